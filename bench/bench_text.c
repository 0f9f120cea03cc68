/**
 *  @file   bench_text.c
 *  @brief  Texts per second of the engine's text forward pass on towers of real shapes with random
 *          weights, token ids given (tokenising excluded, as for the peers in bench_text.py, which
 *          runs this program beside PyTorch and ONNX Runtime and prints them side by side).
 *
 *      bench_text [--shape minilm|uform3] [--tokens N] [--batch N] [--threads N] [--dtype f32|bf16]
 *                 [--seconds S] [--min-calls N] [--cpu-class NAME] [--ab NAME=A,B] [--json]
 *
 *  Shapes: minilm = all-MiniLM-L6-v2 (384 wide, 12 heads, 1536 inner, 6 layers, mean pooling,
 *  normalised); uform3 = a UForm3-small-shaped text tower (768 wide, 12 heads, 3072 inner, 2
 *  unimodal layers run, CLS pooling, a 256-wide projection, RoBERTa positions).
 *
 *  `--cpu-class NAME` (a `uform_cpu_class_name`, e.g. intel_haswell) pins the executor's class
 *  (`uform_ram_options_t.cpu_class`): the kernels and GEMM paths of that class. oneDNN's own ISA is
 *  the process's: DNNL_MAX_CPU_ISA=AVX2 in the environment keeps its products at AVX2 too
 *  (bench_text.py --cpu-class sets it).
 *
 *  `--ab NAME=A,B` alternates the calls between the environment variable NAME set to A and to B
 *  (call_times.h's `call_ab_run`) and prints each variant's calls instead of the usual line.
 *
 *  Besides texts/s and the best call, the JSON line gives `cpu_ms_per_call`: the process's CPU time
 *  over the timed calls, per call. On one thread it is the work of a call, which a shared machine's
 *  other load barely changes (wall-clock figures it does); on several threads it also counts the time
 *  threads spin at barriers and in the executor.
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "models/text_forward.h"
#include "kernels/kernels.h"
#include "random_text_tower.h"
#include "bench_cpu_class.h"
#include "call_times.h"
#include "../tools/strict_number.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/resource.h>

/** Pins (or unpins) the tower's matrices for the matmul primitive's packed weights (kernels.h). */
static void pin_tower(uform_text_tower_t const *t, uform_dtype_t dtype, void (*pin)(void const *, size_t)) {
    size_t element = dtype == uform_dtype_f32_k ? 4 : 2;
    for (size_t l = 0; l < t->layers_count; ++l) {
        uform_tensor_t const *weights[6] = {&t->layers[l].query_weight, &t->layers[l].key_weight,
                                            &t->layers[l].value_weight, &t->layers[l].attention_output_weight,
                                            &t->layers[l].intermediate_weight, &t->layers[l].output_weight};
        for (size_t w = 0; w < 6; ++w) pin(weights[w]->data, weights[w]->rows * weights[w]->cols * element);
    }
    if (t->projection.data) pin(t->projection.data, t->projection.rows * t->projection.cols * element);
}

/** One timed call: the batch's ids through the verb. */
typedef struct text_call_t {
    uform_executor_t executor;
    struct uform_model_s const *model;
    int32_t const *ids;
    size_t const *offsets;
    size_t batch;
    uform_embeddings_t *out;
} text_call_t;

static int encode_ids(void *context) {
    text_call_t const *c = (text_call_t const *)context;
    return uform_text_encode_ids(c->executor, c->model, c->ids, c->offsets, c->batch, NULL, NULL, c->out, NULL) !=
           uform_status_ok_k;
}

int main(int argc, char **argv) {
    char const *shape = "minilm", *dtype_name = "f32";
    size_t tokens = 128, batch = 50, threads = 0;
    double seconds = 3.0;
    size_t min_calls = 3; /* timed calls at least, whatever `seconds` */
    int json = 0, ab_given = 0;
    call_ab_t ab;
    uform_cpu_class_t cpu_class = uform_cpu_class_unknown_k;
    for (int i = 1; i < argc; ++i) {
        char const *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (v && !strcmp(a, "--shape") && (!strcmp(v, "minilm") || !strcmp(v, "uform3"))) shape = v, ++i;
        else if (v && !strcmp(a, "--dtype") && (!strcmp(v, "f32") || !strcmp(v, "bf16"))) dtype_name = v, ++i;
        else if (v && !strcmp(a, "--tokens") && strict_count(v, 1, 510, false, &tokens)) ++i;
        else if (v && !strcmp(a, "--batch") && strict_count(v, 1, (size_t)1 << 20, false, &batch)) ++i;
        else if (v && !strcmp(a, "--threads") && strict_count(v, 0, 4096, false, &threads)) ++i;
        else if (v && !strcmp(a, "--seconds") && strict_real(v, 0, 3600, &seconds)) ++i;
        else if (v && !strcmp(a, "--min-calls") && strict_count(v, 1, 1000000, false, &min_calls)) ++i;
        else if (v && !strcmp(a, "--cpu-class") && bench_cpu_class(v, &cpu_class)) ++i;
        else if (v && !strcmp(a, "--ab") && call_ab_parse(v, &ab)) ab_given = 1, ++i;
        else {
            fprintf(stderr, "usage: bench_text [--shape minilm|uform3] [--tokens N] [--batch N] [--threads N] "
                            "[--dtype f32|bf16] [--seconds S] [--min-calls N] [--cpu-class NAME] [--ab NAME=A,B] [--json]\n");
            return 2;
        }
    }
    int uform3 = !strcmp(shape, "uform3");
    uform_dtype_t dtype = !strcmp(dtype_name, "bf16") ? uform_dtype_bf16_k : uform_dtype_f32_k;
    uform_text_tower_t t = random_text_tower(uform3, dtype);
    pin_tower(&t, dtype, uform_gemm_pin); /* the weights stay put, as a model's replicas do (model.c pins those) */
    int32_t node = 0;
    struct uform_model_s model = {.modality = uform_modality_text_k, .residency = uform_residency_ram_k,
                                  .weights_dtype = dtype, .replicas_count = 1, .replica_nodes = &node, .text_replicas = &t};

    int32_t *ids = malloc(batch * tokens * sizeof(int32_t));
    size_t *offsets = malloc((batch + 1) * sizeof(size_t));
    for (size_t i = 0; i <= batch; ++i) offsets[i] = i * tokens;
    for (size_t i = 0; i < batch * tokens; ++i) ids[i] = (int32_t)((random_uniform() + 1.0f) * 0.5f * 30000.0f);
    float *rows = malloc(batch * t.embedding_dimensions * sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};

    uform_executor_t executor = NULL;
    uform_ram_options_t ram = {.cpu_class = cpu_class};
    uform_status_t opened = uform_executor_for_ram(&ram, threads, 0, &executor);
    if (opened != uform_status_ok_k) {
        fprintf(stderr, "bench_text: %s: %s\n", uform_status_name(opened), uform_error_message());
        return 1;
    }
    uform_executor_description_t description;
    if (uform_executor_describe(executor, &description) != uform_status_ok_k ||
        uform_executor_drain(executor, uform_mood_spinning_k) != uform_status_ok_k) {
        fprintf(stderr, "bench_text: %s\n", uform_error_message());
        return 1;
    }
    /* Two warm-up calls, then as many as fit in `seconds`. */
    text_call_t call = {executor, &model, ids, offsets, batch, &out};
    call_summary_t timed;
    if (ab_given) {
        if (encode_ids(&call) != 0 || !call_ab_run(encode_ids, &call, &ab, seconds, min_calls)) {
            fprintf(stderr, "bench_text: %s\n", uform_error_message());
            return 1;
        }
        char what[128];
        snprintf(what, sizeof what, "%s %s %zu tokens batch %zu, %zu threads:", shape, dtype_name, tokens, batch,
                 description.threads_count);
        call_ab_print(stdout, what, &ab);
        goto done;
    }
    if (encode_ids(&call) != 0 || encode_ids(&call) != 0 || !call_times_run(encode_ids, &call, seconds, min_calls, &timed)) {
        fprintf(stderr, "bench_text: %s\n", uform_error_message());
        return 1;
    }
    if (uform_executor_drain(executor, uform_mood_parked_k) != uform_status_ok_k) {
        fprintf(stderr, "bench_text: %s\n", uform_error_message());
        return 1;
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double rate = (double)(timed.calls * batch) / timed.elapsed;
    char const *class_name = uform_cpu_class_name(description.cpu_class);
    if (json)
        printf("{\"system\": \"uform\", \"shape\": \"%s\", \"dtype\": \"%s\", \"tokens\": %zu, \"batch\": %zu, "
               "\"threads\": %zu, \"cpu_class\": \"%s\", \"texts_per_second\": %.1f, \"best_call_ms\": %.3f, "
               "\"median_call_ms\": %.3f, \"p90_call_ms\": %.3f, \"cpu_ms_per_call\": %.3f, \"peak_rss_mib\": %.1f, \"packed_mib\": %.1f}\n",
               shape, dtype_name, tokens, batch, description.threads_count, class_name, rate, timed.best * 1e3, timed.median * 1e3, timed.p90 * 1e3,
               timed.cpu_per_call * 1e3, usage.ru_maxrss / 1024.0, (double)uform_gemm_packed_bytes() / (1024.0 * 1024.0));
    else
        printf("uform %s %s: %zu tokens, batch %zu, %zu threads, class %s: %.1f texts/s, best call %.3f ms "
               "(median %.3f, p90 %.3f), peak RSS %.1f MiB\n",
               shape, dtype_name, tokens, batch, description.threads_count, class_name, rate, timed.best * 1e3, timed.median * 1e3, timed.p90 * 1e3,
               usage.ru_maxrss / 1024.0);
    if (uform_gemm_matmul_impl()) fprintf(stderr, "bench_text: matmul primitive %s\n", uform_gemm_matmul_impl());
done:
    uform_executor_free(executor);
    pin_tower(&t, dtype, uform_gemm_unpin);
    random_text_tower_free(&t);
    free(ids), free(offsets), free(rows);
    return 0;
}
