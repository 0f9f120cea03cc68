/**
 *  @file   image_forward.h
 *  @brief  Images to embeddings on host executors: decoding and preprocessing (src/image/) on the
 *          executor's threads, then the ViT tower, as one call. Internal only; `uform_encode_images`
 *          checks its arguments and calls this.
 */
#ifndef UFORM_MODELS_IMAGE_FORWARD_H
#define UFORM_MODELS_IMAGE_FORWARD_H

#include "models/image_tower.h"
#include "models/model.h"

/**
 *  @brief Encodes `count` images into `embeddings` as one call on `executor` (blocking when
 *  `outcome` is NULL, deferred otherwise).
 *
 *  With `statuses`, each image's decoding status lands there as the call decodes it, and an image
 *  that fails gets a zero row. Without `statuses`, the first image (lowest index) that fails fails
 *  the whole call, naming its index, and no row is written: a blocking call decodes on the
 *  executor's threads and reports after them; a deferred call decodes every image on the
 *  submitting thread first (its outcome could not carry the failure), then submits.
 */
uform_status_t uform_image_encode(uform_executor_t executor, struct uform_model_s const *model,
                                  uform_image_t const *images, size_t count, uform_embeddings_t const *embeddings,
                                  uform_status_t *statuses, uform_outcome_t *outcome);

#endif // UFORM_MODELS_IMAGE_FORWARD_H
