/**
 *  @file   phases.c
 *  @brief  What the forward passes (text and image) share to walk their phases together: the
 *          barrier between phases and the GEMM tile plan each phase's threads take tiles from.
 */
#include "kernels/kernels.h"

#include "internal.h" // `uform_futex_wait`, `uform_spin_pause`

#include <limits.h> // `INT_MAX`

/** Spins at a barrier before sleeping on the futex. */
#define UFORM_PHASE_BARRIER_SPINS 4096u
/** Rows per GEMM tile when rows are many; up to four times this while every thread keeps two tiles. */
#define UFORM_GEMM_TILE_ROWS 128

void uform_phase_barrier_wait(uform_phase_barrier_t *barrier, size_t threads) {
    if (threads == 1) return;
    unsigned generation = atomic_load(&barrier->generation);
    if (atomic_fetch_add(&barrier->arrived, 1) + 1 == threads) {
        atomic_store(&barrier->arrived, 0);
        atomic_fetch_add(&barrier->generation, 1);
        if (atomic_load(&barrier->sleepers)) uform_futex_wake((uint32_t *)&barrier->generation, INT_MAX);
        return;
    }
    for (unsigned spin = 0; spin < UFORM_PHASE_BARRIER_SPINS; ++spin) {
        if (atomic_load_explicit(&barrier->generation, memory_order_acquire) != generation) return;
        uform_spin_pause();
    }
    atomic_fetch_add(&barrier->sleepers, 1);
    while (atomic_load(&barrier->generation) == generation)
        uform_futex_wait((uint32_t *)&barrier->generation, generation, NULL);
    atomic_fetch_sub(&barrier->sleepers, 1);
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

uform_gemm_plan_t uform_gemm_plan(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m, size_t n) {
    uform_gemm_plan_t plan;
    size_t wanted = threads == 1 ? 1 : threads * 2;
    int widens = uform_gemm_scratch_bytes(gemm, dtype, 1, 1, 1) == sizeof(float);
    /* Bigger row tiles amortise the library's packing of the weights, as long as every thread
     * still gets two tiles. */
    size_t rows = UFORM_GEMM_TILE_ROWS;
    while (rows < 4 * UFORM_GEMM_TILE_ROWS && m / (rows * 2) >= wanted) rows *= 2;
    plan.rows_per_tile = widens ? (m ? m : 1) : rows;
    plan.tiles_m = m ? ceil_div(m, plan.rows_per_tile) : 0;
    size_t splits = plan.tiles_m >= wanted || !plan.tiles_m ? 1 : ceil_div(wanted, plan.tiles_m);
    plan.cols_per_tile = ceil_div(ceil_div(n, splits), 16) * 16;
    if (plan.cols_per_tile < 64 && !widens) plan.cols_per_tile = 64;
    if (plan.cols_per_tile > n) plan.cols_per_tile = n;
    plan.tiles_n = ceil_div(n, plan.cols_per_tile);
    return plan;
}
