/**
 *  @file   errors.c
 *  @brief  Status names and the per-thread error message.
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

void uform_clear_error(void) { uform_thread_message[0] = '\0'; }

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
