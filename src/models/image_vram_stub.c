/**
 *  @file   image_vram_stub.c
 *  @brief  VRAM image towers in a build without CUDA: every entry point is UNSUPPORTED (CMake compiles
 *          this file instead of image_vram.c and image_vram_encode.c).
 */
#include "models/image_vram.h"

#include "cuda_driver.h" // `UFORM_NO_GPU_REASON`
#include "internal.h"

uform_status_t uform_image_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram) {
    (void)model, (void)vram;
    return uform_fail(uform_status_unsupported_k, "uform_model_open: VRAM residency needs a GPU: %s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_image_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                       uform_image_t const *images, size_t count, uform_embeddings_t const *embeddings,
                                       uform_status_t *statuses, uform_outcome_t *outcome) {
    (void)executor, (void)model, (void)images, (void)count, (void)embeddings, (void)statuses;
    return uform_outcome_refuse(outcome, uform_fail(uform_status_unsupported_k, "uform_encode_images: a build without CUDA"));
}
