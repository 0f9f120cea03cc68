/**
 *  @file   test_encode_signals.c
 *  @brief  Encoding while a timer signal reaches a handler every 100 us, as `signal.alarm`
 *          timeouts, setitimer profilers and Python's own handlers do: the embeddings equal those
 *          of a quiet run bit for bit, the signals reach the handler, the caller's signal mask is
 *          given back, and nothing crashes.
 *          oneDNN 2.6's JIT f32 GEMM kernels point RSP into a heap workspace while they run, so a
 *          signal frame written then corrupted the heap (an abort within seconds); the engine
 *          blocks asynchronous signals on a thread while it runs a model's products
 *          (`uform_gemm_thread_enter`). The tower: a UForm3 text tower 128 wide, 3 layers, f32
 *          weights written to files here (so they are packed once for oneDNN's packed f32 GEMM, the
 *          shapes that crashed the unfixed engine), with the tiny UForm3 tokenizer of test/models; on
 *          a RAM executor of every allowed core and on the NULL executor (the caller alone).
 */
#define _GNU_SOURCE
#include "check.h"

#include <pthread.h> // `pthread_sigmask`
#include <sched.h> // `sched_getaffinity`
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <math.h>   // `sqrt`
#include <stdint.h>
#include <unistd.h> // `unlink`, `rmdir`

#ifndef UFORM_TEST_MODELS_DIR
#error "UFORM_TEST_MODELS_DIR must name test/models"
#endif

static atomic_long signals_handled;
static void on_timer(int number) {
    (void)number;
    atomic_fetch_add_explicit(&signals_handled, 1, memory_order_relaxed);
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define TEXTS 8

/* Words of the tiny UForm3 vocabulary, long enough to fill its 64 positions, and shorter ones. */
#define SENTENCE "the big red dog ran in the fog and the small cat sat on the mat "
static char const *const texts[TEXTS] = {
    SENTENCE SENTENCE SENTENCE SENTENCE, SENTENCE, "the cat", SENTENCE SENTENCE SENTENCE,
    "a dog in the fog " SENTENCE SENTENCE SENTENCE SENTENCE, "the mat", SENTENCE SENTENCE, SENTENCE SENTENCE SENTENCE SENTENCE,
};

/** Encodes the batch `rounds` times (or until `seconds` passed), each result against `expected`;
 *  returns the rounds run. */
static long encode_rounds(uform_executor_t executor, uform_model_t model, size_t width, float const *expected,
                          long rounds, double seconds, char const *label) {
    float *rows = calloc(TEXTS * width, sizeof(float));
    CHECK_FATAL(rows);
    uform_embeddings_t embeddings = {.data = rows, .dtype = uform_dtype_f32_k};
    double const deadline = now_seconds() + seconds;
    long done = 0;
    for (; done < rounds && now_seconds() < deadline; ++done) {
        memset(rows, 0, TEXTS * width * sizeof(float));
        uform_status_t status = uform_encode_texts(executor, model, texts, NULL, TEXTS, &embeddings, NULL, NULL);
        if (status != uform_status_ok_k) {
            fprintf(stderr, "%s, round %ld: %s\n", label, done, uform_error_message());
            CHECK(status == uform_status_ok_k);
            break;
        }
        if (expected && memcmp(rows, expected, TEXTS * width * sizeof(float)) != 0) {
            fprintf(stderr, "%s, round %ld: the embeddings differ from the quiet run's\n", label, done);
            CHECK(!"embeddings equal under signals");
            break;
        }
    }
    free(rows);
    return done;
}

/** Writes `directory`/text_encoder.safetensors and config.json: a UForm3 text tower `D` wide with
 *  `L` unimodal layers, random f32 weights (LayerNorm gains near one), and copies the tiny UForm3
 *  tokenizer beside them. */
static void write_tower(char const *directory) {
    enum { D = 128, L = 3, V = 40, P = 64, E = 64 };
    char names[64][64];
    size_t shapes[64][2], count = 0;
#define TENSOR(rows, cols, ...) (snprintf(names[count], sizeof names[count], __VA_ARGS__), shapes[count][0] = rows, shapes[count][1] = cols, ++count)
    TENSOR(V, D, "word_embeddings.weight"), TENSOR(P, D, "position_embeddings.weight");
    TENSOR(1, D, "layer_norm.weight"), TENSOR(1, D, "layer_norm.bias");
    for (int l = 0; l < L; ++l) {
        TENSOR(1, D, "blocks.%d.norm_attn.weight", l), TENSOR(1, D, "blocks.%d.norm_attn.bias", l);
        TENSOR(1, D, "blocks.%d.norm_mlp.weight", l), TENSOR(1, D, "blocks.%d.norm_mlp.bias", l);
        char const *projections[] = {"query", "key", "value", "out"};
        for (int p = 0; p < 4; ++p)
            TENSOR(D, D, "blocks.%d.attention.%s.weight", l, projections[p]), TENSOR(1, D, "blocks.%d.attention.%s.bias", l, projections[p]);
        TENSOR(4 * D, D, "blocks.%d.mlp.hidden_layer.weight", l), TENSOR(1, 4 * D, "blocks.%d.mlp.hidden_layer.bias", l);
        TENSOR(D, 4 * D, "blocks.%d.mlp.output_layer.weight", l), TENSOR(1, D, "blocks.%d.mlp.output_layer.bias", l);
    }
    TENSOR(E, D, "embedding_projection.weight"), TENSOR(1, D, "matching_head.weight"), TENSOR(1, 1, "matching_head.bias");
#undef TENSOR
    char header[16384];
    size_t used = (size_t)snprintf(header, sizeof header, "{"), offset = 0;
    for (size_t i = 0; i < count; ++i) {
        size_t const bytes = shapes[i][0] * shapes[i][1] * 4;
        int const vector = shapes[i][0] == 1 && strcmp(names[i], "matching_head.weight") != 0;
        used += (size_t)(vector ? snprintf(header + used, sizeof header - used,
                                           "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                                           i ? "," : "", names[i], shapes[i][1], offset, offset + bytes)
                                : snprintf(header + used, sizeof header - used,
                                           "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
                                           i ? "," : "", names[i], shapes[i][0], shapes[i][1], offset, offset + bytes));
        offset += bytes;
    }
    used += (size_t)snprintf(header + used, sizeof header - used, "}");
    while (used % 8) header[used++] = ' ';
    CHECK_FATAL(used < sizeof header);
    char path[4096];
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", directory);
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file);
    uint64_t const length = used;
    CHECK_FATAL(fwrite(&length, 8, 1, file) == 1 && fwrite(header, 1, used, file) == used);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < count; ++i) {
        size_t const n = shapes[i][0] * shapes[i][1];
        int const gain = strstr(names[i], "norm") && strstr(names[i], ".weight");
        double const scale = shapes[i][0] == 1 ? 0.2 : 1.7 / sqrt((double)shapes[i][1]);
        for (size_t j = 0; j < n; ++j) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            float const value = (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (float)scale + (gain ? 1.0f : 0.0f);
            CHECK_FATAL(fwrite(&value, 4, 1, file) == 1);
        }
    }
    CHECK_FATAL(fclose(file) == 0);
    snprintf(path, sizeof path, "%s/config.json", directory);
    file = fopen(path, "w");
    CHECK_FATAL(file);
    fprintf(file,
            "{\"text_encoder\": {\"model_type\": \"bert\", \"dim\": %d, \"context_dim\": %d, \"vocab_size\": %d, "
            "\"padding_idx\": 0, \"num_layers\": %d, \"num_heads\": 4, \"embedding_dim\": %d, "
            "\"multimodal_layers_ids\": [], \"head_one_neuron\": true, \"pooling\": \"cls\", "
            "\"max_position_embeddings\": %d, \"dropout_prob\": 0.0}}\n",
            D, D, V, L, E, P);
    CHECK_FATAL(fclose(file) == 0);
    char const *copies[] = {"tokenizer.json", "vocab.txt"};
    for (size_t i = 0; i < 2; ++i) {
        char source[4096];
        snprintf(source, sizeof source, "%s/tiny-uform3/%s", UFORM_TEST_MODELS_DIR, copies[i]);
        snprintf(path, sizeof path, "%s/%s", directory, copies[i]);
        FILE *in = fopen(source, "rb"), *out = fopen(path, "wb");
        CHECK_FATAL(in && out);
        char buffer[65536];
        for (size_t got; (got = fread(buffer, 1, sizeof buffer, in)) > 0;) CHECK_FATAL(fwrite(buffer, 1, got, out) == got);
        fclose(in);
        CHECK_FATAL(fclose(out) == 0);
    }
}

int main(void) {
    char directory[] = "/tmp/uform-signals-XXXXXX";
    CHECK_FATAL(mkdtemp(directory));
    write_tower(directory);
    uform_model_options_t options = {.path = directory, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = NULL;
    if (uform_model_open(&options, &model) != uform_status_ok_k) fprintf(stderr, "%s\n", uform_error_message());
    CHECK_FATAL(model);
    uform_model_description_t description;
    CHECK_FATAL(uform_model_describe(model, &description) == uform_status_ok_k);
    size_t const width = description.dimensions;
    uform_executor_t ram = NULL;
    cpu_set_t allowed;
    CHECK_FATAL(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    CHECK_FATAL(uform_executor_for_ram(NULL, (size_t)CPU_COUNT(&allowed), 0, &ram) == uform_status_ok_k);
    uform_executor_description_t executor_description;
    CHECK_FATAL(uform_executor_describe(ram, &executor_description) == uform_status_ok_k);

    // The quiet runs: the expected rows of each executor (the NULL one sums over one thread).
    float *expected_ram = calloc(TEXTS * width, sizeof(float)), *expected_inline = calloc(TEXTS * width, sizeof(float));
    CHECK_FATAL(expected_ram && expected_inline);
    uform_embeddings_t into_ram = {.data = expected_ram, .dtype = uform_dtype_f32_k};
    uform_embeddings_t into_inline = {.data = expected_inline, .dtype = uform_dtype_f32_k};
    CHECK_FATAL(uform_encode_texts(ram, model, texts, NULL, TEXTS, &into_ram, NULL, NULL) == uform_status_ok_k);
    CHECK_FATAL(uform_encode_texts(NULL, model, texts, NULL, TEXTS, &into_inline, NULL, NULL) == uform_status_ok_k);

    // A handler that runs (not ignored), every 100 us of real time.
    struct sigaction action = {.sa_handler = on_timer};
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    struct sigaction previous;
    CHECK_FATAL(sigaction(SIGALRM, &action, &previous) == 0);
    struct itimerval timer = {.it_interval = {0, 100}, .it_value = {0, 100}};
    CHECK_FATAL(setitimer(ITIMER_REAL, &timer, NULL) == 0);
    sigset_t mask_before, mask_after;
    CHECK_FATAL(pthread_sigmask(SIG_BLOCK, NULL, &mask_before) == 0);
    double const start = now_seconds();
    long const on_ram = encode_rounds(ram, model, width, expected_ram, 100000, 4.0, "RAM executor");
    long const on_inline = encode_rounds(NULL, model, width, expected_inline, 100000, 2.0, "NULL executor");
    double const elapsed = now_seconds() - start;
    CHECK_FATAL(pthread_sigmask(SIG_BLOCK, NULL, &mask_after) == 0);
    struct itimerval off = {{0, 0}, {0, 0}};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    CHECK(sigaction(SIGALRM, &previous, NULL) == 0);
    long const handled = atomic_load(&signals_handled);
    printf("%zu threads: %ld rounds of %d texts on the RAM executor, %ld on the NULL one, in %.1f s, %ld signals "
           "handled\n",
           executor_description.threads_count, on_ram, TEXTS, on_inline, elapsed, handled);
    CHECK(on_ram > 0 && on_inline > 0);
    // Blocked during the products, pending, then handled: the caller's mask is what it was before
    // the calls (every signal the engine blocked given back), and the timer's signals reached the
    // handler (about 9,600 a second in the plain build, 350 under ThreadSanitizer: no rate is
    // asserted, only that they arrive).
    for (int number = 1; number < NSIG; ++number) {
        int const was = sigismember(&mask_before, number), is = sigismember(&mask_after, number);
        if (was != is) fprintf(stderr, "signal %d is %s after the encodes\n", number, is ? "blocked" : "unblocked");
        CHECK(was == is);
    }
    CHECK(handled > 0);
    free(expected_ram);
    free(expected_inline);
    uform_executor_free(ram);
    uform_model_free(model);
    char path[4096];
    char const *files[] = {"text_encoder.safetensors", "config.json", "tokenizer.json", "vocab.txt"};
    for (size_t i = 0; i < 4; ++i) snprintf(path, sizeof path, "%s/%s", directory, files[i]), unlink(path);
    rmdir(directory);
    CHECK_DONE();
}
