/**
 *  @file   text_submit.c
 *  @brief  Submitting the text forward pass: `uform_text_encode_ids` checks the call, copies and
 *          checks the ids, splits the threads into groups and the texts into chunks, takes every
 *          buffer the call needs, then submits the job (text_job.h) that text_forward.c walks.
 */
#define _GNU_SOURCE
#include "models/text_job.h"

#include <stdlib.h> // `calloc`
#include <string.h> // `memset`

/** The replica a thread on `node` reads: the one on its node, else replica 0. */
static uform_text_tower_t const *replica_on(struct uform_model_s const *model, int32_t node) {
    for (size_t r = 0; r < model->replicas_count; ++r)
        if (model->replica_nodes && model->replica_nodes[r] == node) return &model->text_replicas[r];
    return &model->text_replicas[0];
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

/** Copies text `i` of the caller's (`length` tokens) into the job's packed ids and positions as its
 *  encoded text `e`, after the ones before it. */
static void pack_text(forward_job_t *job, uform_text_tower_t const *tower0, int32_t const *ids, size_t const *offsets,
                      size_t i, size_t length, size_t e) {
    size_t first = job->offsets[e], counted = 0;
    for (size_t t = 0; t < length; ++t) {
        int32_t const id = ids[offsets[i] + t];
        job->ids[first + t] = id;
        job->positions[first + t] = (int32_t)uform_text_position(tower0->position_ids, tower0->pad_id, id, t, counted);
        counted += id != tower0->pad_id;
    }
    job->order[e] = i;
    job->offsets[e + 1] = first + length;
}

/** Cuts packed texts [first, end) into chunks of whole texts of at most `limit` tokens (a longer
 *  text alone), raising `*tokens_max` and `*texts_max` to the largest chunk's. */
static void cut_chunks(forward_job_t *job, size_t first, size_t end, size_t limit, size_t *tokens_max, size_t *texts_max) {
    for (size_t f = first; f < end;) {
        forward_chunk_t *chunk = &job->chunks[job->chunks_count++];
        *chunk = (forward_chunk_t){.first_text = f, .first_token = job->offsets[f]};
        while (f < end && job->offsets[f + 1] - chunk->first_token <= limit) ++f;
        chunk->end_text = f, chunk->tokens = job->offsets[f] - chunk->first_token;
        for (size_t i = chunk->first_text; i < f; ++i)
            if (job->offsets[i + 1] - job->offsets[i] > chunk->longest) chunk->longest = job->offsets[i + 1] - job->offsets[i];
        if (chunk->tokens > *tokens_max) *tokens_max = chunk->tokens;
        if (f - chunk->first_text > *texts_max) *texts_max = f - chunk->first_text;
    }
}

/** The tokens of the busiest of `threads` threads taking, in turn, the chunks `cut_chunks` would cut
 *  from packed texts [0, end) at `limit`; `sizes` holds `end` entries. */
static size_t chunks_busiest(size_t const *offsets, size_t end, size_t limit, size_t threads, size_t *sizes) {
    size_t chunks = 0, busiest = 0;
    for (size_t f = 0; f < end;) {
        size_t first = offsets[f];
        while (f < end && offsets[f + 1] - first <= limit) ++f;
        sizes[chunks++] = offsets[f] - first;
    }
    for (size_t t = 0; t < threads && t < chunks; ++t) {
        size_t load = 0;
        for (size_t c = t; c < chunks; c += threads) load += sizes[c];
        busiest = load > busiest ? load : busiest;
    }
    return busiest;
}

/** Of `limit` and the limits that cut about k chunks per thread (k = 2, 3, ...: never under
 *  `least`), the one whose busiest thread ends soonest (ties: the larger). 50 texts of 128 tokens on
 *  2 threads cut at 1,600 tokens (12 texts) leave one thread 26 texts and the other 24; at 640, 25 each. */
static size_t even_limit(size_t const *offsets, size_t end, size_t threads, size_t limit, size_t least) {
    size_t *sizes = (size_t *)malloc((end ? end : 1) * sizeof(size_t));
    if (!sizes) return limit;
    size_t total = offsets[end], best = limit, best_busiest = chunks_busiest(offsets, end, limit, threads, sizes);
    for (size_t k = 2; k <= 64; ++k) {
        size_t candidate = ceil_div(total, k * threads);
        if (candidate < least) break;
        if (candidate >= limit) continue;
        size_t busiest = chunks_busiest(offsets, end, candidate, threads, sizes);
        if (busiest < best_busiest) best = candidate, best_busiest = busiest;
    }
    free(sizes);
    return best;
}

uform_status_t uform_text_check_embeddings(struct uform_model_s const *model, uform_embeddings_t const *embeddings,
                                           size_t count) {
    uform_text_tower_t const *tower = &model->text_replicas[0];
    return uform_embeddings_check("uform_encode_texts: ", "texts", tower->embedding_dimensions,
                                  tower->context * tower->hidden, embeddings, count);
}

uform_status_t uform_text_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                     int32_t const *ids, size_t const *offsets, size_t count,
                                     uform_status_t const *item_statuses, uform_status_t *statuses,
                                     uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    uform_status_t status = uform_text_check_embeddings(model, embeddings, count);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    uform_executor_description_t description;
    status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    if (description.kind == uform_executor_kind_vram_k)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_residency_mismatch_k,
                                          "the model is RAM-resident and the executor is a VRAM executor; "
                                          "encode on a RAM, pool or NULL executor"));
    size_t threads = description.threads_count ? description.threads_count : 1;
    uform_cpu_class_t cpu_class = description.cpu_class;
    if (cpu_class == uform_cpu_class_unknown_k && (status = uform_cpu_detect(&cpu_class, NULL)) != uform_status_ok_k)
        return uform_outcome_refuse(outcome, status);

    /* Every node the executor's threads run on must carry a replica. */
    if ((status = uform_model_check_replicas("", model, executor, &description)) != uform_status_ok_k)
        return uform_outcome_refuse(outcome, status);

    uform_text_tower_t const *tower0 = replica_on(model, -1);
    forward_job_t *job = (forward_job_t *)calloc(1, sizeof *job);
    if (!job) return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    job->model = model;
    job->out = *embeddings;
    job->out_dimensions = embeddings->dimensions ? embeddings->dimensions : tower0->embedding_dimensions;
    job->out_stride = embeddings->stride ? embeddings->stride : job->out_dimensions * uform_dtype_bytes(embeddings->dtype);
    job->gemm = uform_gemm_for(cpu_class);
    job->kernels = job->gemm.kernels;
    job->attention16 = tower0->weights_dtype == uform_dtype_bf16_k ? uform_attention_bf16_for_gemm(&job->gemm, cpu_class) : NULL;
    job->features_rows = tower0->context;
    job->features_stride = uform_features_stride(embeddings, tower0->context * tower0->hidden);
    /* Features are every token's last hidden state: no CLS tail. */
    job->cls_tail = !embeddings->features &&
                    uform_forward_cls_tail(tower0->pooling == uform_pooling_cls_k, tower0->layers_count);
    job->threads = threads;
    job->count = count;

    /* Texts to encode, their ids copied and checked, their positions. */
    size_t encoded = 0, total = 0, longest = 0;
    for (size_t i = 0; i < count; ++i) {
        if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
        size_t length = offsets[i + 1] - offsets[i];
        if (length == 0 || length > tower0->context) {
            uform_text_job_free(job);
            return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                              "text %zu has %zu tokens; expected 1 to %zu (the model's context)", i,
                                              length, tower0->context));
        }
        ++encoded, total += length, longest = length > longest ? length : longest;
    }
    job->encoded = encoded;
    job->order = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    job->offsets = (size_t *)malloc((encoded + 1) * sizeof(size_t));
    job->ids = (int32_t *)malloc((total ? total : 1) * sizeof(int32_t));
    job->positions = (int32_t *)malloc((total ? total : 1) * sizeof(int32_t));
    int skips = 0;
    for (size_t i = 0; item_statuses && i < count; ++i) skips |= item_statuses[i] != uform_status_ok_k;
    if (skips) job->skipped = (unsigned char *)malloc(count);
    if (item_statuses && count) job->item_statuses = (uform_status_t *)malloc(count * sizeof(uform_status_t));
    job->statuses = statuses;
    if (!job->order || !job->offsets || !job->ids || !job->positions || (skips && !job->skipped) ||
        (item_statuses && count && !job->item_statuses)) {
        uform_text_job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for %zu tokens", total));
    }
    if (job->skipped)
        for (size_t i = 0; i < count; ++i) job->skipped[i] = item_statuses[i] != uform_status_ok_k;
    if (job->item_statuses) memcpy(job->item_statuses, item_statuses, count * sizeof(uform_status_t));
    size_t max_position = tower0->position_embeddings.rows;
    /* Every id and position checked in the texts' order, so the first bad one is named. */
    for (size_t i = 0; i < count; ++i) {
        if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
        size_t length = offsets[i + 1] - offsets[i], counted = 0;
        for (size_t t = 0; t < length; ++t) {
            int32_t id = ids[offsets[i] + t];
            size_t position = uform_text_position(tower0->position_ids, tower0->pad_id, id, t, counted);
            counted += id != tower0->pad_id;
            if (id < 0 || (size_t)id >= tower0->word_embeddings.rows || position >= max_position) {
                uform_text_job_free(job);
                return uform_outcome_refuse(outcome, id < 0 || (size_t)id >= tower0->word_embeddings.rows
                                           ? uform_fail(uform_status_invalid_argument_k,
                                                        "text %zu: token %zu is id %d; the model's vocabulary has %zu", i,
                                                        t, (int)id, tower0->word_embeddings.rows)
                                           : uform_fail(uform_status_invalid_argument_k,
                                                        "text %zu: token %zu needs position %zu; the model has %zu", i, t,
                                                        position, max_position));
            }
        }
    }

    /* Groups of threads, and the texts each group takes. */
    size_t hidden = tower0->hidden, head = hidden / tower0->heads;
    size_t *lengths = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *originals = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *group_of = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *sorted = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *group_threads = (size_t *)malloc(threads * sizeof(size_t));
    double *costs = (double *)malloc((encoded ? encoded : 1) * sizeof(double));
    job->chunks = (forward_chunk_t *)malloc((encoded ? encoded : 1) * sizeof(forward_chunk_t));
    job->per_thread = (forward_thread_t *)calloc(threads, sizeof(forward_thread_t));
    int lists_ok = lengths && originals && group_of && sorted && group_threads && costs && job->chunks && job->per_thread;
    if (lists_ok) {
        for (size_t i = 0, e = 0; i < count; ++i) {
            if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
            lengths[e] = offsets[i + 1] - offsets[i], originals[e] = i;
            /* Products grow with the tokens, attention with their square. */
            costs[e] = (double)lengths[e] * (double)(lengths[e] + 6 * hidden);
            ++e;
        }
        job->groups_count = uform_batch_groups(threads, encoded, costs, uform_forward_group_forced(), group_threads,
                                               group_of, sorted);
        job->groups = (forward_group_t *)aligned_alloc(64, round_up(job->groups_count * sizeof(forward_group_t), 64));
        lists_ok = job->groups != NULL;
    }
    if (!lists_ok) {
        free(lengths), free(originals), free(group_of), free(sorted), free(group_threads), free(costs);
        uform_text_job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    }
    memset(job->groups, 0, job->groups_count * sizeof(forward_group_t));
    job->longest = longest;

    /* Packed group after group, each group's texts in their order, cut into chunks of whole texts of
     * about the group's share of FORWARD_CHUNK_FLOATS / hidden tokens each. */
    job->offsets[0] = 0;
    size_t phases_per_chunk = FORWARD_PHASES_PER_CHUNK(tower0->layers_count);
    job->chunks_shared = job->groups_count == threads && encoded >= threads;
    if (job->chunks_shared) {
        /* One thread per group: the job's chunks, packed longest first, of at most a one-thread
         * group's chunk, but small enough for two per thread (down to 128 tokens), so that the
         * threads that finish first take the last ones. */
        size_t total = 0;
        for (size_t n = 0; n < encoded; ++n) total += lengths[n];
        size_t limit = FORWARD_CHUNK_FLOATS / hidden / threads, share = ceil_div(total, 2 * threads);
        if (limit < FORWARD_GROUP_TOKENS_MIN) limit = FORWARD_GROUP_TOKENS_MIN;
        if (share < 128) share = 128;
        if (share < limit) limit = share;
        if (limit < longest) limit = longest;
        for (size_t n = 0; n < encoded; ++n) pack_text(job, tower0, ids, offsets, originals[sorted[n]], lengths[sorted[n]], n);
        /* Chunks of fewer than 512 tokens multiply slower (the products' row tiles reach 512): the
         * even cut goes no lower than that, or than the limit it had. */
        size_t floor = limit < 512 ? limit : 512;
        limit = even_limit(job->offsets, encoded, threads, limit, longest > floor ? longest : floor);
        cut_chunks(job, 0, encoded, limit, &job->chunk_tokens_max, &job->chunk_texts_max);
        for (size_t g = 0; g < job->groups_count; ++g) {
            forward_group_t *group = &job->groups[g];
            group->first_thread = g, group->threads = 1;
            group->chunk_tokens_max = job->chunk_tokens_max, group->chunk_texts_max = job->chunk_texts_max;
            job->per_thread[g].group = g;
        }
    }
    for (size_t g = 0, e = 0, first_thread = 0; g < job->groups_count && !job->chunks_shared; ++g) {
        forward_group_t *group = &job->groups[g];
        group->first_thread = first_thread, group->threads = group_threads[g];
        first_thread += group_threads[g];
        size_t chunk_limit = FORWARD_CHUNK_FLOATS / hidden * group->threads / threads;
        if (chunk_limit < FORWARD_GROUP_TOKENS_MIN) chunk_limit = FORWARD_GROUP_TOKENS_MIN;
        if (chunk_limit < longest) chunk_limit = longest;
        size_t first_text = e;
        for (size_t n = 0; n < encoded; ++n)
            if (group_of[n] == g) pack_text(job, tower0, ids, offsets, originals[n], lengths[n], e), ++e;
        group->first_chunk = job->chunks_count;
        cut_chunks(job, first_text, e, chunk_limit, &group->chunk_tokens_max, &group->chunk_texts_max);
        group->chunks_count = job->chunks_count - group->first_chunk;
        if (group->chunk_tokens_max > job->chunk_tokens_max) job->chunk_tokens_max = group->chunk_tokens_max;
        if (group->chunk_texts_max > job->chunk_texts_max) job->chunk_texts_max = group->chunk_texts_max;
        for (size_t t = group->first_thread; t < first_thread; ++t) job->per_thread[t].group = g;
    }
    free(lengths), free(originals), free(group_of), free(sorted), free(group_threads), free(costs);

    /* Phase counters: each group's on cache lines of their own. */
    size_t counters_per_group = 0;
    for (size_t g = 0; g < job->groups_count; ++g) {
        size_t wanted = round_up((job->chunks_shared ? 1 : job->groups[g].chunks_count) * phases_per_chunk, 8);
        counters_per_group = wanted > counters_per_group ? wanted : counters_per_group;
    }
    job->counters_count = job->groups_count * (counters_per_group ? counters_per_group : 8);
    job->counters = (atomic_size_t *)aligned_alloc(64, round_up(job->counters_count * sizeof(atomic_size_t), 64));
    if (!job->counters) {
        uform_text_job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    }
    for (size_t c = 0; c < job->counters_count; ++c) atomic_init(&job->counters[c], 0);

    /* Activations per group, from the arena pool on the node of the group's first thread. */
    for (size_t g = 0; g < job->groups_count; ++g) {
        forward_group_t *group = &job->groups[g];
        group->counters = job->counters + g * (job->counters_count / job->groups_count);
        size_t tokens = group->chunk_tokens_max, texts = group->chunk_texts_max;
        if (!tokens) continue;
        size_t floats = tokens * hidden * 6 + tokens * tower0->intermediate + texts * hidden + texts * tower0->embedding_dimensions;
        int takes_bf16 = uform_gemm_takes_bf16(&job->gemm, tower0->weights_dtype);
        size_t halves = takes_bf16 ? round_up(tokens * hidden, 32) + round_up(tokens * tower0->intermediate, 32) : 0;
        if (job->attention16) halves += round_up(tokens * hidden * 3, 32);
        group->node = uform_model_thread_node(executor, description.kind, group->first_thread);
        group->arena = uform_arena_take(floats * sizeof(float) + halves * sizeof(uint16_t) + 64 * 8, group->node,
                                        &group->arena_bytes);
        if (!group->arena) {
            uform_text_job_free(job);
            return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the activations of %zu tokens",
                                              tokens));
        }
        group->x = (float *)group->arena;
        group->qkv = group->x + tokens * hidden;
        group->ctx = group->qkv + tokens * hidden * 3;
        group->tmp = group->ctx + tokens * hidden;
        group->ffn = group->tmp + tokens * hidden;
        group->pooled = group->ffn + tokens * tower0->intermediate;
        group->projected = group->pooled + texts * hidden;
        group->a16 = takes_bf16 ? (uint16_t *)(group->projected + round_up(texts * tower0->embedding_dimensions, 16)) : NULL;
        group->ffn16 = takes_bf16 ? group->a16 + round_up(tokens * hidden, 32) : NULL;
        group->qkv16 = job->attention16 ? group->ffn16 + round_up(tokens * tower0->intermediate, 32) : NULL;
    }
    size_t row_floats = hidden > tower0->embedding_dimensions ? hidden : tower0->embedding_dimensions;
    size_t attention_floats = longest * (longest > head + 1 ? longest : head + 1);
    size_t norm_floats = uform_text_norm_floats(job);
    job->norm_offset = round_up(uform_text_gemm_scratch_floats(job) + attention_floats + row_floats, 16);
    job->packed_offset = round_up(job->norm_offset + norm_floats, 16);
    size_t packed_floats = job->attention16 ? ceil_div(uform_attention_bf16_bytes(longest, longest, head), sizeof(float)) : 0;
    size_t scratch_bytes = (job->packed_offset + packed_floats + 16) * sizeof(float);
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = uform_model_thread_node(executor, description.kind, t);
        job->per_thread[t].tower = replica_on(model, node);
        job->per_thread[t].node = node;
        job->per_thread[t].scratch = uform_arena_take(scratch_bytes, node, &job->per_thread[t].scratch_bytes);
        if (!job->per_thread[t].scratch) {
            uform_text_job_free(job);
            return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for thread %zu's scratch", t));
        }
    }
    atomic_init(&job->threads_left, threads);
    atomic_init(&job->next_chunk, 0);

    uform_call_t call = {.residency = uform_residency_ram_k, .schedule = uform_schedule_threads_k, .task = uform_text_job_thread,
                         .context = job};
    status = uform_executor_call(executor, &call, outcome);
    /* A host call that was run returns OK (tasks cannot fail), and its last thread freed the job; any
     * other status is a refusal that ran nothing, so the job is still ours. */
    if (status != uform_status_ok_k) uform_text_job_free(job);
    return status;
}
