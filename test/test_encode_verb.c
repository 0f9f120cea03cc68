/**
 *  @file   test_encode_verb.c
 *  @brief  `uform_encode_texts` on the committed tiny model (test/models/tiny-bert): NULL, RAM, pool
 *          and deferred calls, skipped items, residency and argument errors, re-entry.
 */
#include "encode_harness.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

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

/** Opens the committed tiny model in f32 and describes it (at most 64 dimensions). */
static uform_model_t open_tiny_bert(uform_model_description_t *description) {
    uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    CHECK_FATAL(model != NULL);
    CHECK_STATUS(uform_model_describe(model, description), uform_status_ok_k);
    CHECK_FATAL(description->dimensions > 0 && description->dimensions <= 64);
    return model;
}

static void test_verb(void) {
    uform_model_description_t description;
    uform_model_t model = open_tiny_bert(&description);
    size_t dims = description.dimensions;

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

    /* Features: the description's shape; a bad text's features zero, the others' its tokens then zero
     * rows; a stride that cannot hold them, a stride without features, items past the address space. */
    size_t const hidden = description.hidden, tokens = description.tokens, item = hidden * tokens;
    CHECK(hidden == dims && tokens == description.context && tokens > 0);
    float *features = malloc(3 * item * sizeof(float));
    for (size_t i = 0; i < 3 * item; ++i) features[i] = 5.0f;
    for (size_t i = 0; i < 3 * 64; ++i) mixed_rows[i / 64][i % 64] = 5.0f;
    uform_embeddings_t with_features = out3;
    with_features.features = features;
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &with_features, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[1] == uform_status_invalid_argument_k);
    size_t nonzero_bad = 0, nonzero_padding = 0, zero_rows = 0;
    for (size_t v = 0; v < item; ++v) nonzero_bad += features[item + v] != 0.0f;
    int32_t first_ids[64];
    size_t first_tokens = 0;
    CHECK_OK(uform_model_tokenize(model, mixed[0], strlen(mixed[0]), first_ids, 64, &first_tokens));
    for (size_t v = first_tokens * hidden; v < item; ++v) nonzero_padding += features[v] != 0.0f;
    for (size_t t = 0; t < first_tokens; ++t) {
        double norm = 0;
        for (size_t j = 0; j < hidden; ++j) norm += (double)features[t * hidden + j] * features[t * hidden + j];
        zero_rows += norm == 0;
    }
    CHECK(nonzero_bad == 0 && nonzero_padding == 0 && zero_rows == 0);
    CHECK(max_difference(mixed_rows[0], rows[0], dims) < 1e-5 && max_difference(mixed_rows[2], rows[2], dims) < 1e-5);
    with_features.features_stride = item * sizeof(float) - 1;
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &with_features, statuses, NULL),
                 uform_status_invalid_argument_k);
    char wanted[256];
    snprintf(wanted, sizeof wanted, "uform_encode_texts: embeddings.features_stride is %zu bytes; one item's features "
             "(%zu values) take %zu (0 packs them)", item * sizeof(float) - 1, item, item * sizeof(float));
    CHECK_MESSAGE(wanted);
    with_features.features_stride = SIZE_MAX;
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &with_features, statuses, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_texts: embeddings.features: 3 texts' features 18446744073709551615 bytes apart run "
                  "past the end of the address space");
    {
        /* A count past the address space is refused before `texts` is walked: the two pointers given
         * end where a page that may not be read begins (reading texts[2] would fault). */
        long const page = sysconf(_SC_PAGESIZE);
        unsigned char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(pages != MAP_FAILED && mprotect(pages + page, (size_t)page, PROT_NONE) == 0);
        char const **fenced = (char const **)(pages + page) - 2;
        fenced[0] = mixed[0], fenced[1] = mixed[2];
        uform_embeddings_t packed = {.data = rows, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_texts(executor, model, fenced, NULL, (size_t)1 << 60, &packed, NULL, NULL),
                     uform_status_invalid_argument_k);
        CHECK_MESSAGE("run past the end of the address space");
        munmap(pages, 2 * (size_t)page);
    }
    with_features.features = NULL, with_features.features_stride = 64;
    CHECK_STATUS(uform_encode_texts(executor, model, mixed, NULL, 3, &with_features, statuses, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_texts: embeddings.features_stride is 64 with no features; set both or neither");
    free(features);

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
    CHECK(strstr(reentry.message, "uform_encode_texts: called from inside a callback") == reentry.message);

    /* DEFERRED_FULL and submission order: a deferred call holds the only slot (deferred_limit 1). */
    blocker_t blocker = {0};
    uform_call_t hold = {.schedule = uform_schedule_static_k, .tasks = 1, .task = block_task, .context = &blocker};
    uform_outcome_t held, encoded;
    CHECK_STATUS(uform_executor_call(executor, &hold, &held), uform_status_ok_k);
    while (!atomic_load(&blocker.entered)) uform_sleep_seconds(0.001);
    CHECK_STATUS(uform_executor_call(executor, &hold, &encoded), uform_status_deferred_full_k); /* sanity */
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, count, &out2, NULL, &encoded),
                 uform_status_deferred_full_k);
    CHECK_MESSAGE("uform_encode_texts: 1 deferred calls are already tracked"); /* the verb the user called */
    CHECK(encoded.finished && encoded.status == uform_status_deferred_full_k);
    CHECK(strstr(encoded.message, "uform_encode_texts: 1 deferred calls") == encoded.message);
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

/* ---- Many threads racing on one model ---- */

enum { racers = 8, race_rounds = 12, race_texts = 6, race_patience = 1000000 };

typedef struct racer_t {
    uform_model_t model;
    uform_executor_t executor; /**< NULL: the NULL executor; else this racer's, or one it shares. */
    int deferred, shares;      /**< Deferred calls; `executor` is shared with another racer. */
    char const *const *texts;
    float const (*expected)[64];
    size_t dims;
    size_t ok, contended, mismatched, tokens_wrong;
    uform_status_t failure; /**< The first status other than OK or (sharing) CONTENDED. */
    char message[256];
} racer_t;

static void *race_texts_on_model(void *context) {
    racer_t *r = context;
    float rows[race_texts][64], first[race_texts][64];
    for (size_t round = 0; round < race_rounds;) {
        memset(rows, 0, sizeof rows);
        uform_embeddings_t out = {.data = rows, .stride = sizeof rows[0], .dtype = uform_dtype_f32_k};
        uform_outcome_t outcome;
        uform_status_t status = uform_encode_texts(r->executor, r->model, r->texts, NULL, race_texts, &out, NULL,
                                                   r->deferred ? &outcome : NULL);
        if (status == uform_status_ok_k && r->deferred) status = uform_outcome_wait(&outcome, -1);
        if (status == uform_status_contended_k && r->shares && r->contended < race_patience) {
            ++r->contended; /* the other racer is inside: try again */
            sched_yield();
            continue;
        }
        ++round;
        if (status != uform_status_ok_k) {
            if (!r->failure) r->failure = status, snprintf(r->message, sizeof r->message, "%s", uform_error_message());
            continue;
        }
        ++r->ok;
        if (r->ok == 1) memcpy(first, rows, sizeof rows);
        /* Every round as the baseline, and bit for bit as this racer's first: nothing in the model drifts. */
        for (size_t i = 0; i < race_texts; ++i)
            r->mismatched += max_difference(rows[i], r->expected[i], r->dims) >= 1e-5 ||
                             memcmp(rows[i], first[i], r->dims * sizeof(float)) != 0;
        /* Tokenising and describing race with the other racers' encodes too. */
        int32_t ids[64];
        size_t n = 0;
        uform_model_description_t description;
        if (uform_model_tokenize(r->model, r->texts[r->ok % race_texts], strlen(r->texts[r->ok % race_texts]), ids, 64,
                                 &n) != uform_status_ok_k ||
            n < 2 || uform_model_describe(r->model, &description) != uform_status_ok_k || description.dimensions != r->dims)
            ++r->tokens_wrong;
    }
    return NULL;
}

/** One model, eight threads at once: two on the NULL executor, two on RAM executors of their own
 *  (one blocking, one deferred), two on their own two-thread RAM executors (one thread where the
 *  process has one core), and two sharing one
 *  RAM executor (each call OK or CONTENDED at once, then tried again; never a wait or a torn row); every row equals
 *  the single-threaded baseline, every round, and each racer's rows are bit for bit its first. */
static void test_racing(void) {
    uform_model_description_t description;
    uform_model_t model = open_tiny_bert(&description);
    size_t dims = description.dimensions;
    static char const *const texts[race_texts] = {"the quick brown fox", "jumps", "", "over the lazy dog and the lazy dog",
                                                  "a", "many words make a longer text for the batch to pad around"};
    float expected[race_texts][64];
    uform_embeddings_t out = {.data = expected, .stride = sizeof expected[0], .dtype = uform_dtype_f32_k};
    CHECK_OK(uform_encode_texts(NULL, model, texts, NULL, race_texts, &out, NULL, NULL));

    uform_executor_t executors[racers] = {0};
    racer_t r[racers];
    for (size_t i = 0; i < racers; ++i)
        r[i] = (racer_t) {.model = model, .texts = texts, .expected = (float const (*)[64])expected, .dims = dims};
    /* Two threads where this process may run on two cores (one under `taskset -c 0`). */
    uform_memory_domain_t domain;
    size_t domains = 0;
    CHECK_OK(uform_memory_domains(&domain, 1, &domains));
    size_t const pair = domains && domain.cores_count >= 2 ? 2 : 1;
    CHECK_OK(uform_executor_for_ram(NULL, 1, 1, &executors[2]));
    CHECK_OK(uform_executor_for_ram(NULL, 1, 1, &executors[3]));
    CHECK_OK(uform_executor_for_ram(NULL, pair, 1, &executors[4]));
    CHECK_OK(uform_executor_for_ram(NULL, pair, 1, &executors[5]));
    CHECK_OK(uform_executor_for_ram(NULL, 1, 1, &executors[6]));
    r[1].deferred = r[3].deferred = r[5].deferred = r[7].deferred = 1;
    for (size_t i = 2; i < 7; ++i) r[i].executor = executors[i];
    r[7].executor = executors[6], r[6].shares = r[7].shares = 1;
    pthread_t threads[racers];
    for (size_t i = 0; i < racers; ++i) CHECK_FATAL(pthread_create(&threads[i], NULL, race_texts_on_model, &r[i]) == 0);
    for (size_t i = 0; i < racers; ++i) pthread_join(threads[i], NULL);
    size_t ok = 0, contended = 0;
    for (size_t i = 0; i < racers; ++i) {
        if (r[i].failure)
            fprintf(stderr, "racer %zu: %s: %s\n", i, uform_status_name(r[i].failure), r[i].message);
        CHECK(r[i].failure == uform_status_ok_k);
        CHECK(r[i].mismatched == 0 && r[i].tokens_wrong == 0);
        CHECK(r[i].ok == race_rounds && (r[i].shares || r[i].contended == 0));
        ok += r[i].ok, contended += r[i].contended;
    }
    printf("racing: %d threads x %d rounds on one model: %zu calls OK, %zu CONTENDED (the shared executor), rows as the "
           "baseline\n", racers, race_rounds, ok, contended);
    for (size_t i = 0; i < racers; ++i) uform_executor_free(executors[i]);
    /* The calls pooled their activation arenas; freeing the last open model returns them. */
    CHECK(uform_arena_pooled_bytes() > 0);
    uform_model_free(model);
    CHECK(uform_arena_pooled_bytes() == 0);
}

int main(void) {
    test_verb();
    test_racing();
    CHECK_DONE();
}
