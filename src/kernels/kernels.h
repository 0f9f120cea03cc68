/**
 *  @file   kernels.h
 *  @brief  CPU kernels of the text towers, dispatched by CPU class. Internal only.
 *
 *  Matrix products come from oneDNN (`dnnl_sgemm`, `dnnl_gemm_bf16bf16f32`), chosen by measurement
 *  (bench/bench_gemm.c, figures in bench/RESULTS.md), always on the calling thread alone: the
 *  engine's threads parallelise, the library never spawns its own. The SERIAL class multiplies with
 *  a portable C loop instead, so pinning it runs no library ISA dispatch at all.
 *
 *  The fused kernels (bias + GELU, bias + residual, LayerNorm, attention of one sequence and head,
 *  pooling, L2 normalisation, conversions) are one generic C source (`fused.inc`) compiled once per
 *  class with `__attribute__((target(...)))`: SERIAL (the compiler's baseline), HASWELL (AVX2, FMA,
 *  F16C), SKYLAKE (AVX-512 F/BW/DQ/VL) and GENOA (SKYLAKE + AVX-512 BF16). Higher classes use the
 *  highest of those they include. One binary carries all; `uform_kernels_for` picks.
 */
#ifndef UFORM_KERNELS_KERNELS_H
#define UFORM_KERNELS_KERNELS_H

#include <uform.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>   // `pthread_mutex_t`
#include <signal.h>    // `sigset_t`
#include <stdatomic.h> // `atomic_uint`

/**
 *  @brief IEEE binary16 conversions where the compiler has no `_Float16`: clang before 15 on x86
 *  (its `__fp16` needs runtime functions libgcc lacks). Round to nearest even, as the hardware's and
 *  GCC's conversions; a NaN becomes the quiet NaN 0x7E00 (sign kept). Everywhere else the kernels and
 *  tests convert through `_Float16`, and UFORM_SOFT_F16 is not defined.
 */
#if defined(__clang__) && __clang_major__ < 15
#define UFORM_SOFT_F16 1

static inline uint16_t uform_soft_f16_from_f32(float value) {
    uint32_t bits, sign;
    __builtin_memcpy(&bits, &value, 4);
    sign = bits & 0x80000000u, bits ^= sign;
    uint16_t half;
    if (bits >= (127u + 16u) << 23) half = bits > 255u << 23 ? 0x7E00u : 0x7C00u; // NaN, or too large: infinity
    else if (bits < 113u << 23) { // below the smallest normal half: the float adder rounds it
        uint32_t const magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
        float magic, sum;
        __builtin_memcpy(&magic, &magic_bits, 4);
        __builtin_memcpy(&sum, &bits, 4);
        sum += magic;
        __builtin_memcpy(&bits, &sum, 4);
        half = (uint16_t)(bits - magic_bits);
    }
    else {
        uint32_t const odd = (bits >> 13) & 1u;
        bits += ((uint32_t)(15 - 127) << 23) + 0xFFFu + odd;
        half = (uint16_t)(bits >> 13);
    }
    return (uint16_t)(half | (sign >> 16));
}

static inline float uform_soft_f32_from_f16(uint16_t half) {
    uint32_t const exponent_mask = 0x7C00u << 13;
    uint32_t bits = ((uint32_t)half & 0x7FFFu) << 13;
    uint32_t const exponent = bits & exponent_mask;
    bits += (uint32_t)(127 - 15) << 23;
    if (exponent == exponent_mask) bits += (uint32_t)(128 - 16) << 23; // infinity or NaN
    else if (exponent == 0) {                                          // zero or subnormal
        uint32_t const magic_bits = 113u << 23;
        float magic, value;
        bits += 1u << 23;
        __builtin_memcpy(&magic, &magic_bits, 4);
        __builtin_memcpy(&value, &bits, 4);
        value -= magic;
        __builtin_memcpy(&bits, &value, 4);
    }
    bits |= ((uint32_t)half & 0x8000u) << 16;
    float out;
    __builtin_memcpy(&out, &bits, 4);
    return out;
}
#endif

/** @brief The fused kernels of one class. Rows are contiguous `cols` floats `ld` apart. */
typedef struct uform_kernels_t {
    char const *name; /**< "serial", "haswell", "skylake", "genoa". */
    /** rows[i][j] = gelu(rows[i][j] + bias[j]), GELU with the exact erf. */
    void (*bias_gelu)(float *rows, size_t ld, size_t count, size_t cols, float const *bias);
    /** rows[i][j] += bias[j] (bias may be NULL) and, when `residual` is not NULL, += residual[i][j]. */
    void (*bias_residual)(float *rows, size_t ld, size_t count, size_t cols, float const *bias,
                          float const *residual, size_t residual_ld);
    /** out[i] = LayerNorm(in[i]) * gamma + beta over `cols`, in place allowed. */
    void (*layer_norm)(float const *in, size_t in_ld, float *out, size_t out_ld, size_t count, size_t cols,
                       float const *gamma, float const *beta, float epsilon);
    /** One head of one sequence: out[i] = softmax(q[i] . k[j] * scale over j < length) v, with
     *  `scratch` of `length * (head + 1)` floats. q, k, v rows are `ld` apart, `head` floats wide. */
    void (*attention)(float const *q, float const *k, float const *v, size_t ld, float *out, size_t out_ld,
                      size_t length, size_t head, float scale, float *scratch);
    /** Softmax of each row, in place. */
    void (*softmax_rows)(float *rows, size_t ld, size_t count, size_t cols);
    /** out[j] = mean over rows (count >= 1) of rows[i][j]. */
    void (*mean_rows)(float const *rows, size_t ld, size_t count, size_t cols, float *out);
    /** Divides by the L2 norm (a zero vector stays zero). */
    void (*l2_normalize)(float *vector, size_t count);
    /** Conversions; bf16 rounds to nearest even, f16 as IEEE binary16. */
    void (*f32_to_bf16)(float const *in, uint16_t *out, size_t count);
    void (*f32_to_f16)(float const *in, uint16_t *out, size_t count);
    void (*bf16_to_f32)(uint16_t const *in, float *out, size_t count);
    void (*f16_to_f32)(uint16_t const *in, float *out, size_t count);
    /** C[M][N] = A[M][K] W[N][K]^T with f32 W, portable loops (the SERIAL class's GEMM). */
    void (*gemm_portable)(size_t m, size_t n, size_t k, float const *a, size_t lda, float const *w, size_t ldw,
                          float *c, size_t ldc);
} uform_kernels_t;

/** @brief The kernels of the highest compiled class that `cpu_class` includes (SERIAL at worst). */
uform_kernels_t const *uform_kernels_for(uform_cpu_class_t cpu_class);

/** @brief Whether a class runs oneDNN's bf16 GEMM natively (AVX-512 BF16 or AMX-BF16 classes). */
int uform_kernels_native_bf16(uform_cpu_class_t cpu_class);
/** @brief Whether a class has the AVX-512 foundation (Skylake-class and every x86 class above it). */
int uform_kernels_avx512(uform_cpu_class_t cpu_class);
/** @brief Whether a class has AMX-BF16 tiles (Sapphire Rapids, Granite Rapids, Diamond Rapids: the
 *  class is detected only where the OS enables the tile state). */
int uform_kernels_amx_bf16(uform_cpu_class_t cpu_class);

/** @brief How a GEMM of one thread runs: which library path and its per-thread scratch. */
typedef struct uform_gemm_t {
    uform_kernels_t const *kernels;
    int use_library; /**< 0: the portable loops (SERIAL); 1: oneDNN. */
    int native_bf16; /**< bf16 weights multiply as bf16 through oneDNN; else they widen to f32. */
    int matmul;      /**< Through oneDNN's matmul primitive (brgemm, AMX tiles) instead of its GEMM functions. */
    /** This product's tiles read pinned weights as they lie, never through a packed copy (see
     *  `uform_gemm_for_product`); 0 from `uform_gemm_for`. */
    int plain_weights;
    /** Column-split tiles read the packed weights too (the default); 0 when `UFORM_GEMM_PACK_SPLIT=0`
     *  as `uform_gemm_for` ran (they read the weights as they lie: the A/B switch). */
    int pack_split;
    /** Attention's products in bf16 (`uform_gemm_bf16_with`) through the matmul primitive too, where
     *  `matmul` (AMX), when `UFORM_ATTENTION_MATMUL=1` as `uform_gemm_for` ran; else oneDNN's GEMM
     *  functions (which stop at AVX-512 BF16). Off by default until measured on the AMX host (through
     *  brgemm's AVX-512 BF16 kernels, without AMX, it was level to 1.5% slower than the functions). */
    int attention_matmul;
    /** Epilogues inside the primitive (`uform_gemm_tile_bf16_fused`) where `matmul`; 0 when
     *  `UFORM_GEMM_FUSED=0` as `uform_gemm_for` ran; 2 when it is `refuse` (the passes take the
     *  layouts of the fused path and every fused call is refused: the tests of their fallbacks). */
    int fused;
    /** Where `fused`: the passes run an MLP over planes of its hidden activations
     *  (`uform_gemm_up_plane`, `uform_gemm_down_planes`); 0 when `UFORM_MLP_PLANES=0` as
     *  `uform_gemm_for` ran (A/B). */
    int mlp_planes;
    /** f32 products of pinned weights multiply through oneDNN's packed GEMM (`uform_gemm_sgemm_packs`)
     *  first, not the primitive (classes without AMX); slices its layout would pad too much take the
     *  primitive where `matmul`, else `dnnl_sgemm`. The plans then cut one column tile per thread
     *  where rows are few, since the packed layout pads narrow slices (see gemm.c). */
    int sgemm_packed;
    /** The most threads a group may have for its bf16 products over few rows to split rows alone
     *  (`uform_forward_row_tiles_threads` as `uform_gemm_for` ran; 0: columns as before). */
    size_t row_tiles_threads;
} uform_gemm_t;

/** @brief How one product multiplies, given how many column tiles its plan splits the weights into:
 *  a copy of `gemm` whose tiles read the weights as they lie (`plain_weights`) when the columns
 *  split (`tiles_n` > 1: the batch-1 plan, a few rows over many threads, each tile a slice of the
 *  weights) and `pack_split` is off (UFORM_GEMM_PACK_SPLIT=0); else packed weights where pinned, as
 *  `gemm`. Packed pays both ways on the AMX host: +2 to +8% for the batch-parallel pass, and +7 to
 *  +10% at batch 1 (bench/RESULTS.md, second session of 2026-12-01) once gemm.c's thread tables
 *  stopped folding the slices onto a few slots (each tile took the lock: the -19% measured before). */
static inline uform_gemm_t uform_gemm_for_product(uform_gemm_t const *gemm, size_t tiles_n) {
    uform_gemm_t product = *gemm;
    product.plain_weights = tiles_n > 1 && !gemm->pack_split;
    return product;
}

/** @brief Whether a class multiplies through oneDNN's matmul primitive: AVX-512 classes, where the
 *  primitive runs brgemm on weights packed once (bf16 with epilogues fused where native; the only
 *  API that reaches AMX). Off AMX, f32 goes through the packed GEMM functions first (`sgemm_packed`)
 *  and through the primitive where they leave a slice plain; below AVX-512, oneDNN 2.6 has no f32
 *  brgemm, and the GEMM functions alone serve. The environment variable
 *  `UFORM_GEMM_MATMUL` overrides it: `1` forces the primitive on every library class (bf16 where the
 *  class has native bf16, else f32 on widened weights), `0` keeps the GEMM functions everywhere. */
int uform_gemm_matmul_for(uform_cpu_class_t cpu_class);

/** @brief Fewest rows of an f32 tile that goes through the packed GEMM functions where the class also
 *  has the primitive (`sgemm_packed` and `matmul`: AVX-512 without AMX); fewer go through brgemm. */
#define UFORM_GEMM_SGEMM_ROWS_MIN 32u

/** @brief How a forward pass dispatching as `cpu_class` multiplies: its kernels, the library or the
 *  portable loops (SERIAL), native bf16, and the matmul primitive per `uform_gemm_matmul_for`. */
uform_gemm_t uform_gemm_for(uform_cpu_class_t cpu_class);

/** @brief The implementations oneDNN chose for the matmul primitives this process created, with how
 *  many tile shapes each serves (e.g. "brg:avx512_core_amx (6 shapes)"), or NULL when none was
 *  created; for benchmarks' verbose output. Not thread-safe against a concurrent call of itself. */
char const *uform_gemm_matmul_impl(void);

/** @brief Declares `bytes` bytes from `begin` as weights that stay put until `uform_gemm_unpin`: on
 *  the matmul primitive path (AMX) `uform_gemm_tile` may then keep their slices packed in the
 *  primitive's layout, once, instead of oneDNN packing them on every call; off it, f32 slices are
 *  kept packed for oneDNN's packed GEMM (`uform_gemm_sgemm_packs`). model.c and
 *  image_model.c pin each replica's block for the model's lifetime; weights not pinned are never
 *  packed (a tower built by hand and freed, whose memory may come back with other values). The
 *  packed copies (one per slice and layout in use: about one more copy of the weights per way the
 *  passes split them) are bounded per process by `UFORM_GEMM_PACK_MIB` (default 2048; `0` packs
 *  nothing, the plain path serves, for comparison). */
void uform_gemm_pin(void const *begin, size_t bytes);
/** @brief `uform_gemm_pin` for weights that live on NUMA node `node` (a replica's): their packed
 *  copies are allocated there too (`uform_numa_alloc`), not wherever the first thread to multiply
 *  by them happens to touch them; -1 (as `uform_gemm_pin`) places them anywhere. */
void uform_gemm_pin_on(void const *begin, size_t bytes, int32_t node);
/** @brief For tests: how many packed copies of node-pinned weights have a page on another node
 *  (read back with `get_mempolicy`); `*checked` gets how many such copies exist. */
size_t uform_gemm_packed_misplaced(size_t *checked);
/** @brief Forgets a pinned range (same `begin` and `bytes`) and frees the packed slices of it; call
 *  it before freeing the weights, with no product running on them. */
void uform_gemm_unpin(void const *begin, size_t bytes);
/** @brief Bytes of packed weights the process holds now, for tests and benchmarks. */
size_t uform_gemm_packed_bytes(void);
/** @brief Whether f32 products off the matmul primitive path (AVX2 and AVX-512 classes without AMX)
 *  multiply pinned weights through oneDNN's packed GEMM (`sgemm_pack` / `sgemm_compute`, found at run
 *  time in libdnnl 2.6; see gemm.c): 0 where the library lacks them or `UFORM_GEMM_PACK_MIB=0`. */
int uform_gemm_sgemm_packs(void);

/** @brief Bytes of per-thread scratch `uform_gemm_tile` needs for tiles up to `rows` x `cols` over
 *  depth `depth` with weights of `dtype`. */
size_t uform_gemm_scratch_bytes(uform_gemm_t const *gemm, uform_dtype_t dtype, size_t rows, size_t cols, size_t depth);

/** @brief C[m][n] = A[m][k] W[n][k]^T for one tile, on this thread only. `w` points at the tile's
 *  first weight row (of `dtype`: f32, bf16 or f16) with `ldw` elements between rows. `scratch` holds
 *  at least `uform_gemm_scratch_bytes` bytes, aligned to 64. */
void uform_gemm_tile(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                     void const *w, uform_dtype_t dtype, size_t ldw, float *c, size_t ldc, void *scratch);

/** @brief Whether products with weights of `dtype` multiply A as bf16 (native bf16 through oneDNN):
 *  then a pass may convert A once, as its producer writes it, and call `uform_gemm_tile_bf16`. */
int uform_gemm_takes_bf16(uform_gemm_t const *gemm, uform_dtype_t dtype);

/** @brief `uform_gemm_tile` with A already in bf16 (`lda` elements between rows) and bf16 weights,
 *  where `uform_gemm_takes_bf16`: the same values as `uform_gemm_tile` on the f32 A it came from. */
void uform_gemm_tile_bf16(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, uint16_t const *a16, size_t lda,
                          uint16_t const *w16, size_t ldw, float *c, size_t ldc);

/** @brief What a fused product applies to A W^T before it stores C (`uform_gemm_tile_bf16_fused`), in
 *  this order: the bias, GELU, the per-column factor, then the sum with what C held. */
typedef struct uform_gemm_epilogue_t {
    float const *bias;  /**< [n] f32 added to every row, or NULL. */
    int gelu;           /**< The exact (erf) GELU after the bias. */
    float const *scale; /**< [n] f32 factor per column after the bias (LayerScale), or NULL. */
    int accumulate;     /**< C (f32) += the result, else C = the result. */
    int bf16_out;       /**< C in bf16 (`uint16_t`, rounded to nearest even), else f32 (never with `accumulate`). */
    /** The caller's row counts vary from call to call (texts of any length): the rows are cut at a
     *  multiple of 32 and the rest, as `uform_gemm_tile` cuts them, so few primitives are made (never
     *  with `accumulate`, whose refusal after a first part ran would leave C half summed). */
    int rows_vary;
} uform_gemm_epilogue_t;

/** @brief C = epilogue(A W^T) for one tile with A and W in bf16, the epilogue inside the library's
 *  kernel (oneDNN post-ops: no pass of ours over C, no f32 C where it is stored in bf16). Only on the
 *  matmul primitive path (AMX classes) and for a dense C (`ldc` == `n`: brgemm's dst); returns 0
 *  where it does not apply or oneDNN refuses, and the caller then runs `uform_gemm_tile_bf16` and its
 *  own epilogue over the whole tile. C is then untouched, but for `rows_vary`, where a first part of
 *  the rows may have been written (never summed: `rows_vary` excludes `accumulate`). `UFORM_GEMM_FUSED=0` turns it off (A/B),
 *  `UFORM_GEMM_FUSED=refuse` refuses every call (the passes' fallbacks, tested so). */
int uform_gemm_tile_bf16_fused(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, uint16_t const *a16, size_t lda,
                               uint16_t const *w16, size_t ldw, void *c, size_t ldc, uform_gemm_epilogue_t const *epilogue);

/** @brief Columns of each plane an MLP's hidden activations (`f` wide) are cut into on the fused path:
 *  the widest multiple of 64 up to 768 that divides `f` (ViT-B/16's 3,072: four of 768; 1,536: two),
 *  else `f` itself. Cut this way, each product's operands fit a core's L2: on one Sapphire Rapids
 *  core (a stand-alone oneDNN harness) a down product of depth 3,072 ran 1.3-1.4 TFLOP/s as four
 *  parts of 768 against 0.7-0.85 whole (oneDNN 2.6 takes a strided A only through its slower GEMM,
 *  so the parts' A must be planes of their own; bench/RESULTS.md, 2026-12-02). */
size_t uform_gemm_plane_width(size_t f);

/** @brief One row tile of an MLP's up product into one plane: GELU(A W^T + bias) in bf16, `rows` x
 *  `width` (rows `width` apart), A (`k` wide, dense) and W (the plane's `width` rows of `k`) in bf16,
 *  `bias` the plane's. Inside the library's kernel where `uform_gemm_tile_bf16_fused` runs; where it
 *  refuses, the f32 product goes through `staging` (rows `staging_ld` apart), then the class's GELU. */
void uform_gemm_up_plane(uform_gemm_t const *gemm, size_t rows, size_t width, size_t k, uint16_t const *a16,
                         uint16_t const *w16, float const *bias, uint16_t *plane, float *staging, size_t staging_ld);

/** @brief One row tile of an MLP's down product over `parts` planes: C (f32, `rows` x `n`, dense) =
 *  sum over p of plane_p W_p^T, plane p at `planes + p * plane_stride` (rows `width` apart), W [n][ldw]
 *  in bf16 whose columns [p width, (p + 1) width) multiply plane p. Each part is summed inside the
 *  library's kernel where it can; a refused part goes through `staging` (`rows` x `n` floats). No
 *  bias: the caller's epilogue adds it. */
void uform_gemm_down_planes(uform_gemm_t const *gemm, size_t rows, size_t n, size_t width, size_t parts,
                            uint16_t const *planes, size_t plane_stride, uint16_t const *w16, size_t ldw, float *c,
                            float *staging);

/** @brief Attention of `rows` queries over `length` keys in plain loops, for one head: scores
 *  (`rows` x `length` floats of `scores`) = q k^T x `scale`, softmax by `kernels->softmax_rows`,
 *  then out = scores v. `q`, `k`, `v` rows are `ld` floats apart, `out` rows `out_ld`; `head` is
 *  the head's width. The text and image passes use it where the GEMM library refuses a shape. */
void uform_attention_rows_plain(uform_kernels_t const *kernels, float const *q, float const *k, float const *v,
                                size_t ld, float *out, size_t out_ld, size_t rows, size_t length, size_t head,
                                float scale, float *scores);

/** @brief Time per named step, summed over calls and threads: the profiles of the CPU passes
 *  (UFORM_CPU_PROFILE=1) and the VRAM towers (UFORM_GPU_PROFILE=1), for the benchmarks. Zero-
 *  initialised but for `lock` (PTHREAD_MUTEX_INITIALIZER); names are string literals, 32 at most. */
typedef struct uform_step_profile_t {
    pthread_mutex_t lock;
    char const *names[32];
    double seconds[32];
    size_t counts[32];
} uform_step_profile_t;
/** @brief Adds one run of `seconds` to step `step` (a step past the 32nd is dropped). */
void uform_step_profile_add(uform_step_profile_t *profile, char const *step, double seconds);
/** @brief Prints "`prefix` step  runs  ms  share" per step to `file` (a FILE *; nothing when empty). */
void uform_step_profile_report(uform_step_profile_t *profile, void *file, char const *prefix);

/** @brief Whether UFORM_CPU_PROFILE=1 is set (read once): the CPU forward passes then time their
 *  steps on every thread (`uform_cpu_profile_add`) for the benchmarks to report. */
int uform_cpu_profiling(void);
/** @brief Adds `seconds` of one thread's time to step `step` of the CPU passes' profile. */
void uform_cpu_profile_add(char const *step, double seconds);
/** @brief Prints the CPU passes' profile to `file` (a FILE *). */
void uform_cpu_profile_report(void *file);

/**
 *  @brief One head's attention over bf16 rows (src/kernels/attention_bf16.c): for query rows
 *  `q[0 .. rows)` and keys and values `k`, `v` [0 .. length) (every row `ld` elements apart, `head`
 *  wide), out[i] = softmax(scale q_i K^T) V in f32 (`out` rows `out_ld` floats apart), S and the
 *  softmax in f32, P rounded to bf16 before P V, as PyTorch's bf16 does. `packed` holds
 *  `uform_attention_bf16_bytes` bytes, 4-aligned (64 for the fastest loads). Returns 0 (nothing
 *  written) for a head width that is not a multiple of 32 up to 256, or no rows or keys; the
 *  caller then takes another path.
 */
typedef int (*uform_attention_bf16_t)(uint16_t const *q, uint16_t const *k, uint16_t const *v, size_t ld, size_t rows,
                                      size_t length, size_t head, float scale, void *packed, float *out, size_t out_ld);
/** @brief The AMX kernel where `amx` (an AMX-BF16 class: `uform_kernels_amx_bf16`; it asks
 *  Linux for the tile data once and takes the AVX-512 kernel if refused), else the AVX-512 BF16 one
 *  where `avx512_bf16` (`uform_kernels_native_bf16`), when this build has them (x86-64, GCC or
 *  Clang); else NULL. */
uform_attention_bf16_t uform_attention_bf16_for(int avx512_bf16, int amx);
/** @brief The kernel the CPU passes use for bf16 towers' attention under `gemm` on `cpu_class`:
 *  `uform_attention_bf16_for` as UFORM_ATTENTION_BF16 (`uform_attention_bf16_mode`) allows, where the
 *  products multiply bf16 natively; else NULL (attention through oneDNN's GEMM functions). */
uform_attention_bf16_t uform_attention_bf16_for_gemm(uform_gemm_t const *gemm, uform_cpu_class_t cpu_class);
/** @brief UFORM_ATTENTION_BF16, read once: 0 when it is `0` (the passes keep oneDNN's GEMM functions),
 *  1 when it is `avx512` (no AMX kernel), else 2 (the best kernel of the class). */
int uform_attention_bf16_mode(void);
/** @brief Bytes of `packed` for `uform_attention_bf16_t` over `rows` queries and `length` keys. */
size_t uform_attention_bf16_bytes(size_t rows, size_t length, size_t head);

/** @brief A barrier between the phases of a forward pass: spins `uform_phase_spin_seconds`, then
 *  sleeps on a futex.
 *  Zero-initialised; every one of `threads` threads calls `uform_phase_barrier_wait` with the same
 *  count, and it is reusable phase after phase. */
typedef struct uform_phase_barrier_t {
    atomic_uint arrived, generation, sleepers;
} uform_phase_barrier_t;
void uform_phase_barrier_wait(uform_phase_barrier_t *barrier, size_t threads);
/** @brief How long a thread spins at a phase barrier before sleeping: UFORM_PHASE_SPIN_US
 *  microseconds (0 to 100,000), read once, else 100 us. */
double uform_phase_spin_seconds(void);

/** @brief How a phase's GEMM of `m` x `n` splits into tiles that `threads` threads take one at a
 *  time: row tiles of 128 to 512 while each thread keeps two, columns split (in multiples of 16, at
 *  least 64) when rows are too few; weights that widen per tile (f16, bf16 without native bf16)
 *  take all rows per tile, so each weight tile widens once. */
typedef struct uform_gemm_plan_t {
    size_t rows_per_tile, cols_per_tile, tiles_m, tiles_n;
} uform_gemm_plan_t;
uform_gemm_plan_t uform_gemm_plan(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m, size_t n);

/** @brief A page-aligned block of at least `bytes` bytes from the process's pool of activation arenas
 *  (src/kernels/arena.c), placed on NUMA node `node` (-1: any) when it is first touched; `*granted`
 *  gets its real size (a size class: less than a quarter more than asked), which `uform_arena_give` takes back. Its contents are whatever the last user
 *  left (zeroes when new). NULL (and `*granted` 0) when out of memory. */
void *uform_arena_take(size_t bytes, int32_t node, size_t *granted);
/** @brief Returns an arena to the pool (which unmaps its oldest arenas past its bound). */
void uform_arena_give(void *data, size_t bytes, int32_t node);
/** @brief Bytes the pool holds now, for tests and benchmarks. */
size_t uform_arena_pooled_bytes(void);
/** @brief Unmaps every pooled arena (those taken stay with their takers, and come back as usual). */
void uform_arena_trim(void);

/** @brief How a forward pass spreads a batch over `threads` threads: in `groups` groups of
 *  consecutive threads, each walking the whole pass over its own items with its own activations and
 *  its own barrier (a group of one thread has no barrier at all), the items of a group's GEMMs
 *  packed into its rows. One group of every thread is the tile-split pass (batch 1); one thread per
 *  group is the batch-parallel pass. Items are dealt longest first, each to the group that would
 *  finish it first (`costs` relative, e.g. tokens), and the number of groups is the one whose
 *  slowest group is estimated to finish first, a group of `g` threads counted as
 *  `g / (1 + UFORM_GROUP_PENALTY (g - 1))` threads of one (barriers, smaller tiles). `forced` > 0
 *  fixes the threads per group instead (the `UFORM_FORWARD_GROUP` environment variable, for
 *  benchmarks and tests). Fills `group_threads[g]` for g < the returned count and `group_of[i]` for
 *  every item; `order` gets the items by cost, highest first. At least one group, even for no items.
 *  Where every group is one thread, the passes ignore `group_of` and let the threads take chunks from
 *  one counter instead (a slower core then takes fewer items). */
size_t uform_batch_groups(size_t threads, size_t count, double const *costs, size_t forced, size_t *group_threads,
                          size_t *group_of, size_t *order);

/** @brief `UFORM_FORWARD_GROUP` as a number of threads per group, or 0 (automatic). */
size_t uform_forward_group_forced(void);

/** @brief The most threads a group may have for its bf16 products to split rows alone (every tile
 *  whole rows, so bias, GELU, rounding and LayerScale run inside the library's kernel; the image
 *  pass's MLP then runs over planes of its hidden activations; texts: `uform_text_whole_rows`) where
 *  it would otherwise split columns too:
 *  `UFORM_ROW_TILES_THREADS` (0 turns it off: the A/B switch), else 4: ViT-S/16 and ViT-B/16 at
 *  batch 1 on AMX ran 1.15-1.33x faster so on groups of 2 and of 4 threads (bench/RESULTS.md, third
 *  session of 2026-12-06). With more threads each would read whole weight matrices, which column
 *  tiles share out, and a tile needs 32 rows (8 threads: 256 tokens), so larger groups keep columns. */
size_t uform_forward_row_tiles_threads(void); /* read by `uform_gemm_for` into `row_tiles_threads` */

/** @brief Whether a tower of `layers` layers that pools the first token (`cls_pooling`) runs its last
 *  layer for that token alone (1, the default where it has a layer), or for every token (0, also
 *  under `UFORM_CLS_TAIL=0`, for benchmarks and tests). Under CLS pooling the other tokens' outputs
 *  of the last layer are never read: that layer needs their keys and values, and the first token's
 *  query, attention, output product and MLP only. Every pass (CPU and VRAM, texts and images) asks
 *  this once per call. */
int uform_forward_cls_tail(int cls_pooling, size_t layers);

/** @brief The products of attention through the library (not for SERIAL): C = alpha A B^T
 *  (`transposed`) or C = A B, all f32, row-major. Returns 0 when the library refused. */
int uform_gemm_f32(int transposed, size_t m, size_t n, size_t k, float alpha, float const *a, size_t lda,
                   float const *b, size_t ldb, float *c, size_t ldc);

/** @brief `uform_gemm_f32` with A and B in bf16 (C in f32), for attention where the products
 *  multiply bf16 natively (`uform_gemm_takes_bf16`). Returns 0 when the library refused. */
int uform_gemm_bf16(int transposed, size_t m, size_t n, size_t k, float alpha, uint16_t const *a, size_t lda,
                    uint16_t const *b, size_t ldb, float *c, size_t ldc);

/** @brief `uform_gemm_bf16` through the matmul primitive where `gemm->matmul` and
 *  `gemm->attention_matmul` (AMX: oneDNN's GEMM functions stop at AVX-512 BF16), with B as [n][k]
 *  (`transposed`, K in attention) or [k][n] (V), the GEMM function where the primitive is refused;
 *  the same products (bf16 inputs, f32 sums), summed in the library's order. Returns 0 when both refused. */
int uform_gemm_bf16_with(uform_gemm_t const *gemm, int transposed, size_t m, size_t n, size_t k, float alpha,
                         uint16_t const *a, size_t lda, uint16_t const *b, size_t ldb, float *c, size_t ldc);

/** @brief What `uform_gemm_thread_enter` changed on a thread, for `uform_gemm_thread_leave`. */
typedef struct uform_gemm_thread_t {
    int omp_threads;  /**< OpenMP's nthreads for this thread before. */
    sigset_t signals; /**< The thread's signal mask before. */
} uform_gemm_thread_t;

/** @brief Readies this thread for a model's products, until `uform_gemm_thread_leave`: oneDNN runs
 *  single-threaded on it (OpenMP's nthreads for this thread set to one), and every asynchronous
 *  signal (all but SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT and SIGSYS) is blocked, so it
 *  waits pending for another thread or for the leave. oneDNN 2.6's JIT f32 GEMM kernels (AVX2 and
 *  AVX-512) point RSP into a heap workspace while they run: a signal delivered then writes its frame
 *  into the heap (oneDNN issue 4845, fixed in 3.11.2; found by a probe whose timer signal crashed
 *  an encode loop within seconds). */
void uform_gemm_thread_enter(uform_gemm_thread_t *saved);
void uform_gemm_thread_leave(uform_gemm_thread_t const *saved);

/** @brief One-element conversions (portable). */
static inline float uform_bf16_to_f32(uint16_t value) {
    union { uint32_t u; float f; } bits = {.u = (uint32_t)value << 16};
    return bits.f;
}

#endif // UFORM_KERNELS_KERNELS_H
