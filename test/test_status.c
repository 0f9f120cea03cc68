/**
 *  @file   test_status.c
 *  @brief  Statuses and messages: every name, out-of-range values, the per-thread message (empty
 *          at first, replaced by each failure, untouched by other threads), long messages, the
 *          version string.
 */
#include "check.h"
#include "internal.h"

#include <pthread.h>

static void *fail_on_another_thread(void *argument) {
    (void)argument;
    // A fresh thread starts with no message, and its failure stays its own.
    int failures = uform_error_message()[0] != '\0';
    failures += uform_executor_drain(NULL, (uform_mood_t)42) != uform_status_invalid_argument_k;
    failures += strstr(uform_error_message(), "mood 42") == NULL;
    return (void *)(intptr_t)failures;
}

int main(void) {
    static char const *const expected[] = {
        "ok",          "contended",     "unsupported",  "config_mismatch", "invalid_argument", "out_of_memory",
        "system_error", "timeout",      "device_fault", "deferred_full",   "forked",           "residency_mismatch",
        "limit_exceeded", "peer_lost",  "corrupt_file", "pending",
    };
    size_t const count = sizeof(expected) / sizeof(expected[0]);
    CHECK(count == (size_t)uform_status_pending_k + 1);
    for (size_t status = 0; status < count; ++status) CHECK(strcmp(uform_status_name((uform_status_t)status), expected[status]) == 0);
    CHECK(strcmp(uform_status_name((uform_status_t)count), "invalid") == 0);
    CHECK(strcmp(uform_status_name((uform_status_t)-1), "invalid") == 0);
    // The seed's numeric codes.
    CHECK(uform_status_ok_k == 0 && uform_status_contended_k == 1 && uform_status_unsupported_k == 2 &&
          uform_status_config_mismatch_k == 3);
    CHECK(sizeof(uform_status_t) == sizeof(int));

    // The message: empty before any failure, set by a failure, replaced by the next one, and kept
    // across successful calls.
    CHECK(uform_error_message()[0] == '\0');
    CHECK_STATUS(uform_executor_drain(NULL, (uform_mood_t)7), uform_status_invalid_argument_k);
    CHECK_MESSAGE("mood 7");
    CHECK_STATUS(uform_executor_call(NULL, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("call is NULL");
    CHECK(strstr(uform_error_message(), "mood 7") == NULL);
    CHECK_STATUS(uform_executor_drain(NULL, uform_mood_parked_k), uform_status_ok_k);
    CHECK_MESSAGE("call is NULL");

    // Other threads have their own.
    pthread_t other;
    void *failures = NULL;
    pthread_create(&other, NULL, fail_on_another_thread, NULL);
    pthread_join(other, &failures);
    CHECK(failures == NULL);
    CHECK_MESSAGE("call is NULL");

    // A message longer than the buffer is truncated, terminated, never overflowed; a message may
    // quote the previous one.
    char long_text[2048];
    memset(long_text, 'x', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = '\0';
    CHECK(uform_fail(uform_status_timeout_k, "%s", long_text) == uform_status_timeout_k);
    size_t const length = strlen(uform_error_message());
    CHECK(length > 100 && length < sizeof(long_text) - 1);
    uform_fail(uform_status_timeout_k, "first");
    uform_fail(uform_status_timeout_k, "second after %s", uform_error_message());
    CHECK(strcmp(uform_error_message(), "second after first") == 0);

    // The version string matches the header's numbers.
    char version[32];
    snprintf(version, sizeof(version), "%d.%d.%d", UFORM_VERSION_MAJOR, UFORM_VERSION_MINOR, UFORM_VERSION_PATCH);
    CHECK(strcmp(uform_version(), version) == 0);
    CHECK_DONE();
}
