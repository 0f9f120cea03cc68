/**
 *  @file   text_vram_private.h
 *  @brief  The VRAM text towers' representation, shared by text_vram.c (opening: packing, upload,
 *          freeing), text_vram_launch.c (one chunk's pass on a device: launches, cuBLASLt products,
 *          graphs, profiling) and text_vram_encode.c (the encode job: tokenising, packing, sharing
 *          the texts over devices, gathering the rows). Builds without CUDA compile text_vram_stub.c.
 */
#ifndef UFORM_MODELS_TEXT_VRAM_PRIVATE_H
#define UFORM_MODELS_TEXT_VRAM_PRIVATE_H

#include "models/text_vram.h"

#include "cublaslt.h"
#include "cuda_driver.h"
#include "internal.h"
#include "kernels/kernels.h"

#include <pthread.h> // `pthread_mutex_t`

#define VRAM_ALIGN 256u
#define VRAM_CACHE 48u

typedef struct vram_layer_t {
    CUdeviceptr qkv_weight, qkv_bias, output_weight, output_bias, norm1_gamma, norm1_beta;
    CUdeviceptr up_weight, up_bias, down_weight, down_bias, norm2_gamma, norm2_beta;
} vram_layer_t;

typedef struct vram_algo_t {
    size_t m, n, k, workspace;
    int epilogue, residual, valid;
    uform_lt_algo_t algo;
} vram_algo_t;

/** A captured chunk: the key names everything its launches depend on (see `text_vram_enqueue_chunk`). */
typedef struct vram_graph_t {
    uint64_t key[12];
    int state;      /**< 0 empty, 1 seen once (captured on the next sighting), 2 captured, 3 not capturable. */
    CUgraphExec exec;
    uint64_t used;  /**< LRU clock. */
} vram_graph_t;

#define VRAM_GRAPHS 16u

typedef struct vram_copy_t {
    int32_t ordinal;
    CUdevice device;
    CUcontext context; /**< Retained primary context, or NULL before. */
    uint32_t multiprocessors;
    int shared_optin;  /**< Dynamic shared memory a block may opt into. */
    CUdeviceptr block;
    CUmodule module;
    CUfunction embed, layer_norm, gelu, attention_simt, attention_mma, pool, finish;
    /** `uform_text_attention_flash<32|64|128>x<32|64>_<dtype>` (head width x keys per softmax step),
     *  looked up (under `lock`) on first use by `text_vram_attention`; state 0 not yet, 1 found (and
     *  its shared-memory limit raised), 2 absent. */
    CUfunction attention_flash[3][2];
    int attention_flash_state[3][2];
    uform_lt_handle_t lt;
    CUdeviceptr word, position, type0, embed_gamma, embed_beta, projection;
    vram_layer_t *layers;
    pthread_mutex_t lock; /**< Guards `cache` and `graphs` (held across a graph's launch). */
    vram_algo_t cache[VRAM_CACHE];
    vram_graph_t graphs[VRAM_GRAPHS];
    uint64_t graph_clock;
} vram_copy_t;

typedef struct uform_text_vram_s {
    uform_cuda_t const *cuda;
    uform_cublaslt_t const *lt;
    size_t count;
    vram_copy_t *copies;
    int lt_type; /**< CUDA_R_* of the activations and weights. */
    int suffix;  /**< 0 f32, 1 bf16, 2 f16. */
} uform_text_vram_t;

static inline size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }
static inline size_t element_size(uform_dtype_t dtype) { return dtype == uform_dtype_f32_k ? 4 : 2; }

/** One device's share of a job: encoded texts [first, end), its chunk capacity, its scratch plan. */
typedef struct vram_share_t {
    vram_copy_t *copy;
    size_t first, end;         /**< Encoded texts. */
    size_t tokens;             /**< Their tokens. */
    size_t chunk_tokens;       /**< Tokens per chunk at most (a chunk's texts are at most as many). */
    CUdeviceptr scratch;       /**< The slot's scratch, once its callback ran. */
    CUstream stream;
    CUcontext context;
} vram_share_t;

typedef struct vram_job_t {
    struct uform_model_s const *model;
    uform_text_vram_t *vram;
    uform_text_tower_t const *tower;
    char const *const *texts;
    size_t const *lengths;
    size_t count, context;
    int32_t *slots;            /**< [count][context] ids. */
    size_t *produced;          /**< [count] ids per text. */
    uform_status_t *items;     /**< [count] tokenisation statuses. */
    /* Packed. */
    size_t encoded, total, longest;
    size_t *order;             /**< [encoded] original indices. */
    int32_t *ids, *positions;  /**< [total] */
    size_t *offsets;           /**< [encoded + 1] */
    int32_t *chunk_offsets;    /**< [encoded + 1] scratch for one chunk's offsets at a time (per device, see below) */
    /* Output. */
    uform_embeddings_t out;
    size_t dims, row_bytes;
    unsigned char *host_rows;  /**< [encoded][row_bytes] */
    uform_status_t *statuses;
    /* Devices. */
    size_t shares_count;
    vram_share_t *shares;
    size_t workspace;          /**< cuBLASLt workspace bytes per device. */
    size_t chunks;             /**< Chunks enqueued so far, over all devices. */
} vram_job_t;

/** Pointers into one device's scratch: [workspace][output rows][chunk buffers]. */
typedef struct vram_buffers_t {
    CUdeviceptr workspace, out, ids, positions, offsets, x, ctx, tmp, qkv, ffn, pooled, projected;
} vram_buffers_t;

#define CHECK_STEP(expression)                                                                                         \
    do {                                                                                                               \
        uform_status_t step_ = (expression);                                                                           \
        if (step_ != uform_status_ok_k) return step_;                                                                  \
    } while (0)

/** A failed launch or copy on device `ordinal`: DEVICE_FAULT when the context is lost, else INVALID_ARGUMENT. */
uform_status_t text_vram_launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal);

/** Enqueues one chunk: encoded texts [first, end) of the job, written at output row `first - share->first`. */
uform_status_t text_vram_enqueue_chunk(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                       size_t end, int32_t *offsets);

/** Attention over packed sequences on `copy`'s device, enqueued on `stream`: `context` [tokens][heads
 *  head] from `qkv` [tokens][3 heads head] (Q, K, V of a token side by side, as the QKV product writes
 *  them), `offsets` (int32 on the device, `sequences + 1`) delimiting the sequences, the longest of
 *  which has `longest` tokens; scale 1 / sqrt(head). `dtype` is the activations' (f32, bf16, f16).
 *  Picks the kernel: `attention_flash` (bf16/f16, heads of 32, 64 or 128), else `attention_mma`
 *  (WMMA, heads a multiple of 16), else `attention_simt` (any dtype, the f32 path); the environment
 *  variable UFORM_GPU_ATTENTION=flash|wmma|simt (read once) forces a lower one for comparisons. Text
 *  towers call it once per layer; image towers may too (one sequence per image, no padding).
 *  UNSUPPORTED (with a message) when no kernel's shared memory fits the device. */
uform_status_t text_vram_attention(uform_cuda_t const *cuda, vram_copy_t *copy, CUstream stream, CUdeviceptr context,
                                   CUdeviceptr qkv, CUdeviceptr offsets, size_t sequences, size_t longest, int heads,
                                   int head, uform_dtype_t dtype);

#endif // UFORM_MODELS_TEXT_VRAM_PRIVATE_H
