/**
 *  @file   rendezvous_private.h
 *  @brief  What the three files of the directory exchange share: the file format and its I/O
 *          (rendezvous_files.c), who a process is and whether it still runs (rendezvous_liveness.c),
 *          and the protocol (rendezvous.c). Nothing here is seen outside the exchange.
 */
#ifndef UFORM_RENDEZVOUS_PRIVATE_H
#define UFORM_RENDEZVOUS_PRIVATE_H

#include "rendezvous.h"

#include <stdbool.h>   // `bool`
#include <stdint.h>    // `uint64_t`
#include <sys/stat.h>  // `struct stat`
#include <sys/types.h> // `uid_t`

#include "cuda_driver.h" // `uform_gpu_class_common`, `uform_gpu_class_runs`

/** Longest peer-provided text quoted into a message (a failure's message, a host name). */
#define RV_QUOTE_LIMIT 400

/* ---- Who a process is, and whether it still runs (rendezvous_liveness.c) ---- */

typedef struct rv_identity_t {
    char host[128];
    char boot_id[40];
    uint64_t pid_namespace;
} rv_identity_t;

/** Reads this process's host name (printable, '?' for other bytes), boot ID and PID namespace. */
void rv_read_identity(rv_identity_t *identity);

/** Reads state and start time (clock ticks since boot) of a process from /proc: 1 when read, 0 when
 *  no such process exists, -1 when /proc cannot tell. */
int rv_read_proc_stat(int64_t pid, char *state, uint64_t *start);

/** Whether the process a file describes still runs: 1 alive, 0 gone, -1 cannot tell (another host
 *  or PID namespace, or no /proc). Alive means /proc shows the PID with the start time it wrote,
 *  not a zombie. */
int rv_liveness(rv_identity_t const *self, char const *boot_id, uint64_t pid_namespace, int64_t pid,
                uint64_t pid_start);

/* ---- The file format (rendezvous_files.c) ---- */

#define RV_RECORD_PAIRS 32

/** One parsed file: its header and its key-value lines, pointing into the read text. */
typedef struct rv_record_t {
    uint32_t version;
    char kind[16];
    uint64_t nonce;
    size_t pairs;
    char const *keys[RV_RECORD_PAIRS];
    char const *values[RV_RECORD_PAIRS];
} rv_record_t;

typedef enum rv_load_t { rv_absent_k = 0, rv_loaded_k, rv_other_version_k } rv_load_t;

/** The value of `key`, or NULL. */
char const *rv_record_get(rv_record_t const *record, char const *key);

/** Checks a record holds exactly `keys` (NULL-terminated): false with `*bad` naming the first
 *  missing key ("lacks key 'x'") or the first unknown one ("has unknown key 'y'"). */
bool rv_record_keys(rv_record_t const *record, char const *const *keys, char *bad, size_t capacity);

bool rv_parse_unsigned(char const *text, uint64_t limit, uint64_t *value);
bool rv_parse_hex(char const *text, uint64_t *value);

/** Writes `text` into `out` as a quoted string: printable ASCII kept, `"` and `\` escaped, other
 *  bytes as \xNN, at most `limit` characters of `text` (then `...` after the closing quote). */
void rv_quote(char const *text, size_t limit, char *out, size_t capacity);

/** The cache key of a file: a rename always brings a new inode, so a changed key means new text. */
typedef struct rv_key_t {
    uint64_t ino;
    int64_t mtime_ns;
    uint32_t size;
    bool exists;
} rv_key_t;

bool rv_key_equal(rv_key_t const *key, struct stat const *st);
void rv_key_set(rv_key_t *key, struct stat const *st);

/** The job directory, opened under the StrictModes rules (see rendezvous.h). */
typedef struct rv_directory_t {
    int fd;               /**< The job directory; every file is opened relative to it. */
    char path[4096];      /**< `directory/job`, for messages. */
    uid_t euid;           /**< The effective user: the only owner whose files are read or replaced. */
    char boot_prefix[32]; /**< Boot ID (8 characters) and PID namespace, in temporaries' names. */
    char *text;           /**< Scratch for reading: UFORM_RENDEZVOUS_FILE_LIMIT + 2 bytes. */
} rv_directory_t;

/** Opens (creating, 0700, as `mkdir -p` would) `directory/job`, refusing a job directory that is a
 *  symbolic link, not owned by the effective user or writable by group or others, and following a
 *  symbolic link in `directory` only when the effective user or root owns it. CORRUPT_FILE or
 *  SYSTEM_ERROR with a message that says why. */
uform_status_t rv_open_directory(rv_directory_t *dir, char const *directory, char const *job,
                                 rv_identity_t const *identity);
void rv_close_directory(rv_directory_t *dir);

/** Reads `name` into `dir->text` and parses it. `*load` is rv_absent_k for no file. Symlinks,
 *  non-regular files, files of another owner, writable by group or others, oversized or malformed
 *  are CORRUPT_FILE naming the file. */
uform_status_t rv_load(rv_directory_t *dir, char const *name, struct stat *st, rv_record_t *record, rv_load_t *load);

/** Writes `text` to `name` atomically: a temporary `.tmp.<name>.<boot>.<pid>.<random>` (O_EXCL,
 *  O_NOFOLLOW, 0600), fsync, rename, directory fsync. A `name` that exists and is not a regular file
 *  of the effective user is never replaced (CORRUPT_FILE). Fills `key` when asked. */
uform_status_t rv_write(rv_directory_t *dir, char const *name, char const *text, rv_key_t *key);

/** Removes `name` only if it is a regular file of the effective user and, when `key` is given, still
 *  the file that key describes (nobody replaced it since). */
void rv_remove(rv_directory_t *dir, char const *name, rv_key_t const *key);

/** Removes temporaries that processes of this boot left when they were killed mid-write: names
 *  `.tmp.*.<this boot>.<pid>.*` of the effective user whose PID no longer runs. */
void rv_remove_stale_temporaries(rv_directory_t *dir, rv_identity_t const *identity);

uform_status_t rv_corrupt(rv_directory_t const *dir, char const *name, char const *format, ...) UFORM_PRINTF(3, 4);

/** Test seam, as in rendezvous.h. */
void rv_hook(char const *stage, char const *name);

uint64_t rv_random_u64(void);

/* ---- The protocol's state (rendezvous.c joins; rendezvous_joined.c serves a joined run) ---- */

#define RV_FAILURE_HOLD 2.0      /**< Process 0 keeps acknowledging late arrivals this long after a failure. */
#define RV_DISPUTE_HOLD 0.5      /**< A dispute stays published this long, then its writer removes it. */
#define RV_SWEEP_BUDGET 1024     /**< Peer files process 0 looks up per poll (and others when finishing). */
#define RV_LIVENESS_PERIOD 0.02  /**< How often peers on this host are checked for being alive. */
#define RV_DEADLINE_PASS 0.1     /**< Longest a process spends naming absent peers at its deadline. */
#define GPU_CLASS_LAST uform_gpu_class_apple_metal10_k
#define SPAN_LIMIT ((uint64_t)UFORM_MESH_PROCESSES_MAX * UFORM_MESH_GPUS_PER_PROCESS_MAX)
#define NO_ORIGIN UINT32_MAX

/* ---- Peers, compact: about 120 bytes each ---- */

typedef enum kind_t { kind_none_k = 0, kind_stale_k, kind_facts_k, kind_failed_k } kind_t;
enum { flag_pinned_k = 1, flag_multicast_supported_k = 2, flag_multicast_allowed_k = 4 };

typedef struct peer_t {
    rv_key_t key;
    uint64_t token, first_token, acked_token;
    int64_t pid, first_pid;
    uint64_t pid_start;
    uint64_t span;
    uint32_t gpus, count, origin, first_origin;
    uint8_t kind, gpu_class, gpu_floor, flags;
    int32_t failed_status;
    char *message; /**< A failure record's message, quoted; NULL otherwise. */
} peer_t;

/** Where a process runs: host name, boot ID and PID namespace, interned (few distinct per run). */
typedef struct origin_t {
    char host[128];
    char boot_id[40];
    uint64_t pid_namespace;
} origin_t;

struct uform_rendezvous_t {
    rv_directory_t dir;
    size_t index, count;
    double timeout, deadline;
    rv_identity_t identity;
    uform_rendezvous_facts_t self;
    uint64_t nonce, token;
    bool trusted, written, quiet; /**< quiet: publish no failure record (a claimant, or published). */
    bool disputed;                /**< Failing over a dispute: at once, no hold for late arrivals. */
    bool joined;
    bool complete; /**< Others: process 0 declared the run complete under the nonce. */
    int64_t adopted_pid;    /**< Others: who wrote the `run` whose nonce this process adopted... */
    char adopted_host[128]; /**< ...and on which host. */
    rv_key_t own_key, ack_key, complete_key, dispute_key;
    peer_t *peers; /**< [count]; the own entry is this process. */
    origin_t *origins;
    size_t origins_count, origins_capacity;
    uint32_t *origin_table; /**< Open addressing over `origins`, capacity a power of two. */
    size_t origin_table_capacity;
    size_t facts_count, failed_count; /**< Over `peers` under the nonce (process 0, and after joining). */
    size_t cursor;                    /**< The next peer a budgeted sweep looks up. */
    size_t final_cursor;              /**< Others: the next peer read once `complete` is seen. */
    double next_liveness;
    struct {
        rv_key_t key;
        bool valid;
        uint32_t version;
        uint64_t nonce, token, count, pid_start, pid_namespace;
        int64_t pid;
        char host[128], boot_id[40];
    } run;
    char blob_names[8][48];
    rv_key_t blob_keys[8];
    size_t blob_count;
};

/** The id of a (host, boot ID, PID namespace) triple, interned; NO_ORIGIN when out of memory. */
uint32_t rv_origin_intern(uform_rendezvous_t *rv, char const *host, char const *boot_id, uint64_t pid_namespace);
/** This process's facts file, under the adopted nonce. */
void rv_facts_to_text(uform_rendezvous_t const *rv, char *text, size_t capacity);
/** Parses a `facts` (or `failed`) record of `process-<index>` into `peer`: CORRUPT_FILE naming what
 *  is wrong, including more than UFORM_MESH_GPUS_PER_PROCESS_MAX GPUs. */
uform_status_t rv_parse_facts(uform_rendezvous_t *rv, char const *name, rv_record_t const *record, size_t index,
                              peer_t *peer);
uform_status_t rv_parse_failure(uform_rendezvous_t *rv, char const *name, rv_record_t const *record, size_t index,
                                peer_t *peer);
/** Whether processes `ia` and `ib` agree (count, span, multicast opt-in, GPU classes), else
 *  CONFIG_MISMATCH naming the first field that differs. */
uform_status_t rv_check_pair(peer_t const *a, size_t ia, peer_t const *b, size_t ib);
/** A host name from a file, quoted for messages. */
void rv_quoted_host(uform_rendezvous_t const *rv, uint32_t origin, char *out, size_t capacity);
char const *rv_host_of(uform_rendezvous_t const *rv, uint32_t origin);
int rv_peer_liveness(uform_rendezvous_t const *rv, peer_t const *peer);
/** Reads an unsigned field of `record` within [low, high], or writes why not into `bad`. */
bool rv_field(rv_record_t const *record, char const *key, uint64_t low, uint64_t high, uint64_t *value, char *bad,
              size_t capacity);
bool rv_text_field(rv_record_t const *record, char const *key, size_t capacity_out, char *out, char *bad,
                   size_t capacity);
/** Looks `process-<index>` up by name and, when it changed, reads and classifies it. */
uform_status_t rv_refresh_peer(uform_rendezvous_t *rv, size_t index, bool *changed);
/** The failure a peer published, quoted as that peer's text. */
uform_status_t rv_peer_failed(uform_rendezvous_t const *rv, size_t index);

/* Messages (rendezvous_messages.c). */

/** Writes "1, 3-5, 9" into `out` for the peers not arrived (neither facts nor failure). */
void rv_format_absent(uform_rendezvous_t const *rv, char *out, size_t capacity, size_t *missing);
/** CORRUPT_FILE: process `index` claimed by two processes, both named. */
uform_status_t rv_duplicate_claim(uform_rendezvous_t const *rv, char const *name, size_t index, int64_t pid_a,
                                  char const *host_a, int64_t pid_b, char const *host_b);
/** TIMEOUT: process `index` wrote its facts and is gone; `absent` (may be NULL) lists others. */
uform_status_t rv_peer_gone(uform_rendezvous_t const *rv, size_t index, char const *absent);
/** TIMEOUT of a process never acknowledged: what its `run` says. */
uform_status_t rv_unacknowledged(uform_rendezvous_t const *rv);
/** A peer on this host is gone: looked up once more, then reported as failed or gone. */
uform_status_t rv_confirm_gone(uform_rendezvous_t *rv, size_t index);
/** Process 0's budgeted pass over the peers' files (see rendezvous.h). */
uform_status_t rv_sweep(uform_rendezvous_t *rv, bool liveness, bool *changed, bool whole);

#endif // UFORM_RENDEZVOUS_PRIVATE_H
