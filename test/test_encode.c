/**
 *  @file   test_encode.c
 *  @brief  The text forward pass and `uform_encode_texts` on towers built in memory: every branch
 *          against a double-precision reference written here (word, position and token-type
 *          embeddings, post-norm layers, exact GELU, CLS and mean pooling, projection, the layout's
 *          and the caller's normalisation, Matryoshka truncation, f32/bf16/f16 weights and outputs),
 *          a batch of mixed lengths against each text alone, every CPU class this machine runs,
 *          NULL, RAM and deferred calls, skipped items, residency and argument errors.
 */
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
static double uniform(void) { // [-1, 1)
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static uint16_t to_bf16(float value) {
    union { float f; uint32_t u; } bits = {.f = value};
    return (uint16_t)((bits.u + 0x7FFFu + ((bits.u >> 16) & 1u)) >> 16);
}
static uint16_t to_f16(float value) {
    _Float16 half = (_Float16)value;
    uint16_t out;
    memcpy(&out, &half, 2);
    return out;
}
static float from_f16(uint16_t value) {
    _Float16 half;
    memcpy(&half, &value, 2);
    return (float)half;
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

static uform_tensor_t make_tensor(size_t rows, size_t cols, double scale, double offset, uform_dtype_t dtype) {
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

static float const *values_of(uform_tensor_t const *tensor) {
    for (size_t i = 0; i < helds_count; ++i)
        if (helds[i]->data == tensor->data) return helds[i]->values;
    return NULL;
}

static void free_tensors(void) {
    for (size_t i = 0; i < helds_count; ++i) free(helds[i]->values), free(helds[i]->data), free(helds[i]);
    helds_count = 0;
}

/** Weights scaled so every branch matters: residual and product of similar size, LayerNorm gains
 *  away from one, biases away from zero. */
static uform_text_tower_t make_tower(config_t const *c) {
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

static int32_t replica_node_zero = 0;

static struct uform_model_s make_model(uform_text_tower_t *tower) {
    struct uform_model_s model = {0};
    model.modality = uform_modality_text_k, model.residency = uform_residency_ram_k;
    model.weights_dtype = tower->weights_dtype;
    model.replicas_count = 1, model.replica_nodes = &replica_node_zero, model.text_replicas = tower;
    return model;
}

/* ---- The reference, in double ---- */

static void ref_layer_norm(double *x, size_t n, float const *g, float const *b, double eps) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < n; ++j) mean += x[j];
    mean /= (double)n;
    for (size_t j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= (double)n;
    for (size_t j = 0; j < n; ++j) x[j] = (x[j] - mean) / sqrt(var + eps) * g[j] + b[j];
}

/** y[rows][out] = x[rows][in] W^T + b */
static void ref_linear(double const *x, size_t rows, size_t in, uform_tensor_t const *w, uform_tensor_t const *b,
                       size_t out, double *y) {
    float const *wv = values_of(w), *bv = b && b->data ? values_of(b) : NULL;
    for (size_t i = 0; i < rows; ++i)
        for (size_t o = 0; o < out; ++o) {
            double s = bv ? bv[o] : 0.0;
            for (size_t k = 0; k < in; ++k) s += x[i * in + k] * wv[o * in + k];
            y[i * out + o] = s;
        }
}

static void reference(uform_text_tower_t const *t, int32_t const *ids, size_t n, double *embedding) {
    size_t h = t->hidden, in = t->intermediate, heads = t->heads, d = h / heads;
    double *x = calloc(n * h, sizeof(double)), *q = calloc(n * h, 8), *k = calloc(n * h, 8), *v = calloc(n * h, 8);
    double *ctx = calloc(n * h, 8), *tmp = calloc(n * h, 8), *ffn = calloc(n * in, 8), *s = calloc(n, 8);
    float const *word = values_of(&t->word_embeddings), *pos = values_of(&t->position_embeddings);
    float const *types = t->token_type_embeddings.data ? values_of(&t->token_type_embeddings) : NULL;
    for (size_t i = 0; i < n; ++i) {
        size_t p = t->position_ids == uform_position_ids_roberta_k ? (size_t)t->pad_id + 1 + i : i;
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

static double cosine_fd(float const *a, double const *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static double max_difference(float const *a, float const *b, size_t n) {
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

/** Texts of lengths 1 .. context (specials play no role here), ids drawn over the vocabulary. */
static batch_t make_batch(size_t count, size_t vocab, size_t context) {
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
        for (size_t t = 0; t < lengths[i]; ++t) b.ids[at++] = (int32_t)((uniform() + 1.0) * 0.5 * (double)(vocab - 1));
        b.offsets[i + 1] = at;
    }
    free(lengths);
    return b;
}

static void free_batch(batch_t *b) { free(b->ids), free(b->offsets); }

static uform_status_t encode(uform_executor_t executor, struct uform_model_s const *model, batch_t const *b,
                             float *rows) {
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    return uform_text_encode_ids(executor, model, b->ids, b->offsets, b->count, NULL, NULL, &out, NULL);
}

/* ---- Tests ---- */

/** Every branch against the reference, and the batch against each text alone. */
static void test_against_reference(config_t const *c, char const *name, double threshold) {
    uform_text_tower_t tower = make_tower(c);
    struct uform_model_s model = make_model(&tower);
    size_t width = tower.embedding_dimensions, count = 13;
    batch_t b = make_batch(count, c->vocab, c->context);
    float *rows = calloc(count * width, sizeof(float)), *alone = calloc(width, sizeof(float));
    double *expected = calloc(width, sizeof(double));
    CHECK_STATUS(encode(NULL, &model, &b, rows), uform_status_ok_k);
    double worst_cos = 1, worst_alone = 0;
    for (size_t i = 0; i < count; ++i) {
        size_t n = b.offsets[i + 1] - b.offsets[i];
        reference(&tower, b.ids + b.offsets[i], n, expected);
        double cos = cosine_fd(rows + i * width, expected, width);
        if (cos < worst_cos) worst_cos = cos;
        batch_t one = {.count = 1, .ids = b.ids + b.offsets[i], .offsets = (size_t[]) {0, n}};
        CHECK_STATUS(encode(NULL, &model, &one, alone), uform_status_ok_k);
        double diff = max_difference(alone, rows + i * width, width);
        if (diff > worst_alone) worst_alone = diff;
    }
    printf("%-28s cosine to reference >= %.7f, batch vs alone max |diff| %.2e\n", name, worst_cos, worst_alone);
    CHECK(worst_cos >= threshold);
    CHECK(worst_alone <= (c->dtype == uform_dtype_f32_k ? 2e-5 : 2e-2));
    free(rows), free(alone), free(expected), free_batch(&b), free(tower.layers), free_tensors();
}

/** Every class this machine runs, on RAM executors of two threads, against the NULL executor. */
static void test_classes(config_t const *c, char const *name) {
    uform_text_tower_t tower = make_tower(c);
    struct uform_model_s model = make_model(&tower);
    size_t width = tower.embedding_dimensions, count = 40;
    batch_t b = make_batch(count, c->vocab, c->context);
    float *base = calloc(count * width, sizeof(float)), *rows = calloc(count * width, sizeof(float));
    double *expected = calloc(width, sizeof(double));
    CHECK_STATUS(encode(NULL, &model, &b, base), uform_status_ok_k);
    uform_cpu_class_t own;
    CHECK_OK(uform_cpu_detect(&own, NULL));
    uform_cpu_class_t const classes[] = {uform_cpu_class_serial_k, uform_cpu_class_intel_haswell_k,
                                         uform_cpu_class_intel_skylake_k, uform_cpu_class_intel_icelake_k,
                                         uform_cpu_class_amd_genoa_k, uform_cpu_class_intel_sapphire_k};
    for (size_t k = 0; k < sizeof classes / sizeof *classes; ++k) {
        uform_ram_options_t ram = {.cpu_class = classes[k]};
        uform_executor_t executor = NULL;
        size_t cores = 0;
        uform_memory_domain_t domain;
        CHECK_OK(uform_memory_domains(&domain, 1, &cores));
        size_t threads = domain.cores_count >= 2 ? 2 : 1;
        if (uform_executor_for_ram(&ram, threads, 0, &executor) != uform_status_ok_k) {
            printf("%-28s class %s: not on this machine (%s)\n", name, uform_cpu_class_name(classes[k]),
                   uform_error_message());
            continue;
        }
        memset(rows, 0, count * width * sizeof(float));
        CHECK_STATUS(encode(executor, &model, &b, rows), uform_status_ok_k);
        double worst_cos = 1;
        for (size_t i = 0; i < count; ++i) {
            reference(&tower, b.ids + b.offsets[i], b.offsets[i + 1] - b.offsets[i], expected);
            double cos = cosine_fd(rows + i * width, expected, width);
            if (cos < worst_cos) worst_cos = cos;
        }
        double diff = max_difference(rows, base, count * width);
        printf("%-28s class %-15s kernels %-8s cosine >= %.7f, vs NULL executor max |diff| %.2e\n", name,
               uform_cpu_class_name(classes[k]), uform_kernels_for(classes[k])->name, worst_cos, diff);
        CHECK(worst_cos >= (c->dtype == uform_dtype_f32_k ? 0.99999 : 0.999));
        uform_executor_free(executor);
    }
    free(base), free(rows), free(expected), free_batch(&b), free(tower.layers), free_tensors();
}

/** Output dtypes, truncation, normalisation, stride, skipped items, deferred calls. */
static void test_outputs(void) {
    config_t c = {.hidden = 64, .heads = 4, .intermediate = 128, .layers = 2, .vocab = 50, .max_positions = 40,
                  .context = 24, .projection = 48, .pooling = uform_pooling_mean_k, .dtype = uform_dtype_f32_k};
    uform_text_tower_t tower = make_tower(&c);
    struct uform_model_s model = make_model(&tower);
    size_t count = 7, width = 48;
    batch_t b = make_batch(count, c.vocab, c.context);
    float *full = calloc(count * width, sizeof(float));
    CHECK_STATUS(encode(NULL, &model, &b, full), uform_status_ok_k);

    /* Truncated to 16, normalised, in bf16 and f16, rows 40 bytes apart. */
    uint16_t *narrow = calloc(count * 20, sizeof(uint16_t));
    for (int dtype = 1; dtype <= 2; ++dtype) {
        memset(narrow, 0xAB, count * 20 * sizeof(uint16_t));
        uform_embeddings_t out = {.data = narrow, .stride = 40, .dimensions = 16, .dtype = (uform_dtype_t)dtype,
                                  .normalize = 1};
        CHECK_STATUS(uform_text_encode_ids(NULL, &model, b.ids, b.offsets, count, NULL, NULL, &out, NULL), uform_status_ok_k);
        for (size_t i = 0; i < count; ++i) {
            double norm = 0, worst = 0;
            for (size_t j = 0; j < 16; ++j) norm += (double)full[i * width + j] * full[i * width + j];
            for (size_t j = 0; j < 16; ++j) {
                uint16_t raw = narrow[i * 20 + j];
                float got = dtype == 1 ? uform_bf16_to_f32(raw) : from_f16(raw);
                double want = full[i * width + j] / sqrt(norm);
                if (fabs(got - want) > worst) worst = fabs(got - want);
            }
            CHECK(worst < (dtype == 1 ? 1e-2 : 1e-3));
            CHECK(narrow[i * 20 + 16] == 0xABAB); /* past the row: untouched */
        }
    }

    /* Skipped items get zero rows; the others equal the full batch. */
    uform_status_t skip[7] = {0, uform_status_invalid_argument_k, 0, 0, uform_status_corrupt_file_k, 0, 0};
    uform_status_t statuses[7];
    memset(statuses, 0x7F, sizeof statuses);
    float *rows = calloc(count * width, sizeof(float));
    for (size_t i = 0; i < count * width; ++i) rows[i] = 7.0f;
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_text_encode_ids(NULL, &model, b.ids, b.offsets, count, skip, statuses, &out, NULL), uform_status_ok_k);
    CHECK(memcmp(statuses, skip, sizeof skip) == 0);
    for (size_t i = 0; i < count; ++i)
        for (size_t j = 0; j < width; ++j)
            if (skip[i]) CHECK(rows[i * width + j] == 0.0f);
            else CHECK(fabsf(rows[i * width + j] - full[i * width + j]) < 2e-5f);

    /* Deferred on a RAM executor, then waited. */
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 4, &executor), uform_status_ok_k);
    memset(rows, 0, count * width * sizeof(float));
    uform_outcome_t outcome;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &out, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(max_difference(rows, full, count * width) < 2e-5);

    /* Several deferred calls queued back to back, in order, into separate rows. */
    float *many = calloc(4 * count * width, sizeof(float));
    uform_outcome_t outcomes[4];
    uform_embeddings_t outs[4];
    for (int k = 0; k < 4; ++k) {
        outs[k] = (uform_embeddings_t) {.data = many + k * count * width, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &outs[k], &outcomes[k]),
                     uform_status_ok_k);
    }
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    for (int k = 0; k < 4; ++k) {
        CHECK_STATUS(uform_outcome_poll(&outcomes[k]), uform_status_ok_k);
        CHECK(max_difference(many + k * count * width, full, count * width) < 2e-5);
    }

    /* Errors: named, nothing written, the outcome finished with the same status. */
    for (size_t i = 0; i < count * width; ++i) rows[i] = 7.0f;
    uform_embeddings_t bad = out;
    bad.dtype = uform_dtype_f64_k;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, &outcome),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dtype is 3");
    CHECK(outcome.finished && outcome.status == uform_status_invalid_argument_k);
    CHECK(strstr(outcome.message, "embeddings.dtype") != NULL);
    bad = out, bad.dimensions = 49;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dimensions is 49; the model's embeddings are 48 wide");
    bad = out, bad.stride = 100;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.stride is 100 bytes; a row of 48 f32 values takes 192");
    bad = out, bad.data = NULL;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.data is NULL");
    int32_t wrong[3] = {3, 50, 4};
    batch_t w = {.count = 1, .ids = wrong, .offsets = (size_t[]) {0, 3}};
    CHECK_STATUS(encode(executor, &model, &w, rows), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text 0: token 1 is id 50; the model's vocabulary has 50");
    int32_t *longer = calloc(25, sizeof(int32_t));
    batch_t l = {.count = 1, .ids = longer, .offsets = (size_t[]) {0, 25}};
    CHECK_STATUS(encode(executor, &model, &l, rows), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text 0 has 25 tokens; expected 1 to 24");
    for (size_t i = 0; i < count * width; ++i) CHECK(rows[i] == 7.0f);

    /* Zero texts: OK, nothing written. */
    CHECK_STATUS(uform_text_encode_ids(executor, &model, NULL, (size_t[]) {0}, 0, NULL, NULL, &out, NULL), uform_status_ok_k);

    /* A model whose replica lives on another node than the executor's threads. */
    int32_t elsewhere = 4095;
    model.replica_nodes = &elsewhere;
    CHECK_STATUS(encode(executor, &model, &b, rows), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("which holds no replica of the model");
    CHECK_STATUS(encode(NULL, &model, &b, rows), uform_status_ok_k); /* the NULL executor takes any */
    model.replica_nodes = &replica_node_zero;

    uform_executor_free(executor);
    free(longer), free(many), free(rows), free(narrow), free(full), free_batch(&b), free(tower.layers), free_tensors();
}

/** A batch large enough for several chunks and many GEMM tiles, on every thread this machine lends. */
static void test_large_batch(void) {
    config_t c = {.hidden = 128, .heads = 2, .intermediate = 256, .layers = 1, .vocab = 300, .max_positions = 140,
                  .context = 128, .pooling = uform_pooling_cls_k, .dtype = uform_dtype_f32_k, .token_types = 1};
    uform_text_tower_t tower = make_tower(&c);
    struct uform_model_s model = make_model(&tower);
    size_t count = 260, width = 128;
    batch_t b = make_batch(count, c.vocab, c.context);
    float *rows = calloc(count * width, sizeof(float)), *base = calloc(count * width, sizeof(float));
    CHECK_STATUS(encode(NULL, &model, &b, base), uform_status_ok_k);
    uform_executor_t executor = NULL;
    size_t cores = 0;
    uform_memory_domain_t domain;
    CHECK_OK(uform_memory_domains(&domain, 1, &cores));
    CHECK_STATUS(uform_executor_for_ram(NULL, domain.cores_count >= 3 ? 3 : domain.cores_count, 0, &executor),
                 uform_status_ok_k);
    CHECK_STATUS(encode(executor, &model, &b, rows), uform_status_ok_k);
    double diff = max_difference(rows, base, count * width);
    printf("large batch (%zu texts, %zu tokens): RAM vs NULL max |diff| %.2e\n", count, b.offsets[count], diff);
    CHECK(diff < 2e-5);
    double *expected = calloc(width, sizeof(double));
    for (size_t i = 0; i < count; i += 37) {
        reference(&tower, b.ids + b.offsets[i], b.offsets[i + 1] - b.offsets[i], expected);
        CHECK(cosine_fd(rows + i * width, expected, width) >= 0.99999);
    }
    uform_executor_free(executor);
    free(expected), free(rows), free(base), free_batch(&b), free(tower.layers), free_tensors();
}

/* ---- The verb: uform_encode_texts on the committed tiny model (test/models/tiny-bert) ---- */

typedef struct blocker_t {
    atomic_int release, entered;
} blocker_t;

static void block_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)thread, (void)domain;
    blocker_t *b = context;
    atomic_store(&b->entered, 1);
    while (!atomic_load(&b->release)) uform_sleep_seconds(0.001);
}

typedef struct reentry_t {
    uform_executor_t executor;
    uform_model_t model;
    uform_status_t status;
    char message[256];
} reentry_t;

static void reentry_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    reentry_t *r = context;
    if (thread != 0) return;
    char const *texts[] = {"hello"};
    float row[64];
    uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
    r->status = uform_encode_texts(r->executor, r->model, texts, NULL, 1, &out, NULL, NULL);
    snprintf(r->message, sizeof r->message, "%s", uform_error_message());
}

static void test_verb(void) {
    uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    CHECK_FATAL(model != NULL);
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
    size_t dims = description.dimensions;
    CHECK_FATAL(dims > 0 && dims <= 64);

    char const *texts[] = {"the quick brown fox", "jumps", "over the lazy dog and the lazy dog again", ""};
    size_t count = 4;
    float rows[4][64], alone[64];
    uform_embeddings_t out = {.data = rows, .stride = sizeof rows[0], .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, count, &out, NULL, NULL), uform_status_ok_k);
    /* Each text alone gives its row of the batch; the ids path gives the same. */
    for (size_t i = 0; i < count; ++i) {
        uform_embeddings_t one = {.data = alone, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(NULL, model, texts + i, NULL, 1, &one, NULL, NULL), uform_status_ok_k);
        CHECK(max_difference(alone, rows[i], dims) < 1e-5);
        int32_t ids[64];
        size_t n = 0;
        CHECK_STATUS(uform_model_tokenize(model, texts[i], strlen(texts[i]), ids, 64, &n), uform_status_ok_k);
        size_t offsets[2] = {0, n};
        CHECK_STATUS(uform_text_encode_ids(NULL, model, ids, offsets, 1, NULL, NULL, &one, NULL), uform_status_ok_k);
        CHECK(max_difference(alone, rows[i], dims) < 1e-6);
    }

    /* RAM and pool executors agree with the NULL one. */
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 1, &executor), uform_status_ok_k);
    float again[4][64];
    uform_embeddings_t out2 = {.data = again, .stride = sizeof again[0], .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, count, &out2, NULL, NULL), uform_status_ok_k);
    for (size_t i = 0; i < count; ++i) CHECK(max_difference(again[i], rows[i], dims) < 1e-5);
#ifdef UFORM_FU_STANDIN_PATH
    void *library = dlopen(UFORM_FU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL);
    void *(*pool_new)(char const *) = library ? (void *(*)(char const *))dlsym(library, "fu_pool_new") : NULL;
    int (*pool_spawn)(void *, size_t, int) = library ? (int (*)(void *, size_t, int))dlsym(library, "fu_pool_spawn") : NULL;
    void (*pool_delete)(void *) = library ? (void (*)(void *))dlsym(library, "fu_pool_delete") : NULL;
    if (pool_new && pool_spawn && pool_delete) {
        void *pool = pool_new("encode");
        CHECK(pool_spawn(pool, 2, 0));
        uform_executor_t pooled = NULL;
        CHECK_STATUS(uform_executor_on_pool(pool, NULL, 0, &pooled), uform_status_ok_k);
        memset(again, 0, sizeof again);
        CHECK_STATUS(uform_encode_texts(pooled, model, texts, NULL, count, &out2, NULL, NULL), uform_status_ok_k);
        for (size_t i = 0; i < count; ++i) CHECK(max_difference(again[i], rows[i], dims) < 1e-5);
        uform_executor_free(pooled);
        pool_delete(pool);
    }
    else printf("pool executor: the ForkUnion stand-in did not load (%s)\n", dlerror());
#endif

    /* Many texts (the token buffer grows as they come), each row as its text alone. */
    enum { many_count = 300 };
    char const *many_texts[many_count];
    for (size_t i = 0; i < many_count; ++i) many_texts[i] = texts[i % count];
    float (*many_rows)[64] = calloc(many_count, sizeof *many_rows);
    uform_embeddings_t many_out = {.data = many_rows, .stride = sizeof many_rows[0], .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(executor, model, many_texts, NULL, many_count, &many_out, NULL, NULL), uform_status_ok_k);
    for (size_t i = 0; i < many_count; ++i) CHECK(max_difference(many_rows[i], rows[i % count], dims) < 1e-5);
    free(many_rows);

    /* Invalid UTF-8: with statuses a zero row and the rest encoded; without, the whole call fails. */
    char const *mixed[] = {texts[0], "bad \xff\xfe byte", texts[2]};
    uform_status_t statuses[3] = {99, 99, 99};
    float mixed_rows[3][64];
    for (size_t i = 0; i < 3 * 64; ++i) mixed_rows[i / 64][i % 64] = 5.0f;
    uform_embeddings_t out3 = {.data = mixed_rows, .stride = sizeof mixed_rows[0], .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &out3, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_invalid_argument_k && statuses[2] == uform_status_ok_k);
    for (size_t j = 0; j < dims; ++j) CHECK(mixed_rows[1][j] == 0.0f);
    CHECK(max_difference(mixed_rows[0], rows[0], dims) < 1e-5 && max_difference(mixed_rows[2], rows[2], dims) < 1e-5);
    for (size_t i = 0; i < 3 * 64; ++i) mixed_rows[i / 64][i % 64] = 5.0f;
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &out3, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_texts: text 1:");
    for (size_t i = 0; i < 3 * 64; ++i) CHECK(mixed_rows[i / 64][i % 64] == 5.0f);

    /* Arguments. */
    CHECK_STATUS(uform_encode_texts(executor, NULL, texts, NULL, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    CHECK_STATUS(uform_encode_texts(executor, model, NULL, NULL, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("texts is NULL for 1 texts");
    char const *holes[] = {"a", NULL};
    CHECK_STATUS(uform_encode_texts(executor, model, holes, NULL, 2, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("texts[1] is NULL");
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, 1, NULL, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings is NULL");
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, 0, &out, NULL, NULL), uform_status_ok_k);

    /* Residency: a VRAM-resident model meets a RAM executor, and the NULL one. */
    struct uform_model_s *inner = (struct uform_model_s *)model;
    inner->residency = uform_residency_vram_k;
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, 1, &out, NULL, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("the model is VRAM-resident and the executor is a RAM executor");
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 1, &out, NULL, NULL), uform_status_unsupported_k);
    inner->residency = uform_residency_ram_k;

    /* CONTENDED: from inside a callback of the same executor. */
    reentry_t reentry = {.executor = executor, .model = model, .status = 99};
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = reentry_task, .context = &reentry};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(reentry.status == uform_status_contended_k);
    CHECK(strstr(reentry.message, "inside a callback") != NULL);

    /* DEFERRED_FULL and submission order: a deferred call holds the only slot (deferred_limit 1). */
    blocker_t blocker = {0};
    uform_call_t hold = {.schedule = uform_schedule_static_k, .tasks = 1, .task = block_task, .context = &blocker};
    uform_outcome_t held, encoded;
    CHECK_STATUS(uform_executor_call(executor, &hold, &held), uform_status_ok_k);
    while (!atomic_load(&blocker.entered)) uform_sleep_seconds(0.001);
    CHECK_STATUS(uform_executor_call(executor, &hold, &encoded), uform_status_deferred_full_k); /* sanity */
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, count, &out2, NULL, &encoded),
                 uform_status_deferred_full_k);
    CHECK(encoded.finished && encoded.status == uform_status_deferred_full_k);
    atomic_store(&blocker.release, 1);
    CHECK_STATUS(uform_outcome_wait(&held, -1), uform_status_ok_k);
    memset(again, 0, sizeof again);
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, count, &out2, NULL, &encoded), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&encoded, -1), uform_status_ok_k);
    for (size_t i = 0; i < count; ++i) CHECK(max_difference(again[i], rows[i], dims) < 1e-5);

    /* Matryoshka truncation with normalisation, f16 output. */
    uint16_t halves[4][8];
    uform_embeddings_t narrow = {.data = halves, .stride = sizeof halves[0], .dimensions = 4, .dtype = uform_dtype_f16_k,
                                 .normalize = 1};
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, count, &narrow, NULL, NULL), uform_status_ok_k);
    for (size_t i = 0; i < count; ++i) {
        double norm = 0;
        for (size_t j = 0; j < 4; ++j) norm += (double)from_f16(halves[i][j]) * from_f16(halves[i][j]);
        CHECK(fabs(norm - 1.0) < 2e-3);
    }
    uform_executor_free(executor);
    uform_model_free(model);
}

/* ---- Real models against PyTorch (test/encode/make_references.py) ---- */

static char *read_file(char const *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long length = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)length + 1);
    if (data && fread(data, 1, (size_t)length, f) != (size_t)length) free(data), data = NULL;
    fclose(f);
    if (data) data[length] = '\0', *size = (size_t)length;
    return data;
}

static double cosine_ff(float const *a, float const *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/** Worst cosine of `count` rows against the expected ones; prints it with a label. */
static double worst_cosine(char const *label, float const *rows, float const *expected, size_t count, size_t dims) {
    double worst = 1;
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
        double c = cosine_ff(rows + i * dims, expected + i * dims, dims);
        if (c < worst) worst = c, at = i;
    }
    printf("%-44s %4zu texts: worst cosine %.7f (text %zu)\n", label, count, worst, at);
    return worst;
}

/**
 *  test_encode --model DIR --ids FILE --expected FILE [--texts FILE] [--limit N]
 *
 *  The model's embeddings of the texts, from the ids HF tokenizers gave (the forward pass alone) and,
 *  when the engine's tokenizer is built, from the texts themselves (uform_encode_texts), against
 *  PyTorch's: cosine >= 0.99999 per text with f32 weights, >= 0.999 with bf16, on a RAM executor of
 *  every core; SERIAL and HASWELL pinned on a subset.
 */
static int test_real_model(char const *dir, char const *ids_path, char const *expected_path, char const *texts_path,
                           size_t limit) {
    size_t ids_size = 0, expected_size = 0, texts_size = 0;
    char *ids_text = read_file(ids_path, &ids_size), *expected_raw = read_file(expected_path, &expected_size);
    char *texts_raw = texts_path ? read_file(texts_path, &texts_size) : NULL;
    CHECK_FATAL(ids_text && expected_raw);
    size_t count = 0, total = 0;
    for (char *c = ids_text; *c; ++c) count += *c == '\n', total += *c == ' ' || *c == '\n';
    int32_t *ids = malloc(total * sizeof(int32_t));
    size_t *offsets = malloc((count + 1) * sizeof(size_t));
    offsets[0] = 0;
    char *cursor = ids_text;
    for (size_t i = 0, at = 0; i < count; ++i) {
        while (*cursor && *cursor != '\n') ids[at++] = (int32_t)strtol(cursor, &cursor, 10), cursor += *cursor == ' ';
        ++cursor;
        offsets[i + 1] = at;
    }
    size_t dims = expected_size / sizeof(float) / count;
    if (limit && limit < count) count = limit;
    float const *expected = (float const *)expected_raw;
    float *rows = calloc(count * dims, sizeof(float));
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &executor), uform_status_ok_k);
    uform_executor_description_t description;
    CHECK_OK(uform_executor_describe(executor, &description));
    /* Every core: the executor's own default leaves one in eight out. */
    size_t cores = 0;
    uform_memory_domain_t domains[64];
    CHECK_OK(uform_memory_domains(domains, 64, &cores));
    size_t all = 0;
    for (size_t d = 0; d < cores && d < 64; ++d) all += domains[d].cores_count;
    uform_executor_free(executor);
    CHECK_STATUS(uform_executor_for_ram(NULL, all, 0, &executor), uform_status_ok_k);

    char const *texts[2048];
    size_t lengths[2048], texts_count = 0;
    for (char *line = texts_raw; line && *line && texts_count < 2048 && texts_count < count;) {
        char *newline = strchr(line, '\n');
        texts[texts_count] = line, lengths[texts_count++] = newline ? (size_t)(newline - line) : strlen(line);
        line = newline ? newline + 1 : line + strlen(line);
    }

    uform_dtype_t const dtypes[2] = {uform_dtype_f32_k, uform_dtype_bf16_k};
    double const thresholds[2] = {0.99999, 0.999};
    for (int k = 0; k < 2; ++k) {
        uform_model_options_t options = {.path = dir, .modality = uform_modality_text_k,
                                         .residency = uform_residency_ram_k, .weights_dtype = dtypes[k]};
        uform_model_t model = NULL;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
        if (!model) break;
        uform_model_description_t md;
        CHECK_STATUS(uform_model_describe(model, &md), uform_status_ok_k);
        CHECK(md.dimensions == dims);
        char label[256];
        uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
        memset(rows, 0, count * dims * sizeof(float));
        CHECK_STATUS(uform_text_encode_ids(executor, model, ids, offsets, count, NULL, NULL, &out, NULL), uform_status_ok_k);
        snprintf(label, sizeof label, "%s weights, ids given", k ? "bf16" : "f32");
        CHECK(worst_cosine(label, rows, expected, count, dims) >= thresholds[k]);

        /* The lower classes on a subset. */
        uform_cpu_class_t const lower[2] = {uform_cpu_class_serial_k, uform_cpu_class_intel_haswell_k};
        for (int c = 0; c < 2 && k == 0; ++c) {
            uform_ram_options_t ram = {.cpu_class = lower[c]};
            uform_executor_t pinned = NULL;
            if (uform_executor_for_ram(&ram, all, 0, &pinned) != uform_status_ok_k) continue;
            size_t subset = limit ? (limit / 5 ? limit / 5 : 1) : 40;
            if (subset > count) subset = count;
            memset(rows, 0, subset * dims * sizeof(float));
            CHECK_STATUS(uform_text_encode_ids(pinned, model, ids, offsets, subset, NULL, NULL, &out, NULL), uform_status_ok_k);
            snprintf(label, sizeof label, "f32 weights, ids given, class %s", uform_cpu_class_name(lower[c]));
            CHECK(worst_cosine(label, rows, expected, subset, dims) >= thresholds[k]);
            uform_executor_free(pinned);
        }

        /* Through the engine's tokenizer, when this build has one. */
        size_t probe = 0;
        uform_status_t tokenizing = uform_model_tokenize(model, "probe", 5, NULL, 0, &probe);
        if (texts_count == count && tokenizing == uform_status_ok_k) {
            memset(rows, 0, count * dims * sizeof(float));
            CHECK_STATUS(uform_encode_texts(executor, model, texts, lengths, count, &out, NULL, NULL), uform_status_ok_k);
            snprintf(label, sizeof label, "%s weights, uform_encode_texts", k ? "bf16" : "f32");
            CHECK(worst_cosine(label, rows, expected, count, dims) >= thresholds[k]);
        }
        else if (k == 0)
            printf("uform_encode_texts from texts: skipped (%s: %s)\n", uform_status_name(tokenizing), uform_error_message());
        uform_model_free(model);
    }
    uform_executor_free(executor);
    free(ids), free(offsets), free(rows), free(ids_text), free(expected_raw), free(texts_raw);
    return check_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        char const *model = NULL, *ids = NULL, *expected = NULL, *texts = NULL;
        size_t limit = 0;
        for (int i = 1; i + 1 < argc; i += 2) {
            if (!strcmp(argv[i], "--model")) model = argv[i + 1];
            else if (!strcmp(argv[i], "--ids")) ids = argv[i + 1];
            else if (!strcmp(argv[i], "--expected")) expected = argv[i + 1];
            else if (!strcmp(argv[i], "--texts")) texts = argv[i + 1];
            else if (!strcmp(argv[i], "--limit")) limit = strtoul(argv[i + 1], NULL, 10);
        }
        if (!model || !ids || !expected) {
            fprintf(stderr, "usage: test_encode [--model DIR --ids FILE --expected FILE [--texts FILE] [--limit N]]\n");
            return 2;
        }
        char probe[4096];
        snprintf(probe, sizeof probe, "%s/config.json", model);
        FILE *exists = fopen(probe, "r");
        if (!exists) SKIP("no model at %s (build.sh fetches all-MiniLM-L6-v2; UForm3 fixtures need torch)", model);
        fclose(exists);
        return test_real_model(model, ids, expected, texts, limit);
    }
    config_t bert = {.hidden = 64, .heads = 4, .intermediate = 256, .layers = 2, .vocab = 97, .max_positions = 40,
                     .context = 32, .pooling = uform_pooling_mean_k, .positions = uform_position_ids_absolute_k,
                     .token_types = 1, .normalize = 1, .dtype = uform_dtype_f32_k};
    config_t uform3 = {.hidden = 96, .heads = 3, .intermediate = 384, .layers = 2, .vocab = 120, .max_positions = 40,
                       .context = 30, .projection = 80, .pooling = uform_pooling_cls_k,
                       .positions = uform_position_ids_roberta_k, .dtype = uform_dtype_f32_k};
    test_against_reference(&bert, "bert mean f32", 0.99999);
    test_against_reference(&uform3, "uform3 cls f32", 0.99999);
    config_t b16 = bert, u16 = uform3, h16 = uform3;
    b16.dtype = uform_dtype_bf16_k, u16.dtype = uform_dtype_bf16_k, h16.dtype = uform_dtype_f16_k;
    test_against_reference(&b16, "bert mean bf16 weights", 0.999);
    test_against_reference(&u16, "uform3 cls bf16 weights", 0.999);
    test_against_reference(&h16, "uform3 cls f16 weights", 0.9999);
    test_classes(&bert, "bert mean f32");
    test_classes(&u16, "uform3 cls bf16 weights");
    test_outputs();
    test_large_batch();
    test_verb();
    return check_failures ? 1 : 0;
}
