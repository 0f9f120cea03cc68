/**
 *  @file   fake_nccl.c
 *  @brief  A fake NCCL, built as `libnccl.so.2` for tests only and named to the engine through
 *          `UFORM_NCCL_LIBRARY`, so a mesh's NCCL paths run (under ASan, UBSan and TSan too) on the
 *          fake CUDA driver (fake_cuda.c), whose device pointers are host memory. Never installed.
 *
 *  - Communicators are non-blocking only: `ncclCommInitRankConfig` (inside a group, as the engine
 *    calls it) starts an initialisation that `ncclCommGetAsyncError` reports as in progress for
 *    `FAKE_NCCL_INIT_POLLS` polls (default 3) and until every rank of the unique ID started, in any
 *    process, as NCCL's does: each rank leaves a marker file `.fake-nccl-<id>-<rank>` in
 *    `FAKE_NCCL_DIR` (default /tmp), never removed. Forever with `FAKE_NCCL_INIT_HANG=1`.
 *  - `ncclAllReduce` inside a group queues; `ncclGroupEnd` sums every queued operation whose ranks
 *    all live in this process (after synchronising their streams through the fake driver, unless
 *    `FAKE_NCCL_SYNC=0`), in place, and returns ncclInProgress once per group so the engine's
 *    polling is exercised. Operations of ranks in other processes are left as they are.
 *  - `FAKE_NCCL_REMOTE_ERROR_AFTER=K`: once K collectives completed, a communicator reports
 *    ncclRemoteError, as one whose peer was lost would.
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

typedef enum { ok_k = 0, system_error_k = 2, invalid_argument_k = 4, invalid_usage_k = 5, remote_error_k = 6, in_progress_k = 7 } result_t;

typedef struct { char internal[128]; } unique_id_t;

typedef struct {
    size_t size;
    unsigned magic, version;
    int blocking;
} config_prefix_t;

typedef struct comm_t {
    unique_id_t id;
    int ranks, rank;
    int init_polls;  /**< Polls left before initialisation completes; -1 hangs. */
    int finalizing;  /**< Polls left before finalisation completes. */
    int dead;        /**< Destroyed or aborted: any later use is misuse. */
    long collectives;
    result_t error;
    struct comm_t *next;
} comm_t;

typedef struct op_t {
    comm_t *comm;
    void const *send;
    void *receive;
    size_t count;
    int dtype;
    void *stream;
} op_t;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_t *fake_comms = NULL; // every communicator ever made; dead ones stay, to catch misuse
// Group state is per thread in NCCL; the engine groups on one thread at a time, and plain globals
// keep LeakSanitizer away from a dlopen'ed library's dynamic TLS, which it cannot always scan.
static int fake_depth = 0;
static op_t *fake_ops = NULL;
static size_t fake_ops_count = 0, fake_ops_capacity = 0;
static int fake_group_pending = 0;

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

static int usable(comm_t *comm, char const *call) {
    if (!comm) return misuse(call), 0;
    if (comm->dead) {
        char text[128];
        snprintf(text, sizeof text, "%s on a destroyed or aborted communicator", call);
        misuse(text);
        return 0;
    }
    return 1;
}

FAKE_API result_t ncclGetVersion(int *version) {
    *version = 22800;
    return ok_k;
}

FAKE_API result_t ncclGetUniqueId(unique_id_t *id) {
    static long counter = 0;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake-nccl-%ld-%ld", (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    return ok_k;
}

FAKE_API result_t ncclCommInitRankConfig(comm_t **out, int ranks, unique_id_t id, int rank, config_prefix_t *config) {
    if (!out || ranks < 1 || rank < 0 || rank >= ranks || !config || config->magic != 0xcafebeefu)
        return invalid_argument_k;
    if (config->blocking != 0) misuse("the fake supports non-blocking communicators only");
    comm_t *comm = calloc(1, sizeof *comm);
    comm->id = id, comm->ranks = ranks, comm->rank = rank;
    comm->init_polls = env_int("FAKE_NCCL_INIT_HANG", 0) ? -1 : env_int("FAKE_NCCL_INIT_POLLS", 3);
    char path[512];
    marker_path(comm, rank, path, sizeof path);
    FILE *marker = fopen(path, "w");
    if (marker) fclose(marker);
    pthread_mutex_lock(&fake_lock);
    comm->next = fake_comms, fake_comms = comm;
    pthread_mutex_unlock(&fake_lock);
    *out = comm;
    return fake_depth ? ok_k : in_progress_k;
}

FAKE_API result_t ncclCommGetAsyncError(comm_t *comm, result_t *error) {
    if (!usable(comm, "ncclCommGetAsyncError")) return invalid_usage_k;
    pthread_mutex_lock(&fake_lock);
    if (comm->init_polls > 1 || (comm->init_polls == 1 && all_ranks_started(comm))) --comm->init_polls;
    if (comm->finalizing > 0) --comm->finalizing;
    *error = comm->error ? comm->error : (comm->init_polls || comm->finalizing) ? in_progress_k : ok_k;
    pthread_mutex_unlock(&fake_lock);
    return ok_k;
}

static result_t retire(comm_t *comm, char const *call) {
    if (!usable(comm, call)) return invalid_usage_k;
    comm->dead = 1;
    return ok_k;
}
FAKE_API result_t ncclCommAbort(comm_t *comm) { return comm ? retire(comm, "ncclCommAbort") : ok_k; }
FAKE_API result_t ncclCommDestroy(comm_t *comm) {
    if (comm && !comm->dead && comm->finalizing) misuse("ncclCommDestroy before ncclCommFinalize completed");
    return comm ? retire(comm, "ncclCommDestroy") : ok_k;
}
FAKE_API result_t ncclCommFinalize(comm_t *comm) {
    if (!usable(comm, "ncclCommFinalize")) return invalid_usage_k;
    comm->finalizing = 2;
    return fake_depth ? ok_k : in_progress_k;
}

FAKE_API result_t ncclGroupStart(void) {
    ++fake_depth;
    return ok_k;
}

FAKE_API result_t ncclAllReduce(void const *send, void *receive, size_t count, int dtype, int op, comm_t *comm,
                                void *stream) {
    if (!usable(comm, "ncclAllReduce")) return invalid_usage_k;
    if (comm->init_polls) misuse("ncclAllReduce on a communicator still initialising");
    if (op != 0 || dtype < 0 || dtype > 9) return invalid_argument_k;
    if (!fake_depth) misuse("ncclAllReduce outside a group (the engine always groups)");
    if (fake_ops_count == fake_ops_capacity) {
        fake_ops_capacity = fake_ops_capacity ? fake_ops_capacity * 2 : 16;
        fake_ops = realloc(fake_ops, fake_ops_capacity * sizeof *fake_ops);
    }
    fake_ops[fake_ops_count++] = (op_t){comm, send, receive, count, dtype, stream};
    return ok_k;
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
    static int (*stream_synchronize)(void *) = NULL;
    if (!stream_synchronize) {
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        int (*get)(char const *, void **, int, unsigned long long, void *) =
            driver ? (int (*)(char const *, void **, int, unsigned long long, void *))dlsym(driver, "cuGetProcAddress_v2") : NULL;
        if (get) get("cuStreamSynchronize", (void **)&stream_synchronize, 2000, 0, NULL);
        if (!stream_synchronize) return;
    }
    stream_synchronize(stream);
}

FAKE_API result_t ncclGroupEnd(void) {
    if (fake_depth <= 0) return misuse("ncclGroupEnd without ncclGroupStart"), invalid_usage_k;
    if (--fake_depth) return ok_k;
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
                if (error_after && ++comm->collectives >= error_after) comm->error = remote_error_k;
                pthread_mutex_unlock(&fake_lock);
                if (j != i) fake_ops[j].comm = NULL;
            }
        first->comm = NULL;
    }
    fake_ops_count = 0;
    // Every other group "finishes in the background", to exercise the caller's polling.
    return (fake_group_pending ^= 1) ? in_progress_k : ok_k;
}

FAKE_API char const *ncclGetErrorString(result_t result) {
    switch (result) {
    case ok_k: return "no error";
    case remote_error_k: return "remote process exited or there was a network error (fake)";
    case in_progress_k: return "NCCL operation in progress";
    default: return "fake NCCL error";
    }
}

FAKE_API char const *ncclGetLastError(comm_t *comm) {
    (void)comm;
    return "";
}

__attribute__((destructor)) static void fake_nccl_exit_report(void) {
    int live = 0;
    for (comm_t *comm = fake_comms, *next; comm; comm = next) {
        next = comm->next;
        live += !comm->dead;
        free(comm);
    }
    free(fake_ops);
    if (live) fprintf(stderr, "fake_nccl: leak: %d communicator(s) never destroyed\n", live);
}
