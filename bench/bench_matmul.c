/* Per-call cost of one thread's tile products: oneDNN's GEMM functions (`gemm.matmul = 0`) against its
 *  matmul primitive (`gemm.matmul = 1`, the AMX path), f32 and bf16 weights, small to large M.
 *  Build: gcc -O2 -std=gnu17 -Isrc -Iinclude bench/bench_matmul.c build/libuform.a -ldnnl -lnuma -lcjson \
 *         -lutf8proc -lz -lpthread -ldl -lm -o /tmp/bench_matmul  (figures: bench/RESULTS.md) */
#include "internal.h"
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    size_t shapes[][3] = {{1,384,384},{4,384,384},{16,384,384},{64,384,384},{16,1536,384},{128,1536,384}};
    float *a = aligned_alloc(64, 128*1536*4), *w = aligned_alloc(64, 1536*1536*4), *c = aligned_alloc(64, 128*1536*4);
    uint16_t *w16 = aligned_alloc(64, 1536*1536*2);
    void *scratch = aligned_alloc(64, 1536*1536*4);
    for (size_t i = 0; i < 128*1536; ++i) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < 1536*1536; ++i) w[i] = (float)(i % 5) * 0.1f, w16[i] = 0x3f80;
    uform_gemm_t g = {.kernels = uform_kernels_for(uform_cpu_class_amd_genoa_k), .use_library = 1, .native_bf16 = 1};
    uform_gemm_thread_t prev;
    uform_gemm_thread_enter(&prev);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int bf = 0; bf < 2; ++bf) {
            double us[2];
            for (int mm = 0; mm < 2; ++mm) {
                g.matmul = mm;
                size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                for (int r = 0; r < 20; ++r) uform_gemm_tile(&g, m, n, k, a, k, bf ? (void*)w16 : (void*)w, bf ? uform_dtype_bf16_k : uform_dtype_f32_k, k, c, n, scratch);
                double best = 1e9;
                for (int rep = 0; rep < 5; ++rep) {
                    double t0 = uform_now_seconds(); int it = 200;
                    for (int r = 0; r < it; ++r) uform_gemm_tile(&g, m, n, k, a, k, bf ? (void*)w16 : (void*)w, bf ? uform_dtype_bf16_k : uform_dtype_f32_k, k, c, n, scratch);
                    double t = (uform_now_seconds() - t0) / it * 1e6; if (t < best) best = t;
                }
                us[mm] = best;
            }
            printf("M=%3zu N=%4zu K=%zu %s: gemm %8.2f us, matmul %8.2f us (%s), ratio %.2f\n", shapes[s][0], shapes[s][1], shapes[s][2],
                   bf ? "bf16" : "f32 ", us[0], us[1], uform_gemm_matmul_impl(), us[1] / us[0]);
        }
    uform_gemm_thread_leave(&prev);
}
