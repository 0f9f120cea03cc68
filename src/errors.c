/**
 *  @file   errors.c
 *  @brief  Status names, the per-thread error message, and finishing outcomes.
 */
#include "internal.h"

#include <stdio.h>  // `vsnprintf`
#include <string.h> // `memcpy`

static _Thread_local char uform_thread_message[512];

char const *uform_version(void) { return UFORM_VERSION_STRING; }

char const *uform_status_name(uform_status_t status) {
    static char const *const names[] = {
        "ok",           "contended",          "unsupported",    "config_mismatch",
        "invalid_argument", "out_of_memory",  "system_error",   "timeout",
        "device_fault", "deferred_full",      "forked",         "residency_mismatch",
        "limit_exceeded", "peer_lost",        "corrupt_file",   "pending",
    };
    if ((unsigned)status >= sizeof(names) / sizeof(names[0])) return "invalid";
    return names[status];
}

char const *uform_error_message(void) { return uform_thread_message; }

uform_status_t uform_fail_v(uform_status_t status, char const *format, va_list arguments) {
    // Formatted aside first: callers may pass `uform_error_message()` itself as an argument.
    char formatted[sizeof(uform_thread_message)];
    vsnprintf(formatted, sizeof(formatted), format, arguments);
    memcpy(uform_thread_message, formatted, sizeof(formatted));
    return status;
}

uform_status_t uform_fail(uform_status_t status, char const *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    uform_fail_v(status, format, arguments);
    va_end(arguments);
    return status;
}

void uform_outcome_begin(uform_outcome_t *outcome, uform_executor_t executor) {
    __atomic_store_n(&outcome->finished, 0u, __ATOMIC_RELAXED);
    outcome->status = uform_status_pending_k;
    outcome->reserved[0] = (uint64_t)(uintptr_t)executor;
    outcome->reserved[1] = 0;
    outcome->reserved[2] = 0;
    outcome->reserved[3] = uform_fork_generation(); // a child finds a pending outcome FORKED
    outcome->message[0] = '\0';
}

void uform_outcome_finish(uform_outcome_t *outcome, uform_status_t status, char const *message) {
    if (status != uform_status_ok_k && message) {
        size_t length = strlen(message);
        if (length >= sizeof(outcome->message)) length = sizeof(outcome->message) - 1;
        memcpy(outcome->message, message, length);
        outcome->message[length] = '\0';
    }
    else
        outcome->message[0] = '\0';
    outcome->status = status;
    __atomic_store_n(&outcome->finished, 1u, __ATOMIC_RELEASE);
    uform_futex_wake(&outcome->finished, 1 << 30);
}
