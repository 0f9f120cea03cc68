/**
 *  @file   test_text_plan.c
 *  @brief  How the text forward pass cuts its phases into tasks (src/models/text_plan.h), checked as
 *          a plan, not a timing: at batch 1 on 28 threads every phase of a UForm3-small-shaped and a
 *          MiniLM-shaped tower has at least a task per thread, of sizes one unit apart, and a
 *          makespan within a unit per task of the ideal; products split into exact, disjoint column ranges; a
 *          CLS tower's last layer lists as the tail runs it (K and V over every token, the rest a row per
 *          text: 41% of UForm3-small's multiply-adds at 64 tokens saved); and the
 *          embeddings a tower gives are bit for bit the same on 1, 2, 3 and 7 threads where the
 *          library's AVX-512 products allow it (else within the rounding), on pool executors over the
 *          ForkUnion stand-in, which take more threads than this machine has cores.
 */
#define _GNU_SOURCE 1
#include "check.h"
#include "internal.h"
#include "kernels/kernels.h"
#include "models/model.h"
#include "models/text_forward.h"
#include "models/text_plan.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>

/* ---- The plan ---- */

/** Phases whose work is per text (pooling, the output rows) or one row per text (the projection):
 *  at batch 1 they have a task or a few, and microseconds of work. */
static int per_text(uform_text_phase_t const *phase) {
    return !strcmp(phase->name, "pooling") || !strcmp(phase->name, "projection") || !strcmp(phase->name, "output rows");
}

static void check_batch1(char const *label, uform_text_plan_shape_t const *shape, uform_gemm_t const *gemm,
                         size_t threads, double efficiency_floor) {
    uform_text_phase_t phases[64];
    size_t count = uform_text_plan_describe(shape, gemm, threads, phases, 64);
    CHECK_FATAL(count > 0 && count <= 64);
    double worst = 1;
    size_t fewest = SIZE_MAX;
    for (size_t p = 0; p < count; ++p) {
        uform_text_phase_t const *phase = &phases[p];
        double ideal = phase->total / (double)threads;
        double efficiency = phase->total / ((double)threads * phase->makespan);
        if (per_text(phase)) continue;
        if (phase->tasks < fewest) fewest = phase->tasks;
        if (efficiency < worst) worst = efficiency;
        /* At least a task per thread... */
        CHECK(phase->tasks >= threads);
        /* ...of sizes at most one unit apart: a row, 16 columns of a product, 16 query rows of a head... */
        double unit = !strcmp(phase->name, "attention") ? 2.0 * 16 * (double)shape->lengths[0] * (double)(shape->hidden / shape->heads)
                      : !strcmp(phase->name, "embeddings") || !strcmp(phase->name, "norm") ? (double)shape->hidden
                      : !strcmp(phase->name, "down") ? (double)shape->lengths[0] * 16.0 * (double)shape->intermediate
                                                     : (double)shape->lengths[0] * 16.0 * (double)shape->hidden;
        CHECK(phase->largest <= phase->smallest + unit * 1.0001);
        /* ...so no thread gets more than its share and a unit per task it takes (each task's rounding). */
        double taken = (double)((phase->tasks + threads - 1) / threads);
        int near = phase->makespan <= ideal + taken * unit * 1.0001;
        if (phase->tasks < threads || !near || efficiency < efficiency_floor)
            printf("  %s on %zu threads, %s: %zu tasks, largest %.0f, smallest %.0f, makespan %.0f, ideal %.0f\n", label,
                   threads, phase->name, phase->tasks, phase->largest, phase->smallest, phase->makespan, ideal);
        CHECK(near);
        CHECK(efficiency >= efficiency_floor);
    }
    printf("%-44s %2zu threads: %zu phases, fewest tasks %zu, lowest makespan efficiency %.3f\n", label, threads, count,
           fewest, worst);
}

static void print_phases(char const *label, uform_text_plan_shape_t const *shape, uform_gemm_t const *gemm,
                         size_t threads) {
    uform_text_phase_t phases[64];
    size_t count = uform_text_plan_describe(shape, gemm, threads, phases, 64);
    printf("%s on %zu threads (first layer and the rest):\n", label, threads);
    for (size_t p = 0; p < count && p < 64; ++p)
        if (phases[p].layer == SIZE_MAX || phases[p].layer == 0)
            printf("  %-12s tasks %4zu  largest/smallest %.2f  efficiency %.3f\n", phases[p].name, phases[p].tasks,
                   phases[p].smallest > 0 ? phases[p].largest / phases[p].smallest : 0.0,
                   phases[p].total / ((double)threads * phases[p].makespan));
}

static void test_batch1_plan(void) {
    size_t uform3_tokens = 64, minilm_tokens = 128, short_tokens = 16;
    uform_text_plan_shape_t uform3 = {.hidden = 768, .heads = 12, .intermediate = 3072, .layers = 2, .projection = 256,
                                      .weights_dtype = uform_dtype_bf16_k, .texts = 1, .lengths = &uform3_tokens};
    uform_text_plan_shape_t minilm = {.hidden = 384, .heads = 12, .intermediate = 1536, .layers = 6,
                                      .weights_dtype = uform_dtype_f32_k, .texts = 1, .lengths = &minilm_tokens};
    uform_gemm_t genoa = uform_gemm_for(uform_cpu_class_amd_genoa_k), sapphire = uform_gemm_for(uform_cpu_class_intel_sapphire_k);
    uform_gemm_t haswell = uform_gemm_for(uform_cpu_class_intel_haswell_k);
    print_phases("UForm3-small, 64 tokens, bf16", &uform3, &genoa, 28);
    size_t const counts[] = {2, 3, 4, 7, 8, 16, 28, 32};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; ++c) {
        size_t threads = counts[c];
        uform3.weights_dtype = uform_dtype_bf16_k;
        check_batch1("UForm3-small, 64 tokens, bf16, AVX-512 BF16", &uform3, &genoa, threads, 0.75);
        check_batch1("UForm3-small, 64 tokens, bf16, AMX", &uform3, &sapphire, threads, 0.75);
        check_batch1("UForm3-small, 64 tokens, bf16 widened (AVX2)", &uform3, &haswell, threads, 0.75);
        uform3.weights_dtype = uform_dtype_f32_k;
        check_batch1("UForm3-small, 64 tokens, f32", &uform3, &genoa, threads, 0.75);
        check_batch1("MiniLM, 128 tokens, f32", &minilm, &genoa, threads, 0.75);
    }
    /* Sixteen tokens on 28 threads: rows are fewer than threads, so row phases get a row each. */
    minilm.lengths = &short_tokens;
    uform_text_phase_t phases[64];
    size_t count = uform_text_plan_describe(&minilm, &genoa, 28, phases, 64);
    for (size_t p = 0; p < count && p < 64; ++p)
        if (!strcmp(phases[p].name, "norm") || !strcmp(phases[p].name, "embeddings")) CHECK(phases[p].tasks == 16);
        else if (!strcmp(phases[p].name, "attention")) CHECK(phases[p].tasks == 12); /* a block per head */
        else if (!per_text(&phases[p])) CHECK(phases[p].tasks >= 24); /* 24 units of 16 columns in 384 */
}

/** One thread keeps whole products (one GEMM over up to 512 rows); many texts on a group of several
 *  split by rows alone. */
static void test_large_tasks(void) {
    uform_gemm_t genoa = uform_gemm_for(uform_cpu_class_amd_genoa_k);
    size_t hidden = 768, qkv[3] = {768, 768, 768};
    uform_text_gemm_plan_t one = uform_text_gemm_plan(&genoa, 1, uform_dtype_f32_k, 3200, &hidden, 1);
    CHECK(one.tiles_n == 1 && one.tiles_m == 7 && one.rows_max == 458);
    CHECK(uform_text_gemm_plan(&genoa, 1, uform_dtype_f32_k, 64, qkv, 3).tiles_m == 1);
    CHECK(uform_text_gemm_plan(&genoa, 1, uform_dtype_f32_k, 64, qkv, 3).tiles_n == 1);
    uform_text_gemm_plan_t rows = uform_text_gemm_plan(&genoa, 4, uform_dtype_f32_k, 3200, &hidden, 1);
    CHECK(rows.tiles_n == 1 && rows.tiles_m >= 8);
    CHECK(uform_text_row_tasks(3200, 4) == 200 && uform_text_row_tasks(3200, 1) == 200);
    CHECK(uform_text_attention_blocks(64) == 4 && uform_text_attention_blocks(47) == 2 && uform_text_attention_blocks(5) == 1);
    CHECK(uform_text_attention_tasks(600, 600 * 4, 64, 28, 1) == 0); /* per (text, head) */
    CHECK(uform_text_attention_tasks(12, 48, 64, 28, 0) == 0);       /* SERIAL: whole sequences */
    CHECK(uform_text_attention_tasks(12, 48, 64, 1, 1) == 0);
    CHECK(uform_text_attention_tasks(12, 48, 64, 28, 1) == 28);
    CHECK(uform_text_attention_tasks(4, 16, 64, 7, 1) == 7);
    CHECK(uform_text_attention_tasks(2, 2, 3, 28, 1) == 2);          /* a short text: a block per head */
    CHECK(uform_text_fuse_norms(&genoa, 4, uform_dtype_f32_k, 3200, 768, 3072));
    CHECK(!uform_text_fuse_norms(&genoa, 28, uform_dtype_f32_k, 64, 768, 3072));
    CHECK(!uform_text_fuse_norms(&genoa, 1, uform_dtype_f32_k, 3200, 768, 3072));
}

/** Sum of `total` over the phases of `layer` named `name` ("" for every phase of the layer). */
static double layer_work(uform_text_phase_t const *phases, size_t count, size_t layer, char const *name) {
    double work = 0;
    for (size_t p = 0; p < count; ++p)
        if (phases[p].layer == layer && (!*name || !strcmp(phases[p].name, name))) work += phases[p].total;
    return work;
}

/** A CLS tower's last layer as the tail runs it (`cls_tail`): the layers before are listed as without
 *  it, the last one's products are K and V over every token and the rest over a row per text, its
 *  attention one query row per (text, head), and no pooling phase follows. UForm3-small at 64 tokens
 *  (one text, 2 layers) does 41% fewer multiply-adds, as text_forward.c's comment says. */
static void test_cls_tail_plan(void) {
    size_t lengths[3] = {64, 20, 7}, tokens = 91, texts = 3;
    uform_text_plan_shape_t shape = {.hidden = 768, .heads = 12, .intermediate = 3072, .layers = 2, .projection = 256,
                                     .weights_dtype = uform_dtype_bf16_k, .texts = texts, .lengths = lengths};
    uform_gemm_t const gemms[3] = {uform_gemm_for(uform_cpu_class_amd_genoa_k), uform_gemm_for(uform_cpu_class_intel_sapphire_k),
                                   uform_gemm_for(uform_cpu_class_intel_haswell_k)};
    size_t const counts[] = {1, 2, 7, 28};
    for (size_t g = 0; g < 3; ++g)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; ++c) {
            uform_text_phase_t whole[64], tail[64];
            shape.cls_tail = 0;
            size_t whole_count = uform_text_plan_describe(&shape, &gemms[g], counts[c], whole, 64);
            shape.cls_tail = 1;
            size_t tail_count = uform_text_plan_describe(&shape, &gemms[g], counts[c], tail, 64);
            CHECK_FATAL(whole_count > 0 && whole_count <= 64 && tail_count > 0 && tail_count <= 64);
            /* The first layer and the embeddings, phase for phase. */
            size_t first = 0;
            while (first < whole_count && whole[first].layer != 1) ++first;
            for (size_t p = 0; p < first; ++p) {
                CHECK(!strcmp(whole[p].name, tail[p].name) && whole[p].tasks == tail[p].tasks);
                CHECK(whole[p].total == tail[p].total);
            }
            /* The tail's phases in order, then the projection and the output rows. */
            char const *names[] = {"kv", "first rows", "q", "attention", "context rows", "output", "norm", "up", "down",
                                   "norm", "projection", "output rows"};
            CHECK_FATAL(tail_count == first + 12);
            for (size_t p = 0; p < 12; ++p) CHECK(!strcmp(tail[first + p].name, names[p]));
            CHECK(tail[first + 1].tasks == texts && tail[first + 4].tasks == texts);
            CHECK(tail[first + 3].tasks == texts * shape.heads);
            for (size_t p = 0; p < tail_count; ++p) CHECK(strcmp(tail[p].name, "pooling"));
            CHECK(!strcmp(whole[whole_count - 3].name, "pooling"));
            /* Multiply-adds: K and V are two thirds of Q/K/V; the rest a row per text. */
            double h = 768, inter = 3072, head = 64;
            CHECK(fabs(layer_work(tail, tail_count, 1, "kv") - layer_work(whole, whole_count, 1, "qkv") * 2 / 3) < 1);
            CHECK(fabs(layer_work(tail, tail_count, 1, "q") - (double)texts * h * h) < 1);
            CHECK(fabs(layer_work(tail, tail_count, 1, "output") - (double)texts * h * h) < 1);
            CHECK(fabs(layer_work(tail, tail_count, 1, "up") - (double)texts * h * inter) < 1);
            CHECK(fabs(layer_work(tail, tail_count, 1, "down") - (double)texts * h * inter) < 1);
            CHECK(fabs(layer_work(tail, tail_count, 1, "attention") - 2.0 * (double)tokens * head * 12) < 1);
            CHECK(fabs(layer_work(whole, whole_count, 1, "attention") - 2.0 * (64.0 * 64 + 20 * 20 + 7 * 7) * head * 12) < 1);
        }
    /* One text of 64 tokens: the products and attention of the tail's pass against the whole pass's. */
    size_t one = 64;
    shape.texts = 1, shape.lengths = &one;
    double totals[2] = {0, 0};
    for (int with_tail = 0; with_tail < 2; ++with_tail) {
        uform_text_phase_t phases[64];
        shape.cls_tail = with_tail;
        size_t count = uform_text_plan_describe(&shape, &gemms[1], 2, phases, 64);
        CHECK_FATAL(count <= 64);
        for (size_t p = 0; p < count; ++p)
            if (phases[p].layer != SIZE_MAX && strcmp(phases[p].name, "norm") && strcmp(phases[p].name, "first rows") &&
                strcmp(phases[p].name, "context rows"))
                totals[with_tail] += phases[p].total;
    }
    double saved = 1 - totals[1] / totals[0];
    printf("CLS tail plan: UForm3-small, 64 tokens, 2 layers: %.1f%% of the layers' multiply-adds saved\n", 100 * saved);
    CHECK(saved > 0.40 && saved < 0.42);
}

/** Packed f32 weights (gemm.c's oneDNN packed GEMM pads narrow slices): a column-split product takes
 *  one task per thread while each keeps 384 columns, else two per thread as without packing; the
 *  image plan splits few rows evenly over the threads, every column in each tile. */
static void test_packed_f32_plans(void) {
    uform_gemm_t gemm = uform_gemm_for(uform_cpu_class_intel_haswell_k);
    gemm.matmul = 0, gemm.sgemm_packed = 1;
    uform_gemm_t plain = gemm;
    plain.sgemm_packed = 0;
    size_t qkv[3] = {768, 768, 768}, hidden = 768, narrow = 384;
    CHECK(uform_text_gemm_plan(&gemm, 2, uform_dtype_f32_k, 64, qkv, 3).tiles_n == 2);      /* 1,152 columns a task */
    CHECK(uform_text_gemm_plan(&gemm, 2, uform_dtype_f32_k, 64, &hidden, 1).tiles_n == 2);  /* 384 */
    CHECK(uform_text_gemm_plan(&plain, 2, uform_dtype_f32_k, 64, qkv, 3).tiles_n == 4);
    CHECK(uform_text_gemm_plan(&gemm, 2, uform_dtype_f32_k, 64, &narrow, 1).tiles_n == 4);  /* 192 < 384: as plain */
    CHECK(uform_text_gemm_plan(&gemm, 14, uform_dtype_f32_k, 64, qkv, 3).tiles_n == 28);    /* 165 < 384: as plain */
    CHECK(uform_text_gemm_plan(&gemm, 2, uform_dtype_bf16_k, 64, qkv, 3).tiles_n ==
          uform_text_gemm_plan(&plain, 2, uform_dtype_bf16_k, 64, qkv, 3).tiles_n);           /* bf16: never packed so */
    uform_gemm_plan_t rows = uform_gemm_plan(&gemm, 2, uform_dtype_f32_k, 197, 1152);
    CHECK(rows.tiles_m == 2 && rows.rows_per_tile == 99 && rows.tiles_n == 1 && rows.cols_per_tile == 1152);
    uform_gemm_plan_t before = uform_gemm_plan(&plain, 2, uform_dtype_f32_k, 197, 1152);
    CHECK(before.tiles_m * before.tiles_n == 4 && before.tiles_n == 2);
    uform_gemm_plan_t many = uform_gemm_plan(&gemm, 14, uform_dtype_f32_k, 197, 1152); /* 197 < 32 x 14: as plain */
    uform_gemm_plan_t many_plain = uform_gemm_plan(&plain, 14, uform_dtype_f32_k, 197, 1152);
    CHECK(many.tiles_m == many_plain.tiles_m && many.tiles_n == many_plain.tiles_n);
    /* With the primitive beside them (AVX-512 without AMX), tiles of under 32 rows go through brgemm
     * (gemm.c), so they are cut as without packing; 32 rows and more keep the packed plan. */
    uform_gemm_t both = gemm;
    both.matmul = 1;
    CHECK(uform_text_gemm_plan(&both, 2, uform_dtype_f32_k, 16, qkv, 3).tiles_n == 4);
    CHECK(uform_text_gemm_plan(&both, 2, uform_dtype_f32_k, UFORM_GEMM_SGEMM_ROWS_MIN - 1, qkv, 3).tiles_n == 4);
    CHECK(uform_text_gemm_plan(&both, 2, uform_dtype_f32_k, UFORM_GEMM_SGEMM_ROWS_MIN, qkv, 3).tiles_n == 2);
    CHECK(uform_text_gemm_plan(&gemm, 2, uform_dtype_f32_k, 16, qkv, 3).tiles_n == 2); /* no primitive: packed */
    printf("packed f32 plans: 2 threads 2 column tasks (plain 4), 197 image rows as 99 + 98, 16 rows beside brgemm 4\n");
}

/** Every column of every product in exactly one task, pieces within their product. */
static void test_columns_exact(void) {
    uform_gemm_t genoa = uform_gemm_for(uform_cpu_class_amd_genoa_k);
    size_t const widths[][3] = {{768, 768, 768}, {96, 96, 96}, {80, 0, 0}, {3072, 0, 0}, {40, 40, 40}};
    size_t const products[] = {3, 3, 1, 1, 3};
    for (size_t s = 0; s < 5; ++s)
        for (size_t threads = 1; threads <= 33; threads += 4)
            for (size_t m = 1; m <= 130; m += 43) {
                uform_text_gemm_plan_t plan = uform_text_gemm_plan(&genoa, threads, uform_dtype_f32_k, m, widths[s], products[s]);
                unsigned char seen[3][3072] = {{0}};
                size_t rows_seen = 0;
                for (size_t task = 0; task < plan.tiles_m * plan.tiles_n; ++task) {
                    size_t i0, rows, u0, units;
                    uform_text_split(m, plan.tiles_m, task / plan.tiles_n, &i0, &rows);
                    uform_text_split(plan.units, plan.tiles_n, task % plan.tiles_n, &u0, &units);
                    CHECK(rows >= 1 && rows <= plan.rows_max && units >= 1);
                    if (task % plan.tiles_n == 0) rows_seen += rows;
                    for (size_t p = 0, first = 0; p < products[s]; ++p) {
                        size_t own = (widths[s][p] + 15) / 16;
                        for (size_t u = u0; u < u0 + units; ++u)
                            if (u >= first && u < first + own)
                                for (size_t j = (u - first) * 16; j < (u - first + 1) * 16 && j < widths[s][p]; ++j)
                                    seen[p][j] += task / plan.tiles_n == 0;
                        first += own;
                    }
                }
                CHECK(rows_seen == m);
                for (size_t p = 0; p < products[s]; ++p)
                    for (size_t j = 0; j < widths[s][p]; ++j) CHECK(seen[p][j] == 1);
            }
}

/* ---- Whole-row tiles for small groups (uform_text_whole_rows) ---- */

/** Groups of 2 to 4 threads with bf16 A on the fused path split rows alone, a tile per thread of 32
 *  rows at least, reading packed weights; larger groups, f32, widened bf16 and UFORM_ROW_TILES_THREADS=0
 *  split columns as before. */
static void test_whole_rows_plan(void) {
    uform_gemm_t sapphire = uform_gemm_for(uform_cpu_class_intel_sapphire_k);
    uform_gemm_t haswell = uform_gemm_for(uform_cpu_class_intel_haswell_k);
    size_t hidden = 384, qkv[3] = {384, 384, 384};
    for (size_t threads = 2; threads <= 4; ++threads) {
        CHECK(uform_text_whole_rows(&sapphire, threads, uform_dtype_bf16_k, 32 * threads));
        CHECK(!uform_text_whole_rows(&sapphire, threads, uform_dtype_bf16_k, 32 * threads - 1));
        uform_text_gemm_plan_t plan = uform_text_gemm_plan(&sapphire, threads, uform_dtype_bf16_k, 128, qkv, 3);
        CHECK(plan.tiles_m == threads && plan.tiles_n == 1 && !plan.plain_weights && plan.rows_max == (128 + threads - 1) / threads);
        CHECK(!uform_text_whole_rows(&sapphire, threads, uform_dtype_f32_k, 128));
        CHECK(!uform_text_whole_rows(&haswell, threads, uform_dtype_bf16_k, 128));
        CHECK(!uform_text_fuse_norms(&sapphire, threads, uform_dtype_bf16_k, 128, hidden, 1536));
    }
    CHECK(!uform_text_whole_rows(&sapphire, 1, uform_dtype_bf16_k, 128));
    CHECK(!uform_text_whole_rows(&sapphire, 5, uform_dtype_bf16_k, 512));
    CHECK(uform_text_gemm_plan(&sapphire, 5, uform_dtype_bf16_k, 128, &hidden, 1).tiles_n > 1);
    /* The switch is read as `uform_gemm_for` runs (once per call): a GEMM made before keeps its value. */
    CHECK(sapphire.row_tiles_threads == 4);
    CHECK(setenv("UFORM_ROW_TILES_THREADS", "0", 1) == 0);
    uform_gemm_t const off = uform_gemm_for(uform_cpu_class_intel_sapphire_k);
    CHECK(off.row_tiles_threads == 0 && sapphire.row_tiles_threads == 4);
    CHECK(!uform_text_whole_rows(&off, 2, uform_dtype_bf16_k, 128));
    CHECK(uform_text_gemm_plan(&off, 2, uform_dtype_bf16_k, 128, &hidden, 1).tiles_n > 1);
    CHECK(setenv("UFORM_ROW_TILES_THREADS", "8", 1) == 0);
    uform_gemm_t const eight = uform_gemm_for(uform_cpu_class_intel_sapphire_k);
    CHECK(uform_text_whole_rows(&eight, 8, uform_dtype_bf16_k, 256));
    CHECK(unsetenv("UFORM_ROW_TILES_THREADS") == 0);
    printf("whole-row tiles: groups of 2 to 4 threads with bf16 A, 32 rows a tile at least\n");
}

/* ---- Packed or plain weights, per product ---- */

static float uniform(void);

/** With `pack_split` off (UFORM_GEMM_PACK_SPLIT=0) the batch-1 plan's column-split products read the
 *  weights as they lie while whole-width products (one thread per group, or rows enough for every
 *  thread) keep the packed copy; by default (`pack_split` on) both read the packed copy. The same
 *  rule for the image pass's plan (`uform_gemm_plan`). */
static void test_plain_weights_plan(void) {
    uform_gemm_t sapphire = uform_gemm_for(uform_cpu_class_intel_sapphire_k);
    sapphire.pack_split = 0;
    size_t hidden = 768, inter = 3072, qkv[3] = {768, 768, 768};
    uform_text_gemm_plan_t batch1 = uform_text_gemm_plan(&sapphire, 28, uform_dtype_bf16_k, 64, qkv, 3);
    CHECK(batch1.tiles_n > 1 && batch1.plain_weights);
    CHECK(uform_text_gemm_plan(&sapphire, 28, uform_dtype_bf16_k, 64, &inter, 1).plain_weights);
    CHECK(uform_text_gemm_plan(&sapphire, 5, uform_dtype_bf16_k, 64, &hidden, 1).plain_weights);
    uform_text_gemm_plan_t alone = uform_text_gemm_plan(&sapphire, 1, uform_dtype_bf16_k, 128, qkv, 3);
    CHECK(alone.tiles_n == 1 && !alone.plain_weights);
    uform_text_gemm_plan_t rows = uform_text_gemm_plan(&sapphire, 4, uform_dtype_bf16_k, 3200, &hidden, 1);
    CHECK(rows.tiles_n == 1 && !rows.plain_weights);
    sapphire.pack_split = 1;
    CHECK(!uform_text_gemm_plan(&sapphire, 28, uform_dtype_bf16_k, 64, qkv, 3).plain_weights);
    CHECK(!uform_gemm_for_product(&sapphire, 28).plain_weights);
    sapphire.pack_split = 0;
    /* ViT-B/16: one image (197 tokens) on 28 threads splits columns; a thread's own images do not. */
    uform_gemm_plan_t image1 = uform_gemm_plan(&sapphire, 28, uform_dtype_bf16_k, 197, 768);
    CHECK(image1.tiles_n > 1 && uform_gemm_for_product(&sapphire, image1.tiles_n).plain_weights);
    uform_gemm_plan_t image2 = uform_gemm_plan(&sapphire, 1, uform_dtype_bf16_k, 2 * 197, 3072);
    CHECK(image2.tiles_n == 1 && !uform_gemm_for_product(&sapphire, image2.tiles_n).plain_weights);
    /* The environment's switch, read by `uform_gemm_for`. */
    char const *was = getenv("UFORM_GEMM_PACK_SPLIT");
    unsetenv("UFORM_GEMM_PACK_SPLIT");
    CHECK(uform_gemm_for(uform_cpu_class_intel_sapphire_k).pack_split);
    setenv("UFORM_GEMM_PACK_SPLIT", "1", 1);
    CHECK(uform_gemm_for(uform_cpu_class_intel_sapphire_k).pack_split);
    setenv("UFORM_GEMM_PACK_SPLIT", "0", 1);
    CHECK(!uform_gemm_for(uform_cpu_class_intel_sapphire_k).pack_split);
    if (was) setenv("UFORM_GEMM_PACK_SPLIT", was, 1);
    else unsetenv("UFORM_GEMM_PACK_SPLIT");
}

/** On the matmul primitive's path (forced here), a tile of pinned weights with `plain_weights` packs
 *  nothing and gives the values of the packed whole-width product; without it, the slice is packed. */
static void test_plain_weights_values(uform_cpu_class_t cpu_class) {
    enum { M = 40, N = 96, K = 80 };
    uform_gemm_t gemm = uform_gemm_for(cpu_class);
    char const *budget = getenv("UFORM_GEMM_PACK_MIB");
    if (!gemm.use_library || (budget && !strcmp(budget, "0"))) {
        printf("plain weights: skipped (%s)\n", gemm.use_library ? "UFORM_GEMM_PACK_MIB=0" : "no library on this class");
        return;
    }
    gemm.matmul = 1, gemm.pack_split = 0;
    float *a = malloc(M * K * sizeof(float)), *w = malloc(N * K * sizeof(float));
    float *whole = malloc(M * N * sizeof(float)), *split = malloc(M * N * sizeof(float));
    CHECK_FATAL(a && w && whole && split);
    for (size_t i = 0; i < M * K; ++i) a[i] = uniform();
    for (size_t i = 0; i < N * K; ++i) w[i] = uniform();
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    uform_gemm_pin(w, N * K * sizeof(float));
    /* Column tiles of 32 (a split plan): nothing packed. */
    uform_gemm_t columns = uform_gemm_for_product(&gemm, 3);
    CHECK(columns.plain_weights);
    size_t before = uform_gemm_packed_bytes();
    for (size_t j0 = 0; j0 < N; j0 += 32) uform_gemm_tile(&columns, M, 32, K, a, K, w + j0 * K, uform_dtype_f32_k, K, split + j0, N, NULL);
    CHECK(uform_gemm_packed_bytes() == before);
    /* The whole width (one tile): packed once, the same values within f32 rounding. */
    uform_gemm_t one = uform_gemm_for_product(&gemm, 1);
    CHECK(!one.plain_weights);
    uform_gemm_tile(&one, M, N, K, a, K, w, uform_dtype_f32_k, K, whole, N, NULL);
    int packed = uform_gemm_packed_bytes() > before;
    double most = 0, worst_reference = 0;
    for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
            double reference = 0;
            for (size_t p = 0; p < K; ++p) reference += (double)a[i * K + p] * (double)w[j * K + p];
            most = fmax(most, fabs((double)whole[i * N + j] - (double)split[i * N + j]));
            worst_reference = fmax(worst_reference, fabs((double)split[i * N + j] - reference));
        }
    printf("plain weights (%s): split tiles packed nothing, the whole-width tile %s; max |split - whole| %.1e, "
           "|split - reference| %.1e\n", uform_cpu_class_name(cpu_class), packed ? "packed" : "was not packed (refused)",
           most, worst_reference);
    CHECK(most <= 1e-4 && worst_reference <= 1e-4);
    uform_gemm_unpin(w, N * K * sizeof(float));
    CHECK(uform_gemm_packed_bytes() == before);
    uform_gemm_thread_leave(&previous);
    free(a), free(w), free(whole), free(split);
}

/* ---- The embeddings on 1, 2, 3 and 7 threads ---- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float uniform(void) { // [-1, 1)
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 52) - 1.0);
}

static void *owned[64];
static size_t owned_count;

static uform_tensor_t tensor(size_t rows, size_t cols, float scale, float offset, uform_dtype_t dtype) {
    size_t count = rows * cols;
    void *data = malloc(count * (dtype == uform_dtype_f32_k ? 4 : 2));
    for (size_t i = 0; i < count; ++i) {
        float value = offset + scale * uniform();
        if (dtype == uform_dtype_f32_k) ((float *)data)[i] = value;
        else {
            union { float f; uint32_t u; } bits = {.f = value};
            ((uint16_t *)data)[i] = (uint16_t)(bits.u >> 16);
        }
    }
    owned[owned_count++] = data;
    return (uform_tensor_t){.data = data, .dtype = dtype, .rows = rows, .cols = cols};
}

static uform_text_tower_t tower_of(uform_dtype_t dtype, uform_pooling_t pooling) {
    size_t h = 128, in = 512, layers = 2;
    uform_text_tower_t t = {.vocab_size = 200, .hidden = h, .heads = 4, .intermediate = in, .max_positions = 80,
                            .layers_count = layers, .context = 72, .embedding_dimensions = 64, .layer_norm_epsilon = 1e-12,
                            .pooling = pooling, .normalize = 1, .weights_dtype = dtype};
    float ws = 1.7f / sqrtf((float)h), wi = 1.7f / sqrtf((float)in);
    t.word_embeddings = tensor(200, h, 1.0f, 0, dtype), t.position_embeddings = tensor(80, h, 0.5f, 0, dtype);
    t.embedding_norm_weight = tensor(1, h, 0.3f, 1, uform_dtype_f32_k), t.embedding_norm_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
    t.layers = calloc(layers, sizeof(uform_text_layer_t));
    for (size_t l = 0; l < layers; ++l) {
        uform_text_layer_t *y = &t.layers[l];
        y->query_weight = tensor(h, h, 2 * ws, 0, dtype), y->query_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->key_weight = tensor(h, h, 2 * ws, 0, dtype), y->key_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->value_weight = tensor(h, h, ws, 0, dtype), y->value_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->attention_output_weight = tensor(h, h, ws, 0, dtype);
        y->attention_output_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->attention_norm_weight = tensor(1, h, 0.3f, 1, uform_dtype_f32_k);
        y->attention_norm_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->intermediate_weight = tensor(in, h, ws, 0, dtype), y->intermediate_bias = tensor(1, in, 0.2f, 0, uform_dtype_f32_k);
        y->output_weight = tensor(h, in, wi, 0, dtype), y->output_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
        y->output_norm_weight = tensor(1, h, 0.3f, 1, uform_dtype_f32_k);
        y->output_norm_bias = tensor(1, h, 0.2f, 0, uform_dtype_f32_k);
    }
    t.projection = tensor(64, h, ws, 0, dtype);
    return t;
}

static int32_t node_zero = 0;

/* The ForkUnion stand-in (test/standin), whose pools take any number of threads. */
static void *(*pool_new)(char const *);
static int (*pool_spawn)(void *, size_t, int);
static void (*pool_delete)(void *);

/** Whether the products of `cpu_class` give the same values for a row whatever the tile holding it
 *  (at least 16 rows, any columns): oneDNN's AVX-512 GEMM functions, as measured on this machine. Its
 *  AVX2 kernels round rows differently by their place in a tile, and the AMX path is unmeasured, so
 *  elsewhere the thread counts agree within the rounding instead. */
static int tiles_exact(uform_cpu_class_t cpu_class) {
    uform_gemm_t gemm = uform_gemm_for(cpu_class);
    char const *isa = getenv("DNNL_MAX_CPU_ISA");
    return (cpu_class == uform_cpu_class_intel_skylake_k || cpu_class == uform_cpu_class_intel_icelake_k ||
            cpu_class == uform_cpu_class_amd_genoa_k) &&
           !gemm.matmul && (!isa || !*isa);
}

static void test_identical_across_threads(uform_dtype_t dtype, uform_cpu_class_t cpu_class) {
    uform_ram_options_t ram = {.cpu_class = cpu_class};
    int exact = tiles_exact(cpu_class);
    uform_text_tower_t tower = tower_of(dtype, uform_pooling_mean_k);
    struct uform_model_s model = {.modality = uform_modality_text_k, .residency = uform_residency_ram_k,
                                  .weights_dtype = dtype, .replicas_count = 1, .replica_nodes = &node_zero,
                                  .text_replicas = &tower};
    /* Batch 1 (64 tokens; 13, under a query block), then five texts of mixed lengths: bit for bit in
     * one group of every thread, within the rounding of the products when the texts are dealt to
     * groups (a group multiplies its own texts' rows, and the library's kernel for fewer than 16
     * rows rounds differently). */
    size_t const lengths[7] = {64, 70, 3, 33, 1, 17, 13};
    size_t offsets[8] = {0};
    for (size_t i = 0; i < 7; ++i) offsets[i + 1] = offsets[i] + lengths[i];
    int32_t ids[256];
    for (size_t t = 0; t < offsets[7]; ++t) ids[t] = (int32_t)((t * 37 + 11) % 200);
    struct { size_t begin, end; int one_group; } const batches[4] = {{0, 1, 0}, {6, 7, 0}, {1, 6, 1}, {1, 6, 0}};
    float first[6 * 64], rows[6 * 64];
    size_t const thread_counts[4] = {1, 2, 3, 7};
    for (size_t b = 0; b < 4; ++b) {
        size_t begin = batches[b].begin, count = batches[b].end - begin;
        size_t local[8];
        for (size_t i = 0; i <= count; ++i) local[i] = offsets[begin + i] - offsets[begin];
        for (size_t c = 0; c < 4; ++c) {
            /* A pool of that many threads: a RAM executor never takes more threads than cores. */
            void *pool = pool_new("plan");
            CHECK_FATAL(pool && pool_spawn(pool, thread_counts[c], 0));
            uform_executor_t executor = NULL;
            CHECK_FATAL(uform_executor_on_pool(pool, &ram, 0, &executor) == uform_status_ok_k);
            uform_executor_description_t description;
            CHECK_OK(uform_executor_describe(executor, &description));
            CHECK(description.threads_count == thread_counts[c]);
            char group[8];
            snprintf(group, sizeof group, "%zu", thread_counts[c]);
            if (batches[b].one_group) setenv("UFORM_FORWARD_GROUP", group, 1);
            float *target = c == 0 ? first : rows;
            memset(target, 0xFF, sizeof rows);
            uform_embeddings_t out = {.data = target, .dtype = uform_dtype_f32_k};
            CHECK_STATUS(uform_text_encode_ids(executor, &model, ids + offsets[begin], local, count, NULL, NULL, &out, NULL),
                         uform_status_ok_k);
            unsetenv("UFORM_FORWARD_GROUP");
            uform_executor_free(executor);
            pool_delete(pool);
            for (size_t i = 0; i < count * 64; ++i) CHECK_FATAL(target[i] == target[i]); /* every row written */
            if (c == 0) continue;
            int same = memcmp(first, rows, count * 64 * sizeof(float)) == 0;
            double most = 0;
            for (size_t i = 0; i < count * 64; ++i) most = fabs(first[i] - rows[i]) > most ? fabs(first[i] - rows[i]) : most;
            printf("%s, %s weights, %zu text%s of %zu tokens%s: %zu threads %s 1 thread (max |diff| %.1e)\n",
                   uform_cpu_class_name(cpu_class), dtype == uform_dtype_f32_k ? "f32" : "bf16", count, count == 1 ? "" : "s", local[count],
                   batches[b].one_group ? " in one group" : "", thread_counts[c], same ? "bit for bit equal to" : "differs from",
                   most);
            if (exact && (count == 1 || batches[b].one_group)) CHECK(same);
            else CHECK(most <= 1e-5);
        }
    }
    for (size_t i = 0; i < owned_count; ++i) free(owned[i]);
    owned_count = 0;
    free(tower.layers);
}

/** A CLS-pooled tower's last layer runs for each text's first token alone (text_forward.c's
 *  `forward_cls_tail`); `UFORM_CLS_TAIL=0` runs it for every token. Both give the same embeddings
 *  within the products' rounding (the tail's rows are multiplied in tiles of other shapes) on 1, 2, 3
 *  and 7 threads: batch 1, five texts of mixed lengths (1 to 70 tokens) dealt to groups and in one
 *  group, and 48 texts in one group of 4 threads (2,800 tokens: the LayerNorms fused into the
 *  products, so the tail's gather applies the last LayerNorm itself). */
static void test_cls_tail(uform_dtype_t dtype, uform_cpu_class_t cpu_class) {
    uform_ram_options_t ram = {.cpu_class = cpu_class};
    uform_text_tower_t tower = tower_of(dtype, uform_pooling_cls_k);
    struct uform_model_s model = {.modality = uform_modality_text_k, .residency = uform_residency_ram_k,
                                  .weights_dtype = dtype, .replicas_count = 1, .replica_nodes = &node_zero,
                                  .text_replicas = &tower};
    enum { texts_most = 55 };
    size_t lengths[texts_most] = {64, 70, 3, 33, 1, 17, 13};
    for (size_t i = 7; i < texts_most; ++i) lengths[i] = 50 + (i * 7) % 19;
    size_t offsets[texts_most + 1] = {0};
    for (size_t i = 0; i < texts_most; ++i) offsets[i + 1] = offsets[i] + lengths[i];
    int32_t *ids = malloc(offsets[texts_most] * sizeof(int32_t));
    float *tail = malloc(48 * 64 * sizeof(float)), *whole = malloc(48 * 64 * sizeof(float));
    CHECK_FATAL(ids && tail && whole);
    for (size_t t = 0; t < offsets[texts_most]; ++t) ids[t] = (int32_t)((t * 37 + 11) % 200);
    struct { size_t begin, end, one_group; } const batches[4] = {{0, 1, 0}, {1, 6, 0}, {1, 6, 99}, {7, 55, 4}};
    size_t const thread_counts[4] = {1, 2, 3, 7};
    double tolerance = dtype == uform_dtype_f32_k ? 1e-5 : 2e-3, worst = 0;
    for (size_t b = 0; b < 4; ++b) {
        size_t begin = batches[b].begin, count = batches[b].end - begin;
        size_t local[texts_most + 1];
        for (size_t i = 0; i <= count; ++i) local[i] = offsets[begin + i] - offsets[begin];
        for (size_t c = 0; c < 4; ++c) {
            size_t threads = batches[b].one_group == 4 ? 4 : thread_counts[c];
            void *pool = pool_new("tail");
            CHECK_FATAL(pool && pool_spawn(pool, threads, 0));
            uform_executor_t executor = NULL;
            CHECK_FATAL(uform_executor_on_pool(pool, &ram, 0, &executor) == uform_status_ok_k);
            char group[8];
            snprintf(group, sizeof group, "%zu", threads);
            if (batches[b].one_group) setenv("UFORM_FORWARD_GROUP", group, 1);
            for (int run = 0; run < 2; ++run) {
                float *target = run ? whole : tail;
                if (run) setenv("UFORM_CLS_TAIL", "0", 1);
                memset(target, 0xFF, 48 * 64 * sizeof(float));
                uform_embeddings_t out = {.data = target, .dtype = uform_dtype_f32_k};
                CHECK_STATUS(uform_text_encode_ids(executor, &model, ids + offsets[begin], local, count, NULL, NULL, &out, NULL),
                             uform_status_ok_k);
                unsetenv("UFORM_CLS_TAIL");
            }
            unsetenv("UFORM_FORWARD_GROUP");
            uform_executor_free(executor);
            pool_delete(pool);
            double most = 0;
            for (size_t i = 0; i < count * 64; ++i) {
                CHECK_FATAL(tail[i] == tail[i] && whole[i] == whole[i]); /* every row written */
                most = fabs(tail[i] - whole[i]) > most ? fabs(tail[i] - whole[i]) : most;
            }
            CHECK(most <= tolerance);
            worst = most > worst ? most : worst;
            if (batches[b].one_group == 4) break;
        }
    }
    printf("%s, %s weights, CLS pooling: the last layer for the first tokens alone equals the whole layer within %.1e "
           "(at most %.1e) on 1 to 7 threads, batch 1, 5 texts dealt and in one group, 48 texts in one group of 4\n",
           uform_cpu_class_name(cpu_class), dtype == uform_dtype_f32_k ? "f32" : "bf16", worst, tolerance);
    for (size_t i = 0; i < owned_count; ++i) free(owned[i]);
    owned_count = 0;
    free(tower.layers), free(ids), free(tail), free(whole);
}

int main(void) {
    test_batch1_plan();
    test_large_tasks();
    test_packed_f32_plans();
    test_columns_exact();
    void *library = dlopen(UFORM_FU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL);
    CHECK_FATAL(library != NULL);
    pool_new = (void *(*)(char const *))dlsym(library, "fu_pool_new");
    pool_spawn = (int (*)(void *, size_t, int))dlsym(library, "fu_pool_spawn");
    pool_delete = (void (*)(void *))dlsym(library, "fu_pool_delete");
    CHECK_FATAL(pool_new && pool_spawn && pool_delete);
    /* The class this machine detects, and AVX2 (the class of some CI machines) where it runs. */
    uform_cpu_class_t own = uform_cpu_class_serial_k;
    CHECK_OK(uform_cpu_detect(&own, NULL));
    test_plain_weights_plan();
    test_whole_rows_plan();
    test_cls_tail_plan();
    test_plain_weights_values(own);
    test_identical_across_threads(uform_dtype_f32_k, own);
    test_identical_across_threads(uform_dtype_bf16_k, own);
    test_cls_tail(uform_dtype_f32_k, own);
    test_cls_tail(uform_dtype_bf16_k, own);
    test_cls_tail(uform_dtype_f32_k, uform_cpu_class_serial_k); /* the portable kernels: attention without the library */
    if (own != uform_cpu_class_intel_haswell_k) {
        void *pool = pool_new("probe");
        uform_ram_options_t ram = {.cpu_class = uform_cpu_class_intel_haswell_k};
        uform_executor_t executor = NULL;
        int runs = pool && pool_spawn(pool, 1, 0) && uform_executor_on_pool(pool, &ram, 0, &executor) == uform_status_ok_k;
        uform_executor_free(executor);
        if (pool) pool_delete(pool);
        if (runs) {
            test_identical_across_threads(uform_dtype_f32_k, uform_cpu_class_intel_haswell_k);
            test_cls_tail(uform_dtype_f32_k, uform_cpu_class_intel_haswell_k);
            test_cls_tail(uform_dtype_bf16_k, uform_cpu_class_intel_haswell_k); /* bf16 weights widened */
        }
    }
    return check_failures ? 1 : 0;
}
