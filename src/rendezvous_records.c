/**
 *  @file   rendezvous_records.c
 *  @brief  What the exchange's records say and how they compare: where a process runs (interned
 *          origins), facts and failure records as text and parsed into compact peers, and the
 *          agreement of two processes' facts. The format is described in rendezvous.h.
 */
#include "rendezvous_private.h"

#include <inttypes.h> // `PRIx64`
#include <math.h>     // `isfinite`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `malloc`
#include <string.h>   // `strcmp`

/* ---- Origins ---- */

static uint64_t hash_text(uint64_t hash, char const *text) {
    for (; *text; ++text) hash = (hash ^ (unsigned char)*text) * 0x100000001B3ull;
    return hash * 0x100000001B3ull;
}

uint32_t rv_origin_intern(uform_rendezvous_t *rv, char const *host, char const *boot_id, uint64_t pid_namespace) {
    uint64_t hash = hash_text(hash_text(0xCBF29CE484222325ull, host), boot_id) ^ (pid_namespace * 0x9E3779B97F4A7C15ull);
    if (rv->origins_count * 2 >= rv->origin_table_capacity) { // grow and rehash
        size_t capacity = rv->origin_table_capacity ? rv->origin_table_capacity * 2 : 64;
        uint32_t *table = malloc(capacity * sizeof *table);
        origin_t *origins = realloc(rv->origins, capacity / 2 * sizeof *origins);
        if (!table || !origins) {
            free(table);
            if (origins) rv->origins = origins;
            return NO_ORIGIN;
        }
        rv->origins = origins, rv->origins_capacity = capacity / 2;
        for (size_t i = 0; i < capacity; ++i) table[i] = NO_ORIGIN;
        for (uint32_t id = 0; id < rv->origins_count; ++id) {
            origin_t const *o = &rv->origins[id];
            uint64_t h = hash_text(hash_text(0xCBF29CE484222325ull, o->host), o->boot_id) ^
                         (o->pid_namespace * 0x9E3779B97F4A7C15ull);
            size_t at = (size_t)h & (capacity - 1);
            while (table[at] != NO_ORIGIN) at = (at + 1) & (capacity - 1);
            table[at] = id;
        }
        free(rv->origin_table);
        rv->origin_table = table, rv->origin_table_capacity = capacity;
    }
    size_t mask = rv->origin_table_capacity - 1;
    for (size_t at = (size_t)hash & mask;; at = (at + 1) & mask) {
        uint32_t id = rv->origin_table[at];
        if (id == NO_ORIGIN) {
            id = (uint32_t)rv->origins_count++;
            origin_t *o = &rv->origins[id];
            snprintf(o->host, sizeof o->host, "%s", host);
            snprintf(o->boot_id, sizeof o->boot_id, "%s", boot_id);
            o->pid_namespace = pid_namespace;
            rv->origin_table[at] = id;
            return id;
        }
        origin_t const *o = &rv->origins[id];
        if (o->pid_namespace == pid_namespace && strcmp(o->host, host) == 0 && strcmp(o->boot_id, boot_id) == 0)
            return id;
    }
}

char const *rv_host_of(uform_rendezvous_t const *rv, uint32_t origin) {
    return origin < rv->origins_count ? rv->origins[origin].host : "unknown";
}

/** A host name from a file, quoted for messages. */
void rv_quoted_host(uform_rendezvous_t const *rv, uint32_t origin, char *out, size_t capacity) {
    rv_quote(rv_host_of(rv, origin), 64, out, capacity);
}

int rv_peer_liveness(uform_rendezvous_t const *rv, peer_t const *peer) {
    if (peer->origin >= rv->origins_count) return -1;
    origin_t const *o = &rv->origins[peer->origin];
    return rv_liveness(&rv->identity, o->boot_id, o->pid_namespace, peer->pid, peer->pid_start);
}

/* ---- Agreement: every pair is compared with process 0, field by field ---- */

uform_status_t rv_check_pair(peer_t const *a, size_t ia, peer_t const *b, size_t ib) {
    if (a->count != b->count)
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh processes %zu and %zu disagree on host_domain_count: %u vs %u", ia, ib, a->count, b->count);
    if (a->span != b->span)
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh processes %zu and %zu disagree on gpus_per_multimem_domain: %" PRIu64 " vs %" PRIu64
                          " (zero derives)",
                          ia, ib, a->span, b->span);
    bool allowed_a = a->flags & flag_multicast_allowed_k, allowed_b = b->flags & flag_multicast_allowed_k;
    if (allowed_a != allowed_b)
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh processes %zu and %zu disagree on UFORM_ALLOW_MULTICAST: %s vs %s", ia, ib,
                          allowed_a ? "1" : "not 1", allowed_b ? "1" : "not 1");
    uform_gpu_class_t class_a = (uform_gpu_class_t)a->gpu_class, class_b = (uform_gpu_class_t)b->gpu_class;
    uform_gpu_class_t floor_a = (uform_gpu_class_t)a->gpu_floor, floor_b = (uform_gpu_class_t)b->gpu_floor;
    bool pinned_a = a->flags & flag_pinned_k, pinned_b = b->flags & flag_pinned_k;
    if (pinned_a && pinned_b && class_a != class_b)
        return uform_fail(uform_status_config_mismatch_k, "mesh processes %zu and %zu pin different GPU classes: %s vs %s",
                          ia, ib, uform_gpu_class_name(class_a), uform_gpu_class_name(class_b));
    if (pinned_a && !uform_gpu_class_runs(floor_b, class_a))
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh process %zu pins GPU class %s, which the GPUs of process %zu (%s) cannot run", ia,
                          uform_gpu_class_name(class_a), ib, uform_gpu_class_name(floor_b));
    if (pinned_b && !uform_gpu_class_runs(floor_a, class_b))
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh process %zu pins GPU class %s, which the GPUs of process %zu (%s) cannot run", ib,
                          uform_gpu_class_name(class_b), ia, uform_gpu_class_name(floor_a));
    uform_gpu_class_t common = uform_gpu_class_common(floor_a, floor_b);
    if (!pinned_a && !pinned_b && common == uform_gpu_class_unknown_k)
        return uform_fail(uform_status_config_mismatch_k, "mesh processes %zu (%s) and %zu (%s) have no GPU class in common",
                          ia, uform_gpu_class_name(floor_a), ib, uform_gpu_class_name(floor_b));
    if (class_a != class_b) // describe and dispatch must agree: one class for the whole run
        return uform_fail(uform_status_config_mismatch_k,
                          "mesh processes %zu and %zu dispatch as different GPU classes: %s (%s) vs %s (%s); a mesh "
                          "runs one class, so pin one that every process's GPUs run (uform_vram_options_t::gpu_class, "
                          "such as %s) on every process",
                          ia, ib, uform_gpu_class_name(class_a), pinned_a ? "pinned" : "its GPUs' own",
                          uform_gpu_class_name(class_b), pinned_b ? "pinned" : "its GPUs' own",
                          uform_gpu_class_name(pinned_a ? class_a : pinned_b ? class_b : common));
    return uform_status_ok_k;
}

/* ---- Files as text ---- */

void rv_facts_to_text(uform_rendezvous_t const *rv, char *text, size_t capacity) {
    uform_rendezvous_facts_t const *facts = &rv->self;
    snprintf(text, capacity,
             "uform-mesh %u facts %016" PRIx64 "\ntoken %016" PRIx64 "\nindex %zu\ncount %zu\ngpus %zu\n"
             "gpu_class %d\ngpu_class_pinned %d\ngpu_floor %d\nmultimem_span %zu\nmulticast_supported %d\n"
             "multicast_allowed %d\nhost %s\nboot_id %s\npid_namespace %" PRIu64 "\npid %" PRId64 "\n"
             "pid_start %" PRIu64 "\nstarted %.6f\nend\n",
             facts->format_version ? facts->format_version : UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->token, rv->index,
             rv->count, facts->gpus_count, (int)facts->gpu_class, facts->gpu_class_pinned ? 1 : 0, (int)facts->gpu_floor,
             facts->multimem_span, facts->multicast_supported ? 1 : 0, facts->multicast_allowed ? 1 : 0, facts->host,
             facts->boot_id[0] ? facts->boot_id : "-", facts->pid_namespace, facts->pid, facts->pid_start,
             facts->started);
}

/** Reads an unsigned field, or writes why not into `bad`. */
bool rv_field(rv_record_t const *record, char const *key, uint64_t low, uint64_t high, uint64_t *value, char *bad,
                  size_t capacity) {
    char const *text = rv_record_get(record, key);
    if (rv_parse_unsigned(text, high, value) && *value >= low) return true;
    char quoted[64];
    rv_quote(text ? text : "", 24, quoted, sizeof quoted);
    snprintf(bad, capacity, "its field '%s' is %s, not a number from %" PRIu64 " to %" PRIu64, key, quoted, low, high);
    return false;
}

bool rv_text_field(rv_record_t const *record, char const *key, size_t capacity_out, char *out, char *bad,
                       size_t capacity) {
    char const *text = rv_record_get(record, key);
    if (text && *text && strlen(text) < capacity_out) {
        snprintf(out, capacity_out, "%s", text);
        return true;
    }
    snprintf(bad, capacity, "its field '%s' is empty or longer than %zu bytes", key, capacity_out - 1);
    return false;
}

/** Parses a `facts` record of `process-<index>` into `peer` (origin interned). */
uform_status_t rv_parse_facts(uform_rendezvous_t *rv, char const *name, rv_record_t const *record, size_t index,
                                  peer_t *peer) {
    static char const *const keys[] = {"token", "index", "count", "gpus", "gpu_class", "gpu_class_pinned", "gpu_floor",
                                       "multimem_span", "multicast_supported", "multicast_allowed", "host", "boot_id",
                                       "pid_namespace", "pid", "pid_start", "started", NULL};
    char bad[200], host[128], boot_id[40];
    uint64_t v[12];
    if (!rv_record_keys(record, keys, bad, sizeof bad)) return rv_corrupt(&rv->dir, name, "is garbage (it %s)", bad);
    char const *gpus_text = rv_record_get(record, "gpus");
    if (rv_parse_unsigned(gpus_text, UINT64_MAX, &v[0]) && (v[0] == 0 || v[0] > UFORM_MESH_GPUS_PER_PROCESS_MAX))
        return rv_corrupt(&rv->dir, name, "claims %" PRIu64 " GPUs; a mesh process drives 1 to %d", v[0],
                          UFORM_MESH_GPUS_PER_PROCESS_MAX);
    if (!rv_parse_hex(rv_record_get(record, "token"), &v[1]) || !v[1])
        return rv_corrupt(&rv->dir, name, "is garbage (its field 'token' is not 1 to 16 hex digits)");
    if (!rv_field(record, "index", index, index, &v[2], bad, sizeof bad) ||
        !rv_field(record, "count", 2, UFORM_MESH_PROCESSES_MAX, &v[3], bad, sizeof bad) ||
        !rv_field(record, "gpus", 1, UFORM_MESH_GPUS_PER_PROCESS_MAX, &v[0], bad, sizeof bad) ||
        !rv_field(record, "gpu_class", 1, GPU_CLASS_LAST, &v[4], bad, sizeof bad) ||
        !rv_field(record, "gpu_class_pinned", 0, 1, &v[5], bad, sizeof bad) ||
        !rv_field(record, "gpu_floor", 1, GPU_CLASS_LAST, &v[6], bad, sizeof bad) ||
        !rv_field(record, "multimem_span", 0, SPAN_LIMIT, &v[7], bad, sizeof bad) ||
        !rv_field(record, "multicast_supported", 0, 1, &v[8], bad, sizeof bad) ||
        !rv_field(record, "multicast_allowed", 0, 1, &v[9], bad, sizeof bad) ||
        !rv_field(record, "pid_namespace", 0, UINT64_MAX, &v[10], bad, sizeof bad) ||
        !rv_field(record, "pid", 1, INT64_MAX, &v[11], bad, sizeof bad) ||
        !rv_field(record, "pid_start", 0, UINT64_MAX, &peer->pid_start, bad, sizeof bad) ||
        !rv_text_field(record, "host", sizeof host, host, bad, sizeof bad) ||
        !rv_text_field(record, "boot_id", sizeof boot_id, boot_id, bad, sizeof bad))
        return rv_corrupt(&rv->dir, name, "is garbage (%s)", bad);
    char *end = NULL;
    double started = strtod(rv_record_get(record, "started"), &end);
    if (!end || *end || !isfinite(started)) return rv_corrupt(&rv->dir, name, "is garbage (its field 'started')");
    peer->token = v[1], peer->count = (uint32_t)v[3], peer->gpus = (uint32_t)v[0];
    peer->gpu_class = (uint8_t)v[4], peer->gpu_floor = (uint8_t)v[6], peer->span = v[7];
    peer->flags = (uint8_t)((v[5] ? flag_pinned_k : 0) | (v[8] ? flag_multicast_supported_k : 0) |
                            (v[9] ? flag_multicast_allowed_k : 0));
    peer->pid = (int64_t)v[11];
    peer->origin = rv_origin_intern(rv, host, strcmp(boot_id, "-") == 0 ? "" : boot_id, v[10]);
    if (peer->origin == NO_ORIGIN) return uform_fail(uform_status_out_of_memory_k, "out of memory reading '%s'", name);
    return uform_status_ok_k;
}

/** Parses a `failed` record into `peer`: token, PID, host, status and the quoted message. */
uform_status_t rv_parse_failure(uform_rendezvous_t *rv, char const *name, rv_record_t const *record, size_t index,
                                    peer_t *peer) {
    static char const *const keys[] = {"index", "token", "status", "pid", "host", "message", NULL};
    char bad[200], host[128];
    uint64_t token = 0, status = 0, pid = 0, at = 0;
    if (!rv_record_keys(record, keys, bad, sizeof bad)) return rv_corrupt(&rv->dir, name, "is garbage (it %s)", bad);
    if (!rv_parse_hex(rv_record_get(record, "token"), &token) || !token)
        return rv_corrupt(&rv->dir, name, "is garbage (its field 'token' is not 1 to 16 hex digits)");
    if (!rv_field(record, "index", index, index, &at, bad, sizeof bad) ||
        !rv_field(record, "status", 1, uform_status_pending_k - 1, &status, bad, sizeof bad) ||
        !rv_field(record, "pid", 1, INT64_MAX, &pid, bad, sizeof bad) ||
        !rv_text_field(record, "host", sizeof host, host, bad, sizeof bad))
        return rv_corrupt(&rv->dir, name, "is garbage (%s)", bad);
    char quoted[RV_QUOTE_LIMIT * 4 + 16];
    rv_quote(rv_record_get(record, "message"), RV_QUOTE_LIMIT, quoted, sizeof quoted);
    free(peer->message);
    peer->message = strdup(quoted);
    peer->token = token, peer->pid = (int64_t)pid, peer->failed_status = (int32_t)status;
    // A failure record names its host but not its boot: keep the origin of the facts it replaced.
    if (peer->origin == NO_ORIGIN || strcmp(rv_host_of(rv, peer->origin), host) != 0)
        peer->origin = rv_origin_intern(rv, host, "", 0);
    if (!peer->message || peer->origin == NO_ORIGIN)
        return uform_fail(uform_status_out_of_memory_k, "out of memory reading '%s'", name);
    return uform_status_ok_k;
}

