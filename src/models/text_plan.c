/**
 *  @file   text_plan.c
 *  @brief  How the text forward pass cuts its phases into tasks (see text_plan.h).
 */
#include "models/text_plan.h"

#include <stdint.h> // `SIZE_MAX`
#include <stdlib.h> // `calloc`

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/** Rows per GEMM tile when rows are many; up to four times this while every thread keeps two tiles. */
#define TEXT_GEMM_TILE_ROWS 128u
/** Fewest rows of a row tile where rows are split to give narrow products' threads a task each. */
#define TEXT_GEMM_ROWS_MIN 16u
/** Columns a task of packed f32 weights keeps at least for one task per thread (gemm.c: the packed
 *  layout pads 384 columns by a third, 64 by eight times). */
#define TEXT_PACKED_COLUMNS_MIN 384u
/** Columns a task keeps at least while it splits for two tasks per thread (else one per thread). */
#define TEXT_GEMM_COLUMNS_WIDE 64u

static int gemm_widens(uform_gemm_t const *gemm, uform_dtype_t dtype) {
    return uform_gemm_scratch_bytes(gemm, dtype, 1, 1, 1) == sizeof(float);
}

int uform_text_whole_rows(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m) {
    return threads > 1 && threads <= gemm->row_tiles_threads && m >= 32 * threads && gemm->fused &&
           uform_gemm_takes_bf16(gemm, dtype);
}

uform_text_gemm_plan_t uform_text_gemm_plan(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m,
                                            size_t const *widths, size_t products) {
    uform_text_gemm_plan_t plan = {.tiles_m = 0, .tiles_n = 1};
    size_t widest = 0;
    for (size_t p = 0; p < products; ++p) {
        plan.units += ceil_div(widths[p], UFORM_TEXT_COLUMN_UNIT);
        widest = widths[p] > widest ? widths[p] : widest;
    }
    if (m == 0 || plan.units == 0) return plan;
    if (threads == 0) threads = 1;
    int widens = gemm_widens(gemm, dtype);
    size_t wanted = threads == 1 ? 1 : 2 * threads;
    size_t rows = TEXT_GEMM_TILE_ROWS;
    while (rows < 4 * TEXT_GEMM_TILE_ROWS && m / (rows * 2) >= wanted) rows *= 2;
    size_t tiles_m = widens ? 1 : ceil_div(m, rows), tiles_n = 1;
    if (threads > 1 && tiles_m < wanted) {
        /* Two tasks per thread balance a shared core's delays; but packed f32 weights (gemm.c) pad
         * narrow slices or leave them plain, so there the columns split for one task per thread while
         * each keeps TEXT_PACKED_COLUMNS_MIN of them. */
        size_t per_thread = ceil_div(threads, tiles_m);
        int packed = gemm->sgemm_packed && dtype == uform_dtype_f32_k &&
                     !(gemm->matmul && ceil_div(m, tiles_m) < UFORM_GEMM_SGEMM_ROWS_MIN); /* else brgemm (gemm.c) */
        int wide = packed && plan.units * UFORM_TEXT_COLUMN_UNIT >= TEXT_PACKED_COLUMNS_MIN * per_thread;
        tiles_n = wide ? per_thread : ceil_div(wanted, tiles_m);
        if (plan.units * UFORM_TEXT_COLUMN_UNIT < TEXT_GEMM_COLUMNS_WIDE * tiles_n) {
            /* Two tasks per thread would be narrower than 64 columns: one task per thread is enough. */
            tiles_n = ceil_div(threads, tiles_m);
            if (tiles_n > plan.units && !widens && m > TEXT_GEMM_ROWS_MIN) {
                /* Too few columns even so (a narrow product): split the rows finer. */
                size_t row_tiles = min_size(ceil_div(threads, plan.units), ceil_div(m, TEXT_GEMM_ROWS_MIN));
                if (row_tiles > tiles_m) tiles_m = row_tiles;
                tiles_n = ceil_div(threads, tiles_m);
            }
        }
        if (tiles_n > plan.units) tiles_n = plan.units;
    }
    if (tiles_n > 1 && uform_text_whole_rows(gemm, threads, dtype, m)) tiles_m = threads, tiles_n = 1;
    plan.tiles_m = tiles_m, plan.tiles_n = tiles_n;
    plan.plain_weights = uform_gemm_for_product(gemm, tiles_n).plain_weights;
    plan.rows_max = ceil_div(m, tiles_m);
    plan.cols_max = min_size(ceil_div(plan.units, tiles_n) * UFORM_TEXT_COLUMN_UNIT, widest);
    return plan;
}

size_t uform_text_row_tasks(size_t rows, size_t threads) {
    size_t blocks = ceil_div(rows, 16);
    if (threads <= 1) return blocks;
    /* Blocks of at most 16 rows, as many as a multiple of the threads, so every thread gets as many. */
    return min_size(rows, ceil_div(blocks, threads) * threads);
}

size_t uform_text_attention_blocks(size_t length) {
    return length / UFORM_TEXT_QUERY_BLOCK ? length / UFORM_TEXT_QUERY_BLOCK : 1;
}

size_t uform_text_attention_tasks(size_t pairs, size_t units, size_t longest, size_t threads, int library) {
    if (!library || threads <= 1 || !units || pairs >= 2 * threads) return 0;
    /* As many tasks as threads (or a multiple), none of more blocks than the longest text has. */
    size_t most = uform_text_attention_blocks(longest);
    return min_size(units, ceil_div(units, threads * most) * threads);
}

int uform_text_fuse_norms(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t tokens, size_t hidden,
                          size_t intermediate) {
    /* With A in bf16 the LayerNorm phases write it once, and the products take whole rows. */
    if (threads <= 1 || gemm_widens(gemm, dtype) || uform_gemm_takes_bf16(gemm, dtype)) return 0;
    size_t qkv[3] = {hidden, hidden, hidden};
    return uform_text_gemm_plan(gemm, threads, dtype, tokens, qkv, 3).tiles_n <= 2 &&
           uform_text_gemm_plan(gemm, threads, dtype, tokens, &hidden, 1).tiles_n <= 2 &&
           uform_text_gemm_plan(gemm, threads, dtype, tokens, &intermediate, 1).tiles_n <= 2;
}

/* ---- Describing a pass ---- */

typedef struct describer_t {
    uform_text_phase_t *phases;
    size_t capacity, count, threads;
    double *loads;
} describer_t;

static uform_text_phase_t *phase_begin(describer_t *d, char const *name, size_t layer) {
    for (size_t t = 0; t < d->threads; ++t) d->loads[t] = 0;
    uform_text_phase_t *phase = d->count < d->capacity ? &d->phases[d->count] : NULL;
    if (phase) *phase = (uform_text_phase_t){.name = name, .layer = layer};
    ++d->count;
    return phase;
}

/** One task of `work`, to the first free thread (the counter's order). */
static void phase_task(describer_t *d, uform_text_phase_t *phase, double work) {
    if (!phase) return;
    size_t first = 0;
    for (size_t t = 1; t < d->threads; ++t)
        if (d->loads[t] < d->loads[first]) first = t;
    d->loads[first] += work;
    if (d->loads[first] > phase->makespan) phase->makespan = d->loads[first];
    if (!phase->tasks || work < phase->smallest) phase->smallest = work;
    if (work > phase->largest) phase->largest = work;
    phase->total += work, ++phase->tasks;
}

static void describe_rows(describer_t *d, char const *name, size_t layer, size_t rows, size_t cols) {
    uform_text_phase_t *phase = phase_begin(d, name, layer);
    size_t tasks = uform_text_row_tasks(rows, d->threads);
    for (size_t t = 0; t < tasks; ++t) {
        size_t first, count;
        uform_text_split(rows, tasks, t, &first, &count);
        phase_task(d, phase, (double)(count * cols));
    }
}

static void describe_gemm(describer_t *d, uform_gemm_t const *gemm, uform_dtype_t dtype, char const *name, size_t layer,
                          size_t m, size_t k, size_t const *widths, size_t products) {
    uform_text_phase_t *phase = phase_begin(d, name, layer);
    uform_text_gemm_plan_t plan = uform_text_gemm_plan(gemm, d->threads, dtype, m, widths, products);
    for (size_t task = 0; task < plan.tiles_m * plan.tiles_n; ++task) {
        size_t r0, rows, u0, units, cols = 0;
        uform_text_split(m, plan.tiles_m, task / plan.tiles_n, &r0, &rows);
        uform_text_split(plan.units, plan.tiles_n, task % plan.tiles_n, &u0, &units);
        for (size_t p = 0, first = 0; p < products; ++p) {
            size_t product_units = ceil_div(widths[p], UFORM_TEXT_COLUMN_UNIT);
            size_t begin = u0 > first ? u0 : first, end = min_size(u0 + units, first + product_units);
            if (begin < end) cols += min_size(end * UFORM_TEXT_COLUMN_UNIT, first * UFORM_TEXT_COLUMN_UNIT + widths[p]) -
                                     begin * UFORM_TEXT_COLUMN_UNIT;
            first += product_units;
        }
        phase_task(d, phase, (double)rows * (double)cols * (double)k);
    }
}

/** Tasks of a phase with one task per item, each of `work`, as `next_task` over `items` deals them. */
static void describe_items(describer_t *d, char const *name, size_t layer, size_t items, double work) {
    uform_text_phase_t *phase = phase_begin(d, name, layer);
    for (size_t i = 0; i < items; ++i) phase_task(d, phase, work);
}

/** The last layer as text_forward.c's `forward_cls_tail` runs it: K and V over every token, then a row
 *  per text. */
static void describe_cls_tail(describer_t *d, uform_text_plan_shape_t const *shape, uform_gemm_t const *gemm, size_t l,
                              size_t tokens) {
    size_t hidden = shape->hidden, inter = shape->intermediate, texts = shape->texts, head = hidden / shape->heads;
    size_t kv[2] = {hidden, hidden};
    uform_dtype_t dtype = shape->weights_dtype;
    describe_gemm(d, gemm, dtype, "kv", l, tokens, hidden, kv, 2);
    describe_items(d, "first rows", l, texts, (double)hidden);
    describe_gemm(d, gemm, dtype, "q", l, texts, hidden, &hidden, 1);
    /* A task per (text, head): its first query row against the text's keys, then their values. */
    uform_text_phase_t *attention = phase_begin(d, "attention", l);
    for (size_t task = 0; task < texts * shape->heads; ++task)
        phase_task(d, attention, 2.0 * (double)shape->lengths[task / shape->heads] * (double)head);
    describe_items(d, "context rows", l, texts, (double)hidden);
    describe_gemm(d, gemm, dtype, "output", l, texts, hidden, &hidden, 1);
    describe_rows(d, "norm", l, texts, hidden);
    describe_gemm(d, gemm, dtype, "up", l, texts, hidden, &inter, 1);
    describe_gemm(d, gemm, dtype, "down", l, texts, inter, &hidden, 1);
    describe_rows(d, "norm", l, texts, hidden);
}

size_t uform_text_plan_describe(uform_text_plan_shape_t const *shape, uform_gemm_t const *gemm, size_t threads,
                                uform_text_phase_t *phases, size_t capacity) {
    if (threads == 0) threads = 1;
    describer_t d = {.phases = phases, .capacity = capacity, .threads = threads, .loads = calloc(threads, sizeof(double))};
    if (!d.loads) return 0;
    size_t hidden = shape->hidden, inter = shape->intermediate, head = hidden / shape->heads, texts = shape->texts;
    size_t tokens = 0, longest = 0;
    for (size_t i = 0; i < texts; ++i) {
        tokens += shape->lengths[i];
        longest = shape->lengths[i] > longest ? shape->lengths[i] : longest;
    }
    uform_dtype_t dtype = shape->weights_dtype;
    int fuse = uform_text_fuse_norms(gemm, threads, dtype, tokens, hidden, inter);
    size_t qkv[3] = {hidden, hidden, hidden};
    describe_rows(&d, "embeddings", SIZE_MAX, tokens, hidden);
    for (size_t l = 0; l < shape->layers; ++l) {
        if (shape->cls_tail && l + 1 == shape->layers) {
            describe_cls_tail(&d, shape, gemm, l, tokens);
            break;
        }
        describe_gemm(&d, gemm, dtype, "qkv", l, tokens, hidden, qkv, 3);
        uform_text_phase_t *phase = phase_begin(&d, "attention", l);
        size_t units = 0;
        for (size_t i = 0; i < texts; ++i) units += shape->heads * uform_text_attention_blocks(shape->lengths[i]);
        size_t tasks = uform_text_attention_tasks(texts * shape->heads, units, longest, threads, gemm->use_library);
        for (size_t task = 0; task < (tasks ? tasks : texts * shape->heads); ++task) {
            double work = 0;
            if (!tasks) work = (double)shape->lengths[task / shape->heads] * (double)shape->lengths[task / shape->heads];
            else {
                /* The task's blocks of query rows, each against its text's keys. */
                size_t first, count;
                uform_text_split(units, tasks, task, &first, &count);
                for (size_t i = 0, base = 0; i < texts; ++i) {
                    size_t length = shape->lengths[i], blocks = uform_text_attention_blocks(length);
                    for (size_t u = 0; u < shape->heads * blocks; ++u)
                        if (base + u >= first && base + u < first + count)
                            work += (double)length * (double)(u % blocks + 1 == blocks ? length - u % blocks * UFORM_TEXT_QUERY_BLOCK
                                                                                      : UFORM_TEXT_QUERY_BLOCK);
                    base += shape->heads * blocks;
                }
            }
            phase_task(&d, phase, 2.0 * work * (double)head);
        }
        describe_gemm(&d, gemm, dtype, "output", l, tokens, hidden, &hidden, 1);
        if (!fuse) describe_rows(&d, "norm", l, tokens, hidden);
        describe_gemm(&d, gemm, dtype, "up", l, tokens, hidden, &inter, 1);
        describe_gemm(&d, gemm, dtype, "down", l, tokens, inter, &hidden, 1);
        if (!fuse || l + 1 == shape->layers) describe_rows(&d, "norm", l, tokens, hidden);
    }
    if (!shape->cls_tail) {
        uform_text_phase_t *pooling = phase_begin(&d, "pooling", SIZE_MAX);
        for (size_t i = 0; i < texts; ++i) phase_task(&d, pooling, (double)(shape->lengths[i] * hidden));
    }
    if (shape->projection) describe_gemm(&d, gemm, dtype, "projection", SIZE_MAX, texts, hidden, &shape->projection, 1);
    size_t width = shape->projection ? shape->projection : hidden;
    uform_text_phase_t *output = phase_begin(&d, "output rows", SIZE_MAX);
    for (size_t i = 0; i < texts; ++i) phase_task(&d, output, (double)width);
    free(d.loads);
    return d.count;
}
