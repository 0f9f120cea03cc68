/**
 *  @file   rendezvous.h
 *  @brief  How the processes of one run meet through a shared directory: the facts each writes,
 *          the agreement checks, the description they derive, and a blob (NCCL's unique ID) that
 *          process 0 hands to the others. GPU-free: tests drive it with invented GPU facts.
 *          Implemented by concern: rendezvous_files.c (the directory, the format, reading and
 *          writing), rendezvous_liveness.c (who a process is, whether it still runs),
 *          rendezvous_records.c (what facts and failure records say, and agreement), rendezvous.c
 *          (joining: the protocol below), rendezvous_joined.c (describing, the blob, watching,
 *          leaving, the options' checks).
 *
 *  The job directory `directory/job` (StrictModes, as OpenSSH and systemd-tmpfiles do): created
 *  0700 where missing; refused (CORRUPT_FILE, saying why) when it is a symbolic link, is not owned
 *  by the effective user, or is writable by group or others. A symbolic link among the components
 *  of `directory` is followed only when the effective user or root owns it. Inside, every file is
 *  opened relative to the directory's descriptor with O_NOFOLLOW; a file is read only when it is a
 *  regular file of the effective user, mode without group or other write, at most 64 KiB; a file
 *  of another user (or a link, a FIFO...) is never deleted, truncated or replaced.
 *
 *  Files (each written to a temporary `.tmp.<name>.<boot>-<pidns>.<pid>.<random>`, fsynced, renamed
 *  into place, mode 0600, then the directory fsynced):
 *
 *  | name          | written by         | says                                                   |
 *  | ------------- | ------------------ | ------------------------------------------------------ |
 *  | `run`         | process 0          | the run's nonce, its count, and who process 0 is       |
 *  | `process-<i>` | process i          | its facts, stamped with the nonce it adopted           |
 *  | `ack-<i>`     | process 0          | "nonce N is current and I saw process i's token"       |
 *  | `complete`    | process 0          | "every process's facts under N are in and agree"       |
 *  | `blob-<name>` | process 0          | a shared blob (the NCCL unique ID), stamped with N     |
 *  | `dispute`     | any process        | "index i is claimed by two processes", for 0.5 s       |
 *
 *  Every file starts with `uform-mesh <format version> <kind> <nonce>`, holds exactly its kind's
 *  `key value` lines and ends with `end`. A `process-<i>` holds facts, or later a `failed` record
 *  replacing them (that process gave up: its status and message). Files are looked up by name,
 *  never by listing the directory: files of indices at or above the count are never read.
 *
 *  How one run is told from an earlier run of the same job (the stale-run scheme):
 *
 *  - Every process draws a fresh random 64-bit token at start; process 0 also draws the run's
 *    nonce and (re)writes `run` with it, replacing whatever an earlier run left.
 *  - Each process removes the `process-<i>` and `ack-<i>` of its own index left by an earlier run
 *    (unless a live process on this host still owns that `process-<i>`: then two processes claim
 *    the index), and the temporaries writers of this boot left when killed. It reads `run` and
 *    writes its facts stamped with that nonce, rewriting them whenever `run` changes, until
 *    acknowledged.
 *  - Process 0 trusts only facts stamped with its own nonce: no earlier run can have drawn it. It
 *    acknowledges every such process with `ack-<i>` holding the nonce and that process's token.
 *  - A process other than 0 cannot tell by itself whether the `run` it read is this run's or an
 *    earlier one's, so it trusts nothing until it finds its own fresh token acknowledged under that
 *    nonce: only this run's process 0 can have written that. From then on every file stamped with
 *    the nonce is this run's, and a `run` rewritten under another nonce is a second claimant of
 *    index 0 (CORRUPT_FILE naming both), not a new run to follow.
 *
 *  Who reads what, at each poll (every 1 to 10 ms, backing off while nothing changes; up to 100 ms
 *  for runs above 1,024 processes): every process `run` and `dispute`; process 0 its own file and up
 *  to 1,024 peers' files round robin (acknowledging new facts, checking each against its own), and
 *  once all are in and the peers on its host run, writes `complete`; every other process its own
 *  file, its `ack-<i>` until acknowledged, then `process-0` and `complete`, and once `complete` is
 *  up, every peer's facts (1,024 per poll) checked against process 0's. So a poll costs the same at
 *  any count, memory is about 120 bytes per peer, and a wait ends within a poll of its deadline.
 *
 *  Agreement (each process with process 0, field by field, in this order): host_domain_count,
 *  gpus_per_multimem_domain as requested, UFORM_ALLOW_MULTICAST, pinned GPU classes (equal), a pin
 *  every process's GPUs run, a class in common, and one dispatch class: every process's executor
 *  must dispatch as the same class (pinned, or its GPUs' own), which is the class the description
 *  reports, else CONFIG_MISMATCH suggesting a class to pin everywhere. A file of another format
 *  version under this run's nonce is CORRUPT_FILE (uform.h), not a mismatch.
 *
 *  Failures (statuses as in uform.h): disagreeing fields fail with CONFIG_MISMATCH; hostile files
 *  (garbage, truncated, over 64 KiB, links, FIFOs and other non-regular files, files of another
 *  user or writable by group or others, a key missing or unknown, more than 1,024 GPUs claimed,
 *  another format version under this run's nonce) fail with CORRUPT_FILE naming the file and what
 *  is wrong; missing processes fail with TIMEOUT at the deadline naming the indices, and at once
 *  when a trusted peer on this host (same boot ID and PID namespace; alive means /proc shows its PID
 *  with the start time it wrote, not a zombie) is gone, naming its host and PID, after looking its
 *  file up once more (a peer that published its failure on the way out is reported by that
 *  failure). An index claimed by two processes (two tokens under one nonce, a second `run`, or a
 *  live owner found at start) is written to `dispute` by whoever sees it first, kept 0.5 s so that
 *  every process, acknowledged or not, fails with CORRUPT_FILE naming both claimants, then removed
 *  by its writer; a `dispute` counts when it carries this run's nonce or its writer runs on this
 *  host. Every process that fails after writing its facts publishes a `failed` record, so the
 *  others stop at once with its status; peers quote its message (printable, escaped, capped) as
 *  that process's text. Process 0, having found a failure while some expected process has not
 *  arrived yet, keeps acknowledging for up to 2 s (never past the deadline) so that late arrivals
 *  learn of it too. Nothing crashes or hangs on any file content: every wait is bounded.
 *
 *  Leaving: after a success (`uform_rendezvous_leave` with `remove_files`, once every peer has
 *  read everything) each process removes its `process-<i>` and `ack-<i>`, and process 0 `run`,
 *  `complete` and its blobs, each only while it is still the file this process wrote or read. After
 *  a failure the `failed` records and `run` stay for the peers still waiting; the next run of the
 *  job replaces them.
 */
#ifndef UFORM_RENDEZVOUS_H
#define UFORM_RENDEZVOUS_H

#include "internal.h"

#include <stdbool.h> // `bool`
#include <stddef.h>  // `size_t`
#include <stdint.h>  // `uint64_t`

/** @brief The format of every file the exchange writes; files of another version are CORRUPT_FILE
 *  when they carry this run's nonce, and ignored as an earlier run's otherwise. */
#define UFORM_RENDEZVOUS_FORMAT 1

/** @brief The largest file the exchange reads; anything larger is CORRUPT_FILE. */
#define UFORM_RENDEZVOUS_FILE_LIMIT (64u * 1024u)

/** @brief Longest blob `uform_rendezvous_share_blob` carries. */
#define UFORM_RENDEZVOUS_BLOB_LIMIT 4096u

/** @brief What one process tells its peers. The caller fills the first block; the exchange fills
 *  the rest when it writes the facts and when it reads a peer's. */
typedef struct uform_rendezvous_facts_t {
    /* Filled by the caller. */
    size_t gpus_count;               /**< GPUs this process drives; at least one. */
    uform_gpu_class_t gpu_class;     /**< The class its GPUs dispatch as when pinned, else `gpu_floor`. */
    bool gpu_class_pinned;           /**< Whether `gpu_class` was pinned by the user. */
    uform_gpu_class_t gpu_floor;     /**< The highest class all of its GPUs can run (their meet). */
    size_t multimem_span;            /**< `gpus_per_multimem_domain` as requested; zero derives. */
    bool multicast_supported;        /**< Every GPU of this process reports multicast support. */
    bool multicast_allowed;          /**< `UFORM_ALLOW_MULTICAST=1` in this process. */
    uint32_t format_version;         /**< Zero writes `UFORM_RENDEZVOUS_FORMAT`; tests write others. */

    /* Filled by the exchange. */
    uint64_t nonce;                  /**< The run nonce this process adopted. */
    uint64_t token;                  /**< Random, drawn once per process start. */
    size_t process_index;            /**< `host_domain_index`. */
    size_t process_count;            /**< `host_domain_count`. */
    int64_t pid;                     /**< Process ID. */
    uint64_t pid_start;              /**< Start time of `pid` in clock ticks since boot (/proc). */
    uint64_t pid_namespace;          /**< Inode of /proc/self/ns/pid; zero if unknown. */
    double started;                  /**< Wall-clock seconds since the epoch when it joined. */
    char host[128];                  /**< Host name; a caller's non-empty value is kept (tests
                                          simulate hosts with it, and then `boot_id` too). */
    char boot_id[40];                /**< /proc/sys/kernel/random/boot_id; "" if unknown. */
} uform_rendezvous_facts_t;

/** @brief A joined run: the directory, the nonce and every process's facts. */
typedef struct uform_rendezvous_t uform_rendezvous_t;

/**
 *  @brief Writes this process's facts into `options->directory/options->job/` and waits for every
 *  peer's, up to `options->timeout_seconds` (zero: 120).
 *  @param[in] options Index, count (2 to UFORM_MESH_PROCESSES_MAX), directory, job and timeout.
 *  @param[in] local This process's GPU facts (the caller's block).
 *  @param[out] rendezvous Receives the joined run; untouched on failure.
 *  @return OK, INVALID_ARGUMENT for malformed options, SYSTEM_ERROR for refused file operations,
 *          CONFIG_MISMATCH, CORRUPT_FILE or TIMEOUT as described above.
 */
uform_status_t uform_rendezvous_join(uform_mesh_options_t const *options, uform_rendezvous_facts_t const *local,
                                     uform_rendezvous_t **rendezvous);

/** @brief One process of a joined run, as its facts said, and which host it runs on: the facts the
 *  mesh derives its shape from (mesh_shape.c). */
typedef struct uform_rendezvous_peer_t {
    size_t gpus;                  /**< GPUs it drives. */
    size_t multimem_span;         /**< `gpus_per_multimem_domain` it asked for; zero derives. */
    size_t host;                  /**< Its host, numbered from 0 in the order hosts first appear
                                       (one boot ID, or without boot IDs one host name, per host). */
    bool multicast_supported;     /**< Every GPU of it reports multicast support. */
    bool multicast_allowed;       /**< `UFORM_ALLOW_MULTICAST=1` there. */
    uform_gpu_class_t gpu_class;  /**< The class it dispatches as (every process agreed on it). */
} uform_rendezvous_peer_t;

/** @brief The joined run's processes in index order (`*peers`, malloc'd: the caller frees it),
 *  their count and this process's index. OUT_OF_MEMORY, or INVALID_ARGUMENT without a joined run. */
uform_status_t uform_rendezvous_peers(uform_rendezvous_t const *rendezvous, uform_rendezvous_peer_t **peers,
                                      size_t *count, size_t *index);

/** @brief Process `process`'s host, quoted for messages. */
void uform_rendezvous_host_label(uform_rendezvous_t const *rendezvous, size_t process, char *out, size_t capacity);

/**
 *  @brief Process 0 publishes `bytes` under `name`; every other process waits (same timeout, failing
 *  fast if process 0 is gone) for the blob stamped with this run's nonce and reads it into `bytes`.
 *  `name` is 1 to 32 of [A-Za-z0-9_-]; `size` at most `UFORM_RENDEZVOUS_BLOB_LIMIT` and equal on
 *  every process (a blob of another size is CORRUPT_FILE).
 */
uform_status_t uform_rendezvous_share_blob(uform_rendezvous_t *rendezvous, char const *name, void *bytes,
                                           size_t size);

/**
 *  @brief After joining: looks the peers' files up again (process 0: up to 1,024 peers round robin;
 *  the others: process 0's, which relays every peer's failure). A peer that published a failure
 *  fails this call with that peer's status and quoted message; a peer on this host that is gone
 *  fails it with PEER_LOST naming its host and PID. Cheap enough to call every few milliseconds
 *  while waiting for peers in later stages (NCCL's start).
 */
uform_status_t uform_rendezvous_watch(uform_rendezvous_t *rendezvous);

/** @brief Replaces this process's facts with a record of its failure (status and message) so that
 *  peers still waiting, in joining or later stages, stop at once. Joining publishes its own
 *  failures; callers publish failures of later stages. */
void uform_rendezvous_publish_failure(uform_rendezvous_t *rendezvous, uform_status_t status, char const *message);

/** @brief Frees the handle. With `remove_files`, first removes this process's files (and process
 *  0's `run` and blobs) where they still carry this run's nonce: only safe once every peer has read
 *  everything, as after NCCL's initialisation. */
void uform_rendezvous_leave(uform_rendezvous_t *rendezvous, bool remove_files);

/** @brief Validates mesh options without touching the file system: index below count, directory
 *  and job present with peers, the job 1 to 128 of [A-Za-z0-9._-] and neither "." nor "..", the
 *  timeout zero or positive and finite. NULL is valid (no peers). */
uform_status_t uform_rendezvous_check_options(uform_mesh_options_t const *options);

/**
 *  @brief Test seam: called (when set) at named points, with the file name involved:
 *  "temporary-written" after a file's temporary was written and fsynced but before its rename,
 *  "renamed" after the rename, "waiting" once per poll, "liveness" before process 0 checks that
 *  its peers still run, the set complete. Tests SIGKILL themselves or pause there.
 */
extern void (*uform_rendezvous_test_hook)(char const *stage, char const *name);

#endif // UFORM_RENDEZVOUS_H
