/**
 *  @file   image_vram.h
 *  @brief  VRAM-resident image towers: one weights copy per device (uploaded from the host tower that
 *          src/models/image_model.c read), and `uform_encode_images` on VRAM executors. Internal only.
 *
 *  The forward pass mirrors src/models/image_pass.c (the pre-norm ViT of the `uform` package's
 *  ImageEncoder) with the text towers' machinery (src/models/vram_tower.h): products through
 *  cuBLASLt with fused epilogues, LayerScale folded into the output and down projections at upload,
 *  the text towers' LayerNorm, GELU, attention, pooling and output kernels, and two kernels of its
 *  own (src/kernels/image_gpu.cuh). See image_vram_encode.c.
 */
#ifndef UFORM_MODELS_IMAGE_VRAM_H
#define UFORM_MODELS_IMAGE_VRAM_H

#include "models/image_tower.h"
#include "models/model.h"

/** @brief Uploads `model`'s host image tower (replica 0) to every device `vram` names (NULL derives
 *  one free device), into `model->vram`. UNSUPPORTED without a driver, device or cuBLASLt, or for a
 *  tower wider than 1024; INVALID_ARGUMENT for bad ordinals; OUT_OF_MEMORY. On failure nothing
 *  stays allocated. `uform_text_vram_free` and `uform_text_vram_copies` serve image towers too. */
uform_status_t uform_image_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram);

/** @brief The patch matrix's columns on the device: 3 p p rounded up to a multiple of 8. */
size_t uform_image_vram_depth(uform_image_config_t const *config);

/** @brief `uform_encode_images` for a VRAM model on a VRAM executor (the model and images already
 *  checked): decoding on the executor's decoder threads, then the devices. */
uform_status_t uform_image_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                       uform_image_t const *images, size_t count, uform_embeddings_t const *embeddings,
                                       uform_status_t *statuses, uform_outcome_t *outcome);

#endif // UFORM_MODELS_IMAGE_VRAM_H
