/**
 *  @file   fake_cuda_private.h
 *  @brief  The fake CUDA driver's shared state and types, private to test/gpu/fake_cuda*.c (see
 *          fake_cuda.c for what the fake does). Everything declared here is hidden: the library
 *          exports only `cuGetProcAddress_v2`, `fake_cuda_hold` and `fake_cuda_refuse_context`.
 */
#ifndef UFORM_TEST_FAKE_CUDA_PRIVATE_H
#define UFORM_TEST_FAKE_CUDA_PRIVATE_H

#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#define FAKE_API __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES 8
#define FAKE_HIDDEN __attribute__((visibility("hidden")))

typedef enum fake_kernel_t { fake_empty_k, fake_fill_k, fake_sleep_k, fake_trap_k, fake_add_k, fake_kernels_k } fake_kernel_t;

typedef struct fake_op_t {
    fake_kernel_t kernel;
    double finish; /**< INFINITY behind a hold not yet released. */
    uint64_t buffer, count;
    float value;
    int const *release; /**< A hold (fake_cuda_hold): finishes once this turns non-zero. */
} fake_op_t;

struct CUctx_st {
    int device;
    int references;
    CUresult error;
    int allocations, streams, events, modules;
};

struct CUstream_st {
    struct CUctx_st *context;
    fake_op_t *ops;
    size_t head, count, capacity;
    double last_finish;
    uint64_t enqueued, retired; /**< Operations ever queued and ever finished (or dropped). */
    struct CUstream_st *next; /**< In the global list of live streams. */
};

struct CUevent_st {
    struct CUctx_st *context;
    double finish;              /**< INFINITY when recorded behind a hold: then `ticket` decides. */
    struct CUstream_st *stream; /**< Behind a hold: complete once `stream` retired `ticket` operations. */
    uint64_t ticket;
};

struct CUmod_st {
    struct CUctx_st *context;
    struct CUfunc_st *functions[fake_kernels_k];
};

struct CUfunc_st {
    struct CUmod_st *module;
    fake_kernel_t kernel;
};

typedef struct fake_allocation_t {
    uint64_t base, bytes;
    struct CUctx_st *context;
} fake_allocation_t;

/* ---- Shared state (defined in fake_cuda.c) ---- */

FAKE_HIDDEN extern pthread_mutex_t fake_lock;
FAKE_HIDDEN extern struct CUstream_st *fake_streams;
FAKE_HIDDEN extern fake_allocation_t *fake_allocations;
FAKE_HIDDEN extern size_t fake_allocations_count, fake_allocations_capacity;

FAKE_HIDDEN double fake_now(void);
/** Whether [buffer, buffer + bytes) lies inside one live allocation of `context`. */
FAKE_HIDDEN bool fake_inside(struct CUctx_st *context, uint64_t buffer, uint64_t bytes);
/** Brings `context` up to date and returns its sticky error, or success. Lock held. */
FAKE_HIDDEN CUresult fake_touch(struct CUctx_st *context);
/** The current context, up to date; its error, or INVALID_CONTEXT without one. Lock held. */
FAKE_HIDDEN CUresult fake_current_context(struct CUctx_st **context);

#define FAKE_LOCKED(expression)                                                                    \
    do {                                                                                           \
        pthread_mutex_lock(&fake_lock);                                                            \
        CUresult fake_result_ = (expression);                                                      \
        pthread_mutex_unlock(&fake_lock);                                                          \
        return fake_result_;                                                                       \
    } while (0)

/* ---- The driver entry points of fake_cuda_memory.c, for the lookup table ---- */

FAKE_HIDDEN CUresult fake_cu_mem_alloc(CUdeviceptr *pointer, size_t bytes);
FAKE_HIDDEN CUresult fake_cu_mem_free(CUdeviceptr pointer);
FAKE_HIDDEN CUresult fake_cu_mem_host_alloc(void **pointer, size_t bytes, unsigned int flags);
FAKE_HIDDEN CUresult fake_cu_mem_free_host(void *pointer);
FAKE_HIDDEN CUresult fake_cu_mem_get_info(size_t *free_bytes, size_t *total);
FAKE_HIDDEN CUresult fake_cu_memcpy_dtoh(void *host, CUdeviceptr device, size_t bytes);
FAKE_HIDDEN CUresult fake_cu_memcpy_htod(CUdeviceptr device, void const *host, size_t bytes);
FAKE_HIDDEN CUresult fake_cu_memcpy_dtoh_async(void *host, CUdeviceptr device, size_t bytes, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_memcpy_htod_async(CUdeviceptr device, void const *host, size_t bytes, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_memcpy_peer_async(CUdeviceptr to, CUcontext to_context, CUdeviceptr from,
                                               CUcontext from_context, size_t bytes, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_memset_d8_async(CUdeviceptr device, unsigned char value, size_t count, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_memset_d32_async(CUdeviceptr device, unsigned value, size_t count, CUstream stream);

/* ---- The driver entry points of fake_cuda_streams.c, for the lookup table ---- */

FAKE_HIDDEN CUresult fake_cu_stream_create(CUstream *stream, unsigned flags);
FAKE_HIDDEN CUresult fake_cu_stream_destroy(CUstream stream);
FAKE_HIDDEN CUresult fake_cu_stream_query(CUstream stream);
FAKE_HIDDEN CUresult fake_cu_stream_synchronize(CUstream stream);
FAKE_HIDDEN CUresult fake_cu_stream_wait_event(CUstream stream, CUevent event, unsigned flags);
FAKE_HIDDEN CUresult fake_cu_event_create(CUevent *event, unsigned flags);
FAKE_HIDDEN CUresult fake_cu_event_destroy(CUevent event);
FAKE_HIDDEN CUresult fake_cu_event_record(CUevent event, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_event_query(CUevent event);
FAKE_HIDDEN CUresult fake_cu_event_synchronize(CUevent event);
FAKE_HIDDEN CUresult fake_cu_event_elapsed_time(float *milliseconds, CUevent start, CUevent end);
FAKE_HIDDEN CUresult fake_cu_module_load_data(CUmodule *module, void const *image);
FAKE_HIDDEN CUresult fake_cu_module_unload(CUmodule module);
FAKE_HIDDEN CUresult fake_cu_func_set_attribute(CUfunction function, CUfunction_attribute attribute, int value);
FAKE_HIDDEN CUresult fake_cu_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode);
FAKE_HIDDEN CUresult fake_cu_stream_end_capture(CUstream stream, CUgraph *graph);
FAKE_HIDDEN CUresult fake_cu_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
FAKE_HIDDEN CUresult fake_cu_graph_launch(CUgraphExec exec, CUstream stream);
FAKE_HIDDEN CUresult fake_cu_graph_exec_destroy(CUgraphExec exec);
FAKE_HIDDEN CUresult fake_cu_graph_destroy(CUgraph graph);
FAKE_HIDDEN CUresult fake_cu_module_get_function(CUfunction *function, CUmodule module, char const *name);
FAKE_HIDDEN CUresult fake_cu_launch_kernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                          unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared,
                                          CUstream stream, void **parameters, void **extra);

#endif // UFORM_TEST_FAKE_CUDA_PRIVATE_H
