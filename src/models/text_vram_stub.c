/**
 *  @file   text_vram_stub.c
 *  @brief  VRAM text towers in a build without CUDA: every entry point is UNSUPPORTED (CMake compiles
 *          this file instead of text_vram.c, text_vram_launch.c and text_vram_encode.c).
 */
#include "models/text_vram.h"

#include "cuda_driver.h" // `UFORM_NO_GPU_REASON`
#include "internal.h"

#include <stdio.h>


uform_status_t uform_text_vram_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                          int32_t const *ids, size_t const *offsets, size_t count,
                                          uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    (void)executor, (void)model, (void)ids, (void)offsets, (void)count, (void)embeddings, (void)outcome;
    return uform_fail(uform_status_unsupported_k, "uform_encode_texts: a build without CUDA");
}

uform_status_t uform_text_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram) {
    (void)model, (void)vram;
    return uform_fail(uform_status_unsupported_k, "uform_model_open: VRAM residency needs a GPU: %s", UFORM_NO_GPU_REASON);
}

void uform_text_vram_free(struct uform_model_s *model) { (void)model; }

void uform_text_vram_profile_report(FILE *file) { (void)file; }

size_t uform_text_vram_copies(struct uform_model_s const *model) {
    (void)model;
    return 0;
}

uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome) {
    (void)executor, (void)model, (void)texts, (void)lengths, (void)count, (void)embeddings, (void)statuses;
    return uform_outcome_refuse(outcome, uform_fail(uform_status_unsupported_k, "uform_encode_texts: a build without CUDA"));
}
