/**
 *  @file   test_vram_tower.c
 *  @brief  The host-side planning the VRAM text and image towers share (src/models/vram_tower.c), on
 *          this machine without a GPU: the split of a batch over devices in proportion to their SMs,
 *          the chunk capacity under a scratch limit (whole items, LIMIT_EXCEEDED naming the bytes when
 *          one item cannot fit), and the rows gathered in input order with zero rows and statuses for
 *          the items that failed, and the features written from the pinned staging buffer (rows in
 *          input order, zero rows past each item's tokens and for failed items, the stride's gap
 *          untouched; on one thread and split over an executor's). Builds without CUDA skip it.
 */
#include "check.h"

#if UFORM_WITH_CUDA
#include "models/vram_tower.h"

/** An image-like chunk: 1,000 bytes per token, in whole items of 10 tokens. */
static size_t chunk_bytes(void const *context, size_t tokens) {
    (void)context;
    return tokens / 10 * 10 * 1000;
}


/** `vram_write_features` over 37 inputs (every third failed, the others of 1 to 5 rows of 5, 5.4 MB:
 *  enough to split over threads), from a staging buffer and from rows already in place, on this
 *  thread and over a RAM executor's two: the same bytes every time. */
static void check_write_features(void) {
    enum { count = 37, rows_total = 5, row_bytes = 29000, gap = 13 };
    size_t const stride = rows_total * row_bytes + gap;
    size_t order[count], offsets[count + 1], encoded = 0;
    offsets[0] = 0;
    for (size_t i = 0; i < count; ++i)
        if (i % 3 != 1) order[encoded] = i, offsets[encoded + 1] = offsets[encoded] + 1 + i % rows_total, ++encoded;
    unsigned char *staged = (unsigned char *)malloc(offsets[encoded] * row_bytes);
    unsigned char *expected = (unsigned char *)malloc(count * stride), *got = (unsigned char *)malloc(count * stride);
    CHECK(staged && expected && got);
    if (!staged || !expected || !got) return;
    for (size_t b = 0; b < offsets[encoded] * row_bytes; ++b) staged[b] = (unsigned char)(b * 7 % 251 + 1);
    memset(expected, 0, count * stride);
    for (size_t i = 0; i < count; ++i) memset(expected + i * stride + rows_total * row_bytes, 0xee, gap);
    for (size_t e = 0; e < encoded; ++e)
        memcpy(expected + order[e] * stride, staged + offsets[e] * row_bytes, (offsets[e + 1] - offsets[e]) * row_bytes);
    uform_embeddings_t out = {.features = got, .features_stride = stride};
    uform_executor_t executor = NULL;
    /* Two threads where the process may run on two cores (one under `taskset -c 0`). */
    if (uform_executor_for_ram(NULL, 2, 0, &executor) != uform_status_ok_k)
        CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &executor), uform_status_ok_k);
    for (int threads = 0; threads < 2; ++threads)
        for (int in_place = 0; in_place < 2; ++in_place) {
            /* In place: the device wrote each item's rows already; elsewhere garbage to overwrite. */
            memset(got, 0xab, count * stride);
            for (size_t i = 0; i < count; ++i) memset(got + i * stride + rows_total * row_bytes, 0xee, gap);
            if (in_place)
                for (size_t e = 0; e < encoded; ++e)
                    memcpy(got + order[e] * stride, staged + offsets[e] * row_bytes, (offsets[e + 1] - offsets[e]) * row_bytes);
            vram_write_features(threads ? executor : NULL, &out, stride, rows_total, row_bytes, order, offsets, encoded,
                                count, in_place ? NULL : staged);
            CHECK(!memcmp(got, expected, count * stride));
        }
    uform_executor_free(executor);
    free(staged), free(expected), free(got);
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
    printf("%s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}
#else
int main(void) {
    (void)check_failures; /* no checks in this build */
    SKIP("a build without CUDA has no VRAM towers");
}
#endif
