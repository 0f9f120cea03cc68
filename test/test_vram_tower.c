/**
 *  @file   test_vram_tower.c
 *  @brief  The host-side planning the VRAM text and image towers share (src/models/vram_tower.c), on
 *          this machine without a GPU: the split of a batch over devices in proportion to their SMs,
 *          the chunk capacity under a scratch limit (whole items, LIMIT_EXCEEDED naming the bytes when
 *          one item cannot fit), and the rows gathered in input order with zero rows and statuses for
 *          the items that failed, and the features written from the pinned staging buffer (rows in
 *          input order, zero rows past each item's tokens and for failed items, the stride's gap
 *          untouched; on one thread and split over an executor's), whole or piece by piece as pieces
 *          land (stopping where a piece never does). Builds without CUDA skip it.
 */
#include "check.h"

#if UFORM_WITH_CUDA
#include "models/vram_tower.h"

/** An image-like chunk: 1,000 bytes per token, in whole items of 10 tokens. */
static size_t chunk_bytes(void const *context, size_t tokens) {
    (void)context;
    return tokens / 10 * 10 * 1000;
}


/** The features both writers are checked on: 37 inputs (every third failed, the others of 1 to 5
 *  rows of 5, 5.4 MB: enough to split over threads), their rows packed in a staging buffer, the
 *  bytes the caller's features must hold after (zero rows past each input's own, the stride's gap
 *  untouched), the caller's buffer, and a RAM executor of two threads (one under `taskset -c 0`). */
enum { count = 37, rows_total = 5, row_bytes = 29000, gap = 13, stride = rows_total * row_bytes + gap };
typedef struct features_case_t {
    size_t order[count], offsets[count + 1], encoded, rows;
    unsigned char *staged, *expected, *got;
    uform_embeddings_t out;
    uform_executor_t executor;
} features_case_t;

static int features_case_open(features_case_t *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < count; ++i)
        if (i % 3 != 1) c->order[c->encoded] = i, c->offsets[c->encoded + 1] = c->offsets[c->encoded] + 1 + i % rows_total, ++c->encoded;
    c->rows = c->offsets[c->encoded];
    c->staged = (unsigned char *)malloc(c->rows * row_bytes);
    c->expected = (unsigned char *)malloc(count * stride), c->got = (unsigned char *)malloc(count * stride);
    CHECK(c->staged && c->expected && c->got);
    if (!c->staged || !c->expected || !c->got) return 0;
    for (size_t b = 0; b < c->rows * row_bytes; ++b) c->staged[b] = (unsigned char)(b * 7 % 251 + 1);
    memset(c->expected, 0, count * stride);
    for (size_t i = 0; i < count; ++i) memset(c->expected + i * stride + rows_total * row_bytes, 0xee, gap);
    for (size_t e = 0; e < c->encoded; ++e)
        memcpy(c->expected + c->order[e] * stride, c->staged + c->offsets[e] * row_bytes,
               (c->offsets[e + 1] - c->offsets[e]) * row_bytes);
    c->out = (uform_embeddings_t){.features = c->got, .features_stride = stride};
    if (uform_executor_for_ram(NULL, 2, 0, &c->executor) != uform_status_ok_k)
        CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &c->executor), uform_status_ok_k);
    return 1;
}

/** The caller's buffer before a write: garbage to overwrite, the stride's gap marked. */
static void features_case_garbage(features_case_t *c) {
    memset(c->got, 0xab, count * stride);
    for (size_t i = 0; i < count; ++i) memset(c->got + i * stride + rows_total * row_bytes, 0xee, gap);
}

static void features_case_close(features_case_t *c) {
    uform_executor_free(c->executor);
    free(c->staged), free(c->expected), free(c->got);
}

/** `vram_write_features` from a staging buffer and from rows already in place, on this thread and
 *  over a RAM executor's two: the same bytes every time. */
static void check_write_features(void) {
    features_case_t c;
    if (!features_case_open(&c)) {
        features_case_close(&c);
        return;
    }
    for (int threads = 0; threads < 2; ++threads)
        for (int in_place = 0; in_place < 2; ++in_place) {
            /* In place: the device wrote each item's rows already; elsewhere garbage to overwrite. */
            features_case_garbage(&c);
            if (in_place)
                for (size_t e = 0; e < c.encoded; ++e)
                    memcpy(c.got + c.order[e] * stride, c.staged + c.offsets[e] * row_bytes,
                           (c.offsets[e + 1] - c.offsets[e]) * row_bytes);
            vram_write_features(threads ? c.executor : NULL, &c.out, stride, rows_total, row_bytes, c.order, c.offsets,
                                c.encoded, count, in_place ? NULL : c.staged);
            CHECK(!memcmp(c.got, c.expected, count * stride));
        }
    features_case_close(&c);
}

/** Lands pieces in order until `fail_at`, recording the order asked. */
typedef struct piece_waits_t {
    size_t asked[64], asked_count, fail_at;
} piece_waits_t;

static int piece_wait(void *context, size_t index) {
    piece_waits_t *waits = (piece_waits_t *)context;
    if (waits->asked_count < 64) waits->asked[waits->asked_count++] = index;
    return index != waits->fail_at;
}

/** `vram_write_features_pieces`, the staged rows in pieces whose bounds fall inside items and between
 *  them (the last pieces first in row order, as two devices' would be): every piece landed gives
 *  `vram_write_features`' bytes, on this thread and over two; a wait that fails at piece 3 stops
 *  there with 0, the zeros and pieces 0-2 written, the rest of the staged rows not. */
static void check_write_features_pieces(void) {
    features_case_t c;
    if (!features_case_open(&c)) {
        features_case_close(&c);
        return;
    }
    CHECK(c.rows > 70);
    /* Pieces: [0, 7) [7, 8) [8, 30) [30, 31) [31, 60) then the rest in two, the later one first. */
    size_t const middle = 60 + (c.rows - 60) / 2;
    vram_piece_t pieces[7] = {{.row_begin = 0, .row_end = 7},    {.row_begin = 7, .row_end = 8},
                              {.row_begin = 8, .row_end = 30},   {.row_begin = 30, .row_end = 31},
                              {.row_begin = 31, .row_end = 60},  {.row_begin = middle, .row_end = c.rows},
                              {.row_begin = 60, .row_end = middle}};
    for (int threads = 0; threads < 2; ++threads) {
        uform_executor_t const executor = threads ? c.executor : NULL;
        features_case_garbage(&c);
        piece_waits_t waits = {.fail_at = (size_t)-1};
        CHECK(vram_write_features_pieces(executor, &c.out, stride, rows_total, row_bytes, c.order, c.offsets, c.encoded,
                                         count, c.staged, pieces, 7, piece_wait, &waits) == 1);
        CHECK(!memcmp(c.got, c.expected, count * stride));
        CHECK(waits.asked_count == 7);
        for (size_t p = 0; p < waits.asked_count; ++p) CHECK(waits.asked[p] == p);

        /* The fourth piece never lands: rows [0, 30) and every zero row written, rows [30, rows) not. */
        features_case_garbage(&c);
        waits = (piece_waits_t){.fail_at = 3};
        CHECK(vram_write_features_pieces(executor, &c.out, stride, rows_total, row_bytes, c.order, c.offsets, c.encoded,
                                         count, c.staged, pieces, 7, piece_wait, &waits) == 0);
        CHECK(waits.asked_count == 4);
        size_t landed_bytes = 0, missing_bytes = 0, wrong_bytes = 0;
        for (size_t e = 0; e < c.encoded; ++e)
            for (size_t r = c.offsets[e]; r < c.offsets[e + 1]; ++r) {
                unsigned char const *at = c.got + c.order[e] * stride + (r - c.offsets[e]) * row_bytes;
                if (r < 30) landed_bytes += !memcmp(at, c.staged + r * row_bytes, row_bytes) ? row_bytes : 0;
                else
                    for (size_t b = 0; b < row_bytes; ++b) missing_bytes += at[b] == 0xab;
            }
        for (size_t i = 0; i < count; ++i) { /* zero rows past each input's own, whole rows for the failed */
            size_t own = 0;
            for (size_t e = 0; e < c.encoded; ++e)
                if (c.order[e] == i) own = c.offsets[e + 1] - c.offsets[e];
            for (size_t b = own * row_bytes; b < rows_total * row_bytes; ++b) wrong_bytes += c.got[i * stride + b] != 0;
            for (size_t b = 0; b < gap; ++b) wrong_bytes += c.got[i * stride + rows_total * row_bytes + b] != 0xee;
        }
        CHECK(landed_bytes == 30 * row_bytes);
        CHECK(missing_bytes == (c.rows - 30) * row_bytes);
        CHECK(wrong_bytes == 0);
    }
    features_case_close(&c);
}

int main(void) {
    vram_copy_t copies[2];
    memset(copies, 0, sizeof copies);
    copies[0].multiprocessors = 132, copies[1].multiprocessors = 66;
    size_t offsets[31];
    for (size_t e = 0; e <= 30; ++e) offsets[e] = e * 10;

    /* No limit: 2 to 1 by SMs, each share in one chunk. */
    vram_share_t shares[2] = {{.copy = &copies[0]}, {.copy = &copies[1]}};
    size_t scratch = 0;
    CHECK_STATUS(vram_plan_shares(shares, 2, 30, offsets, 10, 1024, 16, 0, chunk_bytes, NULL, "verb", "an item", &scratch),
                 uform_status_ok_k);
    CHECK(shares[0].first == 0 && shares[0].end == 20 && shares[1].first == 20 && shares[1].end == 30);
    CHECK(shares[0].tokens == 200 && shares[0].chunk_tokens == 200 && shares[1].chunk_tokens == 100);
    CHECK(scratch == vram_share_bytes(&shares[0], 1024, 16, chunk_bytes, NULL));
    CHECK(scratch == 1024 + 512 + 200000);

    /* A limit of 60 KB: chunks of whole items within it, the scratch under it. */
    CHECK_STATUS(vram_plan_shares(shares, 2, 30, offsets, 10, 1024, 16, 60000, chunk_bytes, NULL, "verb", "an item", &scratch),
                 uform_status_ok_k);
    CHECK(shares[0].chunk_tokens >= 10 && scratch <= 60000);
    CHECK(1024 + 512 + chunk_bytes(NULL, shares[0].chunk_tokens + 10) > 60000); /* the most that fit */
    printf("60 KB limit: %zu tokens per chunk, %zu bytes of scratch\n", shares[0].chunk_tokens, scratch);

    /* One item cannot fit 10 KB. */
    CHECK_STATUS(vram_plan_shares(shares, 2, 30, offsets, 10, 1024, 16, 10000, chunk_bytes, NULL, "verb",
                                  "an image of 10 tokens", &scratch),
                 uform_status_limit_exceeded_k);
    CHECK_MESSAGE("verb: an image of 10 tokens needs");
    CHECK_MESSAGE("scratch_limit is 10000");

    /* Fewer items than devices: the last share may be empty. */
    CHECK_STATUS(vram_plan_shares(shares, 2, 1, offsets, 10, 1024, 16, 0, chunk_bytes, NULL, "verb", "an item", &scratch),
                 uform_status_ok_k);
    CHECK(shares[0].end - shares[0].first + shares[1].end - shares[1].first == 1);

    /* Gathering with nothing encoded on a device: rows in input order, zero rows and statuses. */
    vram_tower_t tower = {0};
    size_t order[2] = {0, 2};
    unsigned char host_rows[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    unsigned char out_rows[3][6];
    memset(out_rows, 0xee, sizeof out_rows);
    uform_status_t items[3] = {uform_status_ok_k, uform_status_corrupt_file_k, uform_status_ok_k}, statuses[3];
    uform_embeddings_t out = {.data = out_rows, .stride = 6};
    CHECK_STATUS(vram_gather(&tower, shares, 0, &host_rows[0][0], 4, order, 2, 3, &out, items, statuses, "verb"),
                 uform_status_ok_k);
    CHECK(!memcmp(out_rows[0], host_rows[0], 4) && !memcmp(out_rows[2], host_rows[1], 4));
    CHECK(out_rows[1][0] == 0 && out_rows[1][3] == 0 && out_rows[0][4] == 0xee); /* the stride's padding untouched */
    CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_corrupt_file_k && statuses[2] == uform_status_ok_k);
    check_write_features();
    check_write_features_pieces();
    printf("%s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}
#else
int main(void) {
    (void)check_failures; /* no checks in this build */
    SKIP("a build without CUDA has no VRAM towers");
}
#endif
