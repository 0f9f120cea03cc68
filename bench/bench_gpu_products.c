/**
 *  @file   bench_gpu_products.c
 *  @brief  Every cuBLASLt candidate on the VRAM towers' products, timed: how far the heuristic's first
 *          pick (what `vram_gemm` runs) is from the fastest candidate, per shape and epilogue.
 *
 *  The products are laid out as `vram_gemm` lays them out (src/models/vram_tower_exec.c): bf16 in and
 *  out, f32 compute, D^T (n x m) = W (n x k) A^T (k x m) with W transposed, a bias epilogue (GELU_BIAS
 *  for the up projection) and, for the output and down projections, the residual as C with beta = 1,
 *  32 MiB of workspace. Each candidate runs 3 times to warm up, then `--runs` times between two events;
 *  the mean per product is reported with TFLOP/s at 2 FLOPs per multiply-add (`--all`: every
 *  candidate's). Operands are random bf16 in [-1, 1), or `--constant` bytes. Variants show what the
 *  epilogues cost: the up projection with BIAS alone, the output projection without the residual.
 *
 *  Build and run (on a machine with a GPU and the CUDA toolkit):
 *
 *      cc -O2 -I$CUDA_HOME/include bench/bench_gpu_products.c -L$CUDA_HOME/lib64 -lcublasLt -lcudart \
 *          -o /tmp/bench_gpu_products && /tmp/bench_gpu_products [--runs 20] [--candidates 64] [--all] [--constant]
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CUDA(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t error_ = (call);                                                                                   \
        if (error_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(error_));                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define CHECK_LT(call)                                                                                                 \
    do {                                                                                                               \
        cublasStatus_t status_ = (call);                                                                               \
        if (status_ != CUBLAS_STATUS_SUCCESS) {                                                                        \
            fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)status_);                       \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

typedef struct product_t {
    char const *name;
    size_t m, n, k;
    cublasLtEpilogue_t epilogue;
    int residual;
} product_t;

/* The two ViT shapes at batch 50 and 256 (197 tokens per image), and the text towers at batch 1,024. */
static product_t const products[] = {
    {"vit-b16 b256 qkv", 50432, 2304, 768, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-b16 b256 out +res", 50432, 768, 768, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-b16 b256 out (no res)", 50432, 768, 768, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-b16 b256 up gelu", 50432, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
    {"vit-b16 b256 up (bias only)", 50432, 3072, 768, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-b16 b256 down +res", 50432, 768, 3072, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-b16 b50 qkv", 9850, 2304, 768, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-b16 b50 out +res", 9850, 768, 768, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-b16 b50 up gelu", 9850, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
    {"vit-b16 b50 down +res", 9850, 768, 3072, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-s16 b256 qkv", 50432, 1152, 384, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-s16 b256 out +res", 50432, 384, 384, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-s16 b256 up gelu", 50432, 1536, 384, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
    {"vit-s16 b256 down +res", 50432, 384, 1536, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-s16 b50 qkv", 9850, 1152, 384, CUBLASLT_EPILOGUE_BIAS, 0},
    {"vit-s16 b50 out +res", 9850, 384, 384, CUBLASLT_EPILOGUE_BIAS, 1},
    {"vit-s16 b50 up gelu", 9850, 1536, 384, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
    {"vit-s16 b50 down +res", 9850, 384, 1536, CUBLASLT_EPILOGUE_BIAS, 1},
};

static void config_describe(cublasLtMatmulAlgo_t const *algo, char *text, size_t size) {
    static cublasLtMatmulAlgoConfigAttributes_t const attributes[] = {
        CUBLASLT_ALGO_CONFIG_ID,       CUBLASLT_ALGO_CONFIG_TILE_ID,          CUBLASLT_ALGO_CONFIG_STAGES_ID,
        CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
    static char const *names[] = {"id", "tile", "stages", "splitk", "swizzle", "cluster"};
    size_t used = 0;
    text[0] = 0;
    for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; ++i) {
        uint64_t value = 0; /* asked first for its width, then read into the low bytes (little-endian) */
        size_t width = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(algo, attributes[i], NULL, 0, &width) != CUBLAS_STATUS_SUCCESS ||
            width == 0 || width > sizeof value ||
            cublasLtMatmulAlgoConfigGetAttribute(algo, attributes[i], &value, width, &width) != CUBLAS_STATUS_SUCCESS)
            continue;
        int n = snprintf(text + used, size - used, "%s%s=%llu", used ? " " : "", names[i], (unsigned long long)value);
        if (n < 0 || (size_t)n >= size - used) break;
        used += (size_t)n;
    }
}

int main(int argc, char **argv) {
    int runs = 20, most = 64, every = 0, constant = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--all")) every = 1;
        else if (!strcmp(argv[i], "--constant")) constant = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--runs")) runs = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--candidates")) most = atoi(argv[++i]);
        else runs = 0;
    }
    if (runs < 1 || most < 1 || most > 256)
        return fprintf(stderr, "usage: %s [--runs N] [--candidates 1..256] [--all] [--constant]\n", argv[0]), 2;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return printf("no GPU: skipped\n"), 0;
    struct cudaDeviceProp properties;
    CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
    printf("device: %s, %d SMs; cuBLASLt %zu; %d runs per candidate, up to %d candidates\n", properties.name,
           properties.multiProcessorCount, cublasLtGetVersion(), runs, most);

    size_t largest_a = 0, largest_w = 0, largest_d = 0;
    for (size_t p = 0; p < sizeof products / sizeof products[0]; ++p) {
        product_t const *q = &products[p];
        if (q->m * q->k > largest_a) largest_a = q->m * q->k;
        if (q->n * q->k > largest_w) largest_w = q->n * q->k;
        if (q->m * q->n > largest_d) largest_d = q->m * q->n;
    }
    size_t const workspace_bytes = 32u << 20;
    void *a, *w, *c, *d, *bias, *workspace;
    CHECK_CUDA(cudaMalloc(&a, largest_a * 2));
    CHECK_CUDA(cudaMalloc(&w, largest_w * 2));
    CHECK_CUDA(cudaMalloc(&c, largest_d * 2));
    CHECK_CUDA(cudaMalloc(&d, largest_d * 2));
    CHECK_CUDA(cudaMalloc(&bias, 4096 * 2));
    CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
    /* Random bf16 in [-1, 1) by default (tensor cores draw more power, and may run slower, on varied
     * bits than on repeated ones); `--constant` fills every byte with 0x3C (about 0.0078 as bf16). */
    CHECK_CUDA(cudaMemset(bias, 0x3C, 4096 * 2));
    if (constant) {
        CHECK_CUDA(cudaMemset(a, 0x3C, largest_a * 2));
        CHECK_CUDA(cudaMemset(w, 0x3C, largest_w * 2));
        CHECK_CUDA(cudaMemset(c, 0x3C, largest_d * 2));
    } else {
        size_t largest = largest_a > largest_w ? largest_a : largest_w;
        if (largest_d > largest) largest = largest_d;
        unsigned short *values = malloc(largest * 2);
        if (!values) return 1;
        unsigned long long state = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < largest; ++i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            float value = (float)((state >> 40) & 0xFFFF) / 32768.f - 1.f;
            unsigned bits;
            memcpy(&bits, &value, sizeof bits);
            values[i] = (unsigned short)(bits >> 16);
        }
        CHECK_CUDA(cudaMemcpy(a, values, largest_a * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(w, values, largest_w * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(c, values, largest_d * 2, cudaMemcpyHostToDevice));
        free(values);
    }
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreate(&stream));
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    cublasLtHandle_t lt;
    CHECK_LT(cublasLtCreate(&lt));
    cublasLtMatmulHeuristicResult_t *candidates = calloc((size_t)most, sizeof *candidates);
    if (!candidates) return 1;

    printf("%-28s %6s %9s %8s %9s %8s %6s  %s\n", "product", "cands", "first us", "TFLOP/s", "best us", "TFLOP/s",
           "gain", "best candidate (index, config)");
    for (size_t p = 0; p < sizeof products / sizeof products[0]; ++p) {
        product_t const *q = &products[p];
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatmulPreference_t preference;
        cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
        CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain));
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &q->epilogue, sizeof q->epilogue));
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, q->k, q->n, (int64_t)q->k));
        CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, q->k, q->m, (int64_t)q->k));
        CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, q->n, q->m, (int64_t)q->n));
        CHECK_LT(cublasLtMatmulPreferenceCreate(&preference));
        uint64_t workspace_limit = workspace_bytes;
        CHECK_LT(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_limit, sizeof workspace_limit));
        int returned = 0;
        CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, preference, most, candidates, &returned));
        float alpha = 1.f, beta = q->residual ? 1.f : 0.f;
        double flops = 2.0 * (double)q->m * (double)q->n * (double)q->k;
        double first_us = 0, best_us = 0;
        int best = -1;
        for (int i = 0; i < returned; ++i) {
            if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
            int failed = 0;
            for (int r = 0; r < 3 + runs && !failed; ++r) {
                if (r == 3) CHECK_CUDA(cudaEventRecord(start, stream));
                failed = cublasLtMatmul(lt, desc, &alpha, w, la, a, lb, &beta, q->residual ? c : d, lc, d, lc,
                                        &candidates[i].algo, workspace, workspace_bytes, stream) != CUBLAS_STATUS_SUCCESS;
            }
            if (failed) {
                CHECK_CUDA(cudaStreamSynchronize(stream));
                continue;
            }
            float ms = 0;
            CHECK_CUDA(cudaEventRecord(stop, stream));
            CHECK_CUDA(cudaEventSynchronize(stop));
            CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
            double us = ms * 1e3 / runs;
            if (every) {
                char config[160] = "";
                config_describe(&candidates[i].algo, config, sizeof config);
                printf("  %-26s candidate %2d %9.1f us %8.1f TFLOP/s  %s\n", q->name, i, us, flops / us * 1e-6, config);
            }
            if (i == 0) first_us = us;
            if (best < 0 || us < best_us) best = i, best_us = us;
        }
        char config[160] = "";
        if (best >= 0) config_describe(&candidates[best].algo, config, sizeof config);
        char first_config[160] = "";
        if (returned > 0) config_describe(&candidates[0].algo, first_config, sizeof first_config);
        printf("%-28s %6d %9.1f %8.1f %9.1f %8.1f %5.1f%%  #%d %s   (first: %s)\n", q->name, returned, first_us,
               first_us > 0 ? flops / first_us * 1e-6 : 0., best_us, best_us > 0 ? flops / best_us * 1e-6 : 0.,
               first_us > 0 ? (first_us / best_us - 1) * 100 : 0., best, config, first_config);
        fflush(stdout);
        cublasLtMatmulPreferenceDestroy(preference);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(desc);
    }
    free(candidates);
    cublasLtDestroy(lt);
    return 0;
}
