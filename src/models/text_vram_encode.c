/**
 *  @file   text_vram_encode.c
 *  @brief  `uform_encode_texts` on VRAM executors (text_vram.c describes the pass): the job, tokenising
 *          on the executor's decoder threads in waves overlapped with the devices, packing, sharing each
 *          wave over the devices by their SMs, the scratch plan, and the rows in input order.
 *
 *  Waves (`wave_starts`: one below 512 texts, else an eighth and the rest; for unpinned jobs and
 *  given ids, one; and never more texts than a quarter of the scratch budget holds rows of, so a
 *  batch of many short texts is split rather than refused): call w is deferred; its host
 *  part tokenises wave w on the decoder threads while the devices still run wave w - 2 and w - 1,
 *  and its device part enqueues wave w - 1, tokenised by the call before, so every call's scratch is
 *  planned from lengths already known. Between calls the verb packs the wave just tokenised (ids and
 *  positions after the earlier waves', in the tower's pinned staging buffer, so uploads never wait for
 *  the stream), checks it (without `statuses` the first bad text fails the call, naming its index,
 *  and nothing is written) and plans it. The last device of each wave enqueues the copy of the
 *  wave's rows into pinned host rows; when every wave finished, the rows are written in input order
 *  (by the verb when blocking; for a deferred encode by `job_settle` as the caller's outcome, carried by
 *  the last call, finishes).
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"
#include "../../tools/strict_number.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memcpy`

/* ---- Encoding ---- */

static void job_free(vram_job_t *job) {
    if (!job) return;
    vram_pieces_free(job->vram->cuda, &job->pieces);
    if (job->pinned) vram_staging_give(job->vram, job->ids);
    else free(job->ids), free(job->positions), free(job->chunk_offsets), free(job->host_rows);
    free(job->slots), free(job->produced), free(job->items), free(job->order), free(job->offsets), free(job->shares);
    free(job->run.outcomes);
    free(job);
}

/** The rows in input order, and the features unless already written (from the staging buffer, on
 *  `executor`'s decoder threads when given; the rows no device wrote zeroed). */
static void write_rows(vram_job_t const *job, uform_executor_t executor, int features_written) {
    vram_write_rows(job->host_rows, job->row_bytes, job->order, job->encoded, job->count, &job->out, job->items,
                    job->statuses);
    if (job->out.features && !features_written)
        vram_write_features(executor, &job->out, job->features_stride, job->context, job->features_row_bytes,
                            job->order, job->offsets, job->encoded, job->count, job->staged_features);
}

/** A deferred encode's end (`uform_vram_settle_t`, its last call settling): the rows in input order
 *  when every wave succeeded, then the job freed. */
static void job_settle(void *context, uform_status_t *status, char *message, size_t message_bytes) {
    vram_job_t *job = (vram_job_t *)context;
    vram_waves_settled(&job->run, status, message, message_bytes);
    if (*status == uform_status_ok_k) write_rows(job, NULL, 0);
    job_free(job);
}

static void tokenize_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    vram_job_t *job = (vram_job_t *)context;
    task += job->wave_first;
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
    size_t element = uform_dtype_bytes(tower->weights_dtype);
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
    size_t element = uform_dtype_bytes(tower->weights_dtype), hidden = tower->hidden, tokens = share->chunk_tokens;
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

/** One wave's device part: its share's chunks, then (after the last device) the copies of the wave's
 *  rows back, asynchronous when the rows are pinned. Shares hold encoded indices of the whole job. */
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
    return vram_copy_rows(job->vram, job->shares, job->shares_count, job->host_rows, job->row_bytes, !job->pinned,
                          "uform_encode_texts");
}

static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor,
                               uform_executor_description_t const *description, int tokenise, uform_outcome_t *outcome);

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
    /* Features are every token's last hidden state: no CLS tail. */
    job->cls_tail = !embeddings->features &&
                    uform_forward_cls_tail(job->tower->pooling == uform_pooling_cls_k, job->tower->layers_count);
    job->features_row_bytes = job->tower->hidden * uform_dtype_bytes(embeddings->dtype);
    job->features_stride = uform_features_stride(embeddings, job->tower->context * job->tower->hidden);
    job->count = count, job->context = job->tower->context;
    job->out = *embeddings, job->statuses = statuses;
    job->dims = embeddings->dimensions ? embeddings->dimensions : job->tower->embedding_dimensions;
    job->row_bytes = job->dims * uform_dtype_bytes(embeddings->dtype);
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
    return vram_run(job, executor, &description, 0, outcome);
}

uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome) {
    uform_executor_description_t description;
    uform_status_t status;
    vram_job_t *job = vram_job_new(executor, model, count, embeddings, statuses, &description, &status);
    if (!job) return uform_outcome_refuse(outcome, status);
    job->texts = texts, job->lengths = lengths;
    size_t slots = count * job->context;
    job->slots = (int32_t *)malloc((slots ? slots : 1) * sizeof(int32_t));
    job->produced = (size_t *)calloc(count ? count : 1, sizeof(size_t));
    job->items = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    if (!job->slots || !job->produced || !job->items) {
        job_free(job);
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: no memory for the tokens of %zu texts", count);
        return uform_outcome_refuse(outcome, status);
    }
    return vram_run(job, executor, &description, 1, outcome);
}

/** Where the texts' waves start: `starts[0..waves]` (0 first, `count` last); returns `waves`. One wave
 *  below 512 texts; else two, the first an eighth of the batch: a device runs a text several times
 *  longer than a thread tokenises it, so tokenising the other seven eighths takes about as long as
 *  the device takes for the first eighth, and the second wave runs as one large batch (four equal
 *  waves measured slower than one on MiniLM at 1,024 texts: smaller products). UFORM_GPU_TEXT_WAVE=N
 *  sets equal waves of N texts (0: one wave). */
static size_t wave_starts(size_t count, size_t cap, int overlapped, size_t starts[3], size_t **many) {
    starts[0] = 0, starts[1] = count, starts[2] = count;
    *many = NULL;
    size_t value = 0;
    if (overlapped && strict_count(getenv("UFORM_GPU_TEXT_WAVE"), 0, SIZE_MAX, false, &value)) {
        if (!value || value > cap) value = cap;
    } else if (overlapped && count >= 512 && (count + 7) / 8 <= cap && count - (count + 7) / 8 <= cap) {
        starts[1] = (count + 7) / 8;
        return 2;
    } else value = cap;
    size_t waves = value < count ? (count + value - 1) / value : 1;
    if (waves > 1) *many = (size_t *)malloc((waves + 1) * sizeof(size_t));
    if (!*many) return 1;
    for (size_t w = 0; w <= waves; ++w) (*many)[w] = w * value < count ? w * value : count;
    return waves;
}

/** Packs the inputs [first, end) just tokenised after the earlier waves' (ids, positions, offsets,
 *  order), checks them, and splits them over the devices within `limit` into `*scratch` (0 when the
 *  wave has no encoded text). Shares hold encoded indices of the whole job. */
static uform_status_t pack_wave(vram_job_t *job, size_t first, size_t end, size_t limit, size_t *scratch) {
    uform_text_tower_t const *tower = job->tower;
    size_t first_position = tower->position_ids == uform_position_ids_roberta_k ? (size_t)tower->pad_id + 1 : 0;
    job->wave_base = job->encoded;
    *scratch = 0;
    size_t longest = 0;
    for (size_t i = first; i < end; ++i) {
        if (job->items[i] != uform_status_ok_k) {
            /* Ids given (no texts): an empty text gets a zero row, as with statuses. */
            if (!job->texts || (job->statuses && job->items[i] == uform_status_invalid_argument_k)) continue;
            /* Tokenise it again, into its own slot, for the message. */
            char const *text = job->texts[i] ? job->texts[i] : "";
            size_t length = job->lengths ? job->lengths[i] : strlen(text), produced = 0;
            uform_status_t again = uform_tokenizer_encode(job->model->tokenizer, text, length, job->context,
                                                          job->slots + i * job->context, job->context, &produced);
            char message[512];
            snprintf(message, sizeof message, "%s",
                     again == uform_status_ok_k ? "the tokenizer produced no tokens" : uform_error_message());
            return uform_fail(job->items[i], "uform_encode_texts: text %zu: %s", i, message);
        }
        size_t at = job->offsets[job->encoded], length = job->produced[i];
        memcpy(job->ids + at, job->slots + i * job->context, length * sizeof(int32_t));
        size_t counted = 0;
        for (size_t t = 0; t < length; ++t) {
            job->positions[at + t] = (int32_t)uform_text_position(tower->position_ids, tower->pad_id, job->ids[at + t], t, counted);
            counted += job->ids[at + t] != tower->pad_id;
        }
        job->order[job->encoded] = i;
        job->offsets[++job->encoded] = at + length;
        job->total += length;
        if (length > longest) longest = length;
    }
    if (longest && first_position + longest > tower->position_embeddings.rows)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_encode_texts: a text of %zu tokens needs position %zu; the model has %zu", longest,
                          first_position + longest - 1, tower->position_embeddings.rows);
    if (longest > job->longest) job->longest = longest;
    size_t encoded = job->encoded - job->wave_base;
    if (!encoded) return uform_status_ok_k;
    char what[64];
    snprintf(what, sizeof what, "a text of %zu tokens", longest);
    uform_status_t status = vram_plan_shares(job->shares, job->shares_count, encoded, job->offsets + job->wave_base,
                                             longest, job->workspace, job->row_bytes, limit, chunk_bytes, tower,
                                             "uform_encode_texts", what, scratch);
    for (size_t d = 0; d < job->shares_count; ++d) job->shares[d].first += job->wave_base, job->shares[d].end += job->wave_base;
    return status;
}

/** Runs a job whose `slots`, `produced` and `items` are allocated (and filled unless `tokenise`) in
 *  waves (see the file comment); frees it. */
static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor, uform_executor_description_t const *description,
                               int tokenise, uform_outcome_t *outcome) {
    size_t count = job->count;
    if (!count) {
        job_free(job);
        return uform_outcome_refuse(outcome, uform_status_ok_k);
    }
    /* Pinned: [ids][positions][chunk offsets][rows][features], so uploads and copies back never wait
     * for the stream. */
    size_t ids_bytes = align_up(count * job->context * sizeof(int32_t), 64);
    size_t chunk_offsets_bytes = align_up((2 * count + 2) * sizeof(int32_t), 64), rows_bytes = count * job->row_bytes + 1;
    size_t features_bytes = job->out.features ? count * job->context * job->features_row_bytes : 0;
    features_bytes = vram_staged_features_bytes(features_bytes);
    size_t before_features = 2 * ids_bytes + chunk_offsets_bytes + align_up(rows_bytes, 64);
    unsigned char *staging = (unsigned char *)vram_staging_take(job->vram, before_features + features_bytes);
    if (staging) {
        job->pinned = 1;
        job->ids = (int32_t *)staging, job->positions = (int32_t *)(staging + ids_bytes);
        job->chunk_offsets = (int32_t *)(staging + 2 * ids_bytes);
        job->host_rows = staging + 2 * ids_bytes + chunk_offsets_bytes;
        if (features_bytes) job->staged_features = staging + before_features;
        job->piecewise = !outcome && features_bytes && vram_features_piecewise(features_bytes);
    } else {
        job->ids = (int32_t *)malloc(ids_bytes), job->positions = (int32_t *)malloc(ids_bytes);
        job->chunk_offsets = (int32_t *)malloc(chunk_offsets_bytes), job->host_rows = (unsigned char *)malloc(rows_bytes);
    }
    job->order = (size_t *)malloc(count * sizeof(size_t));
    job->offsets = (size_t *)malloc((count + 1) * sizeof(size_t));
    /* A wave's rows wait on the devices (in their scratch) until its copy back: at most a quarter of
     * the scratch budget's worth of texts per wave, so a large batch of short texts is split to fit
     * rather than refused (LIMIT_EXCEEDED is for a text that cannot fit alone). */
    size_t const budget = description->scratch_limit ? description->scratch_limit : VRAM_DEFAULT_BUDGET;
    size_t rows_cap = budget / 4 / (job->row_bytes ? job->row_bytes : 1);
    if (rows_cap < 1) rows_cap = 1;
    size_t fixed[3] = {0, count, count}, *listed = NULL;
    size_t waves = wave_starts(count, rows_cap, tokenise && job->pinned, fixed, &listed);
    size_t const *starts = listed ? listed : fixed;
    job->run = (vram_waves_t){.outcomes = (uform_outcome_t *)calloc(waves + 1, sizeof(uform_outcome_t)),
                              .failure = {.status = uform_status_ok_k}};
    if (!job->ids || !job->positions || !job->chunk_offsets || !job->host_rows || !job->order || !job->offsets ||
        !job->run.outcomes) {
        free(listed);
        job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k,
                                                        "uform_encode_texts: no memory for the tokens of %zu texts", count));
    }
    job->offsets[0] = 0;
    job->workspace = 32u << 20;
    size_t limit = description->scratch_limit;
    if (limit && limit < (256u << 20)) job->workspace = 1u << 20;

    /* Call w tokenises wave w (its host part) and runs wave w - 1 (its device part). A deferred
     * encode's last call carries the caller's outcome and `job_settle`, which writes the rows and frees
     * the job when it finishes: then the verb returns once everything is enqueued. */
    for (size_t w = 0; w <= waves && job->run.failure.status == uform_status_ok_k; ++w) {
        size_t scratch = 0;
        if (w > 0) {
            uform_status_t packed = pack_wave(job, starts[w - 1], starts[w], limit, &scratch);
            if (packed != uform_status_ok_k) {
                uform_failure_save(&job->run.failure, packed);
                break;
            }
        }
        int tokenising = tokenise && w < waves;
        if (tokenising) job->wave_first = starts[w], job->wave_end = starts[w + 1];
        if (!tokenising && !scratch) continue;
        uform_call_t call = {.residency = uform_residency_vram_k, .schedule = uform_schedule_dynamic_k,
                             .tasks = tokenising ? job->wave_end - job->wave_first : 0,
                             .task = tokenising ? tokenize_task : NULL, .device = scratch ? device_part : NULL,
                             .scratch_bytes = scratch, .context = job};
        if (outcome && w == waves) {
            if (vram_waves_submit_last(&job->run, executor, &call, outcome, job_settle, job)) {
                free(listed);
                return uform_status_ok_k; /* the job is the settle's now, maybe freed already */
            }
        } else (void)vram_waves_submit(&job->run, executor, &call, outcome != NULL);
    }
    /* A blocking call's staged features go out piece by piece while the later pieces still cross. */
    int features_written = 0;
    if (job->piecewise && job->run.failure.status == uform_status_ok_k)
        features_written = vram_write_features_landed(job->vram->cuda, executor, &job->out, job->features_stride,
                                                      job->context, job->features_row_bytes, job->order, job->offsets,
                                                      job->encoded, job->count, job->staged_features, &job->pieces);
    uform_status_t status = vram_waves_finish(&job->run); /* every submitted wave finishes before the job is freed */
    free(listed);
    if (status == uform_status_ok_k) write_rows(job, executor, features_written);
    job_free(job);
    return uform_outcome_refuse(outcome, status);
}
