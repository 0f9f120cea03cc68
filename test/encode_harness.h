/**
 *  @file   encode_harness.h
 *  @brief  What the text forward pass tests share (test_encode.c, test_encode_verb.c): random towers
 *          built in memory, the double-precision reference, random batches and their encoding.
 */
#ifndef UFORM_TEST_ENCODE_HARNESS_H
#define UFORM_TEST_ENCODE_HARNESS_H

#define _GNU_SOURCE 1
#include "check.h"
#include "internal.h"
#include "kernels/kernels.h"
#include "models/text_forward.h"

#include <dlfcn.h>
#include <math.h>
#include <stdatomic.h>

/* ---- Random towers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline double uniform(void) { // [-1, 1)
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static inline uint16_t to_bf16(float value) {
    union { float f; uint32_t u; } bits = {.f = value};
    return (uint16_t)((bits.u + 0x7FFFu + ((bits.u >> 16) & 1u)) >> 16);
}
static inline uint16_t to_f16(float value) {
#if defined(UFORM_SOFT_F16)
    return uform_soft_f16_from_f32(value);
#else
    _Float16 half = (_Float16)value;
    uint16_t out;
    memcpy(&out, &half, 2);
    return out;
#endif
}
static inline float from_f16(uint16_t value) {
#if defined(UFORM_SOFT_F16)
    return uform_soft_f32_from_f16(value);
#else
    _Float16 half;
    memcpy(&half, &value, 2);
    return (float)half;
#endif
}

typedef struct config_t {
    size_t hidden, heads, intermediate, layers, vocab, max_positions, context, projection;
    uform_pooling_t pooling;
    uform_position_ids_t positions;
    int token_types, normalize;
    uform_dtype_t dtype;
} config_t;

/** One tensor: `values` as the reference reads them (already rounded to the dtype), `data` as held. */
typedef struct held_t {
    float *values;
    void *data;
} held_t;

static held_t *helds[256];
static size_t helds_count = 0;

static inline uform_tensor_t make_tensor(size_t rows, size_t cols, double scale, double offset, uform_dtype_t dtype) {
    held_t *held = calloc(1, sizeof *held);
    held->values = malloc(rows * cols * sizeof(float));
    held->data = malloc(rows * cols * (dtype == uform_dtype_f32_k ? 4 : 2));
    for (size_t i = 0; i < rows * cols; ++i) {
        float value = (float)(offset + scale * uniform());
        if (dtype == uform_dtype_bf16_k) {
            uint16_t b = to_bf16(value);
            ((uint16_t *)held->data)[i] = b;
            held->values[i] = uform_bf16_to_f32(b);
        }
        else if (dtype == uform_dtype_f16_k) {
            uint16_t h = to_f16(value);
            ((uint16_t *)held->data)[i] = h;
            held->values[i] = from_f16(h);
        }
        else ((float *)held->data)[i] = held->values[i] = value;
    }
    helds[helds_count++] = held;
    return (uform_tensor_t) {.data = held->data, .dtype = dtype, .rows = rows, .cols = cols};
}

static inline float const *values_of(uform_tensor_t const *tensor) {
    for (size_t i = 0; i < helds_count; ++i)
        if (helds[i]->data == tensor->data) return helds[i]->values;
    return NULL;
}

static inline void free_tensors(void) {
    for (size_t i = 0; i < helds_count; ++i) free(helds[i]->values), free(helds[i]->data), free(helds[i]);
    helds_count = 0;
}

/** Weights scaled so every branch matters: residual and product of similar size, LayerNorm gains
 *  away from one, biases away from zero. */
static inline uform_text_tower_t make_tower(config_t const *c) {
    uform_text_tower_t t = {0};
    t.vocab_size = c->vocab, t.hidden = c->hidden, t.heads = c->heads, t.intermediate = c->intermediate;
    t.max_positions = c->max_positions, t.layers_count = c->layers, t.context = c->context;
    t.embedding_dimensions = c->projection ? c->projection : c->hidden;
    t.layer_norm_epsilon = 1e-12, t.pooling = c->pooling, t.position_ids = c->positions, t.pad_id = 1;
    t.normalize = c->normalize, t.weights_dtype = c->dtype;
    size_t h = c->hidden, in = c->intermediate;
    double ws = 1.0 / sqrt((double)h) * 1.7, wi = 1.0 / sqrt((double)in) * 1.7;
    t.word_embeddings = make_tensor(c->vocab, h, 1.0, 0.0, c->dtype);
    t.position_embeddings = make_tensor(c->max_positions, h, 0.5, 0.0, c->dtype);
    if (c->token_types) t.token_type_embeddings = make_tensor(2, h, 0.5, 0.0, c->dtype);
    t.embedding_norm_weight = make_tensor(1, h, 0.3, 1.0, uform_dtype_f32_k);
    t.embedding_norm_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
    t.layers = calloc(c->layers, sizeof(uform_text_layer_t));
    for (size_t l = 0; l < c->layers; ++l) {
        uform_text_layer_t *y = &t.layers[l];
        y->query_weight = make_tensor(h, h, ws * 2.0, 0.0, c->dtype), y->query_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->key_weight = make_tensor(h, h, ws * 2.0, 0.0, c->dtype), y->key_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->value_weight = make_tensor(h, h, ws, 0.0, c->dtype), y->value_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->attention_output_weight = make_tensor(h, h, ws, 0.0, c->dtype);
        y->attention_output_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->attention_norm_weight = make_tensor(1, h, 0.3, 1.0, uform_dtype_f32_k);
        y->attention_norm_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->intermediate_weight = make_tensor(in, h, ws, 0.0, c->dtype);
        y->intermediate_bias = make_tensor(1, in, 0.5, 0.0, uform_dtype_f32_k);
        y->output_weight = make_tensor(h, in, wi, 0.0, c->dtype), y->output_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
        y->output_norm_weight = make_tensor(1, h, 0.3, 1.0, uform_dtype_f32_k);
        y->output_norm_bias = make_tensor(1, h, 0.2, 0.0, uform_dtype_f32_k);
    }
    if (c->projection) t.projection = make_tensor(c->projection, h, ws, 0.0, c->dtype);
    return t;
}

/** The first memory domain's node (0 on most machines): a hand-built model holds its one replica there,
 *  and the executors the tests run it on live there (`first_domain_ram`): an executor over every node
 *  would have threads on nodes without a replica (RESIDENCY_MISMATCH, as test/numa's guest showed). */
static int32_t replica_node_zero = 0;

static inline uform_ram_options_t first_domain_ram(uform_cpu_class_t cpu_class) {
    uform_memory_domain_t domain;
    size_t count = 0;
    if (uform_memory_domains(&domain, 1, &count) == uform_status_ok_k && count) replica_node_zero = domain.node;
    return (uform_ram_options_t){.memory_domains = &replica_node_zero, .memory_domains_count = 1, .cpu_class = cpu_class};
}

static inline struct uform_model_s make_model(uform_text_tower_t *tower) {
    (void)first_domain_ram(uform_cpu_class_unknown_k);
    struct uform_model_s model = {0};
    model.modality = uform_modality_text_k, model.residency = uform_residency_ram_k;
    model.weights_dtype = tower->weights_dtype;
    model.replicas_count = 1, model.replica_nodes = &replica_node_zero, model.text_replicas = tower;
    return model;
}

/* ---- The reference, in double ---- */

static inline void ref_layer_norm(double *x, size_t n, float const *g, float const *b, double eps) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < n; ++j) mean += x[j];
    mean /= (double)n;
    for (size_t j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= (double)n;
    for (size_t j = 0; j < n; ++j) x[j] = (x[j] - mean) / sqrt(var + eps) * g[j] + b[j];
}

/** y[rows][out] = x[rows][in] W^T + b */
static inline void ref_linear(double const *x, size_t rows, size_t in, uform_tensor_t const *w, uform_tensor_t const *b,
                       size_t out, double *y) {
    float const *wv = values_of(w), *bv = b && b->data ? values_of(b) : NULL;
    for (size_t i = 0; i < rows; ++i)
        for (size_t o = 0; o < out; ++o) {
            double s = bv ? bv[o] : 0.0;
            for (size_t k = 0; k < in; ++k) s += x[i * in + k] * wv[o * in + k];
            y[i * out + o] = s;
        }
}

static inline void reference(uform_text_tower_t const *t, int32_t const *ids, size_t n, double *embedding) {
    size_t h = t->hidden, in = t->intermediate, heads = t->heads, d = h / heads;
    double *x = calloc(n * h, sizeof(double)), *q = calloc(n * h, 8), *k = calloc(n * h, 8), *v = calloc(n * h, 8);
    double *ctx = calloc(n * h, 8), *tmp = calloc(n * h, 8), *ffn = calloc(n * in, 8), *s = calloc(n, 8);
    float const *word = values_of(&t->word_embeddings), *pos = values_of(&t->position_embeddings);
    float const *types = t->token_type_embeddings.data ? values_of(&t->token_type_embeddings) : NULL;
    size_t nonpad_so_far = 0; // HF's create_position_ids_from_input_ids: pad + cumsum(mask) * mask
    for (size_t i = 0; i < n; ++i) {
        int const mask = ids[i] != t->pad_id;
        nonpad_so_far += (size_t)mask;
        size_t p = t->position_ids == uform_position_ids_roberta_k ? (size_t)t->pad_id + nonpad_so_far * (size_t)mask : i;
        for (size_t j = 0; j < h; ++j)
            x[i * h + j] = word[(size_t)ids[i] * h + j] + pos[p * h + j] + (types ? types[j] : 0.0);
        ref_layer_norm(x + i * h, h, values_of(&t->embedding_norm_weight), values_of(&t->embedding_norm_bias),
                       t->layer_norm_epsilon);
    }
    for (size_t l = 0; l < t->layers_count; ++l) {
        uform_text_layer_t const *y = &t->layers[l];
        ref_linear(x, n, h, &y->query_weight, &y->query_bias, h, q);
        ref_linear(x, n, h, &y->key_weight, &y->key_bias, h, k);
        ref_linear(x, n, h, &y->value_weight, &y->value_bias, h, v);
        for (size_t hh = 0; hh < heads; ++hh)
            for (size_t i = 0; i < n; ++i) {
                double top = -1e300, total = 0;
                for (size_t j = 0; j < n; ++j) {
                    double dot = 0;
                    for (size_t e = 0; e < d; ++e) dot += q[i * h + hh * d + e] * k[j * h + hh * d + e];
                    s[j] = dot / sqrt((double)d);
                    if (s[j] > top) top = s[j];
                }
                for (size_t j = 0; j < n; ++j) s[j] = exp(s[j] - top), total += s[j];
                for (size_t e = 0; e < d; ++e) {
                    double acc = 0;
                    for (size_t j = 0; j < n; ++j) acc += s[j] / total * v[j * h + hh * d + e];
                    ctx[i * h + hh * d + e] = acc;
                }
            }
        ref_linear(ctx, n, h, &y->attention_output_weight, &y->attention_output_bias, h, tmp);
        for (size_t i = 0; i < n * h; ++i) x[i] += tmp[i];
        for (size_t i = 0; i < n; ++i)
            ref_layer_norm(x + i * h, h, values_of(&y->attention_norm_weight), values_of(&y->attention_norm_bias),
                           t->layer_norm_epsilon);
        ref_linear(x, n, h, &y->intermediate_weight, &y->intermediate_bias, in, ffn);
        for (size_t i = 0; i < n * in; ++i) ffn[i] = 0.5 * ffn[i] * (1.0 + erf(ffn[i] / sqrt(2.0)));
        ref_linear(ffn, n, in, &y->output_weight, &y->output_bias, h, tmp);
        for (size_t i = 0; i < n * h; ++i) x[i] += tmp[i];
        for (size_t i = 0; i < n; ++i)
            ref_layer_norm(x + i * h, h, values_of(&y->output_norm_weight), values_of(&y->output_norm_bias),
                           t->layer_norm_epsilon);
    }
    double *pooled = calloc(h, 8);
    for (size_t j = 0; j < h; ++j) {
        if (t->pooling == uform_pooling_cls_k) pooled[j] = x[j];
        else {
            for (size_t i = 0; i < n; ++i) pooled[j] += x[i * h + j];
            pooled[j] /= (double)n;
        }
    }
    if (t->projection.data) ref_linear(pooled, 1, h, &t->projection, NULL, t->embedding_dimensions, embedding);
    else memcpy(embedding, pooled, h * sizeof(double));
    if (t->normalize) {
        double norm = 0;
        for (size_t j = 0; j < t->embedding_dimensions; ++j) norm += embedding[j] * embedding[j];
        for (size_t j = 0; j < t->embedding_dimensions; ++j) embedding[j] /= sqrt(norm);
    }
    free(x), free(q), free(k), free(v), free(ctx), free(tmp), free(ffn), free(s), free(pooled);
}

static inline double cosine_fd(float const *a, double const *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static inline double max_difference(float const *a, float const *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = fabs((double)a[i] - b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

/* ---- Batches ---- */

typedef struct batch_t {
    size_t count;
    int32_t *ids;
    size_t *offsets;
} batch_t;

/** Texts of lengths 1 .. context (specials play no role here), ids drawn over the vocabulary; every
 *  other text holds the towers' pad id (1) at every fifth token, as a "[PAD]" typed into a text gives
 *  (RoBERTa positions skip it). */
static inline batch_t make_batch(size_t count, size_t vocab, size_t context) {
    batch_t b = {.count = count, .offsets = calloc(count + 1, sizeof(size_t))};
    size_t total = 0;
    size_t *lengths = calloc(count, sizeof(size_t));
    for (size_t i = 0; i < count; ++i) {
        lengths[i] = 1 + (size_t)((uniform() + 1.0) * 0.5 * (double)context);
        if (lengths[i] > context) lengths[i] = context;
        if (i == 0) lengths[i] = context;
        if (i == 1 && count > 2) lengths[i] = 1;
        total += lengths[i];
    }
    b.ids = calloc(total, sizeof(int32_t));
    for (size_t i = 0, at = 0; i < count; ++i) {
        b.offsets[i] = at;
        for (size_t t = 0; t < lengths[i]; ++t) {
            int32_t const id = (int32_t)((uniform() + 1.0) * 0.5 * (double)(vocab - 1));
            b.ids[at++] = i % 2 == 0 && t % 5 == 2 ? 1 : id;
        }
        b.offsets[i + 1] = at;
    }
    free(lengths);
    return b;
}

static inline void free_batch(batch_t *b) { free(b->ids), free(b->offsets); }

static inline uform_status_t encode(uform_executor_t executor, struct uform_model_s const *model, batch_t const *b,
                             float *rows) {
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    return uform_text_encode_ids(executor, model, b->ids, b->offsets, b->count, NULL, NULL, &out, NULL);
}

#endif // UFORM_TEST_ENCODE_HARNESS_H
