/**
 *  @file   image_forward.c
 *  @brief  The image verb's call on host executors: decoding and preprocessing per image on the
 *          executor's threads (each thread its own image scratch), then the tower over chunks of
 *          images (image_pass.c).
 *
 *  Every thread decodes images from one counter (all images, before the chunks), meeting the others
 *  at the job's barrier. Then the threads split into groups (`uform_batch_groups`), each with its
 *  own activations (from the arena pool) and its own barrier, as the text pass does: one thread per
 *  group (no barrier at all, the images' rows in one GEMM per product) for batches of at least about
 *  as many images as threads, one group of every thread for batch 1. Groups of several threads take
 *  a run of consecutive images each; groups of one thread take the batch's chunks from one counter
 *  (a slower core takes fewer).
 */
#define _GNU_SOURCE
#include "models/image_pass.h"

#include "internal.h"

#include <stdio.h>  // `snprintf`
#include <stdlib.h>
#include <string.h>

#define IMAGE_CHUNK_FLOATS (4096u * 384u)
/** A group's chunks take at least this many tokens (whole images, at least one). */
#define IMAGE_GROUP_TOKENS_MIN 128u

/** The chunk of at most `most` images (at least `least`) whose chunks, taken in turn by `threads`
 *  threads of equal speed, end soonest (ties: the larger chunk). 50 ViT-S/16 images on 2 threads in
 *  chunks of 10 leave one thread 30 images and the other 20; chunks of 5 give each 25. */
static size_t even_chunk(size_t count, size_t threads, size_t most, size_t least) {
    size_t best = most, best_end = SIZE_MAX;
    if (least < 1) least = 1;
    for (size_t chunk = most; chunk >= least && chunk >= 1; --chunk) {
        size_t chunks = ceil_div(count, chunk), end = 0;
        for (size_t t = 0; t < threads && t < chunks; ++t) {
            size_t load = 0;
            for (size_t i = t; i < chunks; i += threads) load += i + 1 < chunks ? chunk : count - i * chunk;
            end = load > end ? load : end;
        }
        if (end < best_end) best = chunk, best_end = end;
    }
    return best;
}

static void job_free(image_job_t *job) {
    if (!job) return;
    if (job->per_thread)
        for (size_t t = 0; t < job->threads; ++t) {
            uform_arena_give(job->per_thread[t].scratch, job->per_thread[t].scratch_bytes, job->per_thread[t].node);
            uform_image_scratch_free(&job->per_thread[t].images);
        }
    free(job->per_thread);
    if (job->groups)
        for (size_t g = 0; g < job->groups_count; ++g)
            uform_arena_give(job->groups[g].arena, job->groups[g].arena_bytes, job->groups[g].node);
    free(job->groups);
    free(job->images);
    uform_arena_give(job->rgb, job->rgb_bytes, -1);
    free(job->item);
    free(job->counters);
    free(job);
}

/** A strict call's failure: the lowest failed index over every thread, with its status and
 *  message ("uform_encode_images: image 3: ..."); OK when every image decoded. */
static uform_status_t job_first_failure(image_job_t const *job, char *message, size_t capacity) {
    size_t failed = SIZE_MAX, by = 0;
    for (size_t t = 0; t < job->threads; ++t)
        if (job->per_thread[t].failed_index < failed) failed = job->per_thread[t].failed_index, by = t;
    if (failed == SIZE_MAX) return uform_status_ok_k;
    snprintf(message, capacity, "uform_encode_images: image %zu: %s", failed, job->per_thread[by].failed_message);
    return job->per_thread[by].failed_status;
}

static void job_thread(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    image_job_t *job = (image_job_t *)context;
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    image_pass_decode(job, thread, &job->counters[0]);
    int abandon = 0;
    if (job->strict)
        for (size_t i = 0; i < job->count && !abandon; ++i) abandon = job->item[i] != uform_status_ok_k;
    image_group_t *group = &job->groups[job->per_thread[thread].group];
    size_t phase = 0;
    if (job->chunks_shared)
        /* One thread per group: every thread takes the next chunk of the batch from one counter, so
         * a thread that runs slower (a busier core, a lower clock) takes fewer images instead of
         * holding the call back with its dealt share. Its group's counters are its own: reset them. */
        for (size_t chunk; !abandon && (chunk = atomic_fetch_add_explicit(&job->counters[1], 1, memory_order_relaxed)) *
                                                   job->chunk_images < job->count;) {
            size_t first = chunk * job->chunk_images;
            size_t n = job->count - first < job->chunk_images ? job->count - first : job->chunk_images;
            for (size_t i = 0; i < phase; ++i) atomic_store_explicit(&group->counters[i], 0, memory_order_relaxed);
            phase = 0;
            image_pass_chunk(job, group, thread, first, n, &phase);
        }
    else
        for (size_t first = 0; first < group->images && !abandon; first += group->chunk_images) {
            size_t n = group->images - first < group->chunk_images ? group->images - first : group->chunk_images;
            image_pass_chunk(job, group, thread, group->first_image + first, n, &phase);
        }
    uform_gemm_thread_leave(&previous);
    if (atomic_fetch_sub(&job->threads_left, 1) == 1 && !job->caller_frees) {
        /* A deferred strict call fails through its outcome, which the executor finishes after this
         * round: every thread has decoded (the barrier), so the lowest failed index is final. */
        char message[sizeof job->per_thread[0].failed_message + 64];
        uform_status_t failure = job->strict ? job_first_failure(job, message, sizeof message) : uform_status_ok_k;
        if (failure != uform_status_ok_k) uform_outcome_record_failure(job->outcome, failure, message);
        job_free(job);
    }
}

/* ---- Submission ---- */

uform_status_t uform_image_encode(uform_executor_t executor, struct uform_model_s const *model,
                                  uform_image_t const *images, size_t count, uform_embeddings_t const *embeddings,
                                  uform_status_t *statuses, uform_outcome_t *outcome) {
    uform_image_tower_t const *tower0 = uform_model_image_replica(model, -1);
    uform_executor_description_t description;
    uform_status_t status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    size_t threads = description.threads_count ? description.threads_count : 1;
    uform_cpu_class_t cpu_class = description.cpu_class;
    if (cpu_class == uform_cpu_class_unknown_k && (status = uform_cpu_detect(&cpu_class, NULL)) != uform_status_ok_k)
        return uform_outcome_refuse(outcome, status);
    if ((status = uform_model_check_replicas("uform_encode_images: ", model, executor, &description)) != uform_status_ok_k)
        return uform_outcome_refuse(outcome, status);

    uform_image_config_t const *c = &tower0->config;
    image_job_t *job = (image_job_t *)calloc(1, sizeof *job);
    if (!job) return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "uform_encode_images: no memory for the job"));
    job->model = model;
    job->tower0 = tower0;
    job->out = *embeddings;
    job->out_dimensions = embeddings->dimensions ? embeddings->dimensions : c->embedding_dimensions;
    job->out_stride = embeddings->stride ? embeddings->stride : job->out_dimensions * uform_dtype_bytes(embeddings->dtype);
    job->gemm = uform_gemm_for(cpu_class);
    job->kernels = job->gemm.kernels;
    job->attention16 = uform_attention_bf16_for_gemm(&job->gemm, cpu_class);
    job->threads = threads;
    job->count = count;
    job->statuses = statuses;
    job->strict = statuses == NULL;
    job->features_stride = uform_features_stride(embeddings, c->sequence * c->dim);
    /* Features are every token's final state: no CLS tail. */
    job->cls_tail = !embeddings->features && uform_forward_cls_tail(c->pooling == uform_pooling_cls_k, c->layers_count);
    job->caller_frees = outcome == NULL;
    job->outcome = outcome;
    job->preprocess.side = c->image_size;
    memcpy(job->preprocess.mean, c->mean, sizeof c->mean);
    memcpy(job->preprocess.std, c->std, sizeof c->std);
    for (int ch = 0; ch < 3; ++ch)
        for (int v = 0; v < 256; ++v) job->lut[ch][v] = ((float)v / 255.0f - c->mean[ch]) / c->std[ch];

    size_t per_image = c->image_size * c->image_size * 3;
    job->images = (uform_image_t *)malloc((count ? count : 1) * sizeof(uform_image_t));
    job->rgb = (uint8_t *)uform_arena_take(count ? count * per_image : 1, -1, &job->rgb_bytes);
    job->item = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    job->per_thread = (image_thread_t *)calloc(threads, sizeof(image_thread_t));
    /* Groups of threads, each a run of consecutive images: as many as `uform_batch_groups` deals
     * it (all images cost the same). */
    size_t *group_threads = (size_t *)malloc(threads * sizeof(size_t));
    size_t *group_of = (size_t *)malloc((count ? count : 1) * sizeof(size_t));
    size_t *sorted = (size_t *)malloc((count ? count : 1) * sizeof(size_t));
    double *costs = (double *)malloc((count ? count : 1) * sizeof(double));
    int lists_ok = job->images && job->rgb && job->item && job->per_thread && group_threads && group_of && sorted && costs;
    if (lists_ok) {
        for (size_t i = 0; i < count; ++i) costs[i] = 1.0;
        job->groups_count = uform_batch_groups(threads, count, costs, uform_forward_group_forced(), group_threads,
                                               group_of, sorted);
        job->groups = (image_group_t *)aligned_alloc(64, round_up(job->groups_count * sizeof(image_group_t), 64));
        lists_ok = job->groups != NULL;
    }
    if (lists_ok) {
        memset(job->groups, 0, job->groups_count * sizeof(image_group_t));
        for (size_t i = 0; i < count; ++i) ++job->groups[group_of[i]].images;
        size_t per_group = 0;
        for (size_t g = 0, first_thread = 0, first_image = 0; g < job->groups_count; ++g) {
            image_group_t *group = &job->groups[g];
            group->first_thread = first_thread, group->threads = group_threads[g];
            group->first_image = first_image;
            first_thread += group->threads, first_image += group->images;
            for (size_t t = group->first_thread; t < first_thread; ++t) job->per_thread[t].group = g;
            size_t chunk = IMAGE_CHUNK_FLOATS / (c->sequence * c->dim) * group->threads / threads;
            if (chunk * c->sequence < IMAGE_GROUP_TOKENS_MIN) chunk = ceil_div(IMAGE_GROUP_TOKENS_MIN, c->sequence);
            if (chunk < 1) chunk = 1;
            if (chunk > group->images) chunk = group->images ? group->images : 1;
            group->chunk_images = chunk;
            if (chunk > job->chunk_images) job->chunk_images = chunk;
            size_t phases = round_up(ceil_div(group->images, chunk) * image_pass_phases_per_chunk(c), 8);
            per_group = phases > per_group ? phases : per_group;
        }
        /* Groups of one thread each, all with images (so all with activations), take chunks from
         * one counter (`job_thread`); chunks are then the same size in every group. */
        job->chunks_shared = job->groups_count == threads && count >= threads;
        if (job->chunks_shared) {
            /* No lower than 512 tokens a chunk (the products' row tiles reach 512), or than it was. */
            job->chunk_images = even_chunk(count, threads, job->chunk_images, ceil_div(512, c->sequence));
            for (size_t g = 0; g < job->groups_count; ++g) job->groups[g].chunk_images = job->chunk_images;
        }
        job->counters_count = 8 + job->groups_count * per_group;
        job->counters = (atomic_size_t *)aligned_alloc(64, round_up(job->counters_count * sizeof(atomic_size_t), 64));
        lists_ok = job->counters != NULL;
        if (lists_ok) {
            for (size_t i = 0; i < job->counters_count; ++i) atomic_init(&job->counters[i], 0);
            for (size_t g = 0; g < job->groups_count; ++g) job->groups[g].counters = job->counters + 8 + g * per_group;
        }
    }
    free(group_threads), free(group_of), free(sorted), free(costs);
    if (!lists_ok) {
        job_free(job);
        return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "uform_encode_images: no memory for %zu images",
                                                        count));
    }
    if (count) memcpy(job->images, images, count * sizeof(uform_image_t));
    size_t depth = 3 * c->patch_size * c->patch_size;
    for (size_t g = 0; g < job->groups_count; ++g) {
        image_group_t *group = &job->groups[g];
        if (!group->images) continue;
        size_t n = group->chunk_images, tokens = n * c->sequence;
        size_t floats = n * c->patches * depth + tokens * c->dim * 5 + tokens * c->dim * 3 + tokens * c->intermediate +
                        n * c->dim + n * c->embedding_dimensions;
        int takes_bf16 = uform_gemm_takes_bf16(&job->gemm, job->tower0->weights_dtype);
        size_t halves = takes_bf16 ? round_up(tokens * c->dim, 32) + round_up(tokens * c->intermediate, 32) +
                                         round_up(tokens * c->dim * 3, 32)
                                   : 0;
        group->node = uform_model_thread_node(executor, description.kind, group->first_thread);
        group->arena = uform_arena_take(floats * sizeof(float) + halves * sizeof(uint16_t) + 64 * 10, group->node,
                                        &group->arena_bytes);
        if (!group->arena) {
            job_free(job);
            return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k,
                                                            "uform_encode_images: no memory for %zu images (%zu bytes of activations)",
                                                            count, floats * sizeof(float)));
        }
        group->patches = (float *)group->arena;
        group->x = group->patches + n * c->patches * depth;
        group->h = group->x + tokens * c->dim;
        group->qkv = group->h + tokens * c->dim;
        group->ctx = group->qkv + tokens * c->dim * 3;
        group->tmp = group->ctx + tokens * c->dim;
        group->ffn = group->tmp + tokens * c->dim;
        group->pooled = group->ffn + tokens * c->intermediate;
        group->projected = group->pooled + n * c->dim;
        group->a16 = takes_bf16 ? (uint16_t *)(group->projected + round_up(n * c->embedding_dimensions, 16)) : NULL;
        group->ffn16 = takes_bf16 ? group->a16 + round_up(tokens * c->dim, 32) : NULL;
        group->qkv16 = takes_bf16 ? group->ffn16 + round_up(tokens * c->intermediate, 32) : NULL;
    }
    size_t row_floats = c->dim > c->embedding_dimensions ? c->dim : c->embedding_dimensions;
    /* The norm buffer of the fused LayerNorms: a tile's rows (at most 512, the plan's largest) of dim. */
    job->widens = uform_gemm_scratch_bytes(&job->gemm, job->tower0->weights_dtype, 1, 1, 1) == sizeof(float);
    int fused = 0; /* as image_pass_chunk decides: f32 A only (a group with bf16 A normalises once, into it) */
    for (size_t g = 0; g < job->groups_count; ++g) fused |= job->groups[g].threads > 1 && !job->widens && !job->groups[g].a16;
    size_t chunk_tokens = job->chunk_images * c->sequence;
    size_t norm_floats = fused ? (chunk_tokens < 512 ? chunk_tokens : 512) * c->dim : 0;
    job->norm_offset = round_up(image_pass_gemm_scratch_floats(job) + image_pass_scores_floats(c) + row_floats, 16);
    job->probs_offset = round_up(job->norm_offset + norm_floats, 16);
    size_t probs_floats = uform_gemm_takes_bf16(&job->gemm, job->tower0->weights_dtype) ? ceil_div(c->sequence * c->sequence, 2) : 0;
    if (job->attention16 && job->tower0->weights_dtype == uform_dtype_bf16_k) { /* the kernel's scores, then its packing */
        size_t kernel_floats = ceil_div(uform_attention_bf16_bytes(c->sequence, c->sequence, c->dim / c->heads), 4);
        probs_floats = probs_floats > kernel_floats ? probs_floats : kernel_floats;
    }
    size_t scratch_bytes = (job->probs_offset + probs_floats + 16) * sizeof(float);
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = uform_model_thread_node(executor, description.kind, t);
        job->per_thread[t].tower = uform_model_image_replica(model, node);
        job->per_thread[t].failed_index = SIZE_MAX;
        job->per_thread[t].node = node;
        job->per_thread[t].scratch = uform_arena_take(scratch_bytes, node, &job->per_thread[t].scratch_bytes);
        if (!job->per_thread[t].scratch) {
            job_free(job);
            return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k,
                                                            "uform_encode_images: no memory for thread %zu's scratch", t));
        }
    }

    atomic_init(&job->threads_left, threads);
    uform_call_t call = {.residency = uform_residency_ram_k, .schedule = uform_schedule_threads_k, .task = job_thread,
                         .context = job};
    /* A deferred call's last thread frees the job, maybe before the executor returns here: nothing
     * of it is read after the submission unless this (blocking) call owns it. */
    int const caller_frees = job->caller_frees;
    status = uform_executor_call(executor, &call, outcome);
    if (status != uform_status_ok_k) {
        /* Refused before running: the job is still ours. */
        job_free(job);
        return status;
    }
    if (caller_frees) {
        char message[sizeof job->per_thread[0].failed_message + 64];
        uform_status_t failure = job->strict ? job_first_failure(job, message, sizeof message) : uform_status_ok_k;
        if (failure != uform_status_ok_k) status = uform_fail(failure, "%s", message);
        job_free(job);
    }
    return status;
}
