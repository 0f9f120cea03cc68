/**
 *  @file   test_encode.c
 *  @brief  The text forward pass on towers built in memory: every branch against a double-precision
 *          reference written here (word, position and token-type embeddings, post-norm layers, exact
 *          GELU, CLS and mean pooling, projection, the layout's and the caller's normalisation,
 *          Matryoshka truncation, f32/bf16/f16 weights and outputs), a batch of mixed lengths
 *          against each text alone, every CPU class this machine runs. The verb
 *          (`uform_encode_texts`): test_encode_verb.c; real models: test_encode_models.c.
 */
#include "encode_harness.h"
#include "fused_refused.h"

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
        uform_ram_options_t ram = first_domain_ram(classes[k]);
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
        /* The same rows at an odd address, 41 bytes apart: no alignment asked, the same bytes. */
        unsigned char *odd = calloc(count * 41 + 1, 1);
        out.data = odd + 1, out.stride = 41;
        CHECK_STATUS(uform_text_encode_ids(NULL, &model, b.ids, b.offsets, count, NULL, NULL, &out, NULL), uform_status_ok_k);
        for (size_t i = 0; i < count; ++i) CHECK(memcmp(odd + 1 + i * 41, narrow + i * 20, 32) == 0);
        free(odd);
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
    uform_ram_options_t const first = first_domain_ram(uform_cpu_class_unknown_k);
    CHECK_STATUS(uform_executor_for_ram(&first, 0, 4, &executor), uform_status_ok_k);
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
    bad = out, bad.stride = SIZE_MAX; /* row 1 would wrap around to the byte before `rows` */
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_texts: embeddings: 7 rows 18446744073709551615 bytes apart run past the end of the address space");
    bad = out, bad.stride = SIZE_MAX / 4;
    CHECK_STATUS(uform_text_encode_ids(executor, &model, b.ids, b.offsets, count, NULL, NULL, &bad, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("run past the end of the address space");
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
    uform_ram_options_t const first = first_domain_ram(uform_cpu_class_unknown_k);
    CHECK_STATUS(uform_executor_for_ram(&first, domain.cores_count >= 3 ? 3 : domain.cores_count, 0, &executor),
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

/** Texts one at a time on a RAM executor of two threads (one group of both: the batch-1 plan) with
 *  bf16 weights, their products split by whole rows (the default for groups of up to 4 threads with
 *  bf16 A, `uform_text_whole_rows`, from 64 tokens) and by columns (UFORM_ROW_TILES_THREADS=0),
 *  against the reference and against the NULL executor's rows: the splits differ in how the products
 *  block and round, within a bf16 step. */
static void test_whole_rows(config_t const *c, char const *name) {
    uform_text_tower_t tower = make_tower(c);
    struct uform_model_s model = make_model(&tower);
    size_t width = tower.embedding_dimensions, count = 6;
    batch_t b = make_batch(count, c->vocab, c->context);
    float *base = calloc(count * width, sizeof(float)), *alone = calloc(count * width, sizeof(float));
    double *expected = calloc(width, sizeof(double));
    CHECK_STATUS(encode(NULL, &model, &b, base), uform_status_ok_k);
    uform_memory_domain_t domain;
    size_t domains = 0;
    CHECK_OK(uform_memory_domains(&domain, 1, &domains));
    uform_ram_options_t const first = first_domain_ram(uform_cpu_class_unknown_k);
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_ram(&first, domain.cores_count >= 2 ? 2 : 1, 0, &executor), uform_status_ok_k);
    char const *splits[2] = {NULL, "0"};
    for (size_t split = 0; split < 2; ++split) {
        if (splits[split]) CHECK(setenv("UFORM_ROW_TILES_THREADS", splits[split], 1) == 0);
        double worst_cos = 1, worst_diff = 0;
        for (size_t i = 0; i < count; ++i) {
            size_t n = b.offsets[i + 1] - b.offsets[i];
            batch_t one = {.count = 1, .ids = b.ids + b.offsets[i], .offsets = (size_t[]){0, n}};
            CHECK_STATUS(encode(executor, &model, &one, alone + i * width), uform_status_ok_k);
            reference(&tower, b.ids + b.offsets[i], n, expected);
            double cos = cosine_fd(alone + i * width, expected, width);
            worst_cos = cos < worst_cos ? cos : worst_cos;
            double diff = max_difference(alone + i * width, base + i * width, width);
            worst_diff = diff > worst_diff ? diff : worst_diff;
        }
        CHECK(unsetenv("UFORM_ROW_TILES_THREADS") == 0);
        printf("%-28s alone on 2 threads, %s: cosine to reference >= %.7f, against the NULL executor max |diff| %.2e\n",
               name, split ? "column tiles" : "whole-row tiles", worst_cos, worst_diff);
        CHECK(worst_cos >= 0.999);
        CHECK(worst_diff <= 2e-2);
    }
    uform_executor_free(executor);
    free(base), free(alone), free(expected), free_batch(&b), free(tower.layers), free_tensors();
}

int main(void) {
    if (skip_refused_run()) return 77;
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
    /* Long enough for whole-row tiles at batch 1 on two threads (32 rows a tile). */
    config_t long16 = {.hidden = 128, .heads = 4, .intermediate = 512, .layers = 2, .vocab = 200, .max_positions = 140,
                       .context = 128, .pooling = uform_pooling_mean_k, .positions = uform_position_ids_absolute_k,
                       .token_types = 1, .normalize = 1, .dtype = uform_dtype_bf16_k};
    test_whole_rows(&long16, "bert mean bf16, 128 tokens");
    CHECK_DONE();
}
