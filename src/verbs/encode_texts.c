/**
 *  @file   encode_texts.c
 *  @brief  `uform_encode_texts`: inputs checked, texts tokenised, one call submitted on the executor,
 *          the forward pass run per batch (src/models/text_forward.c).
 *
 *  A host call's tasks cannot fail (`uform_task_callback_t` returns nothing), and a deferred call's
 *  outcome is finished by the executor, so everything that can fail runs before the submission, on
 *  the submitting thread: argument and residency checks, tokenisation (invalid UTF-8 is a per-item
 *  status or the whole call's failure), every allocation. The call itself only computes. Tokenising
 *  on the submitting thread costs a few microseconds per text, under 2% of the encoding at the
 *  batch sizes measured in bench/RESULTS.md.
 */
#include "internal.h"
#include "models/model.h"
#include "models/text_forward.h"
#include "models/text_vram.h"

#include <stdio.h>  // `snprintf`
#include <stdlib.h> // `malloc`
#include <string.h> // `strlen`

/** Where the model's residency and the executor's kind meet, or why they do not. */
static uform_status_t check_residency(uform_executor_t executor, struct uform_model_s const *model) {
    uform_executor_description_t description;
    uform_status_t status = executor ? uform_check_forked(executor, "uform_encode_texts") : uform_status_ok_k;
    if (status != uform_status_ok_k) return status;
    status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return status;
    if (model->residency == uform_residency_vram_k) {
        if (description.kind == uform_executor_kind_ram_k || description.kind == uform_executor_kind_pool_k)
            return uform_fail(uform_status_residency_mismatch_k,
                              "uform_encode_texts: the model is VRAM-resident and the executor is a %s executor; "
                              "use a VRAM executor on the model's devices",
                              description.kind == uform_executor_kind_ram_k ? "RAM" : "pool");
        if (description.kind != uform_executor_kind_vram_k)
            return uform_fail(uform_status_unsupported_k,
                              "uform_encode_texts: the model is VRAM-resident and the NULL executor has no stream; "
                              "use a VRAM executor on the model's devices");
        return uform_status_ok_k;
    }
    if (description.kind == uform_executor_kind_vram_k)
        return uform_fail(uform_status_residency_mismatch_k,
                          "uform_encode_texts: the model is RAM-resident and the executor is a VRAM executor; "
                          "use a RAM, pool or NULL executor");
    return uform_status_ok_k;
}

static uform_status_t encode_texts(uform_executor_t executor, uform_model_t model, char const *const *texts,
                                   size_t const *lengths, size_t count, uform_embeddings_t const *embeddings,
                                   uform_status_t *statuses, uform_outcome_t *outcome) {
    if (!model) return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "uform_encode_texts: model is NULL"));
    if (model->modality != uform_modality_text_k || !model->text_replicas || !model->tokenizer)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_encode_texts: the model is an image model; open its text tower"));
    if (!texts && count)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_encode_texts: texts is NULL for %zu texts", count));
    /* The embeddings first: a count past the address space is refused before `texts` is walked. */
    uform_status_t status = check_residency(executor, model);
    if (status == uform_status_ok_k) status = uform_text_check_embeddings(model, embeddings, count);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    for (size_t i = 0; i < count; ++i)
        if (!texts[i] && (!lengths || lengths[i]))
            return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                            "uform_encode_texts: texts[%zu] is NULL", i));
    if (model->residency == uform_residency_vram_k)
        return uform_text_vram_encode(executor, model, texts, lengths, count, embeddings, statuses, outcome);

    /* Tokenise: ids packed, at most `context` per text. */
    size_t context = model->text_replicas[0].context;
    size_t capacity = (count < 64 ? count : 64) * context + context; /* grows as texts come */
    int32_t *ids = (int32_t *)malloc(capacity * sizeof(int32_t));
    size_t *offsets = (size_t *)malloc((count + 1) * sizeof(size_t));
    uform_status_t *items = statuses ? (uform_status_t *)malloc((count ? count : 1) * sizeof(uform_status_t)) : NULL;
    if (!ids || !offsets || (statuses && !items)) {
        free(ids), free(offsets), free(items);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k,
                                                        "uform_encode_texts: no memory for the tokens of %zu texts", count));
    }
    offsets[0] = 0;
    for (size_t i = 0; i < count; ++i) {
        if (offsets[i] + context > capacity) {
            int32_t *grown = (int32_t *)realloc(ids, capacity * 2 * sizeof(int32_t));
            if (!grown) {
                free(ids), free(offsets), free(items);
                return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k,
                                                                "uform_encode_texts: no memory for the tokens of %zu texts", count));
            }
            ids = grown, capacity *= 2;
        }
        char const *text = texts[i] ? texts[i] : "";
        size_t length = lengths ? lengths[i] : strlen(text), produced = 0;
        status = uform_tokenizer_encode(model->tokenizer, text, length, context, ids + offsets[i], context, &produced);
        if (status == uform_status_ok_k && produced > context) produced = context;
        if (status == uform_status_ok_k && produced == 0)
            status = uform_fail(uform_status_invalid_argument_k, "the tokenizer produced no tokens");
        if (status != uform_status_ok_k) {
            /* An invalid text is the item's own failure when statuses are given; anything else (and
             * every failure without statuses) fails the whole call, naming the text. */
            if (items && status == uform_status_invalid_argument_k) {
                items[i] = status;
                offsets[i + 1] = offsets[i];
                continue;
            }
            char message[512];
            snprintf(message, sizeof message, "%s", uform_error_message());
            free(ids), free(offsets), free(items);
            return uform_outcome_refuse(outcome, uform_fail(status, "uform_encode_texts: text %zu: %s", i, message));
        }
        if (items) items[i] = uform_status_ok_k;
        offsets[i + 1] = offsets[i] + produced;
    }

    status = uform_text_encode_ids(executor, model, ids, offsets, count, items, statuses, embeddings, outcome);
    free(ids), free(offsets), free(items);
    return status;
}

UFORM_API uform_status_t uform_encode_texts(uform_executor_t executor, uform_model_t model, char const *const *texts,
                                            size_t const *lengths, size_t count, uform_embeddings_t const *embeddings,
                                            uform_status_t *statuses, uform_outcome_t *outcome) {
    return uform_verb_refusal(outcome, encode_texts(executor, model, texts, lengths, count, embeddings, statuses, outcome),
                              "uform_encode_texts");
}
