/**
 *  @file   encode_images.c
 *  @brief  `uform_encode_images`: arguments and residency checked on the submitting thread, then one
 *          call on the executor that decodes, preprocesses and encodes (src/models/image_forward.c), or
 *          for VRAM models the decoding and device calls of src/models/image_vram_encode.c.
 */
#include "internal.h"
#include "models/image_forward.h"
#include "models/image_vram.h"
#include "models/model.h"

static uform_status_t encode_images(uform_executor_t executor, uform_model_t model, uform_image_t const *images,
                                    size_t count, uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                    uform_outcome_t *outcome) {
    if (!model) return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "uform_encode_images: model is NULL"));
    if (model->modality != uform_modality_image_k || !model->image_replicas)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_encode_images: the model is a text model; open its image tower"));
    if (!images && count)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_encode_images: images is NULL for %zu images", count));
    /* The embeddings first: a count past the address space is refused before `images` is walked. */
    uform_image_config_t const *config = &model->image_replicas[0].config;
    uform_status_t checked = uform_embeddings_check("uform_encode_images: ", "images", config->embedding_dimensions,
                                                    config->sequence * config->dim, embeddings, count);
    if (checked != uform_status_ok_k) return uform_outcome_refuse(outcome, checked);
    for (size_t i = 0; i < count; ++i)
        if (!images[i].data && (images[i].size || images[i].width))
            return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                            "uform_encode_images: images[%zu].data is NULL", i));
    uform_executor_description_t description;
    uform_status_t status = executor ? uform_check_forked(executor, "uform_encode_images") : uform_status_ok_k;
    if (status == uform_status_ok_k) status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    if (model->residency == uform_residency_vram_k) {
        if (description.kind == uform_executor_kind_ram_k || description.kind == uform_executor_kind_pool_k)
            return uform_outcome_refuse(outcome, uform_fail(uform_status_residency_mismatch_k,
                                                            "uform_encode_images: the model is VRAM-resident and the executor "
                                                            "is a %s executor; use a VRAM executor on the model's devices",
                                                            description.kind == uform_executor_kind_ram_k ? "RAM" : "pool"));
        if (description.kind != uform_executor_kind_vram_k)
            return uform_outcome_refuse(outcome, uform_fail(uform_status_unsupported_k,
                                                            "uform_encode_images: the model is VRAM-resident and the NULL "
                                                            "executor has no stream; use a VRAM executor on the model's devices"));
        return uform_image_vram_encode(executor, model, images, count, embeddings, statuses, outcome);
    }
    if (description.kind == uform_executor_kind_vram_k)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_residency_mismatch_k,
                                                        "uform_encode_images: the model is RAM-resident and the executor is a VRAM "
                                                        "executor; use a RAM, pool or NULL executor"));
    return uform_image_encode(executor, model, images, count, embeddings, statuses, outcome);
}

UFORM_API uform_status_t uform_encode_images(uform_executor_t executor, uform_model_t model, uform_image_t const *images,
                                             size_t count, uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                             uform_outcome_t *outcome) {
    return uform_verb_refusal(outcome, encode_images(executor, model, images, count, embeddings, statuses, outcome),
                              "uform_encode_images");
}
