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

#endif // UFORM_RENDEZVOUS_PRIVATE_H
