/**
 *  @file   vram_tower.h
 *  @brief  What the VRAM text towers (text_vram*.c) and the VRAM image towers (image_vram*.c) share,
 *          in vram_tower.c: the per-device weights copies (one `cuMemAlloc` block, the engine's
 *          module, a cuBLASLt handle, an algorithm cache and captured graphs per copy), opening and
 *          freeing them, the cuBLASLt product with its fused epilogues, kernel launches, graph
 *          capture and replay, profiling, the split of a batch over devices in proportion to their
 *          SMs with a chunk capacity under the scratch limit, and gathering the output rows in input
 *          order. Internal only; builds without CUDA compile the `*_stub.c` files instead.
 *
 *  A tower lays its tensors out in one host image (`vram_layout_t`), which `vram_tower_open`
 *  uploads per device; offset 0 of the image is reserved, so a weight pointer of 0 means absent.
 *  A verb's job splits its items (texts, images) over the executor's devices (`vram_plan_shares`),
 *  and each device's callback runs its share in chunks through `vram_exec_t` (`vram_gemm`,
 *  `vram_launch`, `text_vram_attention`, `vram_graph`); the last device's callback calls `vram_gather`.
 */
#ifndef UFORM_MODELS_VRAM_TOWER_H
#define UFORM_MODELS_VRAM_TOWER_H

#include "models/model.h"

#include "cublaslt.h"
#include "cuda_driver.h"
#include "internal.h"
#include "kernels/kernels.h"

#include <pthread.h> // `pthread_mutex_t`
#include <stdio.h>   // `FILE`

#define VRAM_ALIGN 256u
/** A device's scratch budget for one wave without a `scratch_limit`. */
#define VRAM_DEFAULT_BUDGET ((size_t)4 << 30)
#define VRAM_CACHE 48u
#define VRAM_GRAPHS 16u

/** One layer's matrices and vectors on a device (text: post-norm BERT; image: pre-norm ViT, whose
 *  LayerScale is folded into `output_*` and `down_*`). */
typedef struct vram_layer_t {
    CUdeviceptr qkv_weight, qkv_bias, output_weight, output_bias, norm1_gamma, norm1_beta;
    CUdeviceptr up_weight, up_bias, down_weight, down_bias, norm2_gamma, norm2_beta;
} vram_layer_t;

typedef struct vram_algo_t {
    size_t m, n, k, workspace;
    int epilogue, residual, valid;
    uform_lt_algo_t algo;
} vram_algo_t;

/** A captured chunk: the key names everything its launches depend on (see `vram_graph`). */
typedef struct vram_graph_t {
    uint64_t key[12];
    int state;      /**< 0 empty, 1 seen once (captured on the next sighting), 2 captured, 3 not capturable. */
    CUgraphExec exec;
    uint64_t used;  /**< LRU clock. */
} vram_graph_t;

/** Tower-level weights of a copy (0 when the tower has none). */
typedef struct vram_weights_t {
    /* Text towers. */
    CUdeviceptr word, position, type0, embed_gamma, embed_beta;
    /* Image towers: patch matrix [dim][depth padded to 8], bias, position embeddings (f32 [patches][dim]),
     * CLS and register tokens (f32 [1 + registers][dim]), the final LayerNorm (f32). */
    CUdeviceptr patch_weight, patch_bias, patch_position, prefix, norm_gamma, norm_beta;
    /* Both: the projection [embedding_dimensions][width] (no bias). */
    CUdeviceptr projection;
} vram_weights_t;

/** A copy stream beside an executor's stream on one device, so uploads overlap the work enqueued
 *  before them on that stream (image towers cut a large share in two chunks: the second's pixels
 *  upload while the first runs). One per executor stream seen, up to `VRAM_UPLOADERS`, made on
 *  first use and destroyed with the copy; `busy` while one device part uses it. */
typedef struct vram_uploader_t {
    CUstream owner, stream;
    CUevent start;    /**< Recorded on `owner` before the first upload: the uploads wait for it. */
    CUevent ready[2]; /**< Recorded on `stream` after each chunk's upload: `owner` waits for it. */
    /* Alternating crops (image_vram_encode.c's `enqueue_alternating`): two device buffers of its own,
     * outside the executor's scratch, used in turn; `freed[r]` is recorded on `owner` after the pass
     * that read `pixels[r]`. Allocated on first use, freed with the model. */
    CUevent freed[2];
    CUdeviceptr pixels[2];
    size_t pixels_bytes;
    int turn;
    int busy;
} vram_uploader_t;
#define VRAM_UPLOADERS 8u

typedef struct vram_copy_t {
    int32_t ordinal;
    CUdevice device;
    CUcontext context; /**< Retained primary context, or NULL before. */
    uint32_t multiprocessors;
    int shared_optin;  /**< Dynamic shared memory a block may opt into. */
    CUdeviceptr block;
    CUmodule module;
    /* Text kernels (the image tower uses the shared ones: LayerNorm, GELU, attention, pool, finish). */
    CUfunction embed, layer_norm, gelu, attention_simt, attention_mma, pool, finish;
    /** `uform_text_attention_flash<32|64|128>x<32|64>_<dtype>` (head width x keys per softmax step),
     *  looked up (under `lock`) on first use by `text_vram_attention`; state 0 not yet, 1 found (and
     *  its shared-memory limit raised), 2 absent. */
    CUfunction attention_flash[3][2];
    int attention_flash_state[3][2];
    /* Image kernels (src/kernels/image_gpu.cuh). */
    CUfunction image_patches, image_assemble;
    uform_lt_handle_t lt;
    vram_weights_t w;
    vram_layer_t *layers;
    pthread_mutex_t lock; /**< Guards `cache` and `graphs` (held across a graph's launch). */
    vram_algo_t cache[VRAM_CACHE];
    /** Timed winners (`vram_gemm`), one per product shape and power-of-two bucket of m (`m` holds the
     *  bucket): a new m in a bucket takes the winner from its own candidates without timing again. */
    vram_algo_t tuned[VRAM_CACHE];
    vram_graph_t graphs[VRAM_GRAPHS];
    uint64_t graph_clock;
    vram_uploader_t uploaders[VRAM_UPLOADERS]; /**< Guarded by `lock`. */
} vram_copy_t;

/** Pinned staging buffers per tower (`vram_staging_take`). */
#define VRAM_STAGING 2
/** The most bytes of features a job stages in the pinned buffer (one copy a chunk, written out by
 *  `vram_write_features`); past it each item's are copied straight into the caller's memory. */
#define VRAM_STAGED_FEATURES_MAX ((size_t)256u << 20)

/** `model->vram` of a VRAM model, text or image. */
typedef struct vram_tower_t {
    uform_cuda_t const *cuda;
    uform_cublaslt_t const *lt;
    size_t count;
    vram_copy_t *copies;
    int lt_type; /**< CUDA_R_* of the activations and weights. */
    int suffix;  /**< 0 f32, 1 bf16, 2 f16. */
    /* Pinned host buffers for a job's uploads and rows (tokens, 8-bit crops, the rows copied back),
     * each lent to one job at a time: two, so a deferred call's job can hold one until it settles
     * while the next call fills the other. */
    pthread_mutex_t staging_lock;
    void *staging[VRAM_STAGING];
    size_t staging_bytes[VRAM_STAGING];
    int staging_lent[VRAM_STAGING];
} vram_tower_t;

#define CHECK_STEP(expression)                                                                                         \
    do {                                                                                                               \
        uform_status_t step_ = (expression);                                                                           \
        if (step_ != uform_status_ok_k) return step_;                                                                  \
    } while (0)

static inline size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

/* ---- Opening ---- */

/** The host image of one tower: every tensor at a 256-aligned offset of one block. */
typedef struct vram_image_t {
    unsigned char *bytes; /**< NULL while only counting. */
    size_t size, used;
} vram_image_t;

/** Reserves `bytes` (256-aligned) in the image; returns the offset. With `image->bytes` NULL only counts. */
size_t vram_image_take(vram_image_t *image, size_t bytes);
/** Copies `rows * cols` values already in `dtype` (zeros when `tensor` is absent); returns the offset. */
size_t vram_image_matrix(vram_image_t *image, uform_tensor_t const *tensor, size_t rows, size_t cols, uform_dtype_t dtype);
/** Writes an f32 vector converted to `dtype` at `offset` (nothing when absent or only counting). */
void vram_image_vector_at(vram_image_t *image, size_t offset, uform_tensor_t const *tensor, size_t count, uform_dtype_t dtype);
/** Reserves and writes an f32 vector converted to `dtype`; returns the offset. */
size_t vram_image_vector(vram_image_t *image, uform_tensor_t const *tensor, size_t count, uform_dtype_t dtype);

/** Q, K and V stacked: one [3 width][width] matrix and one [3 width] bias (in `dtype`), so one product makes all three. */
void vram_image_qkv(vram_image_t *image, uform_tensor_t const *const weights[3], uform_tensor_t const *const biases[3],
                    size_t width, uform_dtype_t dtype, CUdeviceptr *weight_at, CUdeviceptr *bias_at);

/** Lays a tower out into `image` (from `image->used` 0; copying when `image->bytes` is set): offsets
 *  into `weights` and `layers` (`layers_count` of them). */
typedef void (*vram_layout_t)(vram_image_t *image, void const *tower, vram_weights_t *weights, vram_layer_t *layers);

/** @brief Uploads a host tower to every device `options` names (NULL derives one free device) into
 *  `model->vram`: `layout` places `tower`'s tensors, whose matrices have `dtype`. UNSUPPORTED without
 *  a driver, device or cuBLASLt; INVALID_ARGUMENT for bad ordinals; OUT_OF_MEMORY. On failure
 *  nothing stays allocated. */
uform_status_t vram_tower_open(struct uform_model_s *model, uform_vram_options_t const *options, void const *tower,
                               size_t layers_count, uform_dtype_t dtype, vram_layout_t layout);

/** @brief One of the tower's `VRAM_STAGING` pinned host buffers, grown to at least `bytes` (kept
 *  until the model is freed), for one job at a time: uploads from it run at the bus's speed, not
 *  through the driver's staging. NULL when other jobs hold them all or the driver cannot pin that
 *  much: the caller then uses malloc. */
void *vram_staging_take(vram_tower_t *vram, size_t bytes);
/** @brief Returns the buffer `vram_staging_take` lent. */
void vram_staging_give(vram_tower_t *vram, void *buffer);
/** @brief The uploader of `owner` (the executor's stream on `copy`'s device, whose context is
 *  current), made on first use; NULL when it is in use, the table is full or making it failed (then
 *  uploads go on `owner`, in order). Return it with `vram_uploader_give`. */
vram_uploader_t *vram_uploader_take(vram_tower_t const *vram, vram_copy_t *copy, CUstream owner);
/** @brief Returns an uploader `vram_uploader_take` lent. */
void vram_uploader_give(vram_copy_t *copy, vram_uploader_t *uploader);

/* ---- One device's work ---- */

/** One device's share of a job: items [first, end) in the job's packed order, the chunk capacity. */
typedef struct vram_share_t {
    vram_copy_t *copy;
    size_t first, end;         /**< Encoded items. */
    size_t tokens;             /**< Their tokens. */
    size_t chunk_tokens;       /**< Tokens per chunk at most (a chunk's items are at most as many). */
    CUdeviceptr scratch;       /**< The slot's scratch, once its callback ran. */
    CUdeviceptr out;           /**< Its output rows in the scratch (after the workspace). */
    CUstream stream;
    CUcontext context;
} vram_share_t;

/** What a product or launch runs on: a copy, a stream and a cuBLASLt workspace. `verb` starts messages. */
typedef struct vram_exec_t {
    vram_tower_t const *vram;
    vram_copy_t *copy;
    CUstream stream;
    CUdeviceptr workspace;
    size_t workspace_bytes;
    char const *verb;
} vram_exec_t;

/** A failed launch or copy on device `ordinal`: DEVICE_FAULT when the context is lost, else INVALID_ARGUMENT. */
uform_status_t vram_launch_failed(CUresult result, char const *verb, char const *what, int32_t ordinal);
/** The same for the text verb ("uform_encode_texts: ..."). */
uform_status_t text_vram_launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal);

/** Launches `function` on `stream` (device `ordinal`) over a grid_x x grid_y grid of `block`-thread
 *  blocks, timed under `name` when profiling; failures name `verb`. */
uform_status_t vram_launch_grid(uform_cuda_t const *cuda, CUstream stream, int32_t ordinal, char const *verb,
                                CUfunction function, char const *name, unsigned grid_x, unsigned grid_y, unsigned block,
                                unsigned shared, void **arguments);
/** `vram_launch_grid` on the exec's stream over a 1D grid. */
uform_status_t vram_launch(vram_exec_t const *e, CUfunction function, char const *name, unsigned grid, unsigned block,
                           unsigned shared, void **arguments);

/** D[m][n] = A[m][k] W[n][k]^T (+ bias[n]) (+ C[m][n] when `residual`) (GELU with the GELU epilogue),
 *  through cuBLASLt with the copy's algorithm cache; timed under `label` when profiling. Products of
 *  at least 2^30 multiply-adds time cuBLASLt's first 8 candidates on first sight (never while a graph
 *  is captured) and keep the fastest, once per shape and power-of-two bucket of m (+1 to +4% for the
 *  image towers on an H200); UFORM_GPU_GEMM_TUNE=0 takes the heuristic's first pick instead. */
uform_status_t vram_gemm(vram_exec_t const *e, char const *label, size_t m, size_t n, size_t k, CUdeviceptr a,
                         CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d, int epilogue);

/** Attention over packed sequences on `copy`'s device, enqueued on `stream`: `context` [tokens][heads
 *  head] from `qkv` [tokens][3 heads head] (Q, K, V of a token side by side, as the QKV product writes
 *  them), `offsets` (int32 on the device, `sequences + 1`) delimiting the sequences, the longest of
 *  which has `longest` tokens; scale 1 / sqrt(head). `dtype` is the activations'. The text towers'
 *  kernels and their choice (defined in text_vram_launch.c); image towers call it with one sequence
 *  per image. UNSUPPORTED (with a message) when no kernel's shared memory fits the device. */
uform_status_t text_vram_attention(uform_cuda_t const *cuda, vram_copy_t *copy, CUstream stream, uform_dtype_t dtype,
                                   CUdeviceptr context, CUdeviceptr qkv, CUdeviceptr offsets, size_t sequences,
                                   size_t longest, int heads, int head);

/** Enqueues `compute(context)` as a CUDA graph when a chunk of the same `key` was seen before
 *  (captured on the second sighting, replayed after), else directly. UFORM_GPU_NO_GRAPHS=1 turns
 *  graphs off; a capture that fails marks the key as not capturable. The key must name everything
 *  the launches depend on (stream, scratch, shapes, output options). */
uform_status_t vram_graph(vram_exec_t const *e, uint64_t const key[12], uform_status_t (*compute)(void *context),
                          void *context);

/** Whether UFORM_GPU_PROFILE=1 is set: each step runs synchronised and timed (graphs off). */
int vram_profiling(void);

/** Adds `seconds` to the profile's step `name` (a string that outlives the process's report). */
void vram_profile_add(char const *name, double seconds);

/* ---- Jobs ---- */

/** Bytes of one chunk's buffers for `tokens` tokens, for `vram_plan_shares`. */
typedef size_t (*vram_chunk_bytes_t)(void const *context, size_t tokens);

/**
 *  @brief Splits `encoded` items over `count` shares in proportion to their copies' SMs (contiguous
 *  ranges, so rows come back in input order) and gives each a chunk capacity in tokens: all its
 *  tokens when they fit `limit` (0: 4 GiB) beside the workspace and its `row_bytes` output rows, else
 *  the most that do. `offsets[e]` is item e's first token (`encoded + 1` entries). LIMIT_EXCEEDED
 *  (naming `what`, an item of `longest` tokens) when one item cannot fit. Returns the most scratch
 *  any share needs in `*scratch`.
 */
uform_status_t vram_plan_shares(vram_share_t *shares, size_t count, size_t encoded, size_t const *offsets,
                                size_t longest, size_t workspace, size_t row_bytes, size_t limit,
                                vram_chunk_bytes_t chunk_bytes, void const *context, char const *verb,
                                char const *what, size_t *scratch);

/** Bytes of a share's scratch: [workspace][output rows][a chunk's buffers]. */
size_t vram_share_bytes(vram_share_t const *share, size_t workspace, size_t row_bytes, vram_chunk_bytes_t chunk_bytes,
                        void const *context);

/** @brief Enqueues the copy of every share's output rows into `host_rows` (share rows at
 *  `share->first`), on each share's stream; with `wait`, waits for each stream in turn (needed
 *  unless `host_rows` is pinned and the caller waits for the streams some other way). */
uform_status_t vram_copy_rows(vram_tower_t const *vram, vram_share_t const *shares, size_t shares_count,
                             unsigned char *host_rows, size_t row_bytes, int wait, char const *verb);

/** @brief Writes `count` rows in input order with the caller's stride from `host_rows`: encoded item
 *  e is input `order[e]`, every other input a zero row; `statuses` (when set) get `items`. */
void vram_write_rows(unsigned char const *host_rows, size_t row_bytes, size_t const *order, size_t encoded, size_t count,
                     uform_embeddings_t const *out, uform_status_t const *items, uform_status_t *statuses);

/** One piece of a blocking call's staged features: staging rows [row_begin, row_end), whose copy from
 *  the device `event` marks (recorded on the share's stream, in `context`). */
typedef struct vram_piece_t {
    CUevent event;
    CUcontext context;
    size_t row_begin, row_end;
} vram_piece_t;

/** A blocking call's staged features in pieces (`vram_copy_features` records them), so that the
 *  decoder threads copy each piece out as it lands while the next one crosses the bus. */
typedef struct vram_pieces_t {
    vram_piece_t *items;
    size_t count, capacity;
    int broken; /**< An event could not be made or recorded: the features wait for the whole call. */
} vram_pieces_t;

/** Features of at least this many bytes a blocking call copies out piece by piece (on an H100, 30 MB
 *  gained 2-8%, 50 MB and more 9-66%: bench/RESULTS.md, 2026-12-07 (fourth)). */
#define VRAM_PIECEWISE_MIN_BYTES ((size_t)16 << 20)

/** @brief Whether a blocking call staging `staged_bytes` of features copies them out piece by piece:
 *  from `VRAM_PIECEWISE_MIN_BYTES` on, unless UFORM_GPU_FEATURES_PIECES=0 (for measuring the other way). */
int vram_features_piecewise(size_t staged_bytes);

/** @brief Destroys the pieces' events (each in its context) and frees the list; safe on a zeroed one. */
void vram_pieces_free(uform_cuda_t const *cuda, vram_pieces_t *pieces);

/** @brief Enqueues on `share`'s stream (its context current) the copies of encoded items [first, end)'s
 *  features, already in the output dtype at `converted` (device: the chunk's rows packed from item
 *  `first`'s first row). With `staged` (pinned host memory for every encoded item's rows, packed by
 *  `offsets`), asynchronous copies to `staged + offsets[first] * row_bytes`: one, or with `pieces` a
 *  few of at least 4 MiB, each followed by an event appended to `pieces` (`vram_write_features_landed`
 *  places them as they land; otherwise `vram_write_features` once the streams finished). Without
 *  `staged`, item e's `offsets[e + 1] - offsets[e]` rows of `row_bytes` each go straight to the
 *  caller's features of input `order[e]`, `stride` bytes apart: that memory is pageable, so each copy
 *  returns once the stream reached it and it is done. */
uform_status_t vram_copy_features(vram_tower_t const *vram, vram_share_t const *share, CUdeviceptr converted,
                                  size_t const *offsets, size_t const *order, size_t first, size_t end,
                                  uform_embeddings_t const *out, size_t stride, size_t row_bytes,
                                  unsigned char *staged, vram_pieces_t *pieces, char const *verb);

/** @brief The bytes of a job's features to stage in the pinned buffer: `bytes`, or 0 past
 *  `VRAM_STAGED_FEATURES_MAX` or where UFORM_GPU_FEATURES_STAGED=0 (for measuring the other path). */
size_t vram_staged_features_bytes(size_t bytes);

/** @brief Writes the caller's features in input order: encoded item e (input `order[e]`, increasing)
 *  gets its `offsets[e + 1] - offsets[e]` rows from `staged` (when set; else they are there already)
 *  and zero rows up to `rows_total`; every other input zero rows. With an `executor` of several host
 *  threads and a few MB to write, the inputs are split over its threads (a VRAM executor's decoder
 *  threads) in one blocking call (NULL, or that call refused: on the calling thread). */
void vram_write_features(uform_executor_t executor, uform_embeddings_t const *out, size_t stride, size_t rows_total,
                         size_t row_bytes, size_t const *order, size_t const *offsets, size_t encoded, size_t count,
                         unsigned char const *staged);

/** Waits until piece `index` landed in the staging buffer: 1, or 0 where it never will (a fault). */
typedef int (*vram_piece_wait_t)(void *context, size_t index);

/** @brief `vram_write_features` of staged features, piece by piece: first the zeros (the rows past each
 *  item's, the inputs not encoded), while the devices still run; then, for each of `pieces_count`
 *  pieces in order, once `wait` says it landed, its rows to their items. Each step is split over the
 *  threads of `decoders` (a RAM executor; NULL or a refused call: the calling thread). 1 when every
 *  piece was written; 0 when a wait failed, the features then partly written. */
int vram_write_features_pieces(uform_executor_t decoders, uform_embeddings_t const *out, size_t stride,
                               size_t rows_total, size_t row_bytes, size_t const *order, size_t const *offsets,
                               size_t encoded, size_t count, unsigned char const *staged, vram_piece_t const *pieces,
                               size_t pieces_count, vram_piece_wait_t wait, void *wait_context);

/** @brief `vram_write_features_pieces` over a blocking call's `pieces`, each awaited on its event, on
 *  the decoder threads of the VRAM `executor`. 1 when every piece was written; 0 when the pieces are
 *  broken (nothing written) or an event reported a failure (partly written; the call's waves report it). */
int vram_write_features_landed(uform_cuda_t const *cuda, uform_executor_t executor, uform_embeddings_t const *out,
                               size_t stride, size_t rows_total, size_t row_bytes, size_t const *order,
                               size_t const *offsets, size_t encoded, size_t count, unsigned char const *staged,
                               vram_pieces_t const *pieces);

/** @brief Copies every share's output rows back (waiting on each stream in turn) into `host_rows`,
 *  then writes `count` rows in input order with the caller's stride: encoded item e is input
 *  `order[e]`, every other input a zero row; `statuses` (when set) get `items`. */
uform_status_t vram_gather(vram_tower_t const *vram, vram_share_t const *shares, size_t shares_count,
                           unsigned char *host_rows, size_t row_bytes, size_t const *order, size_t encoded,
                           size_t count, uform_embeddings_t const *out, uform_status_t const *items,
                           uform_status_t *statuses, char const *verb);

/** A verb's waves: deferred calls on the executor whose host parts (tokenising, decoding) overlap
 *  the device parts of the waves before; our own outcomes track them. */
typedef struct vram_waves_t {
    uform_outcome_t *outcomes; /**< One per wave at most. */
    size_t waited, used;       /**< Deferred waves [waited, used) are not yet waited for. */
    uform_failure_t failure;   /**< The first failure, OK while none. */
} vram_waves_t;

/** @brief Submits `call` as the next wave: deferred, or, when the executor's ring is full, after our
 *  oldest wave finished; with none of ours left, blocking, unless `deferred` (the caller's call was
 *  deferred: then DEFERRED_FULL, as `uform_executor_call` reports it). A failure is kept in
 *  `waves->failure` and returned. */
uform_status_t vram_waves_submit(vram_waves_t *waves, uform_executor_t executor, uform_call_t const *call, int deferred);

/** @brief Waits for every deferred wave (each must finish before the job is freed, failed or not);
 *  returns the first failure (with its message as the thread's), else OK. */
uform_status_t vram_waves_finish(vram_waves_t *waves);

/** @brief Submits a deferred verb's last wave with the caller's `outcome` and `settle` attached
 *  (`uform_vram_call_settling`), as `vram_waves_submit` does the others (after our oldest wave when
 *  the ring is full). True when attached: `settle` then owns the job and finishes the verb when the
 *  call settles. False after an earlier failure or a refusal (kept in `waves->failure`; `outcome` was
 *  finished with it): the caller finishes the verb itself, as a blocking one. */
bool vram_waves_submit_last(vram_waves_t *waves, uform_executor_t executor, uform_call_t const *call,
                            uform_outcome_t *outcome, uform_vram_settle_t settle, void *context);

/** @brief For a settle: the first failure among `waves`' own deferred waves not yet waited for
 *  (settled by then: they came first), into `status` and `message` while `status` is OK. */
void vram_waves_settled(vram_waves_t const *waves, uform_status_t *status, char *message, size_t message_bytes);

/** @brief Finds each executor device's copy of `model` into `shares` (zeroed, `members_count` of
 *  them): RESIDENCY_MISMATCH when the executor drives no GPU or a device holds no copy. */
uform_status_t vram_bind_shares(uform_executor_t executor, struct uform_model_s const *model, vram_share_t **shares,
                                size_t *count, char const *verb);

#endif // UFORM_MODELS_VRAM_TOWER_H
