/**
 *  @file   test_encode_gpu.c
 *  @brief  `uform_encode_texts` with VRAM-resident text towers, against this engine's CPU path on the
 *          same model files: towers of MiniLM's shape (BERT layout, mean pooling, Normalize) and of
 *          UForm3-small's (RoBERTa positions, CLS pooling, projection), written at test time from the
 *          splitmix64 stream of test/encode/random_weights.h, plus the committed tiny-bert.
 *
 *  Checks: cosine >= 0.99999 per row in f32 and >= 0.999 in bf16 and f16 against the CPU path in f32;
 *  output options (truncation, normalisation, bf16 rows, a stride); a bad text's status and zero row;
 *  a bad text failing the call without statuses; RESIDENCY_MISMATCH (RAM executor, RAM model on a
 *  VRAM executor, an executor on a device without a copy), UNSUPPORTED on the NULL executor; LIMIT_EXCEEDED when one
 *  text cannot fit `scratch_limit`; a batch split to fit a smaller limit, and 12,000 short texts whose
 *  rows alone exceed 4 MiB of scratch (waves capped by rows); deferred calls; waves (texts
 *  tokenised in parts while the device runs the part before: a bad text, forced wave sizes, a one-entry
 *  ring, a deferred call, a scratch limit, all against the CPU path); UNSUPPORTED
 *  without cuBLASLt; two devices when there are two; a device fault during an encode (a trapping
 *  kernel queued on the executor's stream ahead of the verb's launches, in a child process since
 *  the sticky error breaks the device's primary context for the whole process): the verb fails with
 *  DEVICE_FAULT naming the driver's error and writes no row, the executor is poisoned for every later
 *  call, the RAM executor beside it still encodes, and the model and executor free cleanly.
 *  Without a GPU (here and in CI) it checks the refusals and exits 77 (skipped) naming the reason.
 *
 *      test_encode_gpu [--dump DIRECTORY]   keeps the towers, ids and GPU embeddings there for
 *                                           test/encode/gpu_torch_check.py (PyTorch on CUDA).
 *
 *  Environment: UFORM_TEST_UNDER_SANITIZER=1 skips the fault (the trap), which compute-sanitizer
 *  would count as an error.
 */
#define _GNU_SOURCE
#include "check.h"
#include "rows.h"
#include "encode/text_towers.h"
#include "fault_harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char const *dump_directory = NULL;
static char root[512];

/* ---- Model directories ---- */

static void write_vocab(char const *directory, size_t words) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab.txt", directory);
    FILE *file = fopen(path, "w");
    CHECK_FATAL(file != NULL);
    fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", file);
    for (size_t i = 5; i < words; ++i) fprintf(file, "w%zu\n", i);
    CHECK_FATAL(fclose(file) == 0);
}

static void write_text(char const *directory, char const *name, char const *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", directory, name);
    FILE *file = fopen(path, "w");
    CHECK_FATAL(file != NULL);
    fputs(text, file);
    CHECK_FATAL(fclose(file) == 0);
}

typedef struct bert_spec_t {
    size_t hidden, heads, layers, intermediate, vocab, max_positions, sequence;
    uint64_t seed;
} bert_spec_t;

static size_t bert_tensors(bert_spec_t const *spec, tower_tensor_t *out) {
    size_t count = 0, h = spec->hidden, f = spec->intermediate;
    double matrix = 1.2 * sqrt(3.0 / h), peaked = 2.0 * sqrt(3.0 / h), down = 1.2 * sqrt(3.0 / f);
    TOWER_NAME("embeddings.word_embeddings.weight"); TOWER_ADD(2, 0, 0.8, spec->vocab, h);
    TOWER_NAME("embeddings.position_embeddings.weight"); TOWER_ADD(2, 0, 0.8, spec->max_positions, h);
    TOWER_NAME("embeddings.token_type_embeddings.weight"); TOWER_ADD(2, 0, 0.8, 2, h);
    TOWER_NAME("embeddings.LayerNorm.weight"); TOWER_ADD(1, 1, 0.3, h);
    TOWER_NAME("embeddings.LayerNorm.bias"); TOWER_ADD(1, 0, 0.2, h);
    for (unsigned l = 0; l < (unsigned)spec->layers; ++l) {
        char const *names[] = {"query", "key", "value"};
        for (int i = 0; i < 3; ++i) {
            TOWER_NAME("encoder.layer.%u.attention.self.%s.weight", l, names[i]); TOWER_ADD(2, 0, i < 2 ? peaked : matrix, h, h);
            TOWER_NAME("encoder.layer.%u.attention.self.%s.bias", l, names[i]); TOWER_ADD(1, 0, 0.2, h);
        }
        TOWER_NAME("encoder.layer.%u.attention.output.dense.weight", l); TOWER_ADD(2, 0, matrix, h, h);
        TOWER_NAME("encoder.layer.%u.attention.output.dense.bias", l); TOWER_ADD(1, 0, 0.2, h);
        TOWER_NAME("encoder.layer.%u.attention.output.LayerNorm.weight", l); TOWER_ADD(1, 1, 0.3, h);
        TOWER_NAME("encoder.layer.%u.attention.output.LayerNorm.bias", l); TOWER_ADD(1, 0, 0.2, h);
        TOWER_NAME("encoder.layer.%u.intermediate.dense.weight", l); TOWER_ADD(2, 0, matrix, f, h);
        TOWER_NAME("encoder.layer.%u.intermediate.dense.bias", l); TOWER_ADD(1, 0, 0.2, f);
        TOWER_NAME("encoder.layer.%u.output.dense.weight", l); TOWER_ADD(2, 0, down, h, f);
        TOWER_NAME("encoder.layer.%u.output.dense.bias", l); TOWER_ADD(1, 0, 0.2, h);
        TOWER_NAME("encoder.layer.%u.output.LayerNorm.weight", l); TOWER_ADD(1, 1, 0.3, h);
        TOWER_NAME("encoder.layer.%u.output.LayerNorm.bias", l); TOWER_ADD(1, 0, 0.2, h);
    }
    return count;
}

/** A sentence-transformers BERT directory: mean pooling, Normalize, `sequence` tokens at most. */
static void write_bert(char const *directory, bert_spec_t const *spec) {
    mkdir(directory, 0755);
    char path[1024], text[1024];
    snprintf(text, sizeof text,
             "{\"model_type\": \"bert\", \"hidden_size\": %zu, \"num_attention_heads\": %zu, \"num_hidden_layers\": %zu, "
             "\"intermediate_size\": %zu, \"max_position_embeddings\": %zu, \"vocab_size\": %zu, \"type_vocab_size\": 2, "
             "\"layer_norm_eps\": 1e-12, \"hidden_act\": \"gelu\", \"pad_token_id\": 0, "
             "\"position_embedding_type\": \"absolute\"}\n",
             spec->hidden, spec->heads, spec->layers, spec->intermediate, spec->max_positions, spec->vocab);
    write_text(directory, "config.json", text);
    write_text(directory, "modules.json",
               "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
               " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},"
               " {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": \"sentence_transformers.models.Normalize\"}]\n");
    snprintf(path, sizeof path, "%s/1_Pooling", directory);
    mkdir(path, 0755);
    snprintf(text, sizeof text,
             "{\"word_embedding_dimension\": %zu, \"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": true, "
             "\"pooling_mode_max_tokens\": false, \"pooling_mode_mean_sqrt_len_tokens\": false}\n",
             spec->hidden);
    write_text(path, "config.json", text);
    snprintf(text, sizeof text, "{\"max_seq_length\": %zu, \"do_lower_case\": false}\n", spec->sequence);
    write_text(directory, "sentence_bert_config.json", text);
    write_text(directory, "tokenizer_config.json", "{\"do_lower_case\": true}\n");
    write_vocab(directory, spec->vocab);
    size_t count = bert_tensors(spec, NULL);
    tower_tensor_t *tensors = (tower_tensor_t *)calloc(count, sizeof(tower_tensor_t));
    CHECK_FATAL(tensors != NULL);
    bert_tensors(spec, tensors);
    snprintf(path, sizeof path, "%s/model.safetensors", directory);
    CHECK_FATAL(tower_write_safetensors(path, tensors, count, spec->seed) != 0);
    free(tensors);
}

/* ---- Texts ---- */

typedef struct texts_t {
    char **texts;
    size_t count;
} texts_t;

/** `count` texts of 1 to `max_words` words "wN" of a `vocab`-word vocabulary, from `seed`; every
 *  other text has "[PAD]" for every seventh word from the fourth. */
static texts_t make_texts(size_t count, size_t max_words, size_t vocab, uint64_t seed) {
    texts_t t = {.texts = (char **)calloc(count, sizeof(char *)), .count = count};
    CHECK_FATAL(t.texts != NULL);
    for (size_t i = 0; i < count; ++i) {
        size_t words = 1 + (size_t)(tower_splitmix64(&seed) % max_words);
        if (i == 0) words = max_words; /* the longest first, so every batch has one */
        char *text = (char *)malloc(words * 8 + 1);
        CHECK_FATAL(text != NULL);
        size_t used = 0;
        for (size_t w = 0; w < words; ++w) {
            size_t const word = 5 + (size_t)(tower_splitmix64(&seed) % (vocab - 5));
            if (i % 2 && w % 7 == 3) /* a "[PAD]" typed into the text: RoBERTa positions skip it */
                used += (size_t)sprintf(text + used, "%s[PAD]", w ? " " : "");
            else
                used += (size_t)sprintf(text + used, "%sw%zu", w ? " " : "", word);
        }
        t.texts[i] = text;
    }
    return t;
}

static void free_texts(texts_t *t) {
    for (size_t i = 0; i < t->count; ++i) free(t->texts[i]);
    free(t->texts);
}

/* ---- Comparisons ---- */

static uform_model_t open_model(char const *path, uform_residency_t residency, uform_dtype_t dtype,
                                uform_vram_options_t const *vram) {
    uform_model_options_t options = {.path = path, .modality = uform_modality_text_k, .residency = residency,
                                     .vram = vram, .weights_dtype = dtype};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    return model;
}

static uform_executor_t ram_executor = NULL;

/** CPU reference rows (f32 weights) for `texts`. */
static float *cpu_rows(char const *path, texts_t const *t, size_t *dims) {
    uform_model_t model = open_model(path, uform_residency_ram_k, uform_dtype_f32_k, NULL);
    CHECK_FATAL(model != NULL);
    uform_model_description_t description;
    CHECK_FATAL(uform_model_describe(model, &description) == uform_status_ok_k);
    *dims = description.dimensions;
    float *rows = (float *)calloc(t->count * *dims, sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(ram_executor, model, (char const *const *)t->texts, NULL, t->count, &out, NULL, NULL),
                 uform_status_ok_k);
    uform_model_free(model);
    return rows;
}

static void dump(char const *name, uform_model_t model, texts_t const *t, float const *rows, size_t dims) {
    if (!dump_directory) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.f32", dump_directory, name);
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file != NULL);
    fwrite(rows, sizeof(float), t->count * dims, file);
    fclose(file);
    snprintf(path, sizeof path, "%s/%s.ids", dump_directory, name);
    file = fopen(path, "w");
    CHECK_FATAL(file != NULL);
    for (size_t i = 0; i < t->count; ++i) {
        int32_t ids[1024];
        size_t count = 0;
        CHECK(uform_model_tokenize(model, t->texts[i], strlen(t->texts[i]), ids, 1024, &count) == uform_status_ok_k);
        for (size_t j = 0; j < count && j < 1024; ++j) fprintf(file, "%s%d", j ? " " : "", (int)ids[j]);
        fputc('\n', file);
    }
    fclose(file);
}

/** Encodes `t` on a VRAM executor with `dtype` weights and checks every row's cosine to the CPU's. */
static void check_tower(char const *label, char const *path, texts_t const *t, uform_executor_t executor,
                        uform_vram_options_t const *vram, uform_dtype_t dtype, double threshold) {
    size_t dims = 0;
    float *expected = cpu_rows(path, t, &dims);
    uform_model_t model = open_model(path, uform_residency_vram_k, dtype, vram);
    if (!model) {
        free(expected);
        return;
    }
    float *rows = (float *)calloc(t->count * dims, sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    uform_status_t statuses[4096];
    CHECK_FATAL(t->count <= 4096);
    CHECK_STATUS(uform_encode_texts(executor, model, (char const *const *)t->texts, NULL, t->count, &out, statuses, NULL),
                 uform_status_ok_k);
    double worst = 1.0;
    size_t worst_row = 0;
    for (size_t i = 0; i < t->count; ++i) {
        CHECK(statuses[i] == uform_status_ok_k);
        double c = cosine(rows + i * dims, expected + i * dims, dims);
        if (c < worst) worst = c, worst_row = i;
    }
    printf("%-34s %zu texts, worst cosine %.7f (row %zu), threshold %g\n", label, t->count, worst, worst_row, threshold);
    CHECK(worst >= threshold);
    char name[256];
    snprintf(name, sizeof name, "%s", label);
    for (char *c = name; *c; ++c)
        if (*c == ' ' || *c == '/') *c = '_';
    dump(name, model, t, rows, dims);
    free(rows), free(expected);
    uform_model_free(model);
}

/* ---- A device fault during an encode (in a child process) ---- */


/* ---- Deferred encodes in flight together ---- */


/** Deferred encodes return once enqueued and write their rows as their outcomes finish: three of
 *  one model in flight behind a 300 ms device sleep (two with the model's pinned buffers, the third
 *  from unpinned memory, so finished when it returns), each against the CPU rows; a bad text's
 *  status written as the outcome finishes; a deferred encode left to `uform_executor_free`. */
static void test_deferred_in_flight(char const *path, uform_vram_options_t const *one, texts_t const *t) {
    enum { CALLS = 3 };
    size_t dims = 0;
    float *expected = cpu_rows(path, t, &dims);
    uform_model_t gpu = open_model(path, uform_residency_vram_k, uform_dtype_f32_k, one);
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(one, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    CHECK_FATAL(gpu && executor);
    size_t n = t->count;
    float *rows[CALLS];
    uform_outcome_t outcomes[CALLS];
    uform_status_t statuses[CALLS][256];
    CHECK_FATAL(n <= 256);
    char const **texts = (char const **)malloc(n * sizeof(char const *));
    memcpy(texts, t->texts, n * sizeof(char const *));
    texts[n / 2] = "bad \xc3\x28 text";
    {   // Warm: the first calls of a shape plan and time the products and capture the graphs.
        float *warm = (float *)calloc(n * dims, sizeof(float));
        uform_embeddings_t out = {.data = warm, .dtype = uform_dtype_f32_k};
        for (int r = 0; r < 2; ++r)
            CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, n, &out, statuses[0], NULL), uform_status_ok_k);
        free(warm);
    }
    double const nanoseconds = 300e6;
    uform_call_t const sleep = {.residency = uform_residency_vram_k, .device = fault_sleep_callback, .context = (void *)&nanoseconds};
    uform_outcome_t slept;
    CHECK_STATUS(uform_executor_call(executor, &sleep, &slept), uform_status_ok_k);
    double const start = uform_now_seconds();
    int pending_after_return[CALLS], untouched_after_return[CALLS];
    for (int c = 0; c < CALLS; ++c) {
        rows[c] = (float *)malloc(n * dims * sizeof(float));
        memset(rows[c], 0x7f, n * dims * sizeof(float));
        memset(statuses[c], 0x7f, sizeof statuses[c]);
        uform_embeddings_t out = {.data = rows[c], .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, n, &out, statuses[c], &outcomes[c]), uform_status_ok_k);
        pending_after_return[c] = !__atomic_load_n(&outcomes[c].finished, __ATOMIC_ACQUIRE);
        untouched_after_return[c] = rows_untouched(rows[c], n * dims);
    }
    double const submitted = uform_now_seconds() - start;
    printf("three deferred encodes behind a 300 ms device sleep: submitted in %.1f ms; pending on return %d %d %d, "
           "rows untouched on return %d %d %d\n",
           submitted * 1e3, pending_after_return[0], pending_after_return[1], pending_after_return[2],
           untouched_after_return[0], untouched_after_return[1], untouched_after_return[2]);
    // The two with pinned buffers return before the device gets to them (their rows unwritten); the
    // third, unpinned, copies its rows back synchronously, so it returns after the sleep.
    CHECK(pending_after_return[0] && pending_after_return[1] && untouched_after_return[0] && untouched_after_return[1]);
    CHECK(submitted >= 0.2);
    for (int c = CALLS - 1; c >= 0; --c) { // waiting for the last first settles the others on the way
        CHECK_STATUS(uform_outcome_wait(&outcomes[c], -1), uform_status_ok_k);
        double worst = 1.0;
        int statuses_right = 1;
        for (size_t i = 0; i < n; ++i) {
            statuses_right &= statuses[c][i] == (i == n / 2 ? uform_status_invalid_argument_k : uform_status_ok_k);
            if (i == n / 2) continue;
            double const cos = cosine(rows[c] + i * dims, expected + i * dims, dims);
            if (cos < worst) worst = cos;
        }
        int zero = 1;
        for (size_t j = 0; j < dims; ++j) zero &= rows[c][n / 2 * dims + j] == 0.0f;
        printf("deferred encode %d: worst cosine %.7f, bad text's status and zero row: %d %d\n", c, worst, statuses_right, zero);
        CHECK(worst >= 0.99999 && statuses_right && zero);
    }
    CHECK_STATUS(uform_outcome_wait(&slept, -1), uform_status_ok_k);

    // Left to the executor's free: the outcome finishes OK and the rows are written.
    memset(rows[0], 0x7f, n * dims * sizeof(float));
    uform_embeddings_t out = {.data = rows[0], .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, n, &out, statuses[0], &outcomes[0]), uform_status_ok_k);
    uform_executor_free(executor);
    CHECK(outcomes[0].finished && outcomes[0].status == uform_status_ok_k);
    CHECK(cosine(rows[0], expected, dims) >= 0.99999);
    printf("a deferred encode left to uform_executor_free: finished %u, status %s\n", outcomes[0].finished,
           uform_status_name(outcomes[0].status));
    for (int c = 0; c < CALLS; ++c) free(rows[c]);
    free(texts), free(expected);
    uform_model_free(gpu);
}

/** Runs in `test_encode_gpu --fault-child DIRECTORY` (a UForm3-shaped tower written by the parent). */
static int fault_child(char const *directory) {
    enum { COUNT = 24, DIMS = 256 };
    int32_t const first[] = {0};
    uform_vram_options_t one = {.devices = first, .devices_count = 1};
    uform_executor_t victim = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram_executor), uform_status_ok_k);
    CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 0, &victim), uform_status_ok_k);
    CHECK_FATAL(victim && ram_executor);
    texts_t t = make_texts(COUNT, 40, 1000, 0x6b0e0011u);
    char const *const *texts = (char const *const *)t.texts;
    size_t dims = 0;
    float *expected = cpu_rows(directory, &t, &dims);
    CHECK_FATAL(dims == DIMS);
    uform_model_t cpu = open_model(directory, uform_residency_ram_k, uform_dtype_f32_k, NULL);
    uform_model_t gpu = open_model(directory, uform_residency_vram_k, uform_dtype_f32_k, &one);
    CHECK_FATAL(cpu && gpu);
    static float rows[COUNT * DIMS];
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    // Healthy first: the rows match the CPU's.
    CHECK_STATUS(uform_encode_texts(victim, gpu, texts, NULL, COUNT, &out, NULL, NULL), uform_status_ok_k);
    CHECK(cosine(rows, expected, DIMS) >= 0.99999 && cosine(rows + (COUNT - 1) * DIMS, expected + (COUNT - 1) * DIMS, DIMS) >= 0.99999);

    // A trap queued (deferred) on the executor's stream, then the verb behind it: the fault surfaces
    // while the verb waits for its own launches.
    uform_call_t const trap = {.residency = uform_residency_vram_k, .device = fault_trap_callback};
    uform_outcome_t trapped;
    CHECK_STATUS(uform_executor_call(victim, &trap, &trapped), uform_status_ok_k);
    memset(rows, 0x7f, sizeof rows);
    uform_status_t statuses[COUNT];
    CHECK_STATUS(uform_encode_texts(victim, gpu, texts, NULL, COUNT, &out, statuses, NULL), uform_status_device_fault_k);
    CHECK_MESSAGE("CUDA_ERROR");
    printf("an encode behind a trap: %s\n", uform_error_message());
    int const untouched = rows_untouched(rows, COUNT * DIMS);
    printf("rows untouched after the fault: %d\n", untouched);
    CHECK(untouched);
    CHECK_STATUS(uform_outcome_wait(&trapped, -1), uform_status_device_fault_k);
    CHECK(trapped.finished && trapped.status == uform_status_device_fault_k);

    // Poisoned from now on, blocking and deferred alike, without touching the rows.
    CHECK_STATUS(uform_encode_texts(victim, gpu, texts, NULL, 2, &out, NULL, NULL), uform_status_device_fault_k);
    CHECK_MESSAGE("poisoned");
    printf("the next encode: %s\n", uform_error_message());
    uform_outcome_t later;
    uform_status_t const deferred = uform_encode_texts(victim, gpu, texts, NULL, 2, &out, NULL, &later);
    CHECK(deferred == uform_status_device_fault_k);
    if (deferred == uform_status_device_fault_k) CHECK(later.finished && later.status == uform_status_device_fault_k);
    CHECK(rows_untouched(rows, COUNT * DIMS));
    CHECK_STATUS(uform_executor_drain(victim, uform_mood_parked_k), uform_status_device_fault_k);

    // The RAM executor beside it still encodes, the same rows as before the fault.
    memset(rows, 0, sizeof rows);
    CHECK_STATUS(uform_encode_texts(ram_executor, cpu, texts, NULL, COUNT, &out, NULL, NULL), uform_status_ok_k);
    CHECK(!memcmp(rows, expected, sizeof rows));
    // Freeing the model (its device copy in the broken context) and the executor neither hangs nor
    // crashes; the parent's clock bounds it.
    uform_model_free(gpu);
    uform_executor_free(victim);
    uform_model_free(cpu);
    uform_executor_free(ram_executor);
    free(expected);
    free_texts(&t);
    printf("fault child: %s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}

static void test_fault(char const *self, char const *directory) { fault_run_child(self, "--fault-child", directory, 180, "fault"); }

/* ---- Main ---- */

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--fault-child")) return fault_child(argv[2]);
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump_directory = argv[++i];
    snprintf(root, sizeof root, "%s", dump_directory ? dump_directory : "/tmp/uform-test-encode-gpu-XXXXXX");
    if (dump_directory) mkdir(root, 0755);
    else CHECK_FATAL(mkdtemp(root) != NULL);

    /* Refusals that hold on every machine. */
    {
        uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        uform_status_t status = uform_model_open(&options, &model);
        char message[512];
        snprintf(message, sizeof message, "%s", uform_error_message());
        if (uform_gpu_status() != uform_status_ok_k) {
            CHECK_STATUS(status, uform_status_unsupported_k);
            CHECK(strstr(message, "uform_model_open: VRAM residency needs a GPU") != NULL);
            printf("without a GPU: %s\n", message);
            CHECK(model == NULL);
            uform_vram_options_t vram = {.devices = NULL, .devices_count = 1};
            options.vram = &vram;
            CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
            if (check_failures) return 1;
            CHECK(uform_gpu_status() != uform_status_ok_k); // sets the message the skip quotes
            if (!dump_directory) rmdir(root);
            SKIP("no GPU to run VRAM text towers on (%s); the refusals without one passed", uform_error_message());
        }
        uform_model_free(model);
    }

    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &ram_executor), uform_status_ok_k);
    setenv("UFORM_NO_CUBLASLT", "1", 1);
    {
        uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_unsupported_k);
        CHECK_MESSAGE("cuBLASLt");
        printf("without cuBLASLt: %s\n", uform_error_message());
    }
    unsetenv("UFORM_NO_CUBLASLT");
    {
        uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        uform_status_t status = uform_model_open(&options, &model);
        if (status == uform_status_unsupported_k && strstr(uform_error_message(), "cuBLASLt")) {
            printf("SKIPPED: %s\n", uform_error_message());
            uform_executor_free(ram_executor);
            if (!dump_directory) rmdir(root);
            return 77;
        }
        CHECK_STATUS(status, uform_status_ok_k);
        uform_model_free(model);
    }

    size_t gpus = 0;
    uform_gpu_device_t listed[16];
    CHECK_FATAL(uform_gpu_devices(listed, 16, &gpus) == uform_status_ok_k);
    int32_t const first[] = {0};
    uform_vram_options_t one = {.devices = first, .devices_count = 1};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    CHECK_FATAL(executor != NULL);

    /* Towers. */
    char uform3_dir[600], minilm_dir[600];
    snprintf(uform3_dir, sizeof uform3_dir, "%s/uform3-small", root);
    snprintf(minilm_dir, sizeof minilm_dir, "%s/minilm", root);
    text_tower_spec_t uform3 = {"uform3-small", 768, 768, 12, 4, 256, 1000, 80, 0, 2, 0, "cls", 0x6b0e0001u};
    CHECK_FATAL(text_tower_write(uform3_dir, &uform3) != 0);
    write_vocab(uform3_dir, 1000);
    bert_spec_t minilm = {.hidden = 384, .heads = 12, .layers = 6, .intermediate = 1536, .vocab = 1000,
                          .max_positions = 512, .sequence = 128, .seed = 0x6b0e0002u};
    write_bert(minilm_dir, &minilm);

    /* Attention's other shapes: 128-wide heads over up to 320 tokens (five 64-key tiles, so the
     * staging buffers are reused), 64-wide heads over up to 512. The flash kernel (bf16/f16) takes
     * both; the f32 kernel keeps a whole text in shared memory, so f32 runs 128-wide heads over the
     * 128-token texts and not the 512-token ones. */
    char wide_dir[600], long_dir[600];
    snprintf(wide_dir, sizeof wide_dir, "%s/wide-heads", root);
    snprintf(long_dir, sizeof long_dir, "%s/long-texts", root);
    bert_spec_t wide = {.hidden = 256, .heads = 2, .layers = 2, .intermediate = 512, .vocab = 1000,
                        .max_positions = 512, .sequence = 320, .seed = 0x6b0e0003u};
    bert_spec_t long_spec = {.hidden = 256, .heads = 4, .layers = 2, .intermediate = 512, .vocab = 1000,
                             .max_positions = 512, .sequence = 512, .seed = 0x6b0e0004u};
    write_bert(wide_dir, &wide);
    write_bert(long_dir, &long_spec);

    texts_t short_texts = make_texts(96, 62, 1000, 11);   /* up to 64 tokens with the specials */
    texts_t long_texts = make_texts(64, 140, 1000, 12);   /* truncated at 128 */
    texts_t tiny_texts = make_texts(24, 12, 40, 13);
    texts_t wide_texts = make_texts(20, 330, 1000, 14);   /* truncated at 320 */
    texts_t long_texts_512 = make_texts(12, 520, 1000, 15); /* truncated at 512 */
    char const *forced = getenv("UFORM_GPU_ATTENTION");
    int flash_allowed = !forced || !strcmp(forced, "flash");
    uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    char const *names[] = {"f32", "bf16", "f16"};
    double const thresholds[] = {0.99999, 0.999, 0.999};
    for (int d = 0; d < 3; ++d) {
        char label[128];
        snprintf(label, sizeof label, "uform3-small %s", names[d]);
        check_tower(label, uform3_dir, &short_texts, executor, &one, dtypes[d], thresholds[d]);
        snprintf(label, sizeof label, "minilm %s", names[d]);
        check_tower(label, minilm_dir, &long_texts, executor, &one, dtypes[d], thresholds[d]);
        snprintf(label, sizeof label, "tiny-bert %s", names[d]);
        check_tower(label, UFORM_TEST_MODELS_DIR "/tiny-bert", &tiny_texts, executor, &one, dtypes[d], thresholds[d]);
        snprintf(label, sizeof label, "wide-heads %s", names[d]);
        if (d == 0) check_tower(label, wide_dir, &long_texts, executor, &one, dtypes[d], thresholds[d]); /* <= 128 tokens */
        else if (flash_allowed) check_tower(label, wide_dir, &wide_texts, executor, &one, dtypes[d], thresholds[d]);
        else printf("%-34s not run: UFORM_GPU_ATTENTION=%s has no kernel for 320 tokens of 128-wide heads\n", label, forced);
        snprintf(label, sizeof label, "long-texts %s", names[d]);
        if (d > 0 && flash_allowed) check_tower(label, long_dir, &long_texts_512, executor, &one, dtypes[d], thresholds[d]);
        else if (d > 0) printf("%-34s not run: UFORM_GPU_ATTENTION=%s has no kernel for 512 tokens\n", label, forced);
    }

    /* Output options: truncation, normalisation, bf16 rows with a stride; against the CPU with the same. */
    {
        uform_model_t cpu = open_model(uform3_dir, uform_residency_ram_k, uform_dtype_f32_k, NULL);
        uform_model_t gpu = open_model(uform3_dir, uform_residency_vram_k, uform_dtype_f32_k, &one);
        size_t n = short_texts.count, stride = 160;
        unsigned char *a = (unsigned char *)calloc(n, stride), *b = (unsigned char *)calloc(n, stride);
        uform_embeddings_t out = {.data = a, .stride = stride, .dimensions = 64, .dtype = uform_dtype_bf16_k, .normalize = 1};
        CHECK_STATUS(uform_encode_texts(ram_executor, cpu, (char const *const *)short_texts.texts, NULL, n, &out, NULL, NULL),
                     uform_status_ok_k);
        out.data = b;
        CHECK_STATUS(uform_encode_texts(executor, gpu, (char const *const *)short_texts.texts, NULL, n, &out, NULL, NULL),
                     uform_status_ok_k);
        int untouched = 1;
        double worst = bf16_rows_worst(a, b, n, stride, 64, &untouched);
        printf("%-34s worst cosine %.7f, rows normalised, padding untouched: %d\n", "uform3-small 64 dims bf16 rows",
               worst, untouched);
        CHECK(worst >= 0.9999);
        CHECK(untouched);
        free(a), free(b);
        uform_model_free(cpu);

        /* A bad text: its own status and a zero row with statuses; the call's failure without. */
        char const *texts[] = {"w5 w6 w7", "w8", "bad \xff\xfe text", "w9 w10"};
        float rows[4][256];
        memset(rows, 0x7f, sizeof rows);
        uform_status_t statuses[4];
        uform_embeddings_t plain = {.data = rows, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, 4, &plain, statuses, NULL), uform_status_ok_k);
        CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_ok_k && statuses[3] == uform_status_ok_k);
        CHECK(statuses[2] == uform_status_invalid_argument_k);
        int zero = 1, nonzero = 0;
        for (size_t j = 0; j < 256; ++j) zero &= rows[2][j] == 0.0f, nonzero |= rows[3][j] != 0.0f;
        CHECK(zero && nonzero);
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, 4, &plain, NULL, NULL), uform_status_invalid_argument_k);
        CHECK_MESSAGE("text 2");
        printf("bad text: %s\n", uform_error_message());

        /* Residency. */
        CHECK_STATUS(uform_encode_texts(ram_executor, gpu, texts, NULL, 2, &plain, NULL, NULL),
                     uform_status_residency_mismatch_k);
        CHECK_STATUS(uform_encode_texts(NULL, gpu, texts, NULL, 2, &plain, NULL, NULL), uform_status_unsupported_k);
        CHECK_MESSAGE("NULL executor has no stream");
        uform_model_t ram = open_model(uform3_dir, uform_residency_ram_k, uform_dtype_f32_k, NULL);
        CHECK_STATUS(uform_encode_texts(executor, ram, texts, NULL, 2, &plain, NULL, NULL), uform_status_residency_mismatch_k);
        uform_model_free(ram);

        /* The same batch three times: the second call captures a graph, the third replays it; the
         * rows are bit for bit the first's. */
        {
            size_t n = short_texts.count;
            float *runs[3];
            for (int r = 0; r < 3; ++r) {
                runs[r] = (float *)calloc(n * 256, sizeof(float));
                uform_embeddings_t again = {.data = runs[r], .dtype = uform_dtype_f32_k};
                CHECK_STATUS(uform_encode_texts(executor, gpu, (char const *const *)short_texts.texts, NULL, n, &again,
                                                NULL, NULL),
                             uform_status_ok_k);
            }
            int same = !memcmp(runs[0], runs[1], n * 256 * sizeof(float)) && !memcmp(runs[0], runs[2], n * 256 * sizeof(float));
            printf("three calls of one shape (eager, captured, replayed): rows identical: %d\n", same);
            CHECK(same);
            for (int r = 0; r < 3; ++r) free(runs[r]);
        }

        /* Zero texts; a deferred call. */
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, 0, &plain, NULL, NULL), uform_status_ok_k);
        uform_outcome_t outcome;
        memset(rows, 0, sizeof rows);
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, 2, &plain, NULL, &outcome), uform_status_ok_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
        CHECK(rows[1][0] != 0.0f);

        /* LIMIT_EXCEEDED: one 64-token text cannot fit 1.5 MiB of scratch. */
        uform_executor_t small = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 3u << 19, 0, &small), uform_status_ok_k);
        char const *longest[] = {short_texts.texts[0]};
        CHECK_STATUS(uform_encode_texts(small, gpu, longest, NULL, 1, &plain, NULL, NULL), uform_status_limit_exceeded_k);
        CHECK_MESSAGE("scratch_limit");
        printf("limit: %s\n", uform_error_message());
        uform_executor_free(small);
        uform_model_free(gpu);
    }

    /* Waves: 600 texts tokenise in two waves (75, then 525 while the device runs the first). Invalid
     * UTF-8 in the last wave gets its status and a zero row (or, without statuses, fails the call naming
     * it, writing nothing); forced wave sizes, a one-entry ring, a deferred call and 8 MiB of scratch
     * (chunks within waves) give the CPU path's rows too. */
    {
        enum { WAVED = 600, BAD = 530 };
        texts_t many = make_texts(WAVED, 40, 1000, 0x6b0e0009u);
        free(many.texts[BAD]);
        many.texts[BAD] = strdup("w7 w8 \xc3\x28 w9");
        uform_model_t cpu = open_model(minilm_dir, uform_residency_ram_k, uform_dtype_f32_k, NULL);
        uform_model_t gpu = open_model(minilm_dir, uform_residency_vram_k, uform_dtype_f32_k, &one);
        CHECK_FATAL(cpu != NULL && gpu != NULL);
        size_t dims = 384;
        float *expected = (float *)calloc(WAVED * dims, sizeof(float)), *rows = (float *)calloc(WAVED * dims, sizeof(float));
        uform_status_t cpu_statuses[WAVED], statuses[WAVED];
        uform_embeddings_t out = {.data = expected, .dtype = uform_dtype_f32_k};
        char const *const *texts = (char const *const *)many.texts;
        CHECK_STATUS(uform_encode_texts(ram_executor, cpu, texts, NULL, WAVED, &out, cpu_statuses, NULL), uform_status_ok_k);
        CHECK(cpu_statuses[BAD] == uform_status_invalid_argument_k);
        uform_executor_t one_slot = NULL, limited = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 1, &one_slot), uform_status_ok_k);
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 8u << 20, 0, &limited), uform_status_ok_k);
        static char const *const waves[] = {"", "7", "0", "", "", ""};
        static char const *const labels[] = {"default waves (75, 525)", "waves of 7", "one wave", "waves, deferred_limit 1",
                                             "waves, a deferred call", "waves in 8 MiB of scratch"};
        for (int variant = 0; variant < 6; ++variant) {
            if (*waves[variant]) setenv("UFORM_GPU_TEXT_WAVE", waves[variant], 1);
            else unsetenv("UFORM_GPU_TEXT_WAVE");
            memset(rows, 0x7f, WAVED * dims * sizeof(float));
            memset(statuses, 0, sizeof statuses);
            out.data = rows;
            uform_executor_t on = variant == 3 ? one_slot : variant == 5 ? limited : executor;
            if (variant == 4) {
                uform_outcome_t outcome;
                CHECK_STATUS(uform_encode_texts(on, gpu, texts, NULL, WAVED, &out, statuses, &outcome), uform_status_ok_k);
                CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
            } else CHECK_STATUS(uform_encode_texts(on, gpu, texts, NULL, WAVED, &out, statuses, NULL), uform_status_ok_k);
            int zero = 1, same_statuses = 1;
            double worst = rows_worst_but(expected, rows, WAVED, dims, BAD, statuses, cpu_statuses, &zero, &same_statuses);
            printf("%-34s worst cosine %.7f, bad text's row zero: %d\n", labels[variant], worst, zero);
            CHECK(worst >= 0.99999);
            CHECK(zero && same_statuses);
        }
        unsetenv("UFORM_GPU_TEXT_WAVE");
        memset(rows, 0x7f, WAVED * dims * sizeof(float));
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, WAVED, &out, NULL, NULL), uform_status_invalid_argument_k);
        CHECK_MESSAGE("text 530");
        int untouched = rows_untouched(rows, WAVED * dims);
        printf("bad text in the last wave without statuses: %s; rows untouched: %d\n", uform_error_message(), untouched);
        CHECK(untouched);
        CHECK_STATUS(uform_encode_texts(executor, gpu, texts, NULL, 2, &out, NULL, NULL), uform_status_ok_k);
        CHECK(cosine(expected, rows, dims) >= 0.99999);
        uform_executor_free(one_slot), uform_executor_free(limited);
        uform_model_free(cpu), uform_model_free(gpu);
        free(expected), free(rows);
        free_texts(&many);
    }

    /* A batch split to fit 8 MiB of scratch gives the same rows. */
    {
        uform_executor_t limited = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 8u << 20, 0, &limited), uform_status_ok_k);
        check_tower("minilm f32 in 8 MiB of scratch", minilm_dir, &long_texts, limited, &one, uform_dtype_f32_k, 0.99999);
        size_t bytes = 0;
        CHECK_STATUS(uform_executor_scratch_bytes(limited, 0, &bytes), uform_status_ok_k);
        printf("scratch held under an 8 MiB limit: %zu bytes\n", bytes);
        CHECK(bytes > 0 && bytes <= (8u << 20));
        uform_executor_free(limited);
    }

    /* Many short texts under 4 MiB of scratch: their rows (12,000 x 1.5 KiB) are more than the scratch,
     * so the batch runs in waves whose rows fit (a quarter of the budget each), not LIMIT_EXCEEDED as a
     * single wave's rows made it; blocking and deferred, against the CPU path. */
    {
        enum { MANY = 12000 };
        size_t const dims = 384;
        texts_t many = make_texts(MANY, 3, 1000, 0x6b0e000au);
        uform_model_t cpu = open_model(minilm_dir, uform_residency_ram_k, uform_dtype_f32_k, NULL);
        uform_model_t gpu = open_model(minilm_dir, uform_residency_vram_k, uform_dtype_f32_k, &one);
        uform_executor_t limited = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 4u << 20, 0, &limited), uform_status_ok_k);
        float *expected = (float *)calloc(MANY * dims, sizeof(float)), *rows = (float *)calloc(MANY * dims, sizeof(float));
        CHECK_FATAL(cpu && gpu && limited && expected && rows);
        char const *const *texts = (char const *const *)many.texts;
        uform_embeddings_t out = {.data = expected, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(ram_executor, cpu, texts, NULL, MANY, &out, NULL, NULL), uform_status_ok_k);
        out.data = rows;
        for (int deferred = 0; deferred < 2; ++deferred) {
            memset(rows, 0, MANY * dims * sizeof(float));
            uform_outcome_t outcome;
            uform_status_t status = uform_encode_texts(limited, gpu, texts, NULL, MANY, &out, NULL, deferred ? &outcome : NULL);
            if (deferred && status == uform_status_ok_k) status = uform_outcome_wait(&outcome, -1);
            if (status != uform_status_ok_k) printf("12,000 short texts in 4 MiB: %s\n", uform_error_message());
            CHECK_STATUS(status, uform_status_ok_k);
            double worst = 1.0;
            for (size_t i = 0; i < MANY; ++i) {
                double const c = cosine(rows + i * dims, expected + i * dims, dims);
                if (c < worst) worst = c;
            }
            size_t bytes = 0;
            CHECK_STATUS(uform_executor_scratch_bytes(limited, 0, &bytes), uform_status_ok_k);
            printf("12,000 short texts in 4 MiB of scratch (%s): worst cosine %.7f, scratch held %zu bytes\n",
                   deferred ? "deferred" : "blocking", worst, bytes);
            CHECK(worst >= 0.99999);
            CHECK(bytes > 0 && bytes <= (4u << 20));
        }
        uform_executor_free(limited);
        uform_model_free(cpu), uform_model_free(gpu);
        free(expected), free(rows);
        free_texts(&many);
    }

    /* Two devices: the batch split in proportion, rows in input order. */
    if (gpus >= 2) {
        int32_t const both[] = {0, 1}, second[] = {1};
        uform_vram_options_t two = {.devices = both, .devices_count = 2}, other = {.devices = second, .devices_count = 1};
        uform_executor_t pair = NULL;
        CHECK_STATUS(uform_executor_for_vram(&two, NULL, NULL, 0, 0, &pair), uform_status_ok_k);
        check_tower("uform3-small f32 on two devices", uform3_dir, &short_texts, pair, &two, uform_dtype_f32_k, 0.99999);
        uform_model_t on_first = open_model(uform3_dir, uform_residency_vram_k, uform_dtype_bf16_k, &one);
        uform_executor_t on_second = NULL;
        CHECK_STATUS(uform_executor_for_vram(&other, NULL, NULL, 0, 0, &on_second), uform_status_ok_k);
        float row[256];
        uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(on_second, on_first, (char const *const *)short_texts.texts, NULL, 1, &out, NULL, NULL),
                     uform_status_residency_mismatch_k);
        CHECK_MESSAGE("holds no copy");
        uform_model_free(on_first);
        uform_executor_free(on_second);
        uform_executor_free(pair);
    } else printf("one GPU: the two-device checks need two\n");

    test_deferred_in_flight(uform3_dir, &one, &short_texts);
    test_fault(argv[0], uform3_dir);

    free_texts(&short_texts), free_texts(&long_texts), free_texts(&tiny_texts);
    free_texts(&wide_texts), free_texts(&long_texts_512);
    uform_executor_free(executor);
    uform_executor_free(ram_executor);
    if (!dump_directory) {
        char command[700];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        if (system(command) != 0) fprintf(stderr, "could not remove %s\n", root);
    }
    printf("%s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}
