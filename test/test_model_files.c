/**
 *  @file   test_model_files.c
 *  @brief  Model files that must not open: the safetensors reader against hostile files, broken
 *          safetensors inside model directories, and both configuration layouts' broken configs,
 *          every error with its status and a message naming the file and tensor or key; and files
 *          that are not regular files (FIFOs, devices, directories, symbolic-link loops) in a
 *          model's place, refused without waiting on them or reading them.
 */
#include "model_harness.h"

/* ---- Tests ---- */

static void test_safetensors_hostile(void) {
    uform_safetensors_t index;
    uint8_t tiny[7] = {0};
    CHECK_STATUS(uform_safetensors_parse("short.safetensors", tiny, sizeof(tiny), &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("short.safetensors: 7 bytes, too short");

    /* Header lengths: past the cap, past the file. */
    uint8_t big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100,000,001 */
    CHECK_STATUS(uform_safetensors_parse("big.safetensors", big, sizeof(big), &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("big.safetensors: header of 100000001 bytes exceeds the limit of 100000000 bytes");
    uint8_t past[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK_STATUS(uform_safetensors_parse("past.safetensors", past, 16, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("past.safetensors: header of 9 bytes runs past the end of the 16-byte file");
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    CHECK_STATUS(uform_safetensors_parse("huge.safetensors", huge, 16, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("exceeds the limit");

    /* A real 100 MB header, on disk (sparse): refused before anything is read. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/hundred.safetensors", scratch);
    uint64_t const hundred = 100u << 20;
    write_raw_safetensors(path, hundred, "{", 0);
    CHECK_FATAL(truncate(path, (off_t)(8 + hundred + 64)) == 0);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("hundred.safetensors: header of 104857600 bytes exceeds the limit");
    unlink(path);

    /* Headers that lie. */
    struct {
        char const *header;
        size_t data;
        char const *needle1, *needle2;
    } const lies[] = {
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}", 24, "malformed JSON header", NULL},
        {"[1, 2]", 0, "does not start with a JSON object", NULL},
        {"{\"a\": 1}", 0, "tensor 'a': its entry is not a JSON object", NULL},
        {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': 'dtype' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "tensor 'a': 'shape' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "tensor 'a': 'data_offsets' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8, "tensor 'a': 'data_offsets' is missing or not an array of two", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape dimension 0 is not a non-negative integer", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape dimension 0", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e300]}}", 4, "tensor 'a': 'data_offsets' is not two non-negative integers", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8, "tensor 'a': data_offsets [8, 4] run backwards", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 12, "tensor 'a': data_offsets [0, 16] run past the data region of 12 bytes", NULL},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, "tensor 'w': shape [2, 3] of F32 needs 24 bytes, data_offsets [0, 20] hold 20", NULL},
        {"{\"w\": {\"dtype\": \"BF16\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': the shape's element count overflows", NULL},
        {"{\"w\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': shape dimension 0", NULL},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 4194304], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': the shape's byte size overflows", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
         "tensors 'a' [0, 8] and 'b' [4, 12] overlap", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
         "tensor 'a' appears twice", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} x", 4, "bytes after the JSON header's object", NULL},
        /* cJSON would read "F32\u0000x" as "F32" and a name "a\u0000b" as "a". */
        {"{\"a\": {\"dtype\": \"F32\\u0000x\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "a string in the header holds U+0000 (the escape at byte 20)", NULL},
        {"{\"a\\u0000b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "holds U+0000", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "overlap", NULL},
    };
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); ++i) {
        uform_status_t const status = parse_header(lies[i].header, lies[i].data, &index);
        if (status != uform_status_corrupt_file_k) {
            fprintf(stderr, "lie %zu: %s, expected corrupt_file (%s)\n", i, uform_status_name(status), uform_error_message());
            ++check_failures;
        }
        CHECK_MESSAGE("lying.safetensors: ");
        if (!strstr(uform_error_message(), lies[i].needle1)) {
            fprintf(stderr, "lie %zu: message \"%s\" lacks \"%s\"\n", i, uform_error_message(), lies[i].needle1);
            ++check_failures;
        }
    }

    /* What is accepted: metadata, padding, unknown and integer dtypes, empty tensors, holes. */
    char const *good = "{\"__metadata__\": {\"format\": \"pt\"}, \"ids\": {\"dtype\": \"I64\", \"shape\": [1, 2], \"data_offsets\": [0, 16]},"
                       " \"new\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [16, 18]},"
                       " \"empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [18, 18]},"
                       " \"empty2\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [18, 18]},"
                       " \"scalar\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [20, 22]}}    ";
    size_t const text = strlen(good);
    uint8_t *bytes = calloc(1, 8 + text + 24);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)((uint64_t)text >> (8 * i));
    memcpy(bytes + 8, good, text);
    CHECK_STATUS(uform_safetensors_parse("good.safetensors", bytes, 8 + text + 24, &index), uform_status_ok_k);
    CHECK(index.count == 5);
    uform_safetensor_t const *ids = uform_safetensors_find(&index, "ids");
    CHECK(ids && !ids->computable && ids->rank == 2 && ids->elements == 2 && !strcmp(ids->dtype_name, "I64"));
    uform_safetensor_t const *scalar = uform_safetensors_find(&index, "scalar");
    CHECK(scalar && scalar->computable && scalar->dtype == uform_dtype_bf16_k && scalar->rank == 0 && scalar->elements == 1);
    CHECK(uform_safetensors_find(&index, "__metadata__") == NULL);
    CHECK(uform_safetensors_find(&index, "missing") == NULL);
    uform_safetensors_close(&index);
    uform_safetensors_close(&index); /* zeroed: a no-op */
    free(bytes);

    /* An escaped backslash, then "u0000": six characters of a name, not a NUL. */
    char const *literal = "{\"x\\\\u0000\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    size_t const literal_size = strlen(literal);
    bytes = calloc(1, 8 + literal_size + 4);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)((uint64_t)literal_size >> (8 * i));
    memcpy(bytes + 8, literal, literal_size);
    CHECK_STATUS(uform_safetensors_parse("literal.safetensors", bytes, 8 + literal_size + 4, &index), uform_status_ok_k);
    CHECK(index.count == 1 && uform_safetensors_find(&index, "x\\u0000") != NULL);
    uform_safetensors_close(&index);
    free(bytes);

    /* Files: absent, a directory, empty. */
    snprintf(path, sizeof(path), "%s/absent.safetensors", scratch);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_system_error_k);
    CHECK_MESSAGE("absent.safetensors: cannot open");
    CHECK_STATUS(uform_safetensors_open(scratch, &index), uform_status_system_error_k);
    CHECK_MESSAGE("not a regular file");
    snprintf(path, sizeof(path), "%s/empty.safetensors", scratch);
    write_bytes(path, "", 0);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("empty.safetensors: 0 bytes, too short");
    unlink(path);
}

static void test_broken_safetensors_in_models(void) {
    char model_file[4096], original[4096];
    char const *dir = fixture_copy("tiny-bert", "broken-bert");
    snprintf(model_file, sizeof(model_file), "%s/model.safetensors", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/model.safetensors", models_dir);

    /* Truncated: the last tensors run past the end. */
    size_t size;
    void *bytes = read_bytes(original, &size);
    write_bytes(model_file, bytes, size - 100);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors: tensor '", "run past the data region", NULL);
    write_bytes(model_file, bytes, 20);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors: header of", "runs past the end", NULL);
    free(bytes);

    /* A tensor missing, of the wrong shape, of a dtype the engine does not compute with. */
    rewrite_safetensors(original, model_file, (edit_t){.drop = "encoder.layer.1.output.LayerNorm.bias"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors",
                        "tensor 'encoder.layer.1.output.LayerNorm.bias' of shape [8] is missing", NULL);
    rewrite_safetensors(original, model_file, (edit_t){.transpose = "encoder.layer.0.intermediate.dense.weight"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors",
                        "tensor 'encoder.layer.0.intermediate.dense.weight' should have shape [16, 8], found [8, 16]", NULL);
    rewrite_safetensors(original, model_file,
                        (edit_t){.retype = "embeddings.LayerNorm.weight", .dtype = "I32"});
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "broken-bert/model.safetensors",
                        "tensor 'embeddings.LayerNorm.weight' has dtype I32", NULL);
    rewrite_safetensors(original, model_file,
                        (edit_t){.retype = "embeddings.LayerNorm.weight", .dtype = "F16"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "tensor 'embeddings.LayerNorm.weight': shape [8] of F16 needs 16 bytes",
                        NULL, NULL);
    rewrite_safetensors(original, model_file, (edit_t){.rename_from = "embeddings.word_embeddings.weight",
                                                       .rename_to = "embeddings.word_embeddings.weights"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "tensor 'embeddings.word_embeddings.weight' of shape [40, 8] is missing",
                        NULL, NULL);

    /* The "bert." prefix of task checkpoints is accepted. */
    rewrite_safetensors(original, model_file, (edit_t){.prefix = "bert."});
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    uform_model_free(model);

    /* No weights at all. */
    unlink(model_file);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "broken-bert/model.safetensors: cannot open", NULL, NULL);
}

static void test_bert_configs(void) {
    char const *dir = fixture_copy("tiny-bert", "config-bert");
    char config_path[4096], original[4096];
    snprintf(config_path, sizeof(config_path), "%s/config.json", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/config.json", models_dir);
    size_t size;
    char *text = read_bytes(original, &size);

    struct {
        char const *from, *to;
        uform_status_t status;
        char const *needle1, *needle2;
    } const edits[] = {
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"", uform_status_unsupported_k, "'hidden_act' is 'relu'", NULL},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu_new\"", uform_status_unsupported_k, "'hidden_act' is 'gelu_new'", NULL},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": 7", uform_status_corrupt_file_k, "'hidden_act' must be a string", NULL},
        {"\"hidden_size\": 8,", "", uform_status_corrupt_file_k, "missing key 'hidden_size'", NULL},
        {"\"num_hidden_layers\": 2,", "", uform_status_corrupt_file_k, "missing key 'num_hidden_layers'", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": \"8\"", uform_status_corrupt_file_k, "'hidden_size' must be an integer", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": 8.5", uform_status_corrupt_file_k, "'hidden_size' must be an integer", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": 0", uform_status_corrupt_file_k, "'hidden_size' must be an integer in [1,", NULL},
        {"\"num_attention_heads\": 2", "\"num_attention_heads\": 3", uform_status_corrupt_file_k, "not a multiple of 'num_attention_heads' 3", NULL},
        {"\"model_type\": \"bert\"", "\"model_type\": \"gpt2\"", uform_status_unsupported_k, "model_type 'gpt2' is not supported", NULL},
        {"\"model_type\": \"bert\",", "", uform_status_corrupt_file_k, "neither a 'text_encoder' section", NULL},
        {"\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": -1", uform_status_corrupt_file_k, "'layer_norm_eps' must be a number", NULL},
        {"\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 1e-50", uform_status_corrupt_file_k,
         "'layer_norm_eps' must be a number in (0, 1) that float32 holds as a normal number", NULL},
        {"\"position_embedding_type\": \"absolute\"", "\"position_embedding_type\": \"relative_key\"", uform_status_unsupported_k,
         "'position_embedding_type' is 'relative_key'", NULL},
        {"\"pad_token_id\": 0", "\"pad_token_id\": 40", uform_status_corrupt_file_k, "'pad_token_id' must be an integer in [0, 39]", NULL},
        {"\"vocab_size\": 40", "\"vocab_size\": 41", uform_status_corrupt_file_k,
         "tensor 'embeddings.word_embeddings.weight' should have shape [41, 8], found [40, 8]", "config-bert/model.safetensors"},
        {"\"intermediate_size\": 16", "\"intermediate_size\": 12", uform_status_corrupt_file_k,
         "tensor 'encoder.layer.0.intermediate.dense.weight' should have shape [12, 8], found [16, 8]", "config-bert/model.safetensors"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", uform_status_corrupt_file_k,
         "tensor 'encoder.layer.2.attention.self.query.weight' of shape [8, 8] is missing", "config-bert/model.safetensors"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 100000", uform_status_corrupt_file_k,
         "'num_hidden_layers' must be an integer in [0, 1024]", NULL},
        {"{", "{{", uform_status_corrupt_file_k, "malformed JSON near byte", NULL},
        /* What Python's json reads differently from cJSON is refused: a NUL that would cut a string
         * short, a key given twice (Python keeps the last, cJSON would find the first). */
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu\\u0000x\"", uform_status_corrupt_file_k,
         "config-bert/config.json: a string holds U+0000 (the escape at byte", NULL},
        {"\"hidden_size\": 8,", "\"hidden_size\": 8, \"hidden_size\": 16,", uform_status_corrupt_file_k,
         "config-bert/config.json: key 'hidden_size' appears twice in the top-level object", NULL},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu\\\\u0000x\"", uform_status_unsupported_k,
         "'hidden_act' is 'gelu\\u0000x'", NULL},
        {"\"absolute\"\n}", "\"absolute\"\n} trailing", uform_status_corrupt_file_k, "bytes after the value", NULL},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); ++i) {
        char *found = strstr(text, edits[i].from);
        if (!found) {
            fprintf(stderr, "edit %zu: '%s' is not in the fixture config\n", i, edits[i].from);
            ++check_failures;
            continue;
        }
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, edits[i].to, found + strlen(edits[i].from));
        write_text(config_path, edited);
        expect_open_failure(__LINE__ * 1000 + (int)i, dir, edits[i].status, edits[i].needle1,
                            edits[i].needle2 ? edits[i].needle2 : "config-bert/config.json", NULL);
    }
    write_text(config_path, text);
    free(text);

    /* sentence-transformers files. */
    char modules[4096], pooling[4096], sbert[4096];
    snprintf(modules, sizeof(modules), "%s/modules.json", dir);
    snprintf(pooling, sizeof(pooling), "%s/1_Pooling/config.json", dir);
    snprintf(sbert, sizeof(sbert), "%s/sentence_bert_config.json", dir);
    char const *transformer = "{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}";
    char const *pool = "{\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}";
    char buffer[2048];
    snprintf(buffer, sizeof(buffer), "[%s, %s, {\"path\": \"2_Dense\", \"type\": \"sentence_transformers.models.Dense\"}]", transformer, pool);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/modules.json",
                        "module 2 of type 'sentence_transformers.models.Dense' is not supported", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"../../etc\", \"type\": \"sentence_transformers.models.Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "path '../../etc' leaves the model folder", NULL);
    snprintf(buffer, sizeof(buffer), "[%s]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/modules.json", "no sentence_transformers.models.Pooling module", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"1_Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "missing key '[1].type'", NULL);
    write_text(modules, "{\"not\": \"a list\"}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "not a JSON array", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"missing_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "missing_Pooling/config.json", NULL, NULL);
    char long_path[301];
    memset(long_path, 'a', 300), long_path[300] = 0;
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"%s\", \"type\": \"sentence_transformers.models.Pooling\"}]",
             transformer, long_path);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/modules.json",
                        "has 300 bytes, more than the 255 a module folder may have", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, %s]", transformer, pool);
    write_text(modules, buffer);

    write_text(pooling, "{\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": false, \"pooling_mode_max_tokens\": true}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/1_Pooling/config.json", "'pooling_mode_max_tokens' is not supported", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "1_Pooling/config.json",
                        "both 'pooling_mode_cls_token' and 'pooling_mode_mean_tokens' are true", NULL);
    /* No mode at all: mean pooling, as sentence-transformers 6.3 reads it. */
    write_text(pooling, "{\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": false}");
    {
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
        if (model) CHECK(model->text_replicas[0].pooling == uform_pooling_mean_k);
        uform_model_free(model);
    }
    write_text(pooling, "{\"pooling_mode_cls_token\": \"yes\"}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "'pooling_mode_cls_token' must be true or false", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"word_embedding_dimension\": 9}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "'word_embedding_dimension' 9 differs", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true,");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "malformed JSON", NULL);

    /* CLS pooling, no Normalize, no sentence_bert_config.json: context min(512, 16). */
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}");
    unlink(sbert);
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        CHECK(model->text_replicas[0].pooling == uform_pooling_cls_k && model->text_replicas[0].normalize == 0);
        CHECK(model->description.context == 16);
        uform_model_free(model), model = NULL;
    }
    write_text(sbert, "{\"max_seq_length\": 1000}");
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) CHECK(model->description.context == 16); /* capped by the position table */
    uform_model_free(model), model = NULL;
    write_text(sbert, "{\"max_seq_length\": 1}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "sentence_bert_config.json", "'max_seq_length' 1 leaves no room", NULL);
    write_text(sbert, "{\"max_seq_length\": -5}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "sentence_bert_config.json", "'max_seq_length' must be an integer", NULL);

    /* A tokenizer adding more specials than the context holds: refused at open, not at every text. */
    write_text(sbert, "{\"max_seq_length\": 2}");
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k); /* [CLS] and [SEP] fit 2 */
    uform_model_free(model), model = NULL;
    char tokenizer_path[4096];
    snprintf(tokenizer_path, sizeof(tokenizer_path), "%s", join(dir, "tokenizer.json"));
    size_t tokenizer_size = 0;
    char *tokenizer_text = read_bytes(tokenizer_path, &tokenizer_size);
    char const *single = "\"single\": [";
    char *at = strstr(tokenizer_text, single);
    CHECK_FATAL(at != NULL);
    size_t const head = (size_t)(at - tokenizer_text) + strlen(single);
    char const *extra = "{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, ";
    char *three = malloc(tokenizer_size + strlen(extra));
    CHECK_FATAL(three != NULL);
    memcpy(three, tokenizer_text, head), memcpy(three + head, extra, strlen(extra));
    memcpy(three + head + strlen(extra), tokenizer_text + head, tokenizer_size - head);
    write_bytes(tokenizer_path, three, tokenizer_size + strlen(extra));
    /* transformers' BertTokenizer (the class a BERT directory gets by default) rebuilds [CLS] $A [SEP];
     * PreTrainedTokenizerFast keeps tokenizer.json's post-processor, three specials here. */
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    uform_model_free(model), model = NULL;
    char const *fast_class = join(dir, "tokenizer_config.json");
    write_text(fast_class, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\"}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert: the tokenizer adds 3 special tokens to every text, "
                        "more than the model's context of 2", NULL, NULL);
    CHECK(unlink(join(dir, "tokenizer_config.json")) == 0);
    /* A tokenizer.json past 1 GiB (sparse: nothing is read): CORRUPT_FILE, as an oversized config. */
    CHECK_FATAL(truncate(tokenizer_path, ((off_t)1 << 30) + 1) == 0);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "tokenizer.json: 1073741825 bytes, more than the 1073741824", NULL,
                        NULL);
    write_bytes(tokenizer_path, tokenizer_text, tokenizer_size);
    free(three), free(tokenizer_text);

    /* A bare Hugging Face BERT: mean pooling, no normalisation. */
    unlink(sbert), unlink(modules);
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) CHECK(model->text_replicas[0].pooling == uform_pooling_mean_k && model->text_replicas[0].normalize == 0);
    uform_model_free(model), model = NULL;

    /* No tokenizer at all. */
    unlink(join(dir, "tokenizer.json")), unlink(join(dir, "vocab.txt"));
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "config-bert", NULL, NULL);
}

static void test_uform3_configs(void) {
    char const *dir = fixture_copy("tiny-uform3", "config-uform3");
    char config_path[4096], original[4096];
    snprintf(config_path, sizeof(config_path), "%s/config.json", dir);
    snprintf(original, sizeof(original), "%s/tiny-uform3/config.json", models_dir);
    size_t size;
    char *text = read_bytes(original, &size);
    struct {
        char const *from, *to;
        uform_status_t status;
        char const *needle;
    } const edits[] = {
        {"\"multimodal_layers_ids\": [\n      1\n    ],", "", uform_status_corrupt_file_k, "missing key 'text_encoder.multimodal_layers_ids'"},
        {"\"multimodal_layers_ids\": [\n      1\n    ]", "\"multimodal_layers_ids\": [3]", uform_status_corrupt_file_k,
         "'text_encoder.multimodal_layers_ids' must hold layer numbers below num_layers (3)"},
        {"\"multimodal_layers_ids\": [\n      1\n    ]", "\"multimodal_layers_ids\": 1", uform_status_corrupt_file_k,
         "'text_encoder.multimodal_layers_ids' must be an array"},
        {"\"pooling\": \"cls\"", "\"pooling\": \"max\"", uform_status_unsupported_k, "'text_encoder.pooling' is 'max'"},
        {"\"model_type\": \"bert\"", "\"model_type\": \"gpt\"", uform_status_unsupported_k, "'text_encoder.model_type' is 'gpt'"},
        {"\"dim\": 8,", "", uform_status_corrupt_file_k, "missing key 'text_encoder.dim'"},
        {"\"num_heads\": 2", "\"num_heads\": 3", uform_status_corrupt_file_k, "'text_encoder.dim' 8 is not a multiple of 'text_encoder.num_heads' 3"},
        {"\"padding_idx\": 0", "\"padding_idx\": -1", uform_status_corrupt_file_k, "'text_encoder.padding_idx' must be an integer in [0, 39]"},
        {"\"embedding_dim\": 6", "\"embedding_dim\": 7", uform_status_corrupt_file_k,
         "tensor 'embedding_projection.weight' should have shape [7, 8], found [6, 8]"},
        {"\"max_position_embeddings\": 10", "\"max_position_embeddings\": 1", uform_status_corrupt_file_k, "fewer than the 2 specials"},
        {"\"head_one_neuron\": true", "\"head_one_neuron\": 1", uform_status_corrupt_file_k, "'text_encoder.head_one_neuron' must be true or false"},
        {"\"pooling\": \"cls\"", "\"pooling\": \"mean\", \"pooling\": \"cls\"", uform_status_corrupt_file_k,
         "key 'pooling' appears twice in the object 'text_encoder'"},
        {"\"pooling\": \"cls\"", "\"pooling\": \"cls\\u0000mean\"", uform_status_corrupt_file_k, "a string holds U+0000"},
        {"\"text_encoder\": {", "\"text_encoder\": 5, \"x\": {", uform_status_corrupt_file_k, "'text_encoder' must be an object"},
        /* The image tower alone (the text section renamed away): no text tower, not a corrupt file. */
        {"\"text_encoder\": {", "\"x\": {", uform_status_unsupported_k,
         "missing key 'text_encoder': the model has no text tower (an image-only model?)"},
        {"\"dropout_prob\": 0.0\n  },", "\"dropout_prob\": 0.0, \"matryoshka_dims\": [3, 64]\n  },", uform_status_corrupt_file_k,
         "'text_encoder.matryoshka_dims' must hold integers in [1, 6]"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); ++i) {
        char *found = strstr(text, edits[i].from);
        if (!found) {
            fprintf(stderr, "uform3 edit %zu: '%s' is not in the fixture config\n", i, edits[i].from);
            ++check_failures;
            continue;
        }
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, edits[i].to, found + strlen(edits[i].from));
        write_text(config_path, edited);
        expect_open_failure(__LINE__ * 1000 + (int)i, dir, edits[i].status, edits[i].needle, "config-uform3/", NULL);
    }
    /* Every block multimodal: a tower of embeddings alone; none: block 1's cross-attention ignored. */
    char const *lists[] = {"[0, 1, 2]", "[]"};
    size_t const expected_layers[] = {0, 3};
    for (int i = 0; i < 2; ++i) {
        char *found = strstr(text, "[\n      1\n    ]");
        CHECK_FATAL(found);
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, lists[i], found + strlen("[\n      1\n    ]"));
        write_text(config_path, edited);
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(dir, uform_dtype_bf16_k, &model), uform_status_ok_k);
        if (model) CHECK(model->description.layers == expected_layers[i]);
        uform_model_free(model);
    }
    /* A missing weights file. */
    write_text(config_path, text);
    unlink(join(dir, "text_encoder.safetensors"));
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "config-uform3/text_encoder.safetensors: cannot open", NULL, NULL);
    free(text);
}

/* Special files in a model's place: refused at once (a FIFO is never waited on, a device never
 * read), naming the file and what it is; vocab.txt stands in only for a tokenizer.json that does
 * not exist, never for one that cannot be read. */
static void test_special_files(void) {
    char const *dir = fixture_copy("tiny-bert", "special-bert");
    char const *names[] = {"config.json", "model.safetensors", "tokenizer.json"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        char file[4096], saved[4096], needle[256];
        snprintf(file, sizeof(file), "%s/%s", dir, names[i]);
        snprintf(saved, sizeof(saved), "%s/%s.saved", dir, names[i]);
        CHECK_FATAL(rename(file, saved) == 0);
        CHECK_FATAL(mkfifo(file, 0600) == 0);
        snprintf(needle, sizeof(needle), "special-bert/%s: not a regular file (a FIFO)", names[i]);
        EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, needle, NULL, NULL);
        CHECK_FATAL(unlink(file) == 0);
        CHECK_FATAL(symlink("/dev/zero", file) == 0);
        snprintf(needle, sizeof(needle), "special-bert/%s: not a regular file (a character device)", names[i]);
        EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, needle, NULL, NULL);
        CHECK_FATAL(unlink(file) == 0);
        CHECK_FATAL(mkdir(file, 0700) == 0);
        snprintf(needle, sizeof(needle), "special-bert/%s: not a regular file (a directory)", names[i]);
        EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, needle, NULL, NULL);
        CHECK_FATAL(rmdir(file) == 0);
        CHECK_FATAL(symlink(names[i], file) == 0); /* a link to itself */
        snprintf(needle, sizeof(needle), "special-bert/%s: cannot open: Too many levels of symbolic links", names[i]);
        EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, needle, NULL, NULL);
        CHECK_FATAL(unlink(file) == 0);
        CHECK_FATAL(rename(saved, file) == 0);
    }
    /* Without tokenizer.json, vocab.txt serves; without either, both are named. */
    char file[4096], saved[4096];
    snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
    CHECK_FATAL(unlink(file) == 0);
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    uform_model_free(model);
    snprintf(file, sizeof(file), "%s/vocab.txt", dir);
    snprintf(saved, sizeof(saved), "%s/vocab.saved", dir);
    CHECK_FATAL(rename(file, saved) == 0);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "special-bert: neither tokenizer.json nor vocab.txt exists", NULL,
                        NULL);
    CHECK_FATAL(mkfifo(file, 0600) == 0);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "special-bert/vocab.txt: not a regular file (a FIFO)", NULL, NULL);
    CHECK_FATAL(unlink(file) == 0);
}

/* A model directory whose path leaves room for "config.json" but not for the tower's safetensors
 * name: INVALID_ARGUMENT for both towers, never a file opened by a truncated name (the image tower
 * opened ".../image_encoder." once the name was cut at 4,095 bytes). */
static void test_long_paths(void) {
    char const *dir = fixture_copy("tiny-uform3", "long");
    char path[4096];
    size_t length = (size_t)snprintf(path, sizeof(path), "%s", dir);
    while (length < 4080) { /* components of at most 200 bytes, up to exactly 4,080 */
        size_t const part = 4080 - length - 1 < 200 ? 4080 - length - 1 : 200;
        path[length++] = '/';
        memset(path + length, 'd', part), length += part, path[length] = 0;
        CHECK_FATAL(mkdir(path, 0700) == 0);
    }
    CHECK_FATAL(length == 4080);
    char from[4096], to[4096], config_path[4096];
    snprintf(from, sizeof(from), "%s/config.json", dir);
    CHECK_FATAL((size_t)snprintf(config_path, sizeof(config_path), "%s/config.json", path) < sizeof(config_path));
    size_t size = 0;
    char *text_config = read_bytes(from, &size);
    CHECK_FATAL((size_t)snprintf(to, sizeof(to), "%s/image_encoder.", path) == 4095);
    write_bytes(to, "not a tower", 11); /* what the cut name would open */
    uform_modality_t const modalities[] = {uform_modality_image_k, uform_modality_text_k};
    for (size_t i = 0; i < 2; ++i) {
        if (i == 0)
            write_text(config_path, "{\"image_encoder\": {\"dim\": 32, \"patch_size\": 16, \"image_size\": 32, "
                                    "\"num_layers\": 1, \"num_heads\": 2, \"embedding_dim\": 16, \"pooling\": \"cls\", "
                                    "\"num_reg_tokens\": 0, \"normalization_means\": [0.5, 0.5, 0.5], "
                                    "\"normalization_deviations\": [0.25, 0.25, 0.25]}}");
        else
            write_bytes(config_path, text_config, size);
        uform_model_options_t options = {.path = path, .modality = modalities[i], .residency = uform_residency_ram_k,
                                         .weights_dtype = uform_dtype_f32_k};
        uform_model_t model = (uform_model_t)1;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
        CHECK_MESSAGE("model path is too long");
        CHECK(model == NULL);
    }
    free(text_config);
}

/* JSON nested past cJSON's limit is named as such; brackets inside strings do not count. */
static void test_json_depth(void) {
    size_t const deep = 1500;
    char *text = (char *)malloc(2 * deep + 32);
    CHECK_FATAL(text);
    memset(text, '[', deep), memset(text + deep, ']', deep);
    void *root = NULL;
    CHECK_STATUS(uform_json_parse("deep.json", text, 2 * deep, &root), uform_status_corrupt_file_k);
    CHECK_MESSAGE("deep.json: JSON nested deeper than 1000 levels, at byte");
    CHECK(root == NULL);
    memset(text, '[', 999), memset(text + 999, ']', 999);
    CHECK_STATUS(uform_json_parse("fine.json", text, 2 * 999, &root), uform_status_ok_k);
    uform_json_free(root);
    int const prefix = snprintf(text, 32, "{\"a\": \"");
    memset(text + prefix, '[', deep); /* an unterminated string of brackets: malformed, not deep */
    CHECK_STATUS(uform_json_parse("string.json", text, (size_t)prefix + deep, &root), uform_status_corrupt_file_k);
    CHECK_MESSAGE("string.json: malformed JSON near byte");
    /* A string ending in an escaped backslash ends at its quote: the brackets after it count. */
    int const escaped = snprintf(text, 32, "{\"a\": \"x\\\\\", \"b\": ");
    memset(text + escaped, '[', deep);
    CHECK_STATUS(uform_json_parse("escaped.json", text, (size_t)escaped + deep, &root), uform_status_corrupt_file_k);
    CHECK_MESSAGE("escaped.json: JSON nested deeper than 1000 levels, at byte");
    free(text);
}

/* Weights that are not numbers, or that the asked dtype cannot hold: refused at open, naming the tensor. */
static void test_weights_values(void) {
    char const *dir = fixture_copy("tiny-bert", "values-bert");
    char model_file[4096], original[4096];
    snprintf(model_file, sizeof(model_file), "%s/model.safetensors", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/model.safetensors", models_dir);
    uform_model_t model = NULL;
    rewrite_safetensors(original, model_file, (edit_t){.poke = "embeddings.LayerNorm.weight", .poke_element = 3, .poke_value = NAN});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k,
                        "values-bert/model.safetensors: tensor 'embeddings.LayerNorm.weight' holds NaN at element 3", NULL, NULL);
    rewrite_safetensors(original, model_file,
                        (edit_t){.poke = "encoder.layer.1.attention.self.query.weight", .poke_element = 17, .poke_value = -INFINITY});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k,
                        "tensor 'encoder.layer.1.attention.self.query.weight' holds infinity at element 17", NULL, NULL);
    /* 70000 is finite in f32 and bf16, infinity in f16: that open alone is refused. */
    rewrite_safetensors(original, model_file,
                        (edit_t){.poke = "encoder.layer.0.intermediate.dense.weight", .poke_element = 5, .poke_value = 70000.0f});
    uform_dtype_t const holders[2] = {uform_dtype_f32_k, uform_dtype_bf16_k};
    for (size_t i = 0; i < 2; ++i) {
        CHECK_STATUS(open_model(dir, holders[i], &model), uform_status_ok_k);
        uform_model_free(model), model = NULL;
    }
    CHECK_STATUS(open_model(dir, uform_dtype_f16_k, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("tensor 'encoder.layer.0.intermediate.dense.weight' holds 70000 at element 5, past the range of f16 "
                  "weights; open the model with bf16 or f32 weights");
    CHECK(model == NULL);
    /* Just below f16's overflow (65504 is its largest) opens. */
    rewrite_safetensors(original, model_file,
                        (edit_t){.poke = "encoder.layer.0.intermediate.dense.weight", .poke_element = 5, .poke_value = 65504.0f});
    CHECK_STATUS(open_model(dir, uform_dtype_f16_k, &model), uform_status_ok_k);
    uform_model_free(model), model = NULL;
}

/* What a BERT directory's side files may ask that the engine does not do: refused at open, naming it. */
static void test_bert_side_refusals(void) {
    char const *dir = fixture_copy("tiny-bert", "side-bert");
    char config[4096], tokenizer_config[4096], sbert[4096], tokenizer[4096], original[4096];
    snprintf(config, sizeof(config), "%s/config.json", dir);
    snprintf(tokenizer_config, sizeof(tokenizer_config), "%s/tokenizer_config.json", dir);
    snprintf(sbert, sizeof(sbert), "%s/sentence_bert_config.json", dir);
    snprintf(tokenizer, sizeof(tokenizer), "%s/tokenizer.json", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/config.json", models_dir);
    size_t size = 0;
    char *text = read_bytes(original, &size);
    char *edited = malloc(size + 256);
    CHECK_FATAL(text && edited);
    char const *open_brace = strchr(text, '{');
    CHECK_FATAL(open_brace != NULL);
    size_t const head = (size_t)(open_brace - text) + 1;
    /* config.json: a decoder (causal attention), and a null image_encoder (which is no UForm3 section). */
    char const *inserts[2] = {"\"is_decoder\": true, ", "\"image_encoder\": null, "};
    for (size_t k = 0; k < 2; ++k) {
        memcpy(edited, text, head), strcpy(edited + head, inserts[k]);
        memcpy(edited + head + strlen(inserts[k]), text + head, size - head);
        write_bytes(config, edited, size + strlen(inserts[k]));
        if (k == 0) EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config.json: 'is_decoder' is true: causal", NULL, NULL);
        else {
            uform_model_t model = NULL;
            CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
            uform_model_free(model);
        }
    }
    write_bytes(config, text, size);
    /* tokenizer_config.json: other specials than BERT's; left truncation; a value of the wrong type. */
    struct {
        char const *json;
        uform_status_t status;
        char const *needle;
    } const side[] = {
        {"{\"cls_token\": \"<s>\"}", uform_status_unsupported_k, "'cls_token' is '<s>'; only BERT's '[CLS]' is supported"},
        {"{\"sep_token\": {\"content\": \"</s>\"}}", uform_status_unsupported_k, "'sep_token' is '</s>'"},
        {"{\"unk_token\": 5}", uform_status_corrupt_file_k, "'unk_token' must be a string or an object with a 'content' string"},
        {"{\"cls_token\": {\"content\": \"[CLS]\"}, \"unk_token\": \"[UNK]\"}", uform_status_ok_k, NULL},
        /* PreTrainedTokenizerFast keeps tokenizer.json's pipeline and specials, whatever these name. */
        {"{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"cls_token\": \"<s>\", \"sep_token\": \"</s>\"}",
         uform_status_ok_k, NULL},
        /* transformers 5 rebuilds XLMRobertaTokenizer's pipeline its own way (WhitespaceSplit, then Metaspace). */
        {"{\"tokenizer_class\": \"XLMRobertaTokenizer\", \"cls_token\": \"<s>\", \"sep_token\": \"</s>\"}",
         uform_status_unsupported_k, "'tokenizer_class' 'XLMRobertaTokenizer' is not supported"},
        {"{\"tokenizer_class\": \"ElectraTokenizerFast\", \"cls_token\": \"<s>\"}", uform_status_unsupported_k,
         "'cls_token' is '<s>'"},
        {"{\"truncation_side\": \"left\"}", uform_status_unsupported_k,
         "tokenizer_config.json's 'truncation_side' truncates texts from the left, which is not supported"},
        {"{\"truncation_side\": \"middle\"}", uform_status_corrupt_file_k, "'truncation_side' must be \"right\" or \"left\""},
    };
    for (size_t k = 0; k < sizeof(side) / sizeof(side[0]); ++k) {
        write_text(tokenizer_config, side[k].json);
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), side[k].status);
        if (side[k].needle) CHECK_MESSAGE(side[k].needle);
        uform_model_free(model);
    }
    CHECK(unlink(tokenizer_config) == 0);
    /* tokenizer.json's own truncation from the left, which sentence-transformers would follow. */
    size_t tokenizer_size = 0;
    char *tokenizer_text = read_bytes(tokenizer, &tokenizer_size);
    char const *truncation = "\"truncation\": null";
    char *at = strstr(tokenizer_text, truncation);
    CHECK_FATAL(at != NULL);
    char const *left = "\"truncation\": {\"direction\": \"Left\", \"max_length\": 8, \"strategy\": \"LongestFirst\", \"stride\": 0}";
    char *replaced = malloc(tokenizer_size + strlen(left));
    CHECK_FATAL(replaced != NULL);
    size_t const before = (size_t)(at - tokenizer_text), after = tokenizer_size - before - strlen(truncation);
    memcpy(replaced, tokenizer_text, before), memcpy(replaced + before, left, strlen(left));
    memcpy(replaced + before + strlen(left), at + strlen(truncation), after);
    write_bytes(tokenizer, replaced, before + strlen(left) + after);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "tokenizer.json's 'truncation' truncates texts from the left", NULL, NULL);
    write_bytes(tokenizer, tokenizer_text, tokenizer_size);
    /* A context past what attention holds, from each of the three places it comes from. */
    char const *positions = "\"max_position_embeddings\": ";
    at = strstr(text, positions);
    CHECK_FATAL(at != NULL);
    size_t const digits = strspn(at + strlen(positions), "0123456789");
    size_t const start = (size_t)(at - text) + strlen(positions);
    int const wrote = snprintf(edited, size + 256, "%.*s10000%s", (int)start, text, text + start + digits);
    write_bytes(config, edited, (size_t)wrote);
    write_text(sbert, "{\"max_seq_length\": 9000}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k,
                        "a context of 9000 tokens (sentence_bert_config.json's 'max_seq_length'), more than the 8192", NULL, NULL);
    write_text(sbert, "{}");
    write_text(tokenizer_config, "{\"model_max_length\": 8500}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "a context of 8500 tokens (tokenizer_config.json's 'model_max_length')",
                        NULL, NULL);
    write_text(tokenizer_config, "{}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "a context of 10000 tokens ('max_position_embeddings')", NULL, NULL);
    free(replaced), free(tokenizer_text), free(edited), free(text);
}

/* JSON that parses into far more memory than its bytes: refused before cJSON builds it. */
static void test_json_values(void) {
    size_t const allowed = (size_t)1 << 20;
    size_t const length = 2 * allowed + 8;
    char *text = (char *)malloc(length);
    CHECK_FATAL(text);
    /* "[0,0,...,0]" of n zeros holds n + 1 values (the array and its items). */
    size_t n = allowed - 1, at = 0;
    text[at++] = '[';
    for (size_t i = 0; i < n; ++i) text[at++] = '0', text[at++] = i + 1 < n ? ',' : ']';
    void *root = NULL;
    CHECK_STATUS(uform_json_parse("fits.json", text, at, &root), uform_status_ok_k);
    uform_json_free(root), root = NULL;
    text[at - 1] = ',', text[at++] = '0', text[at++] = ']';
    CHECK_STATUS(uform_json_parse("big.json", text, at, &root), uform_status_corrupt_file_k);
    CHECK_MESSAGE("big.json: up to 1048577 JSON values, more than the 1048576 a model's configuration may hold");
    CHECK(root == NULL);
    /* A safetensors header of the same array in its metadata. */
    char *header = (char *)malloc(at + 64);
    CHECK_FATAL(header);
    int const prefix = snprintf(header, 64, "{\"__metadata__\": {\"k\": ");
    memcpy(header + prefix, text, at), memcpy(header + prefix + at, "}}", 3);
    uform_safetensors_t index;
    CHECK_STATUS(parse_header(header, 0, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("a header of up to 1048579 JSON values, more than the 1048576 this engine reads");
    free(header), free(text);
}

int main(void) {
    model_scratch_begin();
    test_safetensors_hostile();
    test_broken_safetensors_in_models();
    test_bert_configs();
    test_uform3_configs();
    test_special_files();
    test_json_depth();
    test_json_values();
    test_weights_values();
    test_bert_side_refusals();
    test_long_paths();
    remove_tree(scratch);
    CHECK_DONE();
}
