/**
 *  @file   text_plan.h
 *  @brief  How the text forward pass cuts each phase into tasks for a group of threads: the GEMM
 *          tiles, the row blocks of the embeddings and LayerNorms, the query blocks of attention,
 *          and whether the LayerNorms fuse into the products. Internal only.
 *
 *  Every phase's tasks are even partitions: task `t` of `tasks` over `units` covers units
 *  [t * units / tasks, (t + 1) * units / tasks), so two tasks of a phase differ by one unit at most
 *  (a unit: a row, 16 columns of a product, 16 query rows of one head). A group of one thread keeps
 *  large tasks (one GEMM per product over up to 512 rows); a group of several cuts every phase into
 *  at least as many tasks as it has threads wherever the phase has that many units, so one short
 *  text (batch 1) spreads over all of them: products by rows when rows are many, else by columns
 *  (and rows, for narrow products), attention by even ranges of 16-row blocks of
 *  the queries of every head, row phases by rows.
 *
 *  `uform_text_plan_describe` lists a whole pass's phases for a shape and thread count from the
 *  same functions the pass runs, so tests check the decomposition on any machine (no timing).
 */
#ifndef UFORM_MODELS_TEXT_PLAN_H
#define UFORM_MODELS_TEXT_PLAN_H

#include "kernels/kernels.h"

#include <stddef.h>

/** Columns per unit of a product's column split. */
#define UFORM_TEXT_COLUMN_UNIT 16u

/** @brief First unit and unit count of task `task` in an even partition of `units` into `tasks`. */
static inline void uform_text_split(size_t units, size_t tasks, size_t task, size_t *first, size_t *count) {
    size_t begin = task * units / tasks, end = (task + 1) * units / tasks;
    *first = begin, *count = end - begin;
}

/** @brief How one phase's product (or several side by side: Q, K and V) splits into tasks. The
 *  products' columns, concatenated, are `units` units of `UFORM_TEXT_COLUMN_UNIT` (each product's
 *  last unit may be narrower); a task is row tile `t / tiles_n` (of `tiles_m`, an even partition of
 *  the rows) and column range `t % tiles_n` (of `tiles_n`, an even partition of the units), and may
 *  span two products. `rows_max` and `cols_max` bound a task's piece of one product (scratch).
 *  `plain_weights`: the tasks read the weights as they lie, not packed (`uform_gemm_for_product`:
 *  the columns split, so each task multiplies by a slice of them). */
typedef struct uform_text_gemm_plan_t {
    size_t tiles_m, tiles_n, units;
    size_t rows_max, cols_max;
    int plain_weights;
} uform_text_gemm_plan_t;

/** @brief Whether a group of `threads` threads, where `uform_text_gemm_plan` would split the columns
 *  of products of `m` rows, splits rows alone instead, a tile per thread
 *  (`row_tiles_threads`, `uform_forward_row_tiles_threads`: 2 to 4 threads, 32 rows a tile at least, bf16 A, epilogues
 *  inside the library's kernel): then each task runs its products' bias, GELU and rounding inside
 *  oneDNN's kernel instead of copying a column tile out and running them after.
 *  MiniLM at 64 and 128 tokens and UForm3-small at 64, batch 1 on 2 AMX threads: 7-30% less per call
 *  (bench/RESULTS.md, third session of 2026-12-06). */
int uform_text_whole_rows(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m);

/** @brief The split of `m` rows times products of `widths[0..products)` columns for `threads` threads:
 *  row tiles of 128 to 512 rows while every thread keeps two tiles; else columns split so every
 *  thread keeps two tasks of at least 64 columns, else one task each of at least one unit, else rows
 *  split finer too. Weights that widen per tile (f16, bf16 without native bf16) keep all rows in one
 *  tile, so each weight tile widens once. */
uform_text_gemm_plan_t uform_text_gemm_plan(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m,
                                            size_t const *widths, size_t products);

/** @brief Tasks of a phase over `rows` rows (embeddings, LayerNorm): blocks of 16 rows for one thread;
 *  for several, blocks of at most 16 rows as many as the next multiple of the threads (at most `rows`). */
size_t uform_text_row_tasks(size_t rows, size_t threads);

/** Query rows per block of attention's split: the library's products give the same values for any
 *  16 rows or more of a sequence as for all of it (fewer take another kernel), so a block is 16 rows,
 *  the last of a sequence taking its remainder, and a sequence shorter than 16 is one block. */
#define UFORM_TEXT_QUERY_BLOCK 16u

/** @brief Blocks of query rows of one (text, head) of `length` tokens. */
size_t uform_text_attention_blocks(size_t length);

/** @brief Tasks of attention over `pairs` (text, head) pairs holding `units` blocks of query rows in all
 *  (`uform_text_attention_blocks` per pair), the longest text `longest` tokens: 0 for one task per
 *  pair, as for one thread, for SERIAL (`library` 0: the fused kernel takes whole sequences) or when
 *  pairs are plenty; else the blocks, in (text, head, block) order, split evenly into as many tasks
 *  as threads (or a multiple, so no task has more blocks than the longest text), a task running its
 *  consecutive blocks of one (text, head) as one piece. */
size_t uform_text_attention_tasks(size_t pairs, size_t units, size_t longest, size_t threads, int library);

/** @brief Whether a group of `threads` applies the LayerNorms inside the products that read them (two
 *  barriers fewer per layer) instead of in phases of their own: only for A in f32 (with bf16 A the
 *  phase normalises and rounds each row once), and while no product of the layer splits a row tile
 *  into more than two column tasks (each task normalises its whole rows). */
int uform_text_fuse_norms(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t tokens, size_t hidden,
                          size_t intermediate);

/** @brief One phase of a pass as `uform_text_plan_describe` lists it. */
typedef struct uform_text_phase_t {
    char const *name;   /**< "embeddings", "qkv", "attention", "output", "norm", "up", "down", ... */
    size_t layer;       /**< Its layer, or SIZE_MAX outside the layers. */
    size_t tasks;       /**< Tasks the group's threads take from the phase's counter. */
    double smallest;    /**< Work of the smallest and largest task (multiply-adds, or row elements). */
    double largest;
    double total;       /**< Work of every task together. */
    double makespan;    /**< The most work one thread gets when each task goes to the first free thread. */
} uform_text_phase_t;

/** @brief The shape of a tower and of one chunk of texts, for `uform_text_plan_describe`. */
typedef struct uform_text_plan_shape_t {
    size_t hidden, heads, intermediate, layers, projection; /**< `projection` 0: none. */
    uform_dtype_t weights_dtype;
    size_t texts;          /**< Texts in the chunk... */
    size_t const *lengths; /**< ...and their tokens. */
    int cls_tail;          /**< A CLS-pooled tower whose last layer runs for the first tokens alone
                                (text_forward.c's `forward_cls_tail`, on unless `UFORM_CLS_TAIL=0`). */
} uform_text_plan_shape_t;

/** @brief Lists the phases one chunk's pass runs on a group of `threads` threads with `gemm`, in order,
 *  into `phases` (up to `capacity`); returns how many there are (which may exceed `capacity`). Every
 *  layer is whole unless `cls_tail`: then the last layer lists as `forward_cls_tail` runs it, "kv"
 *  over every token, "first rows" (each text's first row gathered), "q", "attention" (one query row
 *  per (text, head)), "context rows", and "output", "norm", "up", "down", "norm" on a row per text,
 *  with no "pooling" phase after it. */
size_t uform_text_plan_describe(uform_text_plan_shape_t const *shape, uform_gemm_t const *gemm, size_t threads,
                                uform_text_phase_t *phases, size_t capacity);

#endif // UFORM_MODELS_TEXT_PLAN_H
