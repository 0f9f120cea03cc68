/**
 *  @file   fault_harness.h
 *  @brief  What the tests that break a device on purpose share (test_vram.c, test_encode_gpu.c,
 *          test_encode_images_gpu.c): device callbacks that trap or sleep, and running this test
 *          program again as a child (a trap's sticky error breaks the device's primary context for the
 *          whole process), bounded in time.
 */
#ifndef UFORM_TEST_FAULT_HARNESS_H
#define UFORM_TEST_FAULT_HARNESS_H

#define _GNU_SOURCE
#include "check.h"
#include "internal.h"      // `uform_now_seconds`, `uform_sleep_seconds`
#include "uform_testing.h" // `uform_device_launch`, `uform_kernel_trap_k`, `uform_kernel_sleep_k`

#include <signal.h>   // `kill`
#include <stdio.h>    // `fflush`
#include <stdlib.h>   // `getenv`
#include <sys/wait.h> // `waitpid`
#include <unistd.h>   // `fork`, `execl`

/** A device callback that launches a trap: a deliberate device fault. */
static inline uform_status_t fault_trap_callback(void *context, uform_device_slot_t const *slot) {
    (void)context;
    return uform_device_launch(slot, uform_kernel_trap_k, slot->scratch, 0, 0);
}

/** A device callback that keeps the device busy for `*(double const *)context` nanoseconds. */
static inline uform_status_t fault_sleep_callback(void *context, uform_device_slot_t const *slot) {
    return uform_device_launch(slot, uform_kernel_sleep_k, slot->scratch, 0, *(double const *)context);
}

/** Runs `self flag [argument]` (this program again, from /proc/self/exe) and counts a failure unless
 *  it exits 0 within `seconds` (a child past that is killed). Skipped, saying so, under
 *  UFORM_TEST_UNDER_SANITIZER: compute-sanitizer would count the child's trap as an error. */
static inline void fault_run_child(char const *self, char const *flag, char const *argument, double seconds,
                                   char const *what) {
    if (getenv("UFORM_TEST_UNDER_SANITIZER")) {
        printf("%s test skipped under a sanitizer\n", what);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        if (argument) execl("/proc/self/exe", self, flag, argument, (char *)NULL);
        else execl("/proc/self/exe", self, flag, (char *)NULL);
        _exit(127);
    }
    CHECK_FATAL(child > 0);
    int status = 0;
    double const deadline = uform_now_seconds() + seconds;
    pid_t done = 0;
    while ((done = waitpid(child, &status, WNOHANG)) == 0 && uform_now_seconds() < deadline) uform_sleep_seconds(0.01);
    if (done == 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        fprintf(stderr, "the %s child hung for %.0f s\n", what, seconds);
        ++check_failures;
        return;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#endif // UFORM_TEST_FAULT_HARNESS_H
