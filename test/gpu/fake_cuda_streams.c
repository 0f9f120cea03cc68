/**
 *  @file   fake_cuda_streams.c
 *  @brief  The fake CUDA driver's streams, events, modules, launches and (refused) graphs, on the
 *          virtual clock of fake_cuda.c. Part of the fake `libcuda.so.1`. Never installed.
 */
#include "fake_cuda_private.h"

static char const *const fake_kernel_names[fake_kernels_k] = {"uform_kernel_empty", "uform_kernel_fill_f32",
                                                             "uform_kernel_sleep", "uform_kernel_trap",
                                                             "uform_kernel_add_f32"};

static CUresult fake_stream_create(CUstream *out, unsigned flags) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    if (flags != CU_STREAM_NON_BLOCKING && flags != CU_STREAM_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *stream = calloc(1, sizeof(*stream));
    if (!stream) return CUDA_ERROR_OUT_OF_MEMORY;
    stream->context = context;
    stream->next = fake_streams;
    fake_streams = stream;
    context->streams++;
    *out = stream;
    return CUDA_SUCCESS;
}
CUresult fake_cu_stream_create(CUstream *stream, unsigned flags) { FAKE_LOCKED(fake_stream_create(stream, flags)); }

static bool fake_live_stream(struct CUstream_st *stream) {
    for (struct CUstream_st *cursor = fake_streams; cursor; cursor = cursor->next)
        if (cursor == stream) return true;
    return false;
}

static CUresult fake_stream_destroy(CUstream stream) {
    if (!fake_live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    for (struct CUstream_st **link = &fake_streams; *link; link = &(*link)->next)
        if (*link == stream) {
            *link = stream->next;
            break;
        }
    stream->context->streams--;
    free(stream->ops);
    free(stream);
    return CUDA_SUCCESS;
}
CUresult fake_cu_stream_destroy(CUstream stream) { FAKE_LOCKED(fake_stream_destroy(stream)); }

static CUresult fake_stream_query(CUstream stream) {
    if (!fake_live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult result = fake_touch(stream->context);
    if (result != CUDA_SUCCESS) return result;
    return stream->count ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
CUresult fake_cu_stream_query(CUstream stream) { FAKE_LOCKED(fake_stream_query(stream)); }

CUresult fake_cu_stream_synchronize(CUstream stream) {
    for (;;) {
        CUresult result;
        pthread_mutex_lock(&fake_lock);
        result = fake_stream_query(stream);
        pthread_mutex_unlock(&fake_lock);
        if (result != CUDA_ERROR_NOT_READY) return result;
        struct timespec pause = {.tv_nsec = 2000};
        nanosleep(&pause, NULL);
    }
}

CUresult fake_cu_stream_wait_event(CUstream stream, CUevent event, unsigned flags) {
    (void)stream, (void)event, (void)flags;
    return CUDA_SUCCESS;
}

static CUresult fake_event_create(CUevent *out, unsigned flags) {
    (void)flags;
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    struct CUevent_st *event = calloc(1, sizeof(*event));
    if (!event) return CUDA_ERROR_OUT_OF_MEMORY;
    event->context = context;
    context->events++;
    *out = event;
    return CUDA_SUCCESS;
}
CUresult fake_cu_event_create(CUevent *event, unsigned flags) { FAKE_LOCKED(fake_event_create(event, flags)); }

static CUresult fake_event_destroy(CUevent event) {
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    event->context->events--;
    free(event);
    return CUDA_SUCCESS;
}
CUresult fake_cu_event_destroy(CUevent event) { FAKE_LOCKED(fake_event_destroy(event)); }

static CUresult fake_event_record(CUevent event, CUstream stream) {
    if (!event || !fake_live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    if (event->context != stream->context) return CUDA_ERROR_INVALID_HANDLE;
    CUresult result = fake_touch(stream->context);
    if (result != CUDA_SUCCESS) return result;
    event->finish = stream->count ? stream->last_finish : 0;
    event->stream = stream, event->ticket = stream->enqueued;
    return CUDA_SUCCESS;
}
CUresult fake_cu_event_record(CUevent event, CUstream stream) { FAKE_LOCKED(fake_event_record(event, stream)); }

static CUresult fake_event_query(CUevent event) {
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    CUresult result = fake_touch(event->context);
    if (result != CUDA_SUCCESS) return result;
    if (isinf(event->finish)) // recorded behind a hold: done once the stream got past it
        return !fake_live_stream(event->stream) || event->stream->retired >= event->ticket ? CUDA_SUCCESS
                                                                                          : CUDA_ERROR_NOT_READY;
    return fake_now() >= event->finish ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult fake_cu_event_query(CUevent event) { FAKE_LOCKED(fake_event_query(event)); }

CUresult fake_cu_event_synchronize(CUevent event) {
    for (;;) {
        CUresult result;
        pthread_mutex_lock(&fake_lock);
        result = fake_event_query(event);
        pthread_mutex_unlock(&fake_lock);
        if (result != CUDA_ERROR_NOT_READY) return result;
        struct timespec pause = {.tv_nsec = 2000};
        nanosleep(&pause, NULL);
    }
}

CUresult fake_cu_event_elapsed_time(float *milliseconds, CUevent start, CUevent end) {
    *milliseconds = (float)((end->finish - start->finish) * 1e3);
    return CUDA_SUCCESS;
}

static CUresult fake_module_load(CUmodule *out, void const *image) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    uint32_t magic = 0;
    if (image) memcpy(&magic, image, sizeof(magic));
    if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE; // a fatbin's magic
    struct CUmod_st *module = calloc(1, sizeof(*module));
    if (!module) return CUDA_ERROR_OUT_OF_MEMORY;
    module->context = context;
    for (int kernel = 0; kernel < fake_kernels_k; ++kernel) {
        module->functions[kernel] = calloc(1, sizeof(struct CUfunc_st));
        if (module->functions[kernel])
            *module->functions[kernel] = (struct CUfunc_st) {.module = module, .kernel = (fake_kernel_t)kernel};
    }
    context->modules++;
    *out = module;
    return CUDA_SUCCESS;
}
CUresult fake_cu_module_load_data(CUmodule *module, void const *image) { FAKE_LOCKED(fake_module_load(module, image)); }

static CUresult fake_module_unload(CUmodule module) {
    if (!module) return CUDA_ERROR_INVALID_HANDLE;
    module->context->modules--;
    for (int kernel = 0; kernel < fake_kernels_k; ++kernel) free(module->functions[kernel]);
    free(module);
    return CUDA_SUCCESS;
}
CUresult fake_cu_module_unload(CUmodule module) { FAKE_LOCKED(fake_module_unload(module)); }

/** Accepted and ignored: the fake runs no kernels (VRAM text models raise their attention kernels'
 *  shared-memory ceiling with it). */
CUresult fake_cu_func_set_attribute(CUfunction function, CUfunction_attribute attribute, int value) {
    (void)function, (void)attribute, (void)value;
    return CUDA_SUCCESS;
}

/** Graphs are not faked: capture is refused, so callers fall back to launching directly. */
CUresult fake_cu_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode) {
    (void)stream, (void)mode;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult fake_cu_stream_end_capture(CUstream stream, CUgraph *graph) {
    (void)stream;
    if (graph) *graph = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult fake_cu_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    (void)graph, (void)flags;
    if (exec) *exec = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult fake_cu_graph_launch(CUgraphExec exec, CUstream stream) {
    (void)exec, (void)stream;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult fake_cu_graph_exec_destroy(CUgraphExec exec) {
    (void)exec;
    return CUDA_SUCCESS;
}
CUresult fake_cu_graph_destroy(CUgraph graph) {
    (void)graph;
    return CUDA_SUCCESS;
}

CUresult fake_cu_module_get_function(CUfunction *function, CUmodule module, char const *name) {
    for (int kernel = 0; kernel < fake_kernels_k; ++kernel)
        if (!strcmp(name, fake_kernel_names[kernel])) {
            *function = module->functions[kernel];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

/** Queues `op` on `stream`, finishing `duration` after the stream's last work (never behind a hold). */
static CUresult fake_push(struct CUstream_st *stream, fake_op_t op, double duration) {
    if (stream->count == stream->capacity) {
        size_t capacity = stream->capacity ? stream->capacity * 2 : 64;
        fake_op_t *grown = malloc(capacity * sizeof(fake_op_t));
        if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t index = 0; index < stream->count; ++index)
            grown[index] = stream->ops[(stream->head + index) % stream->capacity];
        free(stream->ops);
        stream->ops = grown, stream->capacity = capacity, stream->head = 0;
    }
    double const now = fake_now();
    double const start = stream->count && stream->last_finish > now ? stream->last_finish : now;
    op.finish = op.release ? INFINITY : start + duration;
    stream->last_finish = op.finish;
    stream->ops[(stream->head + stream->count++) % stream->capacity] = op;
    ++stream->enqueued;
    return CUDA_SUCCESS;
}

/* Seam for the fake NCCL: work on `stream` that finishes only once `*release` is non-zero. */
FAKE_API CUresult fake_cuda_hold(CUstream stream, int const *release) {
    pthread_mutex_lock(&fake_lock);
    CUresult result = !release || !fake_live_stream(stream) ? CUDA_ERROR_INVALID_HANDLE
                                                            : fake_push(stream, (fake_op_t) {.release = release}, 0);
    pthread_mutex_unlock(&fake_lock);
    return result;
}

static CUresult fake_launch(CUfunction function, unsigned grid, unsigned block, unsigned shared, CUstream stream,
                            void **parameters, void **extra) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    if (!function || !fake_live_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    if (function->module->context != context || stream->context != context) return CUDA_ERROR_INVALID_HANDLE;
    if (!grid || !block || block > 1024 || shared || extra) return CUDA_ERROR_INVALID_VALUE;
    fake_op_t op = {.kernel = function->kernel};
    static double empty_duration = -1; // FAKE_CUDA_EMPTY_NS: the empty kernel's duration, to time host overheads
    if (empty_duration < 0) empty_duration = getenv("FAKE_CUDA_EMPTY_NS") ? atof(getenv("FAKE_CUDA_EMPTY_NS")) * 1e-9 : 2e-6;
    double duration = empty_duration;
    switch (function->kernel) {
    case fake_fill_k:
    case fake_add_k:
        if (!parameters) return CUDA_ERROR_INVALID_VALUE;
        memcpy(&op.buffer, parameters[0], sizeof(uint64_t));
        memcpy(&op.count, parameters[1], sizeof(uint64_t));
        memcpy(&op.value, parameters[2], sizeof(float));
        duration = 5e-6;
        break;
    case fake_sleep_k: {
        if (!parameters) return CUDA_ERROR_INVALID_VALUE;
        uint64_t nanoseconds;
        memcpy(&nanoseconds, parameters[0], sizeof(uint64_t));
        duration = (double)nanoseconds * 1e-9;
        break;
    }
    case fake_trap_k: duration = 1e-6; break;
    default: break;
    }
    return fake_push(stream, op, duration);
}
CUresult fake_cu_launch_kernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                 unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared, CUstream stream,
                                 void **parameters, void **extra) {
    if (grid_y != 1 || grid_z != 1 || block_y != 1 || block_z != 1) return CUDA_ERROR_INVALID_VALUE;
    FAKE_LOCKED(fake_launch(function, grid_x, block_x, shared, stream, parameters, extra));
}
