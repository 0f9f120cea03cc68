/**
 *  @file   text_vram_encode.c
 *  @brief  `uform_encode_texts` on VRAM executors (text_vram.c describes it): the job (tokenising on the
 *          executor's threads, packing, sharing the texts over the devices by their SMs, the scratch plan),
 *          the device callback that enqueues each share's chunks, and gathering the rows in input order.
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memcpy`

/* ---- Encoding ---- */

static void job_free(vram_job_t *job) {
    if (!job) return;
    free(job->slots), free(job->produced), free(job->items), free(job->order), free(job->ids), free(job->positions);
    free(job->offsets), free(job->chunk_offsets), free(job->host_rows), free(job->shares);
    free(job);
}

static void tokenize_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    vram_job_t *job = (vram_job_t *)context;
    char const *text = job->texts[task] ? job->texts[task] : "";
    size_t length = job->lengths ? job->lengths[task] : strlen(text), produced = 0;
    uform_status_t status = uform_tokenizer_encode(job->model->tokenizer, text, length, job->context,
                                                   job->slots + task * job->context, job->context, &produced);
    if (status == uform_status_ok_k && produced > job->context) produced = job->context;
    if (status == uform_status_ok_k && produced == 0) status = uform_status_invalid_argument_k;
    job->produced[task] = status == uform_status_ok_k ? produced : 0;
    job->items[task] = status;
}

/** Bytes of one chunk's buffers for `tokens` tokens (and as many texts at most), activations of `element` bytes. */
static size_t chunk_bytes(void const *context, size_t tokens) {
    uform_text_tower_t const *tower = (uform_text_tower_t const *)context;
    size_t element = element_size(tower->weights_dtype);
    size_t hidden = tower->hidden, texts = tokens;
    size_t bytes = 0;
    bytes += align_up(tokens * 4, VRAM_ALIGN) * 2 + align_up((texts + 1) * 4, VRAM_ALIGN); /* ids, positions, offsets */
    bytes += align_up(tokens * hidden * element, VRAM_ALIGN) * 3;                         /* x, ctx, tmp */
    bytes += align_up(tokens * 3 * hidden * element, VRAM_ALIGN);                         /* qkv */
    bytes += align_up(tokens * tower->intermediate * element, VRAM_ALIGN);                 /* ffn */
    bytes += align_up(texts * hidden * element, VRAM_ALIGN);                              /* pooled */
    bytes += align_up(texts * tower->embedding_dimensions * element, VRAM_ALIGN);          /* projected */
    return bytes;
}

static vram_buffers_t buffers_at(vram_job_t const *job, vram_share_t const *share, CUdeviceptr base) {
    uform_text_tower_t const *tower = job->tower;
    size_t element = element_size(tower->weights_dtype), hidden = tower->hidden, tokens = share->chunk_tokens;
    vram_buffers_t b;
    CUdeviceptr at = base;
#define TAKE(field, bytes) (b.field = at, at += align_up((bytes), VRAM_ALIGN))
    TAKE(workspace, job->workspace);
    TAKE(out, (share->end - share->first) * job->row_bytes);
    TAKE(ids, tokens * 4);
    TAKE(positions, tokens * 4);
    TAKE(offsets, (tokens + 1) * 4);
    TAKE(x, tokens * hidden * element);
    TAKE(ctx, tokens * hidden * element);
    TAKE(tmp, tokens * hidden * element);
    TAKE(qkv, tokens * 3 * hidden * element);
    TAKE(ffn, tokens * tower->intermediate * element);
    TAKE(pooled, tokens * hidden * element);
    TAKE(projected, tokens * tower->embedding_dimensions * element);
#undef TAKE
    return b;
}

static uform_status_t gather(vram_job_t *job) {
    return vram_gather(job->vram, job->shares, job->shares_count, job->host_rows, job->row_bytes, job->order, job->encoded,
                       job->count, &job->out, job->items, job->statuses, "uform_encode_texts");
}

static uform_status_t device_part(void *context, uform_device_slot_t const *slot) {
    vram_job_t *job = (vram_job_t *)context;
    vram_share_t *share = &job->shares[slot->device_index];
    share->scratch = (CUdeviceptr)slot->scratch;
    share->stream = (CUstream)slot->stream;
    share->context = (CUcontext)slot->cu_context;
    share->out = buffers_at(job, share, share->scratch).out;
    if (share->end > share->first) {
        vram_buffers_t b = buffers_at(job, share, share->scratch);
        for (size_t e = share->first; e < share->end;) {
            size_t first = e, base = job->offsets[e];
            while (e < share->end && job->offsets[e + 1] - base <= share->chunk_tokens) ++e;
            /* Each chunk's offsets get their own stretch (texts + 1 entries), never reused within the job. */
            CHECK_STEP(text_vram_enqueue_chunk(job, share, &b, first, e, job->chunk_offsets + first + job->chunks++));
        }
    }
    if (slot->device_index + 1 < job->shares_count) return uform_status_ok_k;
    return gather(job);
}

static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor,
                               uform_executor_description_t const *executor_description, uform_outcome_t *outcome);

/** A job for `count` items on the executor's devices, or NULL with the status in `*status_out`. */
static vram_job_t *vram_job_new(uform_executor_t executor, struct uform_model_s const *model, size_t count,
                                uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                uform_executor_description_t *description, uform_status_t *status_out) {
    uform_text_vram_t *vram = (uform_text_vram_t *)model->vram;
    uform_status_t status = uform_executor_describe(executor, description);
    vram_job_t *job = NULL;
    if (status != uform_status_ok_k) goto failed;
    job = (vram_job_t *)calloc(1, sizeof *job);
    if (!job) {
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: out of memory");
        goto failed;
    }
    job->model = model, job->vram = vram, job->tower = &model->text_replicas[0];
    job->count = count, job->context = job->tower->context;
    job->out = *embeddings, job->statuses = statuses;
    job->dims = embeddings->dimensions ? embeddings->dimensions : job->tower->embedding_dimensions;
    job->row_bytes = job->dims * element_size(embeddings->dtype);
    status = vram_bind_shares(executor, model, &job->shares, &job->shares_count, "uform_encode_texts");
    if (status != uform_status_ok_k) goto failed;
    *status_out = uform_status_ok_k;
    return job;
failed:
    job_free(job);
    *status_out = status;
    return NULL;
}

uform_status_t uform_text_vram_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                          int32_t const *ids, size_t const *offsets, size_t count,
                                          uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    uform_executor_description_t description;
    uform_status_t status;
    vram_job_t *job = vram_job_new(executor, model, count, embeddings, NULL, &description, &status);
    if (!job) return uform_outcome_refuse(outcome, status);
    size_t longest = 1;
    for (size_t i = 0; i < count; ++i)
        if (offsets[i + 1] - offsets[i] > longest) longest = offsets[i + 1] - offsets[i];
    if (longest > job->context) {
        job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_encode_texts: a text of %zu ids; the model's context is %zu",
                                                        longest, job->tower->context));
    }
    job->slots = (int32_t *)malloc((count ? count : 1) * job->context * sizeof(int32_t));
    job->produced = (size_t *)calloc(count ? count : 1, sizeof(size_t));
    job->items = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    if (!job->slots || !job->produced || !job->items) {
        job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: out of memory"));
    }
    for (size_t i = 0; i < count; ++i) {
        size_t length = offsets[i + 1] - offsets[i];
        for (size_t t = 0; t < length; ++t) {
            int32_t id = ids[offsets[i] + t];
            if (id < 0 || (size_t)id >= job->tower->word_embeddings.rows) {
                job_free(job);
                return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                                "uform_encode_texts: text %zu: token %zu is id %d; the "
                                                                "vocabulary has %zu",
                                                                i, t, (int)id, job->tower->word_embeddings.rows));
            }
        }
        memcpy(job->slots + i * job->context, ids + offsets[i], length * sizeof(int32_t));
        job->produced[i] = length;
        job->items[i] = length ? uform_status_ok_k : uform_status_invalid_argument_k;
    }
    return vram_run(job, executor, &description, outcome);
}



uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome) {
    uform_executor_description_t description;
    uform_status_t status;
    vram_job_t *job = vram_job_new(executor, model, count, embeddings, statuses, &description, &status);
    if (!job) goto refused;
    job->texts = texts, job->lengths = lengths;
    /* 1. Tokenise on the decoder threads. */
    size_t slots = count * job->context;
    job->slots = (int32_t *)malloc((slots ? slots : 1) * sizeof(int32_t));
    job->produced = (size_t *)calloc(count ? count : 1, sizeof(size_t));
    job->items = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    if (!job->slots || !job->produced || !job->items) {
        job_free(job);
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: no memory for the tokens of %zu texts", count);
        goto refused;
    }
    if (count) {
        uform_call_t tokenise = {.residency = uform_residency_vram_k, .schedule = uform_schedule_dynamic_k,
                                 .tasks = count, .task = tokenize_task, .context = job};
        status = uform_executor_call(executor, &tokenise, NULL);
        if (status != uform_status_ok_k) {
            job_free(job);
            goto refused;
        }
    }
    for (size_t i = 0; i < count; ++i) {
        if (job->items[i] == uform_status_ok_k) continue;
        if (!statuses || job->items[i] != uform_status_invalid_argument_k) {
            /* Tokenise it again here for the message. */
            char const *text = texts[i] ? texts[i] : "";
            size_t length = lengths ? lengths[i] : strlen(text), produced = 0;
            uform_status_t again = uform_tokenizer_encode(model->tokenizer, text, length, job->context,
                                                          job->slots + i * job->context, job->context, &produced);
            char message[512];
            snprintf(message, sizeof message, "%s",
                     again == uform_status_ok_k ? "the tokenizer produced no tokens" : uform_error_message());
            uform_status_t failed = job->items[i];
            job_free(job);
            status = uform_fail(failed, "uform_encode_texts: text %zu: %s", i, message);
            goto refused;
        }
    }

    return vram_run(job, executor, &description, outcome);

refused:
    uform_outcome_refuse(outcome, status);
    return status;
}

/** Packs, plans and runs a job whose `slots`, `produced` and `items` are filled; frees it. */
static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor, uform_executor_description_t const *executor_description,
                               uform_outcome_t *outcome) {
    uform_status_t status = uform_status_ok_k;
    size_t count = job->count, members_count = job->shares_count;
    uform_executor_description_t description = *executor_description;
    /* 2. Pack the encoded texts, check positions. */
    uform_text_tower_t const *tower = job->tower;
    (void)executor;
    for (size_t i = 0; i < count; ++i)
        if (job->items[i] == uform_status_ok_k) {
            ++job->encoded, job->total += job->produced[i];
            if (job->produced[i] > job->longest) job->longest = job->produced[i];
        }
    job->order = (size_t *)malloc((job->encoded ? job->encoded : 1) * sizeof(size_t));
    job->offsets = (size_t *)malloc((job->encoded + 1) * sizeof(size_t));
    job->chunk_offsets = (int32_t *)malloc((2 * job->encoded + 2) * sizeof(int32_t));
    job->ids = (int32_t *)malloc((job->total ? job->total : 1) * sizeof(int32_t));
    job->positions = (int32_t *)malloc((job->total ? job->total : 1) * sizeof(int32_t));
    job->host_rows = (unsigned char *)malloc(job->encoded * job->row_bytes + 1);
    if (!job->order || !job->offsets || !job->chunk_offsets || !job->ids || !job->positions || !job->host_rows) {
        job_free(job);
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: no memory for %zu tokens", job->total);
        goto refused;
    }
    size_t first_position = tower->position_ids == uform_position_ids_roberta_k ? (size_t)tower->pad_id + 1 : 0;
    if (job->longest && first_position + job->longest > tower->position_embeddings.rows) {
        status = uform_fail(uform_status_invalid_argument_k,
                            "uform_encode_texts: a text of %zu tokens needs position %zu; the model has %zu", job->longest,
                            first_position + job->longest - 1, tower->position_embeddings.rows);
        job_free(job);
        goto refused;
    }
    job->offsets[0] = 0;
    for (size_t i = 0, e = 0; i < count; ++i) {
        if (job->items[i] != uform_status_ok_k) continue;
        size_t at = job->offsets[e], length = job->produced[i];
        memcpy(job->ids + at, job->slots + i * job->context, length * sizeof(int32_t));
        for (size_t t = 0; t < length; ++t) job->positions[at + t] = (int32_t)(first_position + t);
        job->order[e] = i;
        job->offsets[++e] = at + length;
    }

    /* 3. Shares per device (by SMs), chunks within the scratch each may hold. */
    job->workspace = 32u << 20;
    size_t limit = description.scratch_limit, scratch = 0;
    if (limit && limit < (256u << 20)) job->workspace = 1u << 20;
    char what[64];
    snprintf(what, sizeof what, "a text of %zu tokens", job->longest);
    status = vram_plan_shares(job->shares, members_count, job->encoded, job->offsets, job->longest, job->workspace,
                              job->row_bytes, limit, chunk_bytes, tower, "uform_encode_texts", what, &scratch);
    if (status != uform_status_ok_k) {
        job_free(job);
        goto refused;
    }

    /* 4. The device call; when it returns, the work ran (or failed) and the job is ours again. */
    uform_call_t call = {.residency = uform_residency_vram_k, .device = device_part, .scratch_bytes = scratch,
                         .context = job};
    if (!job->encoded) {
        job->shares_count = 0;
        gather(job);
        job_free(job);
        return uform_outcome_refuse(outcome, uform_status_ok_k);
    }
    status = uform_executor_call(executor, &call, outcome);
    job_free(job);
    return status;

refused:
    return uform_outcome_refuse(outcome, status);
}
