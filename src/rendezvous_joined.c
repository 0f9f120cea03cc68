/**
 *  @file   rendezvous_joined.c
 *  @brief  A joined run of the directory exchange: the run's facts (which the mesh's shape is
 *          derived from, in mesh_shape.c), the blob process 0 shares, watching the peers in later
 *          stages, publishing a failure, leaving; and the options' checks. Joining itself is rendezvous.c; the scheme is described in rendezvous.h.
 */
#include "rendezvous_private.h"

#include <ctype.h>    // `isalnum`
#include <inttypes.h> // `PRIx64`
#include <limits.h>   // `PATH_MAX`
#include <math.h>     // `isfinite`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `calloc`
#include <string.h>   // `strcmp`
#include <unistd.h>   // `fsync`

/* ---- The run's facts, for the mesh's shape (mesh_shape.c) ---- */

/** Processes share a host when they share a boot ID (one kernel: one NVLink domain, also across
 *  containers); without boot IDs, when they share a host name. */
static bool same_host(origin_t const *a, origin_t const *b) {
    if (a->boot_id[0] && b->boot_id[0]) return strcmp(a->boot_id, b->boot_id) == 0;
    return strcmp(a->host, b->host) == 0;
}

uform_status_t uform_rendezvous_peers(uform_rendezvous_t const *rv, uform_rendezvous_peer_t **peers, size_t *count,
                                      size_t *index) {
    if (!rv || !rv->joined || !peers || !count || !index)
        return uform_fail(uform_status_invalid_argument_k, "uform_rendezvous_peers needs a joined run and outputs");
    // Hosts are few: each origin is mapped to the first origin on its host, and hosts are numbered
    // in the order their first process appears.
    uform_rendezvous_peer_t *result = calloc(rv->count, sizeof *result);
    uint32_t *host = malloc(rv->origins_count * sizeof *host);
    size_t *number = malloc(rv->origins_count * sizeof *number);
    if (!result || !host || !number) {
        free(result), free(host), free(number);
        return uform_fail(uform_status_out_of_memory_k, "out of memory describing a mesh");
    }
    for (uint32_t o = 0; o < rv->origins_count; ++o) {
        host[o] = o, number[o] = SIZE_MAX;
        for (uint32_t earlier = 0; earlier < o && host[o] == o; ++earlier)
            if (host[earlier] == earlier && same_host(&rv->origins[o], &rv->origins[earlier])) host[o] = earlier;
    }
    size_t hosts = 0;
    for (size_t i = 0; i < rv->count; ++i) {
        peer_t const *peer = &rv->peers[i];
        uint32_t const h = host[peer->origin];
        if (number[h] == SIZE_MAX) number[h] = hosts++;
        result[i] = (uform_rendezvous_peer_t) {
            .gpus = peer->gpus,
            .multimem_span = (size_t)peer->span,
            .host = number[h],
            .multicast_supported = (peer->flags & flag_multicast_supported_k) != 0,
            .multicast_allowed = (peer->flags & flag_multicast_allowed_k) != 0,
            .gpu_class = (uform_gpu_class_t)peer->gpu_class,
        };
    }
    free(host), free(number);
    *peers = result, *count = rv->count, *index = rv->index;
    return uform_status_ok_k;
}

void uform_rendezvous_host_label(uform_rendezvous_t const *rv, size_t process, char *out, size_t capacity) {
    if (!rv || process >= rv->count) snprintf(out, capacity, "\"?\"");
    else rv_quoted_host(rv, rv->peers[process].origin, out, capacity);
}

/* ---- After joining ---- */

uform_status_t uform_rendezvous_watch(uform_rendezvous_t *rv) {
    if (!rv || !rv->joined) return uform_status_ok_k;
    bool changed = false;
    uform_status_t status = uform_status_ok_k;
    if (rv->index == 0) status = rv_sweep(rv, true, &changed, false);
    else {
        status = rv_refresh_peer(rv, 0, &changed);
        if (status == uform_status_ok_k && rv->peers[0].kind == kind_failed_k) status = rv_peer_failed(rv, 0);
        if (status == uform_status_ok_k && rv->peers[0].kind == kind_facts_k && rv_peer_liveness(rv, &rv->peers[0]) == 0)
            status = rv_confirm_gone(rv, 0);
    }
    if (status == uform_status_timeout_k) { // a peer that wrote its facts and is gone: lost
        char message[512];
        snprintf(message, sizeof message, "%s", uform_error_message());
        status = uform_fail(uform_status_peer_lost_k, "%s", message);
    }
    return status;
}

/** A blob being waited for (not process 0). */
typedef struct blob_wait_t {
    uform_rendezvous_t *rv;
    char const *file, *name;
    void *bytes;
    size_t size;
    double next_watch;
} blob_wait_t;

/** One look for the blob: OK once read, PENDING while absent, else why not; the peers' files are
 *  watched every 10 ms (a peer that failed or died ends the wait). */
static uform_status_t blob_look(void *context, bool *progress) {
    (void)progress;
    blob_wait_t *wait = context;
    uform_rendezvous_t *rv = wait->rv;
    char const *file = wait->file, *name = wait->name;
    size_t const size = wait->size;
    struct stat st;
    rv_record_t record;
    rv_load_t load;
    uform_status_t status = rv_load(&rv->dir, file, &st, &record, &load);
    if (status != uform_status_ok_k) return status;
    if (load == rv_other_version_k && record.nonce == rv->nonce)
        return rv_corrupt(&rv->dir, file, "is of format version %u; this library reads and writes version %u",
                          record.version, UFORM_RENDEZVOUS_FORMAT);
    if (load == rv_loaded_k && record.nonce == rv->nonce) {
        static char const *const keys[] = {"size", "bytes", NULL};
        char bad[200];
        uint64_t declared = 0;
        char const *hex = rv_record_get(&record, "bytes");
        if (strcmp(record.kind, "blob") != 0 || !rv_record_keys(&record, keys, bad, sizeof bad) ||
            !rv_field(&record, "size", 1, UFORM_RENDEZVOUS_BLOB_LIMIT, &declared, bad, sizeof bad) ||
            strlen(hex) != declared * 2)
            return rv_corrupt(&rv->dir, file, "is garbage");
        if (declared != size)
            return rv_corrupt(&rv->dir, file, "holds %" PRIu64 " bytes, this process expects %zu", declared, size);
        for (size_t i = 0; i < size; ++i) {
            uint64_t byte;
            char pair[3] = {hex[2 * i], hex[2 * i + 1], 0};
            if (!rv_parse_hex(pair, &byte)) return rv_corrupt(&rv->dir, file, "is garbage (bad hex)");
            ((unsigned char *)wait->bytes)[i] = (unsigned char)byte;
        }
        return uform_status_ok_k;
    }
    if (uform_now_seconds() >= wait->next_watch) { // a peer that failed or died ends the wait
        wait->next_watch = uform_now_seconds() + 0.01;
        if ((status = uform_rendezvous_watch(rv)) != uform_status_ok_k) {
            char message[512];
            snprintf(message, sizeof message, "%s", uform_error_message());
            return uform_fail(status == uform_status_peer_lost_k ? uform_status_timeout_k : status,
                              "%s (waiting for blob '%s')", message, name);
        }
    }
    return uform_status_pending_k;
}

uform_status_t uform_rendezvous_share_blob(uform_rendezvous_t *rv, char const *name, void *bytes, size_t size) {
    if (!rv || !rv->joined || !name || !bytes || size == 0 || size > UFORM_RENDEZVOUS_BLOB_LIMIT)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_rendezvous_share_blob needs a joined run, a name and 1 to %u bytes",
                          UFORM_RENDEZVOUS_BLOB_LIMIT);
    size_t name_length = strlen(name);
    bool name_ok = name_length > 0 && name_length <= 32;
    for (size_t i = 0; i < name_length && name_ok; ++i)
        name_ok = (isalnum((unsigned char)name[i]) && (unsigned char)name[i] < 128) || name[i] == '_' || name[i] == '-';
    if (!name_ok) return uform_fail(uform_status_invalid_argument_k, "blob name '%.40s' is not 1 to 32 of [A-Za-z0-9_-]", name);
    char file[48];
    snprintf(file, sizeof file, "blob-%s", name);
    if (rv->index == 0) {
        size_t text_size = size * 2 + 256;
        char *text = malloc(text_size);
        if (!text) return uform_fail(uform_status_out_of_memory_k, "out of memory sharing blob '%s'", name);
        int used = snprintf(text, text_size, "uform-mesh %u blob %016" PRIx64 "\nsize %zu\nbytes ",
                            UFORM_RENDEZVOUS_FORMAT, rv->nonce, size);
        for (size_t i = 0; i < size; ++i) used += snprintf(text + used, text_size - (size_t)used, "%02x", ((unsigned char *)bytes)[i]);
        snprintf(text + used, text_size - (size_t)used, "\nend\n");
        rv_key_t key = {0};
        uform_status_t status = rv_write(&rv->dir, file, text, &key);
        free(text);
        if (status == uform_status_ok_k && rv->blob_count < 8)
            snprintf(rv->blob_names[rv->blob_count], sizeof rv->blob_names[0], "%s", file),
                rv->blob_keys[rv->blob_count++] = key;
        return status;
    }
    blob_wait_t wait = {.rv = rv, .file = file, .name = name, .bytes = bytes, .size = size};
    static uform_poll_backoff_t const backoff = {.spin_seconds = 0, .nap_min = 0.001, .nap_max = 0.01, .growth = 1.5};
    uform_status_t status = uform_poll_until(blob_look, &wait, rv->timeout, &backoff);
    if (status != uform_status_pending_k) return status;
    char host[160];
    rv_quoted_host(rv, rv->peers[0].origin, host, sizeof host);
    return uform_fail(uform_status_timeout_k,
                      "mesh '%.200s': process 0 (host %s, pid %" PRId64 ") did not share '%s' within %g s",
                      rv->dir.path, host, rv->peers[0].pid, name, rv->timeout);
}

void uform_rendezvous_publish_failure(uform_rendezvous_t *rv, uform_status_t status, char const *message) {
    if (!rv || status == uform_status_ok_k || !rv->written || rv->quiet || rv->dir.fd < 0) return;
    if (!message) message = "";
    char prefix[PATH_MAX + 16], name[40], text[1024], line[400];
    snprintf(prefix, sizeof prefix, "mesh '%s': ", rv->dir.path);
    if (strncmp(message, prefix, strlen(prefix)) == 0) message += strlen(prefix);
    snprintf(line, sizeof line, "%s", message);
    for (char *c = line; *c; ++c)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = ' ';
    snprintf(name, sizeof name, "process-%zu", rv->index);
    snprintf(text, sizeof text,
             "uform-mesh %u failed %016" PRIx64 "\nindex %zu\ntoken %016" PRIx64 "\nstatus %d\npid %" PRId64
             "\nhost %s\nmessage %s\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->index, rv->token,
             status > 0 && status < uform_status_pending_k ? (int)status : (int)uform_status_system_error_k,
             rv->self.pid, rv->self.host, line);
    if (rv_write(&rv->dir, name, text, &rv->own_key) == uform_status_ok_k) rv->quiet = true; // written once
}

void uform_rendezvous_leave(uform_rendezvous_t *rv, bool remove_files) {
    if (!rv) return;
    if (remove_files && rv->dir.fd >= 0 && rv->nonce) {
        char name[40];
        snprintf(name, sizeof name, "process-%zu", rv->index);
        rv_remove(&rv->dir, name, &rv->own_key);
        snprintf(name, sizeof name, "ack-%zu", rv->index);
        rv_remove(&rv->dir, name, rv->ack_key.exists ? &rv->ack_key : NULL);
        if (rv->index == 0) {
            for (size_t i = 0; i < rv->blob_count; ++i) rv_remove(&rv->dir, rv->blob_names[i], &rv->blob_keys[i]);
            rv_remove(&rv->dir, "complete", &rv->complete_key);
            rv_remove(&rv->dir, "run", &rv->run.key);
        }
        fsync(rv->dir.fd);
    }
    rv_close_directory(&rv->dir);
    for (size_t i = 0; i < rv->count; ++i) free(rv->peers[i].message);
    free(rv->peers);
    free(rv->origins);
    free(rv->origin_table);
    free(rv);
}

/* ---- Options ---- */

static uform_status_t check_job(char const *job) {
    if (!job) return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::job is required with peers");
    size_t length = strlen(job);
    if (length == 0 || length > 128)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::job must be 1 to 128 characters, not %zu", length);
    if (strcmp(job, ".") == 0 || strcmp(job, "..") == 0)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::job must not be '%s'", job);
    for (size_t i = 0; i < length; ++i) {
        unsigned char c = (unsigned char)job[i];
        if (!(isalnum(c) && c < 128) && c != '.' && c != '_' && c != '-')
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_mesh_options_t::job may hold only [A-Za-z0-9._-], not byte 0x%02x at %zu", c, i);
    }
    return uform_status_ok_k;
}

uform_status_t uform_rendezvous_check_options(uform_mesh_options_t const *options) {
    if (!options) return uform_status_ok_k;
    if (options->host_domain_count > UFORM_MESH_PROCESSES_MAX)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::host_domain_count %zu is above the maximum of %d processes "
                          "(UFORM_MESH_PROCESSES_MAX)",
                          options->host_domain_count, UFORM_MESH_PROCESSES_MAX);
    if (options->host_domain_count > 1 && options->host_domain_index >= options->host_domain_count)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::host_domain_index %zu is not below host_domain_count %zu",
                          options->host_domain_index, options->host_domain_count);
    if (options->host_domain_count <= 1 && options->host_domain_index != 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::host_domain_index %zu needs a host_domain_count above it, not %zu",
                          options->host_domain_index, options->host_domain_count);
    if (options->gpus_per_multimem_domain > SPAN_LIMIT)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::gpus_per_multimem_domain %zu is above the most GPUs a mesh holds "
                          "(%" PRIu64 ")",
                          options->gpus_per_multimem_domain, (uint64_t)SPAN_LIMIT);
    if (!isfinite(options->timeout_seconds) || options->timeout_seconds < 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::timeout_seconds must be zero (120 s) or a finite positive number of "
                          "seconds, not %g",
                          options->timeout_seconds);
    if (options->host_domain_count <= 1) return uform_status_ok_k;
    if (!options->directory || !options->directory[0])
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::directory is required with %zu processes", options->host_domain_count);
    if (strlen(options->directory) > PATH_MAX - 200)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::directory is too long (%zu bytes)",
                          strlen(options->directory));
    return check_job(options->job);
}
