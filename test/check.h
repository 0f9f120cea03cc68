/**
 *  @file   check.h
 *  @brief  Assertions for the ctest executables: each failing check prints where and what, and
 *          the test exits non-zero at the end (or at once, for CHECK_FATAL).
 */
#ifndef UFORM_TEST_CHECK_H
#define UFORM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uform.h>

static int check_failures = 0;

#define CHECK(condition)                                                                           \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition);          \
            ++check_failures;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_FATAL(condition)                                                                     \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            fprintf(stderr, "%s:%d: fatal CHECK failed: %s\n", __FILE__, __LINE__, #condition);    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/** Checks a status equals the expected one, printing both names and the engine's message. */
#define CHECK_STATUS(expression, expected)                                                         \
    do {                                                                                           \
        uform_status_t check_status_ = (expression);                                               \
        if (check_status_ != (expected)) {                                                         \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (message: %s)\n", __FILE__,        \
                    __LINE__, #expression, uform_status_name(check_status_),                       \
                    uform_status_name(expected), uform_error_message());                           \
            ++check_failures;                                                                      \
        }                                                                                          \
    } while (0)

/** Checks a status is OK: for calls a test makes to reach the state it checks. */
#define CHECK_OK(expression) CHECK_STATUS(expression, uform_status_ok_k)

/** Checks the thread's last error message contains `needle`. */
#define CHECK_MESSAGE(needle)                                                                      \
    do {                                                                                           \
        if (!strstr(uform_error_message(), (needle))) {                                            \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,            \
                    uform_error_message(), (needle));                                              \
            ++check_failures;                                                                      \
        }                                                                                          \
    } while (0)

/** Prints a skip notice; ctest treats exit code 77 as skipped when SKIP_RETURN_CODE is set. */
#define SKIP(...)                                                                                  \
    do {                                                                                           \
        printf("SKIPPED: ");                                                                       \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        exit(77);                                                                                  \
    } while (0)

#define CHECK_DONE()                                                                               \
    do {                                                                                           \
        if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures);               \
        return check_failures ? 1 : 0;                                                             \
    } while (0)

#endif
