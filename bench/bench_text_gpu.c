/**
 *  @file   bench_text_gpu.c
 *  @brief  Texts per second of VRAM text towers (src/models/text_vram.c) on towers of real shapes with
 *          random weights, token ids given (tokenising excluded, as for the PyTorch peers that
 *          bench/bench_text_gpu.py runs beside it), or with `--texts` from strings: all-MiniLM-L6-v2's
 *          real tokenizer (test/tokenizer/minilm) on the executor's decoder threads, in waves
 *          overlapped with the device (UFORM_GPU_TEXT_WAVE=0: one wave, for comparison). Each text is
 *          random lowercase words, as many as make at most `--tokens` ids with [CLS] and [SEP].
 *
 *      bench_text_gpu [--shape minilm|uform3] [--tokens N] [--batch N] [--dtype bf16|f16|f32]
 *                     [--devices N] [--seconds S] [--texts] [--in-flight N] [--features] [--context N] [--json]
 *
 *  `--features` asks for every token's last hidden state too (`uform_embeddings_t.features`, f32,
 *  the context's rows per text, zero past its tokens): what that costs beside the same run without.
 *  `--context N` is the tower's context, which sets those rows (default: the real model's, 77 for
 *  UForm3, the `uform` package's `max_position_embeddings`, and 256 for all-MiniLM-L6-v2,
 *  sentence-transformers' `max_seq_length`; at least `--tokens`).
 *
 *  `--in-flight N` (N >= 2) submits the calls deferred, up to N at once, each into its own rows (a
 *  deferred encode returns once its waves are enqueued: with `--texts`, the next call's tokenising
 *  overlaps this one's device work); the rate then counts until the last call finished, and the
 *  best call is the shortest time from one submission to the next.
 *
 *  Shapes as bench_text.c's: minilm = all-MiniLM-L6-v2 (384 wide, 12 heads, 1536 inner, 6 layers,
 *  mean pooling, normalised); uform3 = UForm3-small's text tower (768 wide, 12 heads, 3072 inner, 2
 *  layers run, CLS pooling, 256-wide projection, RoBERTa positions). Prints texts/s, the best call's
 *  time and the achieved TFLOP/s (the dense products and attention the pass executes, 2 FLOPs per
 *  multiply-add: with the CLS tail, UForm3's last layer past attention for the first token alone).
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "kernels/kernels.h" // `uform_forward_cls_tail`
#include "models/text_vram.h"
#include "random_text_tower.h"
#include "../tools/strict_number.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "read_gz.h"

#ifndef UFORM_TOKENIZER_FIXTURES
#define UFORM_TOKENIZER_FIXTURES "test/tokenizer"
#endif

/** `count` texts of random lowercase words, each as long as fits `tokens` ids of `tokenizer`. */
static char **make_texts(uform_tokenizer_t const *tokenizer, size_t count, size_t tokens) {
    char **texts = calloc(count, sizeof(char *));
    int32_t *ids = malloc((tokens + 64) * sizeof(int32_t));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; texts && ids && i < count; ++i) {
        size_t capacity = tokens * 12 + 16, used = 0;
        char *text = calloc(capacity, 1);
        texts[i] = text;
        while (text && used + 10 < capacity) {
            size_t before = used;
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t letters = 2 + (size_t)(state >> 61);
            if (used) text[used++] = ' ';
            for (size_t l = 0; l < letters; ++l, state = state * 6364136223846793005ull + 1442695040888963407ull)
                text[used++] = (char)('a' + (state >> 59) % 26);
            text[used] = 0;
            size_t produced = 0;
            if (uform_tokenizer_encode(tokenizer, text, used, tokens + 32, ids, tokens + 32, &produced) != uform_status_ok_k ||
                produced > tokens) {
                used = before, text[used] = 0;
                break;
            }
        }
    }
    free(ids);
    return texts;
}

int main(int argc, char **argv) {
    char const *shape = "minilm", *dtype_name = "bf16";
    size_t tokens = 128, batch = 50, devices = 1, in_flight = 1, context = 0;
    double seconds = 3.0;
    int json = 0, from_texts = 0, with_features = 0;
    for (int i = 1; i < argc; ++i) {
        char const *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--texts")) from_texts = 1;
        else if (!strcmp(a, "--features")) with_features = 1;
        else if (v && !strcmp(a, "--shape") && (!strcmp(v, "minilm") || !strcmp(v, "uform3"))) shape = v, ++i;
        else if (v && !strcmp(a, "--dtype") && (!strcmp(v, "f32") || !strcmp(v, "bf16") || !strcmp(v, "f16"))) dtype_name = v, ++i;
        else if (v && !strcmp(a, "--tokens") && strict_count(v, 1, 510, false, &tokens)) ++i;
        else if (v && !strcmp(a, "--batch") && strict_count(v, 1, (size_t)1 << 20, false, &batch)) ++i;
        else if (v && !strcmp(a, "--devices") && strict_count(v, 1, 8, false, &devices)) ++i;
        else if (v && !strcmp(a, "--in-flight") && strict_count(v, 1, 64, false, &in_flight)) ++i;
        else if (v && !strcmp(a, "--context") && strict_count(v, 2, 510, false, &context)) ++i;
        else if (v && !strcmp(a, "--seconds") && strict_real(v, 0, 3600, &seconds)) ++i;
        else {
            fprintf(stderr, "usage: bench_text_gpu [--shape minilm|uform3] [--tokens N] [--batch N] [--dtype bf16|f16|f32] "
                            "[--devices N] [--seconds S] [--texts] [--in-flight N] [--features] [--context N] [--json]\n");
            return 2;
        }
    }
    if (uform_gpu_status() != uform_status_ok_k) {
        printf("bench_text_gpu: skipped: %s\n", uform_error_message());
        return 0;
    }
    int uform3 = !strcmp(shape, "uform3");
    uform_dtype_t dtype = !strcmp(dtype_name, "f32") ? uform_dtype_f32_k
                          : !strcmp(dtype_name, "f16") ? uform_dtype_f16_k : uform_dtype_bf16_k;
    uform_text_tower_t t = random_text_tower(uform3, dtype);
    if (!context) context = uform3 ? 77 : 256;
    if (context < tokens) context = tokens;
    t.context = context;
    size_t h = t.hidden, in = t.intermediate;
    int32_t node = 0;
    struct uform_model_s model = {.modality = uform_modality_text_k, .residency = uform_residency_vram_k,
                                  .weights_dtype = dtype, .replicas_count = 1, .replica_nodes = &node, .text_replicas = &t};
    int32_t ordinals[8];
    if (devices < 1 || devices > 8) devices = 1;
    for (size_t i = 0; i < devices; ++i) ordinals[i] = (int32_t)i;
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = devices};
    if (uform_text_vram_open(&model, &vram) != uform_status_ok_k) {
        fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
        return 1;
    }
    uform_executor_t executor = NULL;
    if (uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor) != uform_status_ok_k) {
        fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
        return 1;
    }
    if (uform_executor_drain(executor, uform_mood_spinning_k) != uform_status_ok_k) {
        fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
        return 1;
    }

    int32_t *ids = malloc(batch * tokens * sizeof(int32_t));
    size_t *offsets = malloc((batch + 1) * sizeof(size_t));
    for (size_t i = 0; i <= batch; ++i) offsets[i] = i * tokens;
    for (size_t i = 0; i < batch * tokens; ++i) ids[i] = 1000 + (int32_t)((random_uniform() + 1.0f) * 0.5f * 29000.0f);
    float *rows = malloc(in_flight * batch * t.embedding_dimensions * sizeof(float));
    uform_embeddings_t *outs = calloc(in_flight, sizeof(uform_embeddings_t));
    uform_outcome_t *outcomes = calloc(in_flight, sizeof(uform_outcome_t));
    int *pending = calloc(in_flight, sizeof(int));
    /* --features: every token's last hidden state too, f32 [batch][context][hidden] per call in flight. */
    size_t feature_floats = with_features ? batch * t.context * h : 0;
    float *features = feature_floats ? malloc(in_flight * feature_floats * sizeof(float)) : NULL;
    if (feature_floats && !features) {
        fprintf(stderr, "bench_text_gpu: no memory for the features\n");
        return 1;
    }
    for (size_t k = 0; k < in_flight; ++k)
        outs[k] = (uform_embeddings_t){.data = rows + k * batch * t.embedding_dimensions, .dtype = uform_dtype_f32_k,
                                       .features = features ? features + k * feature_floats : NULL};
    char **texts = NULL;
    if (from_texts) {
        size_t size = 0;
        char *json_text = read_gz(UFORM_TOKENIZER_FIXTURES "/minilm/tokenizer.json.gz", &size);
        if (!json_text || uform_tokenizer_open_json(json_text, size, "minilm", &model.tokenizer) != uform_status_ok_k) {
            fprintf(stderr, "bench_text_gpu: cannot read %s: %s\n", UFORM_TOKENIZER_FIXTURES "/minilm/tokenizer.json.gz",
                    json_text ? uform_error_message() : "missing");
            return 1;
        }
        free(json_text);
        texts = make_texts(model.tokenizer, batch, tokens);
        if (!texts) return 1;
    }
    /* Slot k's call: blocking with one in flight, else deferred after slot k's previous call finished. */
#define ENCODE_INTO(k, outcome)                                                                                        \
    (texts ? uform_text_vram_encode(executor, &model, (char const *const *)texts, NULL, batch, &outs[k], NULL, outcome)  \
           : uform_text_vram_encode_ids(executor, &model, ids, offsets, batch, &outs[k], outcome))
    for (int w = 0; w < 3; ++w)
        if (ENCODE_INTO(0, NULL) != uform_status_ok_k) {
            fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
            return 1;
        }
    size_t calls = 0;
    int failed = 0;
    double start = uform_now_seconds(), elapsed, best = 1e30;
    do {
        double before = uform_now_seconds();
        size_t const k = calls % in_flight;
        if (in_flight < 2) failed |= ENCODE_INTO(0, NULL) != uform_status_ok_k;
        else {
            if (pending[k]) pending[k] = 0, failed |= uform_outcome_wait(&outcomes[k], -1) != uform_status_ok_k;
            failed |= ENCODE_INTO(k, &outcomes[k]) != uform_status_ok_k;
            pending[k] = 1;
        }
        double took = uform_now_seconds() - before;
        if (took < best) best = took;
        ++calls;
        elapsed = uform_now_seconds() - start;
    } while (elapsed < seconds || calls < 3);
    for (size_t k = 0; k < in_flight; ++k)
        if (pending[k]) pending[k] = 0, failed |= uform_outcome_wait(&outcomes[k], -1) != uform_status_ok_k;
    elapsed = uform_now_seconds() - start;
    if (failed) {
        fprintf(stderr, "bench_text_gpu: a call failed: %s\n", uform_error_message());
        return 1;
    }
    double rate = (double)(calls * batch) / elapsed;
    /* FLOPs per text the pass executes; with the CLS tail (`uform_forward_cls_tail`, UForm3's CLS
     * pooling) the last layer's output product and MLP for the first token alone. */
    double layer = (double)tokens * 2.0 * (4.0 * h * h + 2.0 * h * in) + 4.0 * (double)tokens * tokens * h;
    double last = uform_forward_cls_tail(uform3, t.layers_count)
                      ? (double)tokens * 6.0 * h * h + 4.0 * (double)tokens * tokens * h + 2.0 * h * h + 4.0 * h * in
                      : layer;
    double per_text = (double)(t.layers_count - 1) * layer + last + (uform3 ? 2.0 * h * t.embedding_dimensions : 0.0);
    double tflops = rate * per_text / 1e12;
    if (json)
        printf("{\"system\": \"uform-gpu\", \"shape\": \"%s\", \"dtype\": \"%s\", \"tokens\": %zu, \"batch\": %zu, "
               "\"devices\": %zu, \"from\": \"%s\", \"in_flight\": %zu, \"texts_per_second\": %.1f, \"best_call_ms\": %.3f, "
               "\"tflops\": %.1f}\n",
               shape, dtype_name, tokens, batch, devices, texts ? "texts" : "ids", in_flight, rate, best * 1e3, tflops);
    else
        printf("uform-gpu %s %s from %s: %zu tokens (at most), batch %zu, %zu device(s), %zu in flight: %.1f texts/s, best "
               "call %.3f ms, %.1f TFLOP/s\n",
               shape, dtype_name, texts ? "texts" : "ids", tokens, batch, devices, in_flight, rate, best * 1e3, tflops);
    uform_text_vram_profile_report(stderr);
    if (uform_executor_drain(executor, uform_mood_parked_k) != uform_status_ok_k)
        fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
    uform_executor_free(executor);
    uform_text_vram_free(&model);
    random_text_tower_free(&t);
    if (model.tokenizer) uform_tokenizer_free(model.tokenizer);
    for (size_t i = 0; texts && i < batch; ++i) free(texts[i]);
    free(texts), free(ids), free(offsets), free(rows), free(outs), free(outcomes), free(pending);
    return 0;
}
