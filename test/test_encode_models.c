/**
 *  @file   test_encode_models.c
 *  @brief  Real models against PyTorch (test/encode/make_references.py): all-MiniLM-L6-v2 against
 *          sentence-transformers and UForm3-shaped towers against the `uform` package, embedding by
 *          embedding, by cosine.
 *
 *  usage: test_encode_models [--vram | --numa] --model DIR --ids FILE --expected FILE [--texts FILE] [--features FILE] [--limit N]
 *         exits 77 (skipped) when DIR holds no model, and with --vram when there is no GPU
 */
#define _GNU_SOURCE 1
#include "check.h"
#include "rows.h"
#include "internal.h"
#include "models/text_forward.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <numa.h>
#include <numaif.h>
#include <string.h>
#include <unistd.h>

/* ---- Real models against PyTorch (test/encode/make_references.py) ---- */

/** Splits `raw` (may be NULL) into at most `capacity` lines, in place of copies: `texts[i]` points at
 *  line i, `lengths[i]` is its length without the newline. Returns how many. */
static size_t split_lines(char *raw, char const **texts, size_t *lengths, size_t capacity) {
    size_t count = 0;
    for (char *line = raw; line && *line && count < capacity;) {
        char *newline = strchr(line, '\n');
        texts[count] = line, lengths[count++] = newline ? (size_t)(newline - line) : strlen(line);
        line = newline ? newline + 1 : line + strlen(line);
    }
    return count;
}

/** Worst cosine of `count` rows against the expected ones; prints it with a label. */
static double worst_cosine(char const *label, float const *rows, float const *expected, size_t count, size_t dims) {
    double worst = 1;
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
        double c = cosine(rows + i * dims, expected + i * dims, dims);
        if (c < worst) worst = c, at = i;
    }
    printf("%-44s %4zu texts: worst cosine %.7f (text %zu)\n", label, count, worst, at);
    return worst;
}

/** The token rows of a text of `n` ids the features references keep (make_references.py's
 *  `feature_tokens`): first, second, middle, last, without repeats, ascending. Returns how many. */
static size_t feature_tokens(size_t n, size_t picked[4]) {
    size_t candidates[4] = {0, n > 1 ? 1 : 0, n / 2, n - 1}, count = 0;
    for (int i = 0; i < 4; ++i) {
        int seen = 0;
        for (size_t j = 0; j < count; ++j) seen |= picked[j] == candidates[i];
        if (!seen) picked[count++] = candidates[i];
    }
    for (size_t i = 1; i < count; ++i) /* ascending */
        for (size_t j = i; j > 0 && picked[j - 1] > picked[j]; --j) {
            size_t swap = picked[j];
            picked[j] = picked[j - 1], picked[j - 1] = swap;
        }
    return count;
}

#define FEATURE_TEXTS 24

/** A float as bf16 and f16 bits, rounded to nearest even (as the engine's conversions). */
static uint16_t to_bf16_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
static uint16_t to_f16_bits(float value) {
#if defined(UFORM_SOFT_F16)
    return uform_soft_f16_from_f32(value);
#else
    _Float16 half = (_Float16)value;
    uint16_t out;
    memcpy(&out, &half, sizeof out);
    return out;
#endif
}

/**
 *  The features (`uform_embeddings_t.features`, the last hidden states) of the first FEATURE_TEXTS
 *  texts against PyTorch's rows of the same tokens (make_references.py `features`): cosine >= 0.99999
 *  per row with f32 weights (`threshold`), zero rows past each text up to the context; the embeddings
 *  asked with features against those asked without; bf16 and f16 features are the f32 ones rounded,
 *  bit for bit; a stride wider than the features leaves the bytes between items untouched; a text's
 *  features alone equal its features in the batch; with `mean_pooled` (mean pooling, no projection:
 *  MiniLM), the normalised mean of a text's rows is its embedding.
 */
static void check_features(uform_executor_t executor, uform_model_t model, int32_t const *ids, size_t const *offsets,
                           size_t count, float const *reference, size_t reference_rows, double threshold,
                           int mean_pooled, char const *label) {
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(model, &md));
    if (count > FEATURE_TEXTS) count = FEATURE_TEXTS;
    size_t const hidden = md.hidden, tokens = md.tokens, dims = md.dimensions, item = tokens * hidden;
    CHECK_FATAL(hidden > 0 && tokens > 0);
    float *features = malloc(count * item * sizeof(float)), *rows = malloc(count * dims * sizeof(float));
    float *plain = malloc(count * dims * sizeof(float));
    memset(features, 0x5A, count * item * sizeof(float)); /* every byte must be written */
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k, .features = features};
    CHECK_STATUS(uform_text_encode_ids(executor, model, ids, offsets, count, NULL, NULL, &out, NULL), uform_status_ok_k);
    uform_embeddings_t without = {.data = plain, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_text_encode_ids(executor, model, ids, offsets, count, NULL, NULL, &without, NULL), uform_status_ok_k);

    double worst = 1, worst_embedding = 1, worst_mean = 1;
    size_t at = 0, row = 0, nonzero_padding = 0;
    for (size_t i = 0; i < count; ++i) {
        size_t length = offsets[i + 1] - offsets[i], picked[4];
        float const *mine = features + i * item;
        for (size_t p = 0, n = feature_tokens(length, picked); p < n && row < reference_rows; ++p, ++row) {
            double c = cosine(mine + picked[p] * hidden, reference + row * hidden, hidden);
            if (c < worst) worst = c, at = i;
        }
        for (size_t v = length * hidden; v < item; ++v) nonzero_padding += mine[v] != 0.0f;
        double c = cosine(rows + i * dims, plain + i * dims, dims);
        worst_embedding = c < worst_embedding ? c : worst_embedding;
        if (mean_pooled) { /* the pooled rows are the embedding up to normalisation */
            float mean[1024] = {0};
            for (size_t t = 0; t < length; ++t)
                for (size_t j = 0; j < hidden && j < 1024; ++j) mean[j] += mine[t * hidden + j] / (float)length;
            c = cosine(mean, rows + i * dims, dims);
            worst_mean = c < worst_mean ? c : worst_mean;
        }
    }
    printf("%-44s %4zu texts: features' worst cosine %.7f (text %zu), %zu rows\n", label, count, worst, at, row);
    CHECK(row == reference_rows);
    CHECK(worst >= threshold);
    CHECK(nonzero_padding == 0);
    CHECK(worst_embedding >= 0.99999);
    if (mean_pooled) CHECK(worst_mean >= 0.99999);

    /* bf16 and f16 features: the f32 ones rounded; packed at a wider stride, odd like the address they
     * start at (features need no alignment); f32 features so too, the same bytes. */
    size_t const stride = item * 2 + 65;
    unsigned char *narrow_block = malloc(count * stride + 1), *narrow = narrow_block + 1;
    uint16_t *narrow_rows = malloc(count * dims * 2);
    uform_dtype_t const narrow_dtypes[2] = {uform_dtype_bf16_k, uform_dtype_f16_k};
    for (int k = 0; k < 2; ++k) {
        memset(narrow, 0xA5, count * stride);
        uform_embeddings_t half = {.data = narrow_rows, .dtype = narrow_dtypes[k], .features = narrow,
                                   .features_stride = stride};
        CHECK_STATUS(uform_text_encode_ids(executor, model, ids, offsets, count, NULL, NULL, &half, NULL), uform_status_ok_k);
        size_t mismatches = 0, gap_touched = 0;
        for (size_t i = 0; i < count; ++i) {
            for (size_t v = 0; v < item; ++v) {
                float value = features[i * item + v];
                uint16_t want = k == 0 ? to_bf16_bits(value) : to_f16_bits(value), got;
                memcpy(&got, narrow + i * stride + v * 2, 2);
                mismatches += got != want;
            }
            for (size_t b = item * 2; b < stride; ++b) gap_touched += narrow[i * stride + b] != 0xA5;
        }
        printf("%-44s %s features: %zu values differ from the f32 ones rounded, %zu gap bytes touched\n", label,
               k ? "f16" : "bf16", mismatches, gap_touched);
        CHECK(mismatches == 0);
        CHECK(gap_touched == 0);
    }
    {
        size_t const odd = item * 4 + 3;
        unsigned char *block = malloc(count * odd + 3), *wide = block + 3;
        float *wide_rows = malloc(count * dims * sizeof(float));
        uform_embeddings_t f32 = {.data = wide_rows, .dtype = uform_dtype_f32_k, .features = wide, .features_stride = odd};
        CHECK_STATUS(uform_text_encode_ids(executor, model, ids, offsets, count, NULL, NULL, &f32, NULL), uform_status_ok_k);
        size_t differing = 0;
        for (size_t i = 0; i < count; ++i) differing += memcmp(wide + i * odd, features + i * item, item * 4) != 0;
        printf("%-44s f32 features at an odd address and stride: %zu items differ\n", label, differing);
        CHECK(differing == 0);
        free(block), free(wide_rows);
    }

    /* A text alone: its features as in the batch. */
    size_t const lone = count > 3 ? 3 : count - 1;
    float *alone = malloc(item * sizeof(float)), alone_row[1024];
    size_t lone_offsets[2] = {0, offsets[lone + 1] - offsets[lone]};
    uform_embeddings_t one = {.data = alone_row, .dtype = uform_dtype_f32_k, .features = alone};
    CHECK_STATUS(uform_text_encode_ids(executor, model, ids + offsets[lone], lone_offsets, 1, NULL, NULL, &one, NULL),
                 uform_status_ok_k);
    double worst_alone = 1;
    for (size_t t = 0; t < lone_offsets[1]; ++t) {
        double c = cosine(alone + t * hidden, features + lone * item + t * hidden, hidden);
        worst_alone = c < worst_alone ? c : worst_alone;
    }
    printf("%-44s text %zu alone: its features' worst cosine to the batch's %.7f\n", label, lone, worst_alone);
    /* The same values up to the products' rounding (other shapes, other kernels; in bf16, activations
     * rounded to bf16 between them). */
    CHECK(worst_alone >= (md.weights_dtype == uform_dtype_f32_k ? 0.999999 : 0.9999));
    free(alone), free(narrow_block), free(narrow_rows), free(features), free(rows), free(plain);
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
                           char const *features_path, size_t limit) {
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
    size_t lengths[2048];
    size_t const texts_count = split_lines(texts_raw, texts, lengths, count < 2048 ? count : 2048);

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
        if (features_path) {
            size_t features_size = 0;
            char *features_raw = read_file(features_path, &features_size);
            CHECK_FATAL(features_raw != NULL);
            snprintf(label, sizeof label, "%s weights, features", k ? "bf16" : "f32");
            char layout[4096];
            snprintf(layout, sizeof layout, "%s/model.safetensors", dir); /* sentence-transformers: mean, no projection */
            check_features(executor, model, ids, offsets, count, (float const *)features_raw,
                           features_size / sizeof(float) / md.hidden, thresholds[k], access(layout, F_OK) == 0, label);
            free(features_raw);
        }

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

/** The VRAM model's features of the first texts and of an invalid one after them (with statuses)
 *  against the CPU model's (f32): cosine >= `threshold` per token row, zero rows past each text and
 *  for the invalid one; the embeddings asked with features against `reference` as well. Then 600 of
 *  those texts in a deferred call (two waves into the staging buffer) against that call's features. */
static void check_vram_features(uform_executor_t ram, uform_model_t cpu, uform_executor_t executor, uform_model_t model,
                                char const **texts, size_t const *lengths, size_t count, float const *reference,
                                double threshold, char const *label) {
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(model, &md));
    if (count > FEATURE_TEXTS) count = FEATURE_TEXTS;
    size_t const hidden = md.hidden, tokens = md.tokens, item = hidden * tokens, dims = md.dimensions, n = count + 1;
    char const *with_bad[FEATURE_TEXTS + 1];
    size_t bad_lengths[FEATURE_TEXTS + 1];
    memcpy(with_bad, texts, count * sizeof(char const *)), memcpy(bad_lengths, lengths, count * sizeof(size_t));
    with_bad[count] = "bad \xff byte", bad_lengths[count] = 10;
    float *cpu_features = malloc(n * item * sizeof(float)), *gpu_features = malloc(n * item * sizeof(float));
    float *cpu_rows = malloc(n * dims * sizeof(float)), *gpu_rows = malloc(n * dims * sizeof(float));
    memset(gpu_features, 0x5A, n * item * sizeof(float));
    uform_status_t statuses[FEATURE_TEXTS + 1];
    uform_embeddings_t on_cpu = {.data = cpu_rows, .dtype = uform_dtype_f32_k, .features = cpu_features};
    uform_embeddings_t on_gpu = {.data = gpu_rows, .dtype = uform_dtype_f32_k, .features = gpu_features};
    CHECK_STATUS(uform_encode_texts(ram, cpu, with_bad, bad_lengths, n, &on_cpu, statuses, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_encode_texts(executor, model, with_bad, bad_lengths, n, &on_gpu, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[count] == uform_status_invalid_argument_k);
    double worst = 1, worst_row = 1;
    size_t nonzero = 0;
    for (size_t i = 0; i < count; ++i) {
        size_t length = 0;
        CHECK_OK(uform_model_tokenize(cpu, texts[i], lengths[i], NULL, 0, &length));
        for (size_t t = 0; t < length; ++t) {
            double c = cosine(gpu_features + i * item + t * hidden, cpu_features + i * item + t * hidden, hidden);
            worst = c < worst ? c : worst;
        }
        for (size_t v = length * hidden; v < item; ++v) nonzero += gpu_features[i * item + v] != 0.0f;
        double c = cosine(gpu_rows + i * dims, reference + i * dims, dims);
        worst_row = c < worst_row ? c : worst_row;
    }
    for (size_t v = 0; v < item; ++v) nonzero += gpu_features[count * item + v] != 0.0f;
    printf("%-44s %4zu texts: features' worst cosine to the CPU's %.7f, rows with features %.7f\n", label, count, worst,
           worst_row);
    CHECK(worst >= threshold && worst_row >= threshold);
    CHECK(nonzero == 0);
    /* 600 texts (these over and over), deferred: two waves staged (75 and 525 texts), the outcome
     * writing them; each text's features and padding as in the call above. */
    enum { many = 600 };
    char const **cycled = malloc(many * sizeof(char const *));
    size_t *cycled_lengths = malloc(many * sizeof(size_t));
    float *many_features = malloc((size_t)many * item * sizeof(float)), *many_rows = malloc((size_t)many * dims * sizeof(float));
    CHECK_FATAL(cycled && cycled_lengths && many_features && many_rows);
    for (size_t i = 0; i < many; ++i) cycled[i] = texts[i % count], cycled_lengths[i] = lengths[i % count];
    memset(many_features, 0x5A, (size_t)many * item * sizeof(float));
    uform_embeddings_t on_gpu_many = {.data = many_rows, .dtype = uform_dtype_f32_k, .features = many_features};
    uform_outcome_t outcome;
    CHECK_STATUS(uform_encode_texts(executor, model, cycled, cycled_lengths, many, &on_gpu_many, NULL, &outcome),
                 uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    double worst_many = 1;
    size_t differ = 0;
    for (size_t i = 0; i < many; ++i) {
        float const *got = many_features + i * item, *want = gpu_features + i % count * item;
        for (size_t t = 0; t < tokens; ++t) {
            int zero_got = 1, zero_want = 1;
            for (size_t j = 0; j < hidden; ++j) zero_got &= got[t * hidden + j] == 0.0f, zero_want &= want[t * hidden + j] == 0.0f;
            if (zero_got != zero_want) ++differ;
            else if (!zero_got) {
                double c = cosine(got + t * hidden, want + t * hidden, hidden);
                worst_many = c < worst_many ? c : worst_many;
            }
        }
    }
    printf("%-44s %4d texts deferred: features' worst cosine to the call above %.7f, padding rows differing %zu\n",
           label, many, worst_many, differ);
    CHECK(worst_many >= 0.99999 && differ == 0);
    free(cycled), free(cycled_lengths), free(many_features), free(many_rows);
    free(cpu_features), free(gpu_features), free(cpu_rows), free(gpu_rows);
}

/**
 *  test_encode_models --vram ...: the same model VRAM-resident on device 0, encoding the texts
 *  (uform_encode_texts) with f32, bf16 and f16 weights, against PyTorch's rows (cosine >= 0.99999 in
 *  f32, >= 0.999 in bf16 and f16) and against this engine's CPU path with f32 weights (the same
 *  bounds); their features against the CPU path's (`check_vram_features`). Skipped (77) without a GPU,
 *  cuBLASLt or the texts.
 */
static int test_real_model_vram(char const *dir, char const *expected_path, char const *texts_path, size_t limit) {
    if (uform_gpu_status() != uform_status_ok_k) SKIP("no GPU to run the VRAM tower on (%s)", uform_error_message());
    if (!texts_path) SKIP("no texts: the VRAM path encodes texts, not ids");
    size_t expected_size = 0, texts_size = 0;
    char *expected_raw = read_file(expected_path, &expected_size), *texts_raw = read_file(texts_path, &texts_size);
    CHECK_FATAL(expected_raw && texts_raw);
    char const *texts[2048];
    size_t lengths[2048];
    size_t count = split_lines(texts_raw, texts, lengths, 2048);
    uform_model_options_t options = {.path = dir, .modality = uform_modality_text_k, .residency = uform_residency_ram_k,
                                     .weights_dtype = uform_dtype_f32_k};
    uform_model_t cpu = NULL;
    CHECK_STATUS(uform_model_open(&options, &cpu), uform_status_ok_k);
    CHECK_FATAL(cpu != NULL);
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(cpu, &md));
    size_t const dims = md.dimensions, rows_expected = expected_size / sizeof(float) / dims;
    if (count > rows_expected) count = rows_expected; /* the references cover the first texts */
    if (limit && limit < count) count = limit;
    size_t probe = 0;
    if (uform_model_tokenize(cpu, "probe", 5, NULL, 0, &probe) != uform_status_ok_k)
        SKIP("the model has no tokenizer here (%s)", uform_error_message());
    float *reference = calloc(count * dims, sizeof(float)), *rows = calloc(count * dims, sizeof(float));
    uform_executor_t ram = NULL, executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &ram), uform_status_ok_k);
    uform_embeddings_t out = {.data = reference, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(ram, cpu, texts, lengths, count, &out, NULL, NULL), uform_status_ok_k);
    int32_t const first[] = {0};
    uform_vram_options_t one = {.devices = first, .devices_count = 1};
    CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    uform_dtype_t const dtypes[3] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    double const thresholds[3] = {0.99999, 0.999, 0.999};
    char const *const names[3] = {"f32", "bf16", "f16"};
    for (int k = 0; k < 3 && executor; ++k) {
        uform_model_options_t on_gpu = {.path = dir, .modality = uform_modality_text_k,
                                        .residency = uform_residency_vram_k, .vram = &one, .weights_dtype = dtypes[k]};
        uform_model_t model = NULL;
        uform_status_t status = uform_model_open(&on_gpu, &model);
        if (k == 0 && status == uform_status_unsupported_k && strstr(uform_error_message(), "cuBLASLt"))
            SKIP("%s", uform_error_message());
        CHECK_STATUS(status, uform_status_ok_k);
        if (!model) break;
        memset(rows, 0, count * dims * sizeof(float));
        out.data = rows;
        CHECK_STATUS(uform_encode_texts(executor, model, texts, lengths, count, &out, NULL, NULL), uform_status_ok_k);
        char label[256];
        snprintf(label, sizeof label, "VRAM %s weights against PyTorch", names[k]);
        CHECK(worst_cosine(label, rows, (float const *)expected_raw, count, dims) >= thresholds[k]);
        snprintf(label, sizeof label, "VRAM %s weights against the CPU's f32", names[k]);
        CHECK(worst_cosine(label, rows, reference, count, dims) >= thresholds[k]);
        snprintf(label, sizeof label, "VRAM %s weights, features", names[k]);
        check_vram_features(ram, cpu, executor, model, texts, lengths, count, (float const *)expected_raw, thresholds[k],
                            label);
        uform_model_free(model);
    }
    uform_executor_free(executor);
    uform_executor_free(ram);
    uform_model_free(cpu);
    free(reference), free(rows), free(expected_raw), free(texts_raw);
    return check_failures ? 1 : 0;
}

/** Pages of `bytes` from `memory` (every 16th, and the last) not on `node`, an absent page counting as
 *  elsewhere (a replica is written whole); -1 when placement cannot be read (no NUMA support, or
 *  `move_pages` refused, as a container's seccomp filter may do; `errno` says why). */
static long pages_elsewhere(void const *memory, size_t bytes, int node) {
    if (numa_available() < 0) return -1;
    if (!bytes) return 0;
    size_t const page = (size_t)sysconf(_SC_PAGESIZE);
    long elsewhere = 0;
    for (size_t offset = 0;; offset += 16 * page) {
        if (offset >= bytes) offset = bytes - 1; /* the last page, once */
        void *address = (void *)((char const *)memory + offset - offset % page);
        int actual = -1;
        if (move_pages(0, 1, &address, NULL, &actual, 0) != 0) return -1;
        elsewhere += actual != node;
        if (offset == bytes - 1) break;
    }
    return elsewhere;
}

/**
 *  test_encode_models --numa ...: the model opened with every memory domain (the default) holds one
 *  replica per domain, each one's pages on its node; a thread reads its own node's replica; the
 *  texts encoded by an executor over every core, by one executor per domain and by the NULL executor
 *  agree within f32's rounding and against PyTorch (cosine >= 0.99999); and every packed copy of a
 *  replica's weights the products made lies on that replica's node. On a machine of one node this
 *  checks that node; test/numa/run_numa_guest.sh runs it in a guest of two.
 */
static int test_real_model_numa(char const *dir, char const *expected_path, char const *texts_path, size_t limit) {
    if (!texts_path) SKIP("no texts: --numa encodes texts");
    size_t expected_size = 0, texts_size = 0;
    char *expected_raw = read_file(expected_path, &expected_size), *texts_raw = read_file(texts_path, &texts_size);
    CHECK_FATAL(expected_raw && texts_raw);
    char const *texts[2048];
    size_t lengths[2048];
    size_t count = split_lines(texts_raw, texts, lengths, 2048);
    if (limit && limit < count) count = limit;
    uform_memory_domain_t domains[64];
    size_t domains_count = 0, cores = 0;
    CHECK_OK(uform_memory_domains(domains, 64, &domains_count));
    if (domains_count > 64) domains_count = 64;
    for (size_t d = 0; d < domains_count; ++d) cores += domains[d].cores_count;
    printf("%zu memory domain(s), %zu cores; numa_available %d\n", domains_count, cores, numa_available());

    uform_model_options_t options = {.path = dir, .modality = uform_modality_text_k, .residency = uform_residency_ram_k,
                                     .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    CHECK_FATAL(model != NULL);
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(model, &md));
    size_t const dims = md.dimensions;
    CHECK(md.replicas == domains_count && model->replicas_count == domains_count);
    if (expected_size / sizeof(float) / dims < count) count = expected_size / sizeof(float) / dims;
    for (size_t r = 0; r < model->replicas_count; ++r) {
        int const node = model->replica_nodes[r];
        CHECK(node == domains[r].node);
        CHECK(uform_model_text_replica(model, node) == &model->text_replicas[r]);
        long const elsewhere = pages_elsewhere(model->memory.blocks[r], model->memory.block_bytes, node);
        int const why = errno;
        if (elsewhere == -1)
            printf("replica %zu: node %d, %zu bytes; where its pages lie cannot be read here (%s): not checked\n", r,
                   node, model->memory.block_bytes, numa_available() < 0 ? "no NUMA support" : strerror(why));
        else
            printf("replica %zu: node %d, %zu bytes, pages elsewhere: %ld\n", r, node, model->memory.block_bytes, elsewhere);
        CHECK(elsewhere == 0 || elsewhere == -1);
        /* The tower's tensors point into its own replica's block. */
        char const *block = (char const *)model->memory.blocks[r];
        char const *weights = (char const *)model->text_replicas[r].layers[0].intermediate_weight.data;
        CHECK(weights >= block && weights < block + model->memory.block_bytes);
    }

    /* Every core, each domain alone, the NULL executor: the same rows within f32's rounding. */
    float *all = calloc(count * dims, sizeof(float)), *rows = calloc(count * dims, sizeof(float));
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, cores, 0, &executor), uform_status_ok_k);
    uform_embeddings_t out = {.data = all, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(executor, model, texts, lengths, count, &out, NULL, NULL), uform_status_ok_k);
    uform_executor_free(executor);
    CHECK(worst_cosine("every core, every domain, against PyTorch", all, (float const *)expected_raw, count, dims) >= 0.99999);
    out.data = rows;
    for (size_t d = 0; d <= domains_count; ++d) {
        int32_t node = d < domains_count ? domains[d].node : -1;
        uform_ram_options_t ram = {.memory_domains = &node, .memory_domains_count = 1};
        executor = NULL;
        if (d < domains_count) CHECK_STATUS(uform_executor_for_ram(&ram, domains[d].cores_count, 0, &executor), uform_status_ok_k);
        memset(rows, 0, count * dims * sizeof(float));
        CHECK_STATUS(uform_encode_texts(executor, model, texts, lengths, count, &out, NULL, NULL), uform_status_ok_k);
        uform_executor_free(executor);
        double worst = 0;
        for (size_t i = 0; i < count * dims; ++i) worst = fmax(worst, fabs((double)rows[i] - all[i]));
        if (d < domains_count) printf("the executor of node %d: max |row - every core's row| %.2e\n", node, worst);
        else printf("the NULL executor: max |row - every core's row| %.2e\n", worst);
        CHECK(worst < 1e-5); /* rows of unit norm */
    }

    /* The packed copies of the weights are on their replica's node. */
    size_t checked = 0;
    size_t const misplaced = uform_gemm_packed_misplaced(&checked);
    uform_cpu_class_t own = uform_cpu_class_unknown_k;
    CHECK_OK(uform_cpu_detect(&own, NULL));
    printf("packed copies of the replicas' weights: %zu, on another node: %zu (class %s)\n", checked, misplaced,
           uform_cpu_class_name(own));
    CHECK(misplaced == 0);
    if (numa_available() >= 0 && own != uform_cpu_class_serial_k) CHECK(checked > 0);
    uform_model_free(model);
    CHECK(uform_gemm_packed_misplaced(&checked) == 0 && checked == 0); /* freed with the model */
    free(all), free(rows), free(expected_raw), free(texts_raw);
    return check_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    char const *model = NULL, *ids = NULL, *expected = NULL, *texts = NULL, *features = NULL;
    size_t limit = 0;
    int vram = 0, numa = 0;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--vram")) vram = 1, --i;
        else if (!strcmp(argv[i], "--numa")) numa = 1, --i;
        else if (i + 1 == argc) break;
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--ids")) ids = argv[i + 1];
        else if (!strcmp(argv[i], "--expected")) expected = argv[i + 1];
        else if (!strcmp(argv[i], "--texts")) texts = argv[i + 1];
        else if (!strcmp(argv[i], "--limit")) limit = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--features")) features = argv[i + 1];
    }
    if (!model || !ids || !expected) {
        fprintf(stderr, "usage: test_encode_models [--vram | --numa] --model DIR --ids FILE --expected FILE [--texts FILE] [--features FILE] [--limit N]\n");
        return 2;
    }
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/config.json", model);
    FILE *exists = fopen(probe, "r");
    if (!exists) SKIP("no model at %s (build.sh fetches all-MiniLM-L6-v2; UForm3 fixtures need torch)", model);
    fclose(exists);
    if (numa) return test_real_model_numa(model, expected, texts, limit);
    return vram ? test_real_model_vram(model, expected, texts, limit) : test_real_model(model, ids, expected, texts, features, limit);
}
