/**
 *  @file   text_vram.h
 *  @brief  VRAM-resident text towers: one weights copy per device (uploaded from the host tower that
 *          src/models/model.c read), and `uform_encode_texts` on VRAM executors. Internal only.
 *
 *  The forward pass mirrors src/models/text_forward.c (post-norm BERT over packed texts): the
 *  products run through cuBLASLt (src/cublaslt.h) with the bias, GELU and residual fused as
 *  epilogues, the rest through the engine's kernels (src/kernels/text_gpu.cuh). See text_vram.c.
 */
#ifndef UFORM_MODELS_TEXT_VRAM_H
#define UFORM_MODELS_TEXT_VRAM_H

#include "models/model.h"

#include <stdio.h> // `FILE`

/** @brief Uploads `model`'s host tower (replica 0) to every device `vram` names (NULL derives one
 *  free device), into `model->vram`. UNSUPPORTED without a driver, device or cuBLASLt, or for a
 *  tower wider than 1024; INVALID_ARGUMENT for bad ordinals; OUT_OF_MEMORY. On failure nothing
 *  stays allocated. */
uform_status_t uform_text_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram);

/** @brief The number of device copies (zero for RAM models). */
size_t uform_text_vram_copies(struct uform_model_s const *model);

/** @brief Releases every device allocation, module, cuBLASLt handle and context of `model->vram`. */
void uform_text_vram_free(struct uform_model_s *model);

/** @brief `uform_encode_texts` for a VRAM model on a VRAM executor (arguments already checked but
 *  for the executor's devices). */
uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome);

/** @brief The same from token ids (text `i` is `ids[offsets[i] .. offsets[i + 1])`), for benchmarks
 *  and tests: no tokenising, every text must be 1 to `context` ids of the vocabulary. */
uform_status_t uform_text_vram_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                          int32_t const *ids, size_t const *offsets, size_t count,
                                          uform_embeddings_t const *embeddings, uform_outcome_t *outcome);

/** @brief With UFORM_GPU_PROFILE=1 set, each step runs synchronised and timed (graphs off); this
 *  prints the totals per step (kernel or product) so far. Nothing without it. */
void uform_text_vram_profile_report(FILE *file);

#endif // UFORM_MODELS_TEXT_VRAM_H
