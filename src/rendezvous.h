/**
 *  @file   rendezvous.h
 *  @brief  How the processes of one run meet through a shared directory: the facts each writes,
 *          the agreement checks, the description they derive, and a blob (NCCL's unique ID) that
 *          process 0 hands to the others. GPU-free: tests drive it with invented GPU facts.
 *
 *  Files in `directory/job/` (each written to a dot-named temporary, fsynced, renamed into place,
 *  mode 0600, then the directory fsynced; never read through a symlink; at most 64 KiB):
 *
 *  | name          | written by         | says                                                   |
 *  | ------------- | ------------------ | ------------------------------------------------------ |
 *  | `run`         | process 0          | the run's nonce, and who process 0 is                  |
 *  | `process-<i>` | process i          | its facts, stamped with the nonce it adopted           |
 *  | `ack-<i>`     | process 0          | "nonce N is current and I saw process i's token"       |
 *  | `blob-<name>` | process 0          | a shared blob (the NCCL unique ID), stamped with N     |
 *
 *  Every file starts with `uform-mesh <format version> <kind> <nonce>`, holds `key value` lines
 *  and ends with `end`. A `process-<i>` holds facts, or later one of two records replacing them:
 *  `failed` (that process gave up: its status and message, which peers still waiting adopt at
 *  once) or `disputed` (two processes claim index i: both PIDs and hosts). Temporaries are named
 *  `.tmp.<name>.<pid>.<random>` and never read.
 *
 *  How one run is told from an earlier run of the same job (the stale-run scheme):
 *
 *  - Every process draws a fresh random 64-bit token at start; process 0 also draws the run's
 *    nonce and (re)writes `run` with it, replacing whatever an earlier run left.
 *  - Each process removes the `process-<i>` of its own index left by an earlier run (unless a live
 *    process on this host still owns it: then two processes claim the index), reads `run`, and
 *    writes its facts stamped with that nonce, rewriting them whenever `run` changes.
 *  - Process 0 trusts only facts stamped with its own nonce: no earlier run can have drawn it. It
 *    acknowledges every such process with `ack-<i>` holding the nonce and that process's token.
 *  - A process other than 0 cannot tell by itself whether the `run` it read is this run's or an
 *    earlier one's (process 0 may simply not have started yet), so it trusts nothing until it
 *    finds its own fresh token acknowledged under that nonce: only this run's process 0 can have
 *    written that. From then on every file stamped with the nonce is this run's; files with other
 *    nonces are ignored, whatever they say.
 *
 *  Cost: a process polls every 1 to 10 ms (backing off while nothing changes; 10 ms more per 64
 *  processes), listing the directory and re-reading only files whose inode, size or mtime changed.
 *  Process 0 writes one acknowledgement per process. Two processes on one host join in a few ms.
 *
 *  Agreement: host_domain_count, gpus_per_multimem_domain as requested, UFORM_ALLOW_MULTICAST,
 *  pinned GPU classes (equal, and runnable by every process's GPUs) and, without pins, a class all
 *  GPUs run. Fields are compared in that order, each over processes in index order, so every
 *  process that sees the same files names the same disagreement. A file of another format version
 *  is CORRUPT_FILE (uform.h), not a mismatch.
 *
 *  Failures (statuses as in uform.h): disagreeing fields fail every process with CONFIG_MISMATCH;
 *  an index claimed by two processes (two tokens under one nonce, or a live owner found at start)
 *  and hostile files (garbage, truncated, over 64 KiB, symlinks, FIFOs and other non-regular files,
 *  writable by group or others, another format version under this run's nonce) fail with
 *  CORRUPT_FILE naming the file; missing processes fail with TIMEOUT at the deadline naming the
 *  indices, and at once when a trusted peer on this host (same boot ID and PID namespace; alive
 *  means /proc shows its PID with the start time it wrote, not a zombie) is gone, naming its host
 *  and PID; a complete set with a gone member fails the same way. Every process that fails after
 *  writing its facts publishes a `failed` record, so the others stop at once with its status.
 *  Process 0, having found a failure while some expected process has not arrived yet, keeps
 *  acknowledging for up to 2 s (never past the deadline) so that late arrivals learn of it too.
 *  Nothing crashes or hangs on any file content: every wait is bounded by the timeout.
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
 *  @param[in] options Index, count (at least two), directory, job and timeout.
 *  @param[in] local This process's GPU facts (the caller's block).
 *  @param[out] rendezvous Receives the joined run; untouched on failure.
 *  @return OK, INVALID_ARGUMENT for malformed options, SYSTEM_ERROR for refused file operations,
 *          CONFIG_MISMATCH, CORRUPT_FILE or TIMEOUT as described above.
 */
uform_status_t uform_rendezvous_join(uform_mesh_options_t const *options, uform_rendezvous_facts_t const *local,
                                     uform_rendezvous_t **rendezvous);

/** @brief Every process's facts, `count` of them in index order. */
uform_rendezvous_facts_t const *uform_rendezvous_peers(uform_rendezvous_t const *rendezvous, size_t *count);

/**
 *  @brief Derives the mesh description from the joined facts: this process's index and GPUs, GPUs
 *  of lower indices, the run's GPUs, the multimem span (the agreed request, else the run's GPUs on
 *  this host, which must be equal on every host), the tier and the class. Deterministic over the
 *  facts, so every process fails or succeeds alike. CONFIG_MISMATCH when hosts derive different
 *  spans.
 */
uform_status_t uform_rendezvous_describe(uform_rendezvous_t const *rendezvous,
                                         uform_mesh_description_t *description);

/**
 *  @brief Process 0 publishes `bytes` under `name`; every other process waits (same timeout, failing
 *  fast if process 0 is gone) for the blob stamped with this run's nonce and reads it into `bytes`.
 *  `name` is 1 to 32 of [A-Za-z0-9_-]; `size` at most `UFORM_RENDEZVOUS_BLOB_LIMIT` and equal on
 *  every process (a blob of another size is CORRUPT_FILE).
 */
uform_status_t uform_rendezvous_share_blob(uform_rendezvous_t *rendezvous, char const *name, void *bytes,
                                           size_t size);

/**
 *  @brief After joining: lists the peers' files again. A peer that published a failure fails this
 *  call with that peer's status and message; a peer on this host that is gone fails it with
 *  PEER_LOST naming its host and PID. Cheap enough to call every few milliseconds while waiting
 *  for peers in later stages (NCCL's start).
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

/**
 *  @brief The same derivation for a run of one process: span from the request or this process's
 *  GPUs, tier from its facts, class from its facts.
 */
void uform_rendezvous_describe_alone(uform_rendezvous_facts_t const *local, uform_mesh_description_t *description);

/** @brief Validates mesh options without touching the file system: index below count, directory
 *  and job present with peers, the job 1 to 128 of [A-Za-z0-9._-] and neither "." nor "..", the
 *  timeout zero or positive and finite. NULL is valid (no peers). */
uform_status_t uform_rendezvous_check_options(uform_mesh_options_t const *options);

/**
 *  @brief Test seam: called (when set) at named points, with the file name involved:
 *  "temporary-written" after a file's temporary was written and fsynced but before its rename,
 *  "renamed" after the rename, "waiting" once per poll. Tests SIGKILL themselves there.
 */
extern void (*uform_rendezvous_test_hook)(char const *stage, char const *name);

#endif // UFORM_RENDEZVOUS_H
