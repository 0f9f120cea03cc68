/**
 *  @file   rendezvous_messages.c
 *  @brief  The rendezvous's failure messages: absent peers as ranges, two claimants of one index, a
 *          peer's published failure, a peer gone, and a process process 0 never acknowledged.
 */
#include "rendezvous_private.h"

#include <inttypes.h> // `PRId64`
#include <stdio.h>    // `snprintf`
#include <string.h>   // `strlen`

/** Writes "1, 3-5, 9" into `out` for the peers not arrived (neither facts nor failure). */
void rv_format_absent(uform_rendezvous_t const *rv, char *out, size_t capacity, size_t *missing) {
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

uform_status_t rv_duplicate_claim(uform_rendezvous_t const *rv, char const *name, size_t index, int64_t pid_a,
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

uform_status_t rv_peer_gone(uform_rendezvous_t const *rv, size_t index, char const *absent) {
    char host[160];
    rv_quoted_host(rv, rv->peers[index].origin, host, sizeof host);
    return uform_fail(uform_status_timeout_k,
                      "mesh '%.200s': process %zu of %zu (host %s, pid %" PRId64 ") wrote its facts and is gone%s%s",
                      rv->dir.path, index, rv->count, host, rv->peers[index].pid, absent ? "; absent: " : "",
                      absent ? absent : "");
}

/** The TIMEOUT of a process never acknowledged: what its `run` says. */
uform_status_t rv_unacknowledged(uform_rendezvous_t const *rv) {
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
