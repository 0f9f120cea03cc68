/**
 *  @file   rendezvous.c
 *  @brief  Joining a run of the directory exchange: the stale-run scheme, acknowledgements,
 *          disputes, each process's poll and the wait bounded by the timeout. The scheme is
 *          described in rendezvous.h; records are rendezvous_records.c, files rendezvous_files.c.
 */
#include "rendezvous_private.h"

#include "cuda_driver.h" // `uform_gpu_class_common`, `uform_gpu_class_runs`

#include <ctype.h>    // `isalnum`
#include <errno.h>    // `errno`
#include <fcntl.h>    // `AT_SYMLINK_NOFOLLOW`
#include <inttypes.h> // `PRIx64`
#include <limits.h>   // `PATH_MAX`
#include <math.h>     // `isfinite`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `calloc`
#include <string.h>   // `strcmp`
#include <time.h>     // `clock_gettime`
#include <unistd.h>   // `getpid`

/* ---- Messages ---- */

/** Writes "1, 3-5, 9" into `out` for the peers not arrived (neither facts nor failure). */
static void format_absent(uform_rendezvous_t const *rv, char *out, size_t capacity, size_t *missing) {
    size_t used = 0;
    out[0] = '\0';
    *missing = 0;
    for (size_t i = 0; i < rv->count; ++i) {
        if (rv->peers[i].kind == kind_facts_k || rv->peers[i].kind == kind_failed_k) continue;
        size_t j = i;
        while (j + 1 < rv->count && rv->peers[j + 1].kind != kind_facts_k && rv->peers[j + 1].kind != kind_failed_k) ++j;
        *missing += j - i + 1;
        char piece[48];
        if (j == i) snprintf(piece, sizeof piece, "%s%zu", used ? ", " : "", i);
        else snprintf(piece, sizeof piece, "%s%zu-%zu", used ? ", " : "", i, j);
        size_t length = strlen(piece);
        if (used + length + 6 >= capacity) {
            if (used + 6 < capacity) snprintf(out + used, capacity - used, ", ...");
            for (size_t k = j + 1; k < rv->count; ++k)
                *missing += rv->peers[k].kind != kind_facts_k && rv->peers[k].kind != kind_failed_k;
            return;
        }
        memcpy(out + used, piece, length + 1);
        used += length;
        i = j;
    }
}

static uform_status_t duplicate_claim(uform_rendezvous_t const *rv, char const *name, size_t index, int64_t pid_a,
                                      char const *host_a, int64_t pid_b, char const *host_b) {
    char a[160], b[160];
    rv_quote(host_a, 64, a, sizeof a);
    rv_quote(host_b, 64, b, sizeof b);
    return uform_fail(uform_status_corrupt_file_k,
                      "mesh file '%.200s/%s': process index %zu is claimed by two processes: pid %" PRId64
                      " on host %s and pid %" PRId64 " on host %s",
                      rv->dir.path, name, index, pid_a, a, pid_b, b);
}

/** The failure a peer published, quoted as that peer's text. */
uform_status_t rv_peer_failed(uform_rendezvous_t const *rv, size_t index) {
    peer_t const *peer = &rv->peers[index];
    char host[160];
    rv_quoted_host(rv, peer->origin, host, sizeof host);
    return uform_fail((uform_status_t)peer->failed_status, "mesh process %zu (host %s, pid %" PRId64 ") failed with %s: %s",
                      index, host, peer->pid, uform_status_name((uform_status_t)peer->failed_status),
                      peer->message ? peer->message : "\"\"");
}

static uform_status_t peer_gone(uform_rendezvous_t const *rv, size_t index, char const *absent) {
    char host[160];
    rv_quoted_host(rv, rv->peers[index].origin, host, sizeof host);
    return uform_fail(uform_status_timeout_k,
                      "mesh '%.200s': process %zu of %zu (host %s, pid %" PRId64 ") wrote its facts and is gone%s%s",
                      rv->dir.path, index, rv->count, host, rv->peers[index].pid, absent ? "; absent: " : "",
                      absent ? absent : "");
}

/* ---- Writing ---- */

static uform_status_t write_own_facts(uform_rendezvous_t *rv) {
    char name[40], text[1024];
    snprintf(name, sizeof name, "process-%zu", rv->index);
    rv_facts_to_text(rv, text, sizeof text);
    uform_status_t status = rv_write(&rv->dir, name, text, &rv->own_key);
    if (status == uform_status_ok_k) rv->written = true;
    return status;
}

static uform_status_t write_run(uform_rendezvous_t *rv) {
    char text[768];
    snprintf(text, sizeof text,
             "uform-mesh %u run %016" PRIx64 "\ntoken %016" PRIx64 "\ncount %zu\nhost %s\nboot_id %s\n"
             "pid_namespace %" PRIu64 "\npid %" PRId64 "\npid_start %" PRIu64 "\nstarted %.6f\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->token, rv->count, rv->self.host,
             rv->self.boot_id[0] ? rv->self.boot_id : "-", rv->self.pid_namespace, rv->self.pid, rv->self.pid_start,
             rv->self.started);
    uform_status_t status = rv_write(&rv->dir, "run", text, &rv->run.key);
    if (status == uform_status_ok_k)
        rv->run.valid = true, rv->run.nonce = rv->nonce, rv->run.token = rv->token, rv->run.count = rv->count;
    return status;
}

/**
 *  Publishes a dispute over `index` for every process of the run (the `dispute` file, read by all at
 *  every poll, trusted or not), keeps it up for RV_DISPUTE_HOLD so they all see it, removes it, and
 *  fails with CORRUPT_FILE naming both claimants.
 */
static uform_status_t dispute(uform_rendezvous_t *rv, char const *name, size_t index, int64_t pid_a, char const *host_a,
                              int64_t pid_b, char const *host_b) {
    char text[1024];
    uint64_t nonce = rv->nonce ? rv->nonce : rv->run.valid ? rv->run.nonce : 0;
    snprintf(text, sizeof text,
             "uform-mesh %u disputed %016" PRIx64 "\nindex %zu\npid_a %" PRId64 "\nhost_a %s\npid_b %" PRId64
             "\nhost_b %s\nwriter_pid %" PRId64 "\nwriter_pid_start %" PRIu64 "\nwriter_boot_id %s\n"
             "writer_pid_namespace %" PRIu64 "\nend\n",
             UFORM_RENDEZVOUS_FORMAT, nonce, index, pid_a, host_a, pid_b, host_b, rv->self.pid, rv->self.pid_start,
             rv->identity.boot_id[0] ? rv->identity.boot_id : "-", rv->identity.pid_namespace);
    rv_key_t key = {0};
    rv->disputed = true;
    rv->quiet = rv->quiet || index == rv->index; // a claimant's own file may be the other claimant's
    if (rv_write(&rv->dir, "dispute", text, &key) == uform_status_ok_k) {
        double left = rv->deadline + 0.1 - uform_now_seconds();
        uform_sleep_seconds(left < RV_DISPUTE_HOLD ? (left > 0 ? left : 0) : RV_DISPUTE_HOLD);
        rv_remove(&rv->dir, "dispute", &key);
    }
    return duplicate_claim(rv, name, index, pid_a, host_a, pid_b, host_b);
}

/** Fails when a `dispute` is up that concerns this run: under its nonce or the nonce `run` names, or
 *  written by a process on this host that still runs (its writer removes it after a short hold). */
static uform_status_t check_dispute(uform_rendezvous_t *rv) {
    struct stat st;
    if (fstatat(rv->dir.fd, "dispute", &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rv->dispute_key.exists = false;
        return uform_status_ok_k;
    }
    if (rv_key_equal(&rv->dispute_key, &st)) return uform_status_ok_k; // judged before: not ours
    rv_record_t record;
    rv_load_t load;
    uform_status_t status = rv_load(&rv->dir, "dispute", &st, &record, &load);
    if (status != uform_status_ok_k || load != rv_loaded_k) return status;
    rv_key_set(&rv->dispute_key, &st);
    static char const *const keys[] = {"index", "pid_a", "host_a", "pid_b", "host_b", "writer_pid", "writer_pid_start",
                                       "writer_boot_id", "writer_pid_namespace", NULL};
    char bad[200], host_a[128], host_b[128], boot_id[40];
    uint64_t index, pid_a, pid_b, writer_pid, writer_start, writer_namespace;
    if (strcmp(record.kind, "disputed") != 0) return rv_corrupt(&rv->dir, "dispute", "is of unexpected kind '%.15s'", record.kind);
    if (!rv_record_keys(&record, keys, bad, sizeof bad) ||
        !rv_field(&record, "index", 0, UFORM_MESH_PROCESSES_MAX, &index, bad, sizeof bad) ||
        !rv_field(&record, "pid_a", 1, INT64_MAX, &pid_a, bad, sizeof bad) ||
        !rv_field(&record, "pid_b", 1, INT64_MAX, &pid_b, bad, sizeof bad) ||
        !rv_field(&record, "writer_pid", 1, INT64_MAX, &writer_pid, bad, sizeof bad) ||
        !rv_field(&record, "writer_pid_start", 0, UINT64_MAX, &writer_start, bad, sizeof bad) ||
        !rv_field(&record, "writer_pid_namespace", 0, UINT64_MAX, &writer_namespace, bad, sizeof bad) ||
        !rv_text_field(&record, "host_a", sizeof host_a, host_a, bad, sizeof bad) ||
        !rv_text_field(&record, "host_b", sizeof host_b, host_b, bad, sizeof bad) ||
        !rv_text_field(&record, "writer_boot_id", sizeof boot_id, boot_id, bad, sizeof bad))
        return rv_corrupt(&rv->dir, "dispute", "is garbage (%s)", bad);
    bool ours = record.nonce && (record.nonce == rv->nonce || (rv->run.valid && record.nonce == rv->run.nonce));
    if (!ours && rv_liveness(&rv->identity, boot_id, writer_namespace, (int64_t)writer_pid, writer_start) != 1)
        return uform_status_ok_k; // an earlier run's, whose writer is gone or elsewhere
    rv->disputed = true; // published below as this process's failure too, for peers that missed it
    return duplicate_claim(rv, "dispute", (size_t)index, (int64_t)pid_a, host_a, (int64_t)pid_b, host_b);
}

/* ---- Reading peers ---- */

static void peer_set_kind(uform_rendezvous_t *rv, peer_t *peer, kind_t kind) {
    if (peer->kind == kind) return;
    rv->facts_count -= peer->kind == kind_facts_k, rv->failed_count -= peer->kind == kind_failed_k;
    rv->facts_count += kind == kind_facts_k, rv->failed_count += kind == kind_failed_k;
    peer->kind = (uint8_t)kind;
}

/** Looks `process-<index>` up by name and, when it changed, reads and classifies it against the
 *  nonce. A second token under the nonce, or a file over this process's own, is a dispute. */
uform_status_t rv_refresh_peer(uform_rendezvous_t *rv, size_t index, bool *changed) {
    char name[40];
    snprintf(name, sizeof name, "process-%zu", index);
    peer_t *peer = &rv->peers[index];
    bool own = index == rv->index;
    struct stat st;
    if (fstatat(rv->dir.fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            return uform_fail(uform_status_system_error_k, "cannot inspect mesh file '%.200s/%s': %s", rv->dir.path,
                              name, strerror(errno));
        if (peer->key.exists) *changed = true;
        peer->key.exists = false;
        if (!own) peer_set_kind(rv, peer, kind_none_k);
        return uform_status_ok_k;
    }
    if (rv_key_equal(&peer->key, &st)) return uform_status_ok_k;
    *changed = true;
    if (own && rv_key_equal(&rv->own_key, &st)) { // the file this process wrote
        rv_key_set(&peer->key, &st);
        return uform_status_ok_k;
    }
    rv_record_t record;
    rv_load_t load;
    peer->key.exists = false; // read again next time unless this read succeeds
    uform_status_t status = rv_load(&rv->dir, name, &st, &record, &load);
    if (status != uform_status_ok_k) return status;
    if (load == rv_absent_k) return own ? uform_status_ok_k : (peer_set_kind(rv, peer, kind_none_k), uform_status_ok_k);
    if (load == rv_other_version_k && (record.nonce == rv->nonce || own))
        return rv_corrupt(&rv->dir, name, "is of format version %u%s; this library reads and writes version %u",
                          record.version, record.nonce == rv->nonce ? " under this run's nonce" : "",
                          UFORM_RENDEZVOUS_FORMAT);
    if (load == rv_other_version_k || (record.nonce != rv->nonce && !own)) { // an earlier run's
        peer_set_kind(rv, peer, kind_stale_k);
        rv_key_set(&peer->key, &st);
        return uform_status_ok_k;
    }
    // Under this run's nonce, or this process's own file under any: another writer there claims
    // the same index, judged below by its token.
    bool failed = strcmp(record.kind, "failed") == 0;
    if (!failed && strcmp(record.kind, "facts") != 0)
        return rv_corrupt(&rv->dir, name, "is of unexpected kind '%.15s'", record.kind);
    peer_t read = *peer;
    read.message = NULL;
    status = failed ? rv_parse_failure(rv, name, &record, index, &read) : rv_parse_facts(rv, name, &record, index, &read);
    if (status != uform_status_ok_k) {
        free(read.message);
        return status;
    }
    if (own) { // another process wrote over this process's facts: it claims the same index
        free(read.message);
        if (read.token == rv->token) return rv_key_set(&peer->key, &st), uform_status_ok_k;
        return dispute(rv, name, index, rv->self.pid, rv->self.host, read.pid, rv_host_of(rv, read.origin));
    }
    if (peer->first_token && peer->first_token != read.token) {
        free(read.message);
        return dispute(rv, name, index, peer->first_pid, rv_host_of(rv, peer->first_origin), read.pid,
                       rv_host_of(rv, read.origin));
    }
    if (!peer->first_token) peer->first_token = read.token, peer->first_pid = read.pid, peer->first_origin = read.origin;
    free(peer->message);
    uint8_t kind = peer->kind;
    *peer = read;
    peer->kind = kind;
    peer_set_kind(rv, peer, failed ? kind_failed_k : kind_facts_k);
    rv_key_set(&peer->key, &st);
    return uform_status_ok_k;
}

/* ---- The run file, acknowledgements, completion ---- */

/** Reads `run` when it changed. */
static uform_status_t refresh_run(uform_rendezvous_t *rv) {
    struct stat st;
    if (fstatat(rv->dir.fd, "run", &st, AT_SYMLINK_NOFOLLOW) != 0) {
        memset(&rv->run, 0, sizeof rv->run);
        return uform_status_ok_k;
    }
    if (rv_key_equal(&rv->run.key, &st)) return uform_status_ok_k;
    rv_record_t record;
    rv_load_t load;
    memset(&rv->run, 0, sizeof rv->run);
    uform_status_t status = rv_load(&rv->dir, "run", &st, &record, &load);
    if (status != uform_status_ok_k || load == rv_absent_k) return status;
    rv_key_set(&rv->run.key, &st);
    rv->run.version = record.version, rv->run.nonce = record.nonce;
    if (load == rv_other_version_k) return uform_status_ok_k;
    if (strcmp(record.kind, "run") != 0) return rv_corrupt(&rv->dir, "run", "is of unexpected kind '%.15s'", record.kind);
    static char const *const keys[] = {"token", "count", "host", "boot_id", "pid_namespace", "pid", "pid_start",
                                       "started", NULL};
    char bad[200];
    uint64_t pid = 0;
    if (!rv_record_keys(&record, keys, bad, sizeof bad)) return rv_corrupt(&rv->dir, "run", "is garbage (it %s)", bad);
    if (!rv_parse_hex(rv_record_get(&record, "token"), &rv->run.token) || !rv->run.token || !record.nonce)
        return rv_corrupt(&rv->dir, "run", "is garbage (its nonce or field 'token' is not 1 to 16 hex digits)");
    if (!rv_field(&record, "count", 2, UFORM_MESH_PROCESSES_MAX, &rv->run.count, bad, sizeof bad) ||
        !rv_field(&record, "pid", 1, INT64_MAX, &pid, bad, sizeof bad) ||
        !rv_field(&record, "pid_start", 0, UINT64_MAX, &rv->run.pid_start, bad, sizeof bad) ||
        !rv_field(&record, "pid_namespace", 0, UINT64_MAX, &rv->run.pid_namespace, bad, sizeof bad) ||
        !rv_text_field(&record, "host", sizeof rv->run.host, rv->run.host, bad, sizeof bad) ||
        !rv_text_field(&record, "boot_id", sizeof rv->run.boot_id, rv->run.boot_id, bad, sizeof bad))
        return rv_corrupt(&rv->dir, "run", "is garbage (%s)", bad);
    if (strcmp(rv->run.boot_id, "-") == 0) rv->run.boot_id[0] = '\0';
    rv->run.pid = (int64_t)pid;
    rv->run.valid = true;
    return uform_status_ok_k;
}

/** Whether `ack-<index>` acknowledges this process's token under the adopted nonce. */
static uform_status_t refresh_ack(uform_rendezvous_t *rv) {
    char name[40];
    snprintf(name, sizeof name, "ack-%zu", rv->index);
    struct stat st;
    if (fstatat(rv->dir.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && rv_key_equal(&rv->ack_key, &st))
        return uform_status_ok_k;
    rv_record_t record;
    rv_load_t load;
    rv->ack_key.exists = false;
    uform_status_t status = rv_load(&rv->dir, name, &st, &record, &load);
    if (status != uform_status_ok_k || load != rv_loaded_k) return status; // absent, or an earlier format's
    if (strcmp(record.kind, "ack") != 0) return rv_corrupt(&rv->dir, name, "is of unexpected kind '%.15s'", record.kind);
    static char const *const keys[] = {"index", "token", NULL};
    char bad[200];
    uint64_t token = 0, index = 0;
    if (!rv_record_keys(&record, keys, bad, sizeof bad)) return rv_corrupt(&rv->dir, name, "is garbage (it %s)", bad);
    if (!rv_parse_hex(rv_record_get(&record, "token"), &token) ||
        !rv_field(&record, "index", rv->index, rv->index, &index, bad, sizeof bad))
        return rv_corrupt(&rv->dir, name, "is garbage (its token or index)");
    rv_key_set(&rv->ack_key, &st);
    if (record.nonce == rv->nonce && token == rv->token) rv->trusted = true;
    return uform_status_ok_k;
}

static uform_status_t write_ack(uform_rendezvous_t *rv, size_t index) {
    char name[40], text[256];
    snprintf(name, sizeof name, "ack-%zu", index);
    snprintf(text, sizeof text, "uform-mesh %u ack %016" PRIx64 "\nindex %zu\ntoken %016" PRIx64 "\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, index, rv->peers[index].token);
    uform_status_t status = rv_write(&rv->dir, name, text, NULL);
    if (status == uform_status_ok_k) rv->peers[index].acked_token = rv->peers[index].token;
    return status;
}

/** Whether process 0 declared the run complete under the nonce. */
static uform_status_t refresh_complete(uform_rendezvous_t *rv, bool *complete) {
    struct stat st;
    if (fstatat(rv->dir.fd, "complete", &st, AT_SYMLINK_NOFOLLOW) != 0) return uform_status_ok_k;
    if (rv_key_equal(&rv->complete_key, &st)) return uform_status_ok_k; // judged before: an earlier run's
    rv_record_t record;
    rv_load_t load;
    uform_status_t status = rv_load(&rv->dir, "complete", &st, &record, &load);
    if (status != uform_status_ok_k || load != rv_loaded_k) return status;
    rv_key_set(&rv->complete_key, &st);
    if (record.nonce != rv->nonce) return uform_status_ok_k;
    static char const *const keys[] = {"count", NULL};
    char bad[200];
    uint64_t count = 0;
    if (strcmp(record.kind, "complete") != 0 || !rv_record_keys(&record, keys, bad, sizeof bad) ||
        !rv_field(&record, "count", rv->count, rv->count, &count, bad, sizeof bad))
        return rv_corrupt(&rv->dir, "complete", "is garbage under this run's nonce");
    *complete = true;
    return uform_status_ok_k;
}

/* ---- Joining ---- */

/** The agreement of a newly read peer with process 0 (or of process 0 with this process). */
static uform_status_t check_with_zero(uform_rendezvous_t *rv, size_t index) {
    if (rv->peers[0].kind != kind_facts_k || rv->peers[index].kind != kind_facts_k || index == 0)
        return uform_status_ok_k;
    return rv_check_pair(&rv->peers[0], 0, &rv->peers[index], index);
}

/** A peer on this host that wrote its facts is gone: look its file up once more (it may have
 *  published its failure on the way out), then report whichever is true. */
uform_status_t rv_confirm_gone(uform_rendezvous_t *rv, size_t index) {
    bool changed = false;
    uform_status_t status = rv_refresh_peer(rv, index, &changed);
    if (status != uform_status_ok_k) return status;
    if (rv->peers[index].kind == kind_failed_k) return rv_peer_failed(rv, index);
    if (rv->peers[index].kind != kind_facts_k) return uform_status_ok_k; // replaced: judged on the next poll
    char absent[200];
    size_t missing = 0;
    format_absent(rv, absent, sizeof absent, &missing);
    return peer_gone(rv, index, rv->index == 0 ? (missing ? absent : "none") : NULL);
}

/** Process 0's budgeted sweep: looks up to RV_SWEEP_BUDGET peers up by name, acknowledges new
 *  facts, and checks them against its own; `liveness` also checks those on this host. */
uform_status_t rv_sweep(uform_rendezvous_t *rv, bool liveness, bool *changed, bool whole) {
    size_t visits = whole ? rv->count : (rv->count < RV_SWEEP_BUDGET ? rv->count : RV_SWEEP_BUDGET);
    for (size_t visit = 0; visit < visits; ++visit) {
        size_t index = rv->cursor;
        rv->cursor = rv->cursor + 1 == rv->count ? 0 : rv->cursor + 1;
        if (index == rv->index) continue;
        bool peer_changed = false;
        uform_status_t status = rv_refresh_peer(rv, index, &peer_changed);
        if (status != uform_status_ok_k) return status;
        peer_t *peer = &rv->peers[index];
        if (peer_changed) {
            *changed = true;
            if (peer->kind == kind_facts_k && !rv->joined && peer->acked_token != peer->token &&
                (status = write_ack(rv, index)) != uform_status_ok_k)
                return status;
            if (peer->kind == kind_failed_k) return rv_peer_failed(rv, index);
            if ((status = check_with_zero(rv, index)) != uform_status_ok_k) return status;
        }
        if (liveness && peer->kind == kind_facts_k && rv_peer_liveness(rv, peer) == 0 &&
            (status = rv_confirm_gone(rv, index)) != uform_status_ok_k)
            return status;
    }
    return uform_status_ok_k;
}

/** Process 0's final check before declaring the run complete: every peer on this host alive. */
static uform_status_t check_all_alive(uform_rendezvous_t *rv) {
    rv_hook("liveness", "");
    for (size_t index = 0; index < rv->count; ++index) {
        if (index == rv->index || rv->peers[index].kind != kind_facts_k || rv_peer_liveness(rv, &rv->peers[index]) != 0)
            continue;
        uform_status_t status = rv_confirm_gone(rv, index);
        if (status != uform_status_ok_k) return status;
        if (rv->peers[index].kind != kind_facts_k) return uform_status_ok_k; // replaced: not complete yet
    }
    return uform_status_ok_k;
}

/** Others, once `complete` is up: read every peer's facts (budgeted per poll) and check each
 *  against process 0's, in index order. Sets `*done` when every one was read. */
static uform_status_t read_all(uform_rendezvous_t *rv, bool *done) {
    for (size_t visit = 0; visit < RV_SWEEP_BUDGET && rv->final_cursor < rv->count; ++visit) {
        size_t index = rv->final_cursor;
        bool changed = false;
        uform_status_t status = index == rv->index ? uform_status_ok_k : rv_refresh_peer(rv, index, &changed);
        if (status != uform_status_ok_k) return status;
        if (rv->peers[index].kind == kind_failed_k) return rv_peer_failed(rv, index);
        if (rv->peers[index].kind != kind_facts_k) return uform_status_ok_k; // not (yet) readable: next poll
        if ((status = check_with_zero(rv, index)) != uform_status_ok_k) return status;
        ++rv->final_cursor;
    }
    *done = rv->final_cursor == rv->count;
    return uform_status_ok_k;
}

/** The TIMEOUT of a process never acknowledged: what its `run` says. */
static uform_status_t unacknowledged(uform_rendezvous_t const *rv) {
    char why[400];
    if (!rv->run.key.exists) snprintf(why, sizeof why, "process 0 never wrote 'run'");
    else if (!rv->run.valid)
        snprintf(why, sizeof why, "'run' is of format version %u, an earlier run's or another library's", rv->run.version);
    else {
        int alive = rv_liveness(&rv->identity, rv->run.boot_id, rv->run.pid_namespace, rv->run.pid, rv->run.pid_start);
        char host[160], counts[96] = "";
        rv_quote(rv->run.host, 64, host, sizeof host);
        if (rv->run.count != rv->count)
            snprintf(counts, sizeof counts, "; 'run' names a run of %" PRIu64 " processes, this process expects %zu",
                     rv->run.count, rv->count);
        snprintf(why, sizeof why,
                 "'run' was written by pid %" PRId64 " on host %s, which %s: an earlier run's process 0, or one that "
                 "already failed%s",
                 rv->run.pid, host,
                 alive == 0 ? "is gone" : alive > 0 ? "still runs but never acknowledged this process" : "may be gone",
                 counts);
    }
    return uform_fail(uform_status_timeout_k,
                      "mesh '%.200s': process %zu of %zu was not acknowledged by process 0 within %g s; %s", rv->dir.path,
                      rv->index, rv->count, rv->timeout, why);
}

/** The TIMEOUT of a trusted process: the peers still absent, looked up within RV_DEADLINE_PASS. */
static uform_status_t absent_at_deadline(uform_rendezvous_t *rv) {
    double stop = uform_now_seconds() + RV_DEADLINE_PASS;
    bool cut = false;
    if (rv->index != 0)
        for (size_t index = 0; index < rv->count && !cut; ++index) {
            bool changed = false;
            if (index != rv->index && rv_refresh_peer(rv, index, &changed) != uform_status_ok_k)
                peer_set_kind(rv, &rv->peers[index], kind_none_k);
            cut = (index & 255) == 255 && uform_now_seconds() >= stop;
        }
    char list[200];
    size_t missing = 0;
    format_absent(rv, list, sizeof list, &missing);
    bool one = missing == 1;
    return uform_fail(uform_status_timeout_k, "mesh '%.200s': process%s %s of %zu did not write %s facts within %g s%s",
                      rv->dir.path, one ? "" : "es", list, rv->count, one ? "its" : "their", rv->timeout,
                      cut ? " (the listing was cut short)" : "");
}

/** One poll of process 0. Returns a failure, or OK with `*joined` once the run is complete. */
static uform_status_t poll_zero(uform_rendezvous_t *rv, bool liveness, bool may_complete, bool *changed,
                                bool *joined) {
    uform_status_t status = refresh_run(rv);
    if (status != uform_status_ok_k) return status;
    if (!rv->run.key.exists) return write_run(rv); // removed by someone: put it back
    if (rv->run.valid && rv->run.token != rv->token)
        return dispute(rv, "run", 0, rv->self.pid, rv->self.host, rv->run.pid, rv->run.host);
    if (!rv->run.valid || rv->run.nonce != rv->nonce)
        return rv_corrupt(&rv->dir, "run",
                          "was rewritten under another nonce (%016" PRIx64 ", not this run's %016" PRIx64
                          ") with this process's token",
                          rv->run.nonce, rv->nonce);
    if ((status = rv_refresh_peer(rv, 0, changed)) != uform_status_ok_k) return status;
    if ((status = rv_sweep(rv, liveness, changed, false)) != uform_status_ok_k) return status;
    if (rv->facts_count < rv->count || !may_complete) return uform_status_ok_k;
    if ((status = check_all_alive(rv)) != uform_status_ok_k || rv->facts_count < rv->count) return status;
    char text[128];
    snprintf(text, sizeof text, "uform-mesh %u complete %016" PRIx64 "\ncount %zu\nend\n", UFORM_RENDEZVOUS_FORMAT,
             rv->nonce, rv->count);
    if ((status = rv_write(&rv->dir, "complete", text, &rv->complete_key)) == uform_status_ok_k) *joined = true;
    return status;
}

/** One poll of any other process. */
static uform_status_t poll_other(uform_rendezvous_t *rv, bool liveness, bool *changed, bool *joined) {
    uform_status_t status = refresh_run(rv);
    if (status != uform_status_ok_k) return status;
    if (rv->run.valid && rv->run.nonce != rv->nonce) {
        if (rv->trusted) { // two processes claim index 0: the one that acknowledged this one, and the writer
            char a[160], b[160];
            rv_quote(rv->adopted_host, 64, a, sizeof a);
            rv_quote(rv->run.host, 64, b, sizeof b);
            return uform_fail(uform_status_corrupt_file_k,
                              "mesh file '%.200s/run': process index 0 is claimed by two processes: pid %" PRId64
                              " on host %s, which acknowledged this process, and pid %" PRId64 " on host %s, which "
                              "rewrote 'run' under another nonce",
                              rv->dir.path, rv->adopted_pid, a, rv->run.pid, b);
        }
        rv->nonce = rv->run.nonce; // a new run, or the first one seen: start over under it
        rv->adopted_pid = rv->run.pid;
        snprintf(rv->adopted_host, sizeof rv->adopted_host, "%s", rv->run.host);
        for (size_t i = 0; i < rv->count; ++i) {
            peer_t *peer = &rv->peers[i];
            if (i == rv->index) continue;
            peer_set_kind(rv, peer, kind_none_k);
            peer->key.exists = false, peer->first_token = 0;
        }
        rv->ack_key.exists = false;
        *changed = true;
        if ((status = write_own_facts(rv)) != uform_status_ok_k) return status;
    }
    if (!rv->written) return uform_status_ok_k;
    if ((status = rv_refresh_peer(rv, rv->index, changed)) != uform_status_ok_k) return status;
    if (!rv->trusted) {
        if ((status = refresh_ack(rv)) != uform_status_ok_k || !rv->trusted) return status;
        *changed = true;
    }
    // Trusted: process 0 is the one peer watched at every poll; the others are read at the end.
    if ((status = rv_refresh_peer(rv, 0, changed)) != uform_status_ok_k) return status;
    if (rv->peers[0].kind == kind_failed_k) return rv_peer_failed(rv, 0);
    if (rv->peers[0].kind == kind_facts_k &&
        (status = rv_check_pair(&rv->peers[0], 0, &rv->peers[rv->index], rv->index)) != uform_status_ok_k)
        return status;
    if (liveness && rv->peers[0].kind == kind_facts_k && rv_peer_liveness(rv, &rv->peers[0]) == 0 &&
        (status = rv_confirm_gone(rv, 0)) != uform_status_ok_k)
        return status;
    if (!rv->complete && (status = refresh_complete(rv, &rv->complete)) != uform_status_ok_k) return status;
    if (rv->complete) status = read_all(rv, joined);
    return status;
}

/** The join's state between looks: a failure process 0 holds while late arrivals come in. */
typedef struct join_t {
    uform_rendezvous_t *rv;
    uform_status_t held;
    double hold_until;
    char held_message[512];
} join_t;

/** One poll of the run's files: OK once joined, a failure, else PENDING (also while process 0
 *  holds a failure); `*progress` when a file changed, so the next poll comes soon. */
static uform_status_t join_look(void *context, bool *progress) {
    join_t *join = context;
    uform_rendezvous_t *rv = join->rv;
    rv_hook("waiting", "");
    bool joined = false;
    double now = uform_now_seconds();
    bool liveness = now >= rv->next_liveness;
    if (liveness) rv->next_liveness = now + RV_LIVENESS_PERIOD;
    uform_status_t status = check_dispute(rv);
    if (status == uform_status_ok_k)
        status = rv->index == 0 ? poll_zero(rv, liveness, !join->held, progress, &joined)
                                : poll_other(rv, liveness, progress, &joined);
    if (status == uform_status_ok_k && joined) return uform_status_ok_k;
    now = uform_now_seconds();
    if (status != uform_status_ok_k) {
        // Others fail at once; process 0 first lets every expected process in (briefly, still
        // acknowledging), so late arrivals hear of the failure too. Disputes are not held.
        bool hold = rv->index == 0 && !rv->quiet && !rv->disputed && status != uform_status_system_error_k &&
                    status != uform_status_out_of_memory_k && rv->facts_count + rv->failed_count < rv->count;
        if (!hold) return status;
        if (!join->held) {
            join->held = status;
            snprintf(join->held_message, sizeof join->held_message, "%s", uform_error_message());
            join->hold_until = now + RV_FAILURE_HOLD < rv->deadline ? now + RV_FAILURE_HOLD : rv->deadline;
        }
    }
    if (join->held && (now >= join->hold_until || rv->facts_count + rv->failed_count >= rv->count))
        return uform_fail(join->held, "%s", join->held_message);
    return uform_status_pending_k;
}

/** Polls the run's files until joined, a failure, or the deadline: completion.c's `uform_poll_until`
 *  (other processes' files announce nothing this one could park on), sleeping from 1 ms, growing by
 *  half up to 10 ms a 1,024 processes (at most 100 ms), and from 1 ms again after a change. */
static uform_status_t join_loop(uform_rendezvous_t *rv) {
    // Polls cost the same at any count; only the shared file system's load grows with it.
    double interval_limit = 0.010 * (double)(rv->count / 1024 + 1);
    if (interval_limit > 0.1) interval_limit = 0.1;
    uform_poll_backoff_t const backoff = {.spin_seconds = 0, .nap_min = 0.001, .nap_max = interval_limit, .growth = 1.5};
    join_t join = {.rv = rv, .held = uform_status_ok_k};
    double const seconds = rv->deadline - uform_now_seconds();
    uform_status_t const status = uform_poll_until(join_look, &join, seconds > 0 ? seconds : 0, &backoff);
    if (status != uform_status_pending_k) return status;
    if (join.held) return uform_fail(join.held, "%s", join.held_message);
    return rv->trusted ? absent_at_deadline(rv) : unacknowledged(rv);
}

static uform_status_t check_local(uform_mesh_options_t const *options, uform_rendezvous_facts_t const *local) {
    if (options->host_domain_count < 2)
        return uform_fail(uform_status_invalid_argument_k, "a rendezvous needs at least two processes, not %zu",
                          options->host_domain_count);
    if (local->gpus_count == 0 || local->gpus_count > UFORM_MESH_GPUS_PER_PROCESS_MAX)
        return uform_fail(uform_status_invalid_argument_k, "a mesh process drives 1 to %d GPUs, not %zu",
                          UFORM_MESH_GPUS_PER_PROCESS_MAX, local->gpus_count);
    if (local->gpu_class <= uform_gpu_class_unknown_k || local->gpu_class > GPU_CLASS_LAST ||
        local->gpu_floor <= uform_gpu_class_unknown_k || local->gpu_floor > GPU_CLASS_LAST)
        return uform_fail(uform_status_invalid_argument_k, "mesh facts need known GPU classes, not %d and %d",
                          (int)local->gpu_class, (int)local->gpu_floor);
    return uform_status_ok_k;
}

/** This process's own peer entry, from its facts. */
static void own_peer(uform_rendezvous_t *rv) {
    peer_t *peer = &rv->peers[rv->index];
    uform_rendezvous_facts_t const *f = &rv->self;
    peer->token = peer->first_token = rv->token, peer->pid = f->pid, peer->pid_start = f->pid_start;
    peer->span = f->multimem_span, peer->gpus = (uint32_t)f->gpus_count, peer->count = (uint32_t)rv->count;
    peer->gpu_class = (uint8_t)f->gpu_class, peer->gpu_floor = (uint8_t)f->gpu_floor;
    peer->flags = (uint8_t)((f->gpu_class_pinned ? flag_pinned_k : 0) |
                            (f->multicast_supported ? flag_multicast_supported_k : 0) |
                            (f->multicast_allowed ? flag_multicast_allowed_k : 0));
    peer_set_kind(rv, peer, kind_facts_k);
}

/** Claims the index: what an earlier run left is removed, unless a live process on this host still
 *  owns it, which makes two claimants. Also removes this index's stale acknowledgement and the
 *  temporaries killed writers of this boot left. */
static uform_status_t claim_index(uform_rendezvous_t *rv) {
    char name[40];
    snprintf(name, sizeof name, "process-%zu", rv->index);
    rv_remove_stale_temporaries(&rv->dir, &rv->identity);
    struct stat st;
    rv_record_t record;
    rv_load_t load = rv_absent_k;
    uform_status_t status = rv_load(&rv->dir, name, &st, &record, &load);
    if (status == uform_status_ok_k && load == rv_loaded_k && strcmp(record.kind, "facts") == 0) {
        peer_t old = {.origin = NO_ORIGIN};
        if (rv_parse_facts(rv, name, &record, rv->index, &old) == uform_status_ok_k && old.pid != rv->self.pid &&
            rv_peer_liveness(rv, &old) == 1) {
            refresh_run(rv); // the dispute carries the nonce peers follow, where `run` names one
            return dispute(rv, name, rv->index, old.pid, rv_host_of(rv, old.origin), rv->self.pid, rv->self.host);
        }
    }
    // Whatever else is there (garbage included) is an earlier run's: removed when this user owns it.
    rv_remove(&rv->dir, name, NULL);
    if (fstatat(rv->dir.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return rv_corrupt(&rv->dir, name, "is left by an earlier run and cannot be removed: %s owned by uid %u",
                          S_ISREG(st.st_mode) ? "a file" : "not a regular file", (unsigned)st.st_uid);
    snprintf(name, sizeof name, "ack-%zu", rv->index);
    rv_remove(&rv->dir, name, NULL);
    return uform_status_ok_k;
}

uform_status_t uform_rendezvous_join(uform_mesh_options_t const *options, uform_rendezvous_facts_t const *local,
                                     uform_rendezvous_t **rendezvous) {
    if (!options || !local || !rendezvous)
        return uform_fail(uform_status_invalid_argument_k, "uform_rendezvous_join needs options, facts and an output");
    uform_status_t status = uform_rendezvous_check_options(options);
    if (status == uform_status_ok_k) status = check_local(options, local);
    if (status != uform_status_ok_k) return status;

    double start = uform_now_seconds();
    uform_rendezvous_t *rv = calloc(1, sizeof *rv);
    if (rv) rv->peers = calloc(options->host_domain_count, sizeof *rv->peers);
    if (!rv || !rv->peers) {
        free(rv);
        return uform_fail(uform_status_out_of_memory_k, "out of memory joining a mesh of %zu processes",
                          options->host_domain_count);
    }
    rv->dir.fd = -1;
    rv->index = options->host_domain_index;
    rv->count = options->host_domain_count;
    rv->timeout = options->timeout_seconds > 0 ? options->timeout_seconds : 120.0;
    rv->deadline = start + rv->timeout;
    for (size_t i = 0; i < rv->count; ++i) rv->peers[i].origin = rv->peers[i].first_origin = NO_ORIGIN;
    rv_read_identity(&rv->identity);
    rv->token = rv_random_u64();
    rv->self = *local;
    rv->self.token = rv->token;
    rv->self.process_index = rv->index;
    rv->self.process_count = rv->count;
    rv->self.pid = (int64_t)getpid();
    char state;
    if (rv_read_proc_stat(rv->self.pid, &state, &rv->self.pid_start) <= 0) rv->self.pid_start = 0;
    rv->self.pid_namespace = rv->identity.pid_namespace;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    rv->self.started = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
    // A caller may name the host itself (tests simulate several hosts); otherwise this one's.
    if (!local->host[0]) snprintf(rv->self.host, sizeof rv->self.host, "%s", rv->identity.host);
    if (!local->boot_id[0] && !local->host[0])
        snprintf(rv->self.boot_id, sizeof rv->self.boot_id, "%s", rv->identity.boot_id);
    for (char *c = rv->self.host; *c; ++c)
        if (*c <= ' ' || *c > '~') *c = '?';
    for (char *c = rv->self.boot_id; *c; ++c)
        if (*c <= ' ' || *c > '~') *c = '?';
    rv->peers[rv->index].origin = rv_origin_intern(rv, rv->self.host, rv->self.boot_id, rv->self.pid_namespace);
    if (rv->peers[rv->index].origin == NO_ORIGIN) status = uform_fail(uform_status_out_of_memory_k, "out of memory");
    own_peer(rv);

    if (status == uform_status_ok_k) status = rv_open_directory(&rv->dir, options->directory, options->job, &rv->identity);
    if (status == uform_status_ok_k) status = claim_index(rv);
    if (status == uform_status_ok_k && rv->index == 0) {
        rv->nonce = rv_random_u64();
        rv->trusted = true;
        status = write_own_facts(rv);
        if (status == uform_status_ok_k) status = write_run(rv);
    }
    if (status == uform_status_ok_k) status = join_loop(rv);
    if (status != uform_status_ok_k) {
        char message[512];
        snprintf(message, sizeof message, "%s", uform_error_message());
        uform_rendezvous_publish_failure(rv, status, message);
        uform_rendezvous_leave(rv, false);
        return uform_fail(status, "%s", message);
    }
    rv->joined = true;
    *rendezvous = rv;
    return uform_status_ok_k;
}

