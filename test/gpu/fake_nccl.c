/**
 *  @file   fake_nccl.c
 *  @brief  A fake NCCL, built as `libnccl.so.2` for tests only and named to the engine through
 *          `UFORM_NCCL_LIBRARY`, so a mesh's NCCL paths run (under ASan, UBSan and TSan too) on the
 *          fake CUDA driver (fake_cuda.c), whose device pointers are host memory. Never installed.
 *
 *  - `ncclCommInitRankConfig` starts non-blocking communicators only (the engine bounds its
 *    initialisation so): inside a group, as the engine calls it, it starts an initialisation that
 *    `ncclCommGetAsyncError` reports as in progress for `FAKE_NCCL_INIT_POLLS` polls (default 3) and
 *    until every rank of the unique ID started, in any process, as NCCL's does: each rank leaves a
 *    marker file `.fake-nccl-<id>-<rank>` in `FAKE_NCCL_DIR` (default /tmp), never removed. Forever
 *    with `FAKE_NCCL_INIT_HANG=1`.
 *  - `ncclCommSplit` (color 0 only) on a started non-blocking parent makes a child with the config
 *    given (its `blocking` recorded): as NCCL's, the call returns at once, the parent reports the
 *    split in progress (the same polls and markers as an initialisation; forever with
 *    `FAKE_NCCL_SPLIT_HANG=1`), and the child is written to `*newcomm` only once it is up. Aborting
 *    the parent meanwhile retires the child.
 *  - `ncclAllReduce` inside a group queues; `ncclGroupEnd` sums every queued operation whose ranks
 *    all live in this process (after synchronising their streams through the fake driver, unless
 *    `FAKE_NCCL_SYNC=0`), in place. A group of non-blocking communicators returns ncclInProgress
 *    every other time so the engine's polling is exercised; a group of blocking ones returns
 *    ncclSuccess (mixing both in one group is misuse, as in NCCL). Operations of ranks in other
 *    processes are left as they are.
 *  - `FAKE_NCCL_REMOTE_ERROR_AFTER=K`: once K collectives completed, a communicator reports
 *    ncclRemoteError, as one whose peer was lost would.
 *  - `FAKE_NCCL_BLOCK_AFTER=K`: once K collectives completed on a blocking communicator, the next
 *    group's `ncclGroupEnd` blocks, as NCCL's does when a peer is gone, until one of the group's
 *    communicators is aborted (from another thread), then returns ncclRemoteError.
 *  - `FAKE_NCCL_STALL_AFTER=K`: once K collectives completed on a communicator (of either kind), the
 *    next group is enqueued (`ncclGroupEnd` returns ncclSuccess) but never runs, as on NCCL when a peer
 *    was SIGKILLed between collectives: its kernel spins on the dead peer's flags, so each stream
 *    holds (fake_cuda.c's `fake_cuda_hold`) until that collective's communicator is aborted, and
 *    `ncclCommGetAsyncError` keeps reporting ncclSuccess (nothing on NVLink notices a dead peer).
 *  - Aborting or destroying a communicator frees its device memory, which on the real driver
 *    synchronises the device (`cuMemUnmap`, `cudaFree`): it waits, as NCCL's `commFree` does, until
 *    no stalled collective of another live communicator on the same device remains. Aborting the
 *    parents before a child whose collective spins therefore never returns on NCCL; here it prints
 *    "fake_nccl: misuse" after 10 s and goes on.
 *  - `fake_nccl_describe` tells a test how a communicator was made and how many collectives ran on it.
 *  - Misuse (a call on a destroyed or aborted communicator, an unbalanced group, an operation on a
 *    communicator still initialising) prints "fake_nccl: misuse"; communicators alive at exit print
 *    "fake_nccl: leak". ctest fails on either.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_API __attribute__((visibility("default")))

#include "nccl_abi.h" // the engine's one restatement of NCCL's ABI: the fake implements it

typedef uform_nccl_result_t result_t;

typedef struct uform_nccl_comm_s {
    uform_nccl_unique_id_t id;
    int ranks, rank;
    int init_polls;  /**< Polls left before initialisation completes; -1 hangs. */
    int finalizing;  /**< Polls left before finalisation completes. */
    int dead;        /**< Destroyed or aborted: any later use is misuse (atomic: aborts may come from any thread). */
    int blocking;    /**< As configured. */
    int child;       /**< Made by ncclCommSplit. */
    void *context;   /**< The CUDA context current at creation: the communicator's device. */
    int splits;      /**< Children split off so far: numbers their unique IDs. */
    struct uform_nccl_comm_s *split_pending;     /**< A child still starting, handed out through... */
    struct uform_nccl_comm_s **split_out;        /**< ...this once it is up. */
    long collectives, enqueued;
    result_t error;
    struct uform_nccl_comm_s *next;
} comm_t;

typedef struct op_t {
    comm_t *comm;
    void const *send;
    void *receive;
    size_t count;
    int dtype;
    void *stream;
} op_t;

/* Every entry point, declared by the engine's signatures (nccl_abi.h): a definition below that drifts
 * from them does not compile. */
FAKE_API uform_nccl_get_version_fn ncclGetVersion;
FAKE_API uform_nccl_get_unique_id_fn ncclGetUniqueId;
FAKE_API uform_nccl_comm_init_rank_config_fn ncclCommInitRankConfig;
FAKE_API uform_nccl_comm_get_async_error_fn ncclCommGetAsyncError;
FAKE_API uform_nccl_comm_fn ncclCommAbort, ncclCommDestroy, ncclCommFinalize;
FAKE_API uform_nccl_group_fn ncclGroupStart, ncclGroupEnd;
FAKE_API uform_nccl_comm_split_fn ncclCommSplit;
FAKE_API uform_nccl_all_reduce_fn ncclAllReduce;
FAKE_API uform_nccl_get_error_string_fn ncclGetErrorString;
FAKE_API uform_nccl_get_last_error_fn ncclGetLastError;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_t *fake_comms = NULL; // every communicator ever made; dead ones stay, to catch misuse
// Group state is per thread in NCCL; the engine groups on one thread at a time, and plain globals
// keep LeakSanitizer away from a dlopen'ed library's dynamic TLS, which it cannot always scan.
static int fake_depth = 0;
static op_t *fake_ops = NULL;
static size_t fake_ops_count = 0, fake_ops_capacity = 0;
static int fake_group_pending = 0;
static int fake_group_blocking = -1; // -1: no communicator in the group yet
static comm_t **fake_stalled = NULL; // communicators with a collective spinning on a dead peer (under fake_lock)
static size_t fake_stalled_count = 0, fake_stalled_capacity = 0;

static void misuse(char const *what) { fprintf(stderr, "fake_nccl: misuse: %s\n", what); }

static int env_int(char const *name, int fallback) {
    char const *value = getenv(name);
    return value && *value ? atoi(value) : fallback;
}

static void marker_path(comm_t const *comm, int rank, char *path, size_t capacity) {
    char const *directory = getenv("FAKE_NCCL_DIR");
    snprintf(path, capacity, "%s/.fake-nccl-%.40s-%d", directory && *directory ? directory : "/tmp", comm->id.internal, rank);
}

/** Whether every rank of the communicator's unique ID has started (left its marker). */
static int all_ranks_started(comm_t const *comm) {
    for (int rank = 0; rank < comm->ranks; ++rank) {
        char path[512];
        struct stat st;
        marker_path(comm, rank, path, sizeof path);
        if (stat(path, &st) != 0) return 0;
    }
    return 1;
}

static int is_dead(comm_t const *comm) { return __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE); }

/** Notes a communicator's kind in the open group: NCCL refuses blocking and non-blocking together. */
static void join_group(comm_t const *comm) {
    if (fake_group_blocking == -1) fake_group_blocking = comm->blocking;
    else if (fake_group_blocking != comm->blocking) misuse("blocking and non-blocking communicators in one group");
}

static int usable(comm_t *comm, char const *call) {
    if (!comm) return misuse(call), 0;
    if (is_dead(comm)) {
        char text[128];
        snprintf(text, sizeof text, "%s on a destroyed or aborted communicator", call);
        misuse(text);
        return 0;
    }
    return 1;
}

/** A function of the fake driver (the same libcuda.so.1 the engine loaded): a driver entry point
 *  through `cuGetProcAddress_v2`, or one of fake_cuda.c's own seams by name. NULL without one. */
static void *driver_function(char const *name, int seam) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!driver) return NULL;
    void *function = NULL;
    if (seam) function = dlsym(driver, name);
    else {
        int (*get)(char const *, void **, int, unsigned long long, void *) =
            (int (*)(char const *, void **, int, unsigned long long, void *))dlsym(driver, "cuGetProcAddress_v2");
        if (get) get(name, &function, 2000, 0, NULL);
    }
    dlclose(driver); // drops the reference RTLD_NOLOAD took; the engine keeps the library loaded
    return function;
}

/** The calling thread's CUDA context: the device a communicator made now lives on. */
static void *current_context(void) {
    int (*get_current)(void **) = (int (*)(void **))driver_function("cuCtxGetCurrent", 0);
    void *context = NULL;
    if (get_current) get_current(&context);
    return context;
}

FAKE_API result_t ncclGetVersion(int *version) {
    *version = 22800;
    return uform_nccl_success_k;
}

FAKE_API result_t ncclGetUniqueId(uform_nccl_unique_id_t *id) {
    static long counter = 0;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake-nccl-%ld-%ld", (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    return uform_nccl_success_k;
}

FAKE_API result_t ncclCommInitRankConfig(comm_t **out, int ranks, uform_nccl_unique_id_t id, int rank, uform_nccl_config_t *config) {
    if (!out || ranks < 1 || rank < 0 || rank >= ranks || !config || config->magic != UFORM_NCCL_CONFIG_MAGIC)
        return uform_nccl_invalid_argument_k;
    if (config->blocking != 0) misuse("the engine starts NCCL non-blocking, to bound it by its timeout");
    comm_t *comm = calloc(1, sizeof *comm);
    comm->id = id, comm->ranks = ranks, comm->rank = rank, comm->blocking = config->blocking;
    comm->init_polls = env_int("FAKE_NCCL_INIT_HANG", 0) ? -1 : env_int("FAKE_NCCL_INIT_POLLS", 3);
    comm->context = current_context();
    char path[512];
    marker_path(comm, rank, path, sizeof path);
    FILE *marker = fopen(path, "w");
    if (marker) fclose(marker);
    pthread_mutex_lock(&fake_lock);
    comm->next = fake_comms, fake_comms = comm;
    pthread_mutex_unlock(&fake_lock);
    *out = comm;
    return fake_depth ? uform_nccl_success_k : uform_nccl_in_progress_k;
}

FAKE_API result_t ncclCommSplit(comm_t *parent, int color, int key, comm_t **out, uform_nccl_config_t *config) {
    if (!usable(parent, "ncclCommSplit")) return uform_nccl_invalid_usage_k;
    if (!out || color != 0 || key < 0 || key >= parent->ranks || (config && config->magic != UFORM_NCCL_CONFIG_MAGIC))
        return uform_nccl_invalid_argument_k;
    if (parent->init_polls || parent->split_pending) misuse("ncclCommSplit on a communicator still starting");
    if (!fake_depth) misuse("ncclCommSplit outside a group (the engine always groups)");
    comm_t *child = calloc(1, sizeof *child);
    child->id = parent->id;
    size_t used = strnlen(child->id.internal, sizeof child->id.internal - 16);
    snprintf(child->id.internal + used, sizeof child->id.internal - used, "-s%d", ++parent->splits);
    child->ranks = parent->ranks, child->rank = key, child->child = 1;
    child->blocking = config ? config->blocking : parent->blocking;
    child->context = current_context();
    child->init_polls = env_int("FAKE_NCCL_SPLIT_HANG", 0) ? -1 : env_int("FAKE_NCCL_INIT_POLLS", 3);
    char path[512];
    marker_path(child, key, path, sizeof path);
    FILE *marker = fopen(path, "w");
    if (marker) fclose(marker);
    pthread_mutex_lock(&fake_lock);
    child->next = fake_comms, fake_comms = child;
    parent->split_pending = child, parent->split_out = out;
    pthread_mutex_unlock(&fake_lock);
    *out = NULL; // NCCL writes the child only once the split completed
    join_group(parent);
    return uform_nccl_success_k;
}

FAKE_API result_t ncclCommGetAsyncError(comm_t *comm, result_t *error) {
    if (!usable(comm, "ncclCommGetAsyncError")) return uform_nccl_invalid_usage_k;
    pthread_mutex_lock(&fake_lock);
    if (comm->init_polls > 1 || (comm->init_polls == 1 && all_ranks_started(comm))) --comm->init_polls;
    comm_t *child = comm->split_pending;
    if (child && (child->init_polls > 1 || (child->init_polls == 1 && all_ranks_started(child)))) --child->init_polls;
    if (child && !child->init_polls) *comm->split_out = child, comm->split_pending = NULL, child = NULL;
    if (comm->finalizing > 0) --comm->finalizing;
    *error = comm->error                                                   ? comm->error
             : (comm->init_polls || child || comm->finalizing) ? uform_nccl_in_progress_k
                                                                           : uform_nccl_success_k;
    pthread_mutex_unlock(&fake_lock);
    return uform_nccl_success_k;
}

static result_t retire(comm_t *comm, char const *call) {
    if (!usable(comm, call)) return uform_nccl_invalid_usage_k;
    pthread_mutex_lock(&fake_lock);
    if (comm->split_pending) __atomic_store_n(&comm->split_pending->dead, 1, __ATOMIC_RELEASE); // never handed out
    comm->split_pending = NULL;
    pthread_mutex_unlock(&fake_lock);
    __atomic_store_n(&comm->dead, 1, __ATOMIC_RELEASE);
    return uform_nccl_success_k;
}
/** Frees a retired communicator's device memory: as on the real driver, that waits for the device,
 *  so for every collective of another communicator on the same device that spins on a dead peer
 *  (FAKE_NCCL_STALL_AFTER) until that communicator is aborted too. */
static void free_device_memory(comm_t const *comm, char const *call) {
    for (int waited = 0;; ++waited) {
        int spinning = 0;
        pthread_mutex_lock(&fake_lock);
        for (size_t i = 0; i < fake_stalled_count && !spinning; ++i)
            spinning = fake_stalled[i] != comm && fake_stalled[i]->context == comm->context && !is_dead(fake_stalled[i]);
        pthread_mutex_unlock(&fake_lock);
        if (!spinning) return;
        if (waited == 10000) {
            char text[256];
            snprintf(text, sizeof text,
                     "%s waited 10 s for its device, where a collective of another communicator spins on a dead peer "
                     "(NCCL's would wait forever: abort that communicator first)",
                     call);
            misuse(text);
            return;
        }
        usleep(1000);
    }
}

FAKE_API result_t ncclCommAbort(comm_t *comm) {
    if (!comm) return uform_nccl_success_k;
    result_t result = retire(comm, "ncclCommAbort"); // sets its own abort flag: its own kernels quit
    if (result == uform_nccl_success_k) free_device_memory(comm, "ncclCommAbort");
    return result;
}
FAKE_API result_t ncclCommDestroy(comm_t *comm) {
    if (comm && !is_dead(comm) && comm->finalizing) misuse("ncclCommDestroy before ncclCommFinalize completed");
    if (!comm) return uform_nccl_success_k;
    result_t result = retire(comm, "ncclCommDestroy");
    if (result == uform_nccl_success_k) free_device_memory(comm, "ncclCommDestroy");
    return result;
}
FAKE_API result_t ncclCommFinalize(comm_t *comm) {
    if (!usable(comm, "ncclCommFinalize")) return uform_nccl_invalid_usage_k;
    comm->finalizing = comm->blocking ? 0 : 2; // a blocking group finalises before it returns
    if (fake_depth) join_group(comm);
    return fake_depth || comm->blocking ? uform_nccl_success_k : uform_nccl_in_progress_k;
}

FAKE_API result_t ncclGroupStart(void) {
    ++fake_depth;
    return uform_nccl_success_k;
}

FAKE_API result_t ncclAllReduce(void const *send, void *receive, size_t count, uform_nccl_dtype_t dtype, uform_nccl_op_t op, comm_t *comm,
                                void *stream) {
    if (!usable(comm, "ncclAllReduce")) return uform_nccl_invalid_usage_k;
    if (comm->init_polls) misuse("ncclAllReduce on a communicator still initialising");
    if (op != uform_nccl_sum_k || (int)dtype < 0 || (int)dtype > 9) return uform_nccl_invalid_argument_k;
    if (!fake_depth) misuse("ncclAllReduce outside a group (the engine always groups)");
    join_group(comm);
    if (fake_ops_count == fake_ops_capacity) {
        fake_ops_capacity = fake_ops_capacity ? fake_ops_capacity * 2 : 16;
        fake_ops = realloc(fake_ops, fake_ops_capacity * sizeof *fake_ops);
    }
    fake_ops[fake_ops_count++] = (op_t){comm, send, receive, count, dtype, stream};
    return uform_nccl_success_k;
}

static double element(void const *buffer, size_t i, int dtype) {
    switch (dtype) {
    case 2: return ((int32_t const *)buffer)[i];
    case 7: return ((float const *)buffer)[i];
    case 8: return ((double const *)buffer)[i];
    case 9: {
        uint32_t bits = (uint32_t)((uint16_t const *)buffer)[i] << 16;
        float value;
        memcpy(&value, &bits, 4);
        return value;
    }
    default: return 0; // f16 and others: summed as zeros, enough for a fake
    }
}

static void store(void *buffer, size_t i, int dtype, double value) {
    switch (dtype) {
    case 2: ((int32_t *)buffer)[i] = (int32_t)value; break;
    case 7: ((float *)buffer)[i] = (float)value; break;
    case 8: ((double *)buffer)[i] = value; break;
    case 9: {
        float f = (float)value;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        bits += 0x7FFF + ((bits >> 16) & 1);
        ((uint16_t *)buffer)[i] = (uint16_t)(bits >> 16);
        break;
    }
    default: break;
    }
}

/** Synchronises a stream through the fake driver (the same libcuda.so.1 the engine loaded). */
static void synchronize(void *stream) {
    int (*stream_synchronize)(void *) = (int (*)(void *))driver_function("cuStreamSynchronize", 0);
    if (stream_synchronize) stream_synchronize(stream);
}

FAKE_API result_t ncclGroupEnd(void) {
    if (fake_depth <= 0) return misuse("ncclGroupEnd without ncclGroupStart"), uform_nccl_invalid_usage_k;
    if (--fake_depth) return uform_nccl_success_k;
    int blocking = fake_group_blocking == 1;
    fake_group_blocking = -1;
    long block_after = env_int("FAKE_NCCL_BLOCK_AFTER", 0);
    if (blocking && block_after && fake_ops_count && fake_ops[0].comm->enqueued >= block_after) {
        // A peer is gone: NCCL's blocking group waits until a communicator of it is aborted.
        for (int waited = 0;; ++waited) {
            int aborted = 0;
            for (size_t i = 0; i < fake_ops_count; ++i) aborted = aborted || is_dead(fake_ops[i].comm);
            if (aborted) break;
            if (waited == 60000) {
                misuse("a blocked ncclGroupEnd was never released by ncclCommAbort within 60 s");
                break;
            }
            usleep(1000);
        }
        fake_ops_count = 0;
        return uform_nccl_remote_error_k;
    }
    long stall_after = env_int("FAKE_NCCL_STALL_AFTER", 0);
    if (stall_after && fake_ops_count && fake_ops[0].comm->enqueued >= stall_after) {
        // A peer died between collectives: enqueued, but each kernel spins until its communicator's
        // abort flag is set (`dead`, which fake_cuda_hold watches).
        int (*hold)(void *, int const *) = (int (*)(void *, int const *))driver_function("fake_cuda_hold", 1);
        if (!hold) misuse("FAKE_NCCL_STALL_AFTER needs the fake CUDA driver");
        for (size_t i = 0; i < fake_ops_count; ++i) {
            comm_t *comm = fake_ops[i].comm;
            ++comm->enqueued;
            if (hold && hold(fake_ops[i].stream, &comm->dead) != 0) misuse("fake_cuda_hold refused a stream");
            pthread_mutex_lock(&fake_lock);
            if (fake_stalled_count == fake_stalled_capacity) {
                fake_stalled_capacity = fake_stalled_capacity ? fake_stalled_capacity * 2 : 8;
                fake_stalled = realloc(fake_stalled, fake_stalled_capacity * sizeof *fake_stalled);
            }
            fake_stalled[fake_stalled_count++] = comm;
            pthread_mutex_unlock(&fake_lock);
        }
        fake_ops_count = 0;
        return uform_nccl_success_k;
    }
    for (size_t i = 0; i < fake_ops_count; ++i) ++fake_ops[i].comm->enqueued;
    int sync = env_int("FAKE_NCCL_SYNC", 1);
    long error_after = env_int("FAKE_NCCL_REMOTE_ERROR_AFTER", 0);
    // Every set of operations on one unique ID whose ranks are all here is summed in place.
    for (size_t i = 0; i < fake_ops_count; ++i) {
        op_t *first = &fake_ops[i];
        if (!first->comm) continue;
        size_t members = 0;
        for (size_t j = i; j < fake_ops_count; ++j)
            members += fake_ops[j].comm && !memcmp(&fake_ops[j].comm->id, &first->comm->id, sizeof first->comm->id);
        if ((int)members == first->comm->ranks) {
            double *sums = calloc(first->count ? first->count : 1, sizeof(double));
            for (size_t j = i; j < fake_ops_count; ++j)
                if (fake_ops[j].comm && !memcmp(&fake_ops[j].comm->id, &first->comm->id, sizeof first->comm->id)) {
                    if (sync) synchronize(fake_ops[j].stream);
                    for (size_t k = 0; k < first->count; ++k) sums[k] += element(fake_ops[j].send, k, first->dtype);
                }
            for (size_t j = i; j < fake_ops_count; ++j)
                if (fake_ops[j].comm && !memcmp(&fake_ops[j].comm->id, &first->comm->id, sizeof first->comm->id))
                    for (size_t k = 0; k < first->count; ++k) store(fake_ops[j].receive, k, first->dtype, sums[k]);
            free(sums);
        }
        for (size_t j = i; j < fake_ops_count; ++j)
            if (fake_ops[j].comm && !memcmp(&fake_ops[j].comm->id, &first->comm->id, sizeof first->comm->id)) {
                comm_t *comm = fake_ops[j].comm;
                pthread_mutex_lock(&fake_lock);
                if (error_after && ++comm->collectives >= error_after) comm->error = uform_nccl_remote_error_k;
                pthread_mutex_unlock(&fake_lock);
                if (j != i) fake_ops[j].comm = NULL;
            }
        first->comm = NULL;
    }
    fake_ops_count = 0;
    // Every other group "finishes in the background", to exercise the caller's polling; a group of
    // blocking communicators returns once its work is enqueued.
    if (blocking) return uform_nccl_success_k;
    return (fake_group_pending ^= 1) ? uform_nccl_in_progress_k : uform_nccl_success_k;
}

FAKE_API char const *ncclGetErrorString(result_t result) {
    switch (result) {
    case uform_nccl_success_k: return "no error";
    case uform_nccl_remote_error_k: return "remote process exited or there was a network error (fake)";
    case uform_nccl_in_progress_k: return "NCCL operation in progress";
    default: return "fake NCCL error";
    }
}

FAKE_API char const *ncclGetLastError(comm_t *comm) {
    (void)comm;
    return "";
}

/** For tests: how `comm` was made (blocking, a split child) and how many collectives it enqueued.
 *  Returns 0, or -1 for a communicator the fake never made. */
FAKE_API int fake_nccl_describe(comm_t const *comm, int *blocking, int *child, long *enqueued) {
    pthread_mutex_lock(&fake_lock);
    comm_t const *known = fake_comms;
    while (known && known != comm) known = known->next;
    pthread_mutex_unlock(&fake_lock);
    if (!known) return -1;
    *blocking = comm->blocking, *child = comm->child, *enqueued = comm->enqueued;
    return 0;
}

__attribute__((destructor)) static void fake_nccl_exit_report(void) {
    int live = 0;
    for (comm_t *comm = fake_comms, *next; comm; comm = next) {
        next = comm->next;
        live += !comm->dead;
        free(comm);
    }
    free(fake_ops);
    free(fake_stalled);
    if (live) fprintf(stderr, "fake_nccl: leak: %d communicator(s) never destroyed\n", live);
}
