/**
 *  @file   bench_text_gpu.c
 *  @brief  Texts per second of VRAM text towers (src/models/text_vram.c) on towers of real shapes with
 *          random weights, token ids given (tokenising excluded, as for the PyTorch peers that
 *          bench/bench_text_gpu.py runs beside it).
 *
 *      bench_text_gpu [--shape minilm|uform3] [--tokens N] [--batch N] [--dtype bf16|f16|f32]
 *                     [--devices N] [--seconds S] [--json]
 *
 *  Shapes as bench_text.c's: minilm = all-MiniLM-L6-v2 (384 wide, 12 heads, 1536 inner, 6 layers,
 *  mean pooling, normalised); uform3 = UForm3-small's text tower (768 wide, 12 heads, 3072 inner, 2
 *  layers run, CLS pooling, 256-wide projection, RoBERTa positions). Prints texts/s, the best call's
 *  time and the achieved TFLOP/s (dense products and attention, 2 FLOPs per multiply-add).
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "models/text_vram.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state = 0x2545F4914F6CDD1Dull;
static float uniform(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / (double)(1ull << 52) - 1.0);
}

static void *allocations[256];
static size_t allocations_count = 0;

static uform_tensor_t tensor(size_t rows, size_t cols, float scale, float offset, uform_dtype_t dtype) {
    size_t n = rows * cols;
    void *data = malloc(n * (dtype == uform_dtype_f32_k ? 4 : 2));
    allocations[allocations_count++] = data;
    for (size_t i = 0; i < n; ++i) {
        float value = offset + scale * uniform();
        union { float f; uint32_t u; } bits = {.f = value};
        if (dtype == uform_dtype_f32_k) ((float *)data)[i] = value;
        else if (dtype == uform_dtype_bf16_k) ((uint16_t *)data)[i] = (uint16_t)((bits.u + 0x7FFFu + ((bits.u >> 16) & 1u)) >> 16);
        else { /* f16 of small values, truncated: good enough for timing */
            uint32_t sign = (bits.u >> 16) & 0x8000u;
            int exponent = (int)((bits.u >> 23) & 0xFF) - 127 + 15;
            uint16_t half = exponent <= 0 ? (uint16_t)sign : (uint16_t)(sign | ((uint32_t)exponent << 10) | ((bits.u >> 13) & 0x3FFu));
            ((uint16_t *)data)[i] = half;
        }
    }
    return (uform_tensor_t) {.data = data, .dtype = dtype, .rows = rows, .cols = cols};
}

int main(int argc, char **argv) {
    char const *shape = "minilm", *dtype_name = "bf16";
    size_t tokens = 128, batch = 50, devices = 1;
    double seconds = 3.0;
    int json = 0;
    for (int i = 1; i < argc; ++i) {
        char const *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (v && !strcmp(a, "--shape")) shape = v, ++i;
        else if (v && !strcmp(a, "--dtype")) dtype_name = v, ++i;
        else if (v && !strcmp(a, "--tokens")) tokens = strtoul(v, NULL, 10), ++i;
        else if (v && !strcmp(a, "--batch")) batch = strtoul(v, NULL, 10), ++i;
        else if (v && !strcmp(a, "--devices")) devices = strtoul(v, NULL, 10), ++i;
        else if (v && !strcmp(a, "--seconds")) seconds = atof(v), ++i;
        else {
            fprintf(stderr, "usage: bench_text_gpu [--shape minilm|uform3] [--tokens N] [--batch N] [--dtype bf16|f16|f32] "
                            "[--devices N] [--seconds S] [--json]\n");
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
    uform_text_tower_t t = {0};
    t.hidden = uform3 ? 768 : 384, t.heads = 12, t.intermediate = 4 * t.hidden, t.layers_count = uform3 ? 2 : 6;
    t.vocab_size = 30522, t.max_positions = 512, t.context = 510, t.layer_norm_epsilon = 1e-12;
    t.embedding_dimensions = uform3 ? 256 : 384, t.pooling = uform3 ? uform_pooling_cls_k : uform_pooling_mean_k;
    t.position_ids = uform3 ? uform_position_ids_roberta_k : uform_position_ids_absolute_k, t.pad_id = 0;
    t.normalize = !uform3, t.weights_dtype = dtype;
    size_t h = t.hidden, in = t.intermediate;
    float ws = 1.0f / sqrtf((float)h), wi = 1.0f / sqrtf((float)in);
    t.word_embeddings = tensor(t.vocab_size, h, 0.5f, 0, dtype);
    t.position_embeddings = tensor(t.max_positions, h, 0.5f, 0, dtype);
    if (!uform3) t.token_type_embeddings = tensor(2, h, 0.5f, 0, dtype);
    t.embedding_norm_weight = tensor(1, h, 0.2f, 1, uform_dtype_f32_k);
    t.embedding_norm_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
    t.layers = calloc(t.layers_count, sizeof(uform_text_layer_t));
    for (size_t l = 0; l < t.layers_count; ++l) {
        uform_text_layer_t *y = &t.layers[l];
        y->query_weight = tensor(h, h, ws, 0, dtype), y->query_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->key_weight = tensor(h, h, ws, 0, dtype), y->key_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->value_weight = tensor(h, h, ws, 0, dtype), y->value_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->attention_output_weight = tensor(h, h, ws, 0, dtype);
        y->attention_output_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->attention_norm_weight = tensor(1, h, 0.2f, 1, uform_dtype_f32_k);
        y->attention_norm_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->intermediate_weight = tensor(in, h, ws, 0, dtype), y->intermediate_bias = tensor(1, in, 0.1f, 0, uform_dtype_f32_k);
        y->output_weight = tensor(h, in, wi, 0, dtype), y->output_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
        y->output_norm_weight = tensor(1, h, 0.2f, 1, uform_dtype_f32_k);
        y->output_norm_bias = tensor(1, h, 0.1f, 0, uform_dtype_f32_k);
    }
    if (uform3) t.projection = tensor(t.embedding_dimensions, h, ws, 0, dtype);
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
    for (size_t i = 0; i < batch * tokens; ++i) ids[i] = 1000 + (int32_t)((uniform() + 1.0f) * 0.5f * 29000.0f);
    float *rows = malloc(batch * t.embedding_dimensions * sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    for (int w = 0; w < 3; ++w)
        if (uform_text_vram_encode_ids(executor, &model, ids, offsets, batch, &out, NULL) != uform_status_ok_k) {
            fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
            return 1;
        }
    size_t calls = 0;
    double start = uform_now_seconds(), elapsed, best = 1e30;
    do {
        double before = uform_now_seconds();
        uform_text_vram_encode_ids(executor, &model, ids, offsets, batch, &out, NULL);
        double took = uform_now_seconds() - before;
        if (took < best) best = took;
        ++calls;
        elapsed = uform_now_seconds() - start;
    } while (elapsed < seconds || calls < 3);
    double rate = (double)(calls * batch) / elapsed;
    double per_text = (double)t.layers_count * ((double)tokens * 2.0 * (4.0 * h * h + 2.0 * h * in) +
                                                4.0 * (double)tokens * tokens * h) +
                      (uform3 ? 2.0 * h * t.embedding_dimensions : 0.0);
    double tflops = rate * per_text / 1e12;
    if (json)
        printf("{\"system\": \"uform-gpu\", \"shape\": \"%s\", \"dtype\": \"%s\", \"tokens\": %zu, \"batch\": %zu, "
               "\"devices\": %zu, \"texts_per_second\": %.1f, \"best_call_ms\": %.3f, \"tflops\": %.1f}\n",
               shape, dtype_name, tokens, batch, devices, rate, best * 1e3, tflops);
    else
        printf("uform-gpu %s %s: %zu tokens, batch %zu, %zu device(s): %.1f texts/s, best call %.3f ms, %.1f TFLOP/s\n",
               shape, dtype_name, tokens, batch, devices, rate, best * 1e3, tflops);
    uform_text_vram_profile_report(stderr);
    if (uform_executor_drain(executor, uform_mood_parked_k) != uform_status_ok_k)
        fprintf(stderr, "bench_text_gpu: %s\n", uform_error_message());
    uform_executor_free(executor);
    uform_text_vram_free(&model);
    for (size_t i = 0; i < allocations_count; ++i) free(allocations[i]);
    free(t.layers), free(ids), free(offsets), free(rows);
    return 0;
}
