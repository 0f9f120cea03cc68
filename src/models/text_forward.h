/**
 *  @file   text_forward.h
 *  @brief  The forward pass of text towers on host executors: token ids in, embeddings out, as one
 *          call on the executor. Internal only; `uform_encode_texts` tokenises, then calls this.
 */
#ifndef UFORM_MODELS_TEXT_FORWARD_H
#define UFORM_MODELS_TEXT_FORWARD_H

#include "models/model.h"

/**
 *  @brief Encodes `count` token sequences, packed: text `i` is `ids[offsets[i] .. offsets[i + 1])`,
 *  specials included, at most the tower's context long. `item_statuses` (may be NULL: all OK) marks
 *  texts that get a zero row instead (any status but OK); the call copies it into `statuses` (may be
 *  NULL) as it starts, so a deferred call writes its per-item statuses while it runs, not before. Everything that can fail is checked and allocated before the call is
 *  submitted: the ids are copied, so the caller may free them at once; `embeddings` (the struct,
 *  not its rows) too. Blocking when `outcome` is NULL, deferred otherwise, exactly as
 *  `uform_executor_call` (CONTENDED, DEFERRED_FULL, FORKED, RESIDENCY_MISMATCH).
 *
 *  The call runs with the threads schedule, its threads split into groups (`uform_batch_groups`):
 *  each group encodes its own texts (dealt longest first) with its own activations, every thread of
 *  a group walking the same phases (embeddings, then per layer the Q/K/V products, attention, the
 *  output product with the residual, LayerNorm, the MLP products, LayerNorm; pooling, projection,
 *  output), meeting at the group's barrier after each, taking the phase's tasks from the group's
 *  counter. text_plan.h cuts each phase into tasks: for a group of several threads, at least one per
 *  thread wherever the phase has that many units, so batch 1 spreads over every thread; a group
 *  whose products keep whole rows per task applies the LayerNorms inside the products that read them
 *  instead of in phases of their own. One thread per group (no barrier) for batches of about as many
 *  texts as threads or more, all threads in one group for batch 1. Texts are packed without padding,
 *  so no text's result depends on the others in its batch but through the rounding of the products.
 *  The pass is text_submit.c (checks, buffers, submission), text_forward.c (the walk), text_plan.c.
 */
uform_status_t uform_text_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                     int32_t const *ids, size_t const *offsets, size_t count,
                                     uform_status_t const *item_statuses, uform_status_t *statuses,
                                     uform_embeddings_t const *embeddings, uform_outcome_t *outcome);

/** @brief Checks an embeddings target against a model: dtype, dimensions, stride, data. */
uform_status_t uform_text_check_embeddings(struct uform_model_s const *model, uform_embeddings_t const *embeddings,
                                           size_t count);

#endif // UFORM_MODELS_TEXT_FORWARD_H
