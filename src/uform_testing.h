/**
 *  @file   uform_testing.h
 *  @brief  Test-only parts of libuform's ABI: the engine's own device kernels. The library exports
 *          them (tests, benchmarks and the Python and Mojo suites launch them by name), but they are
 *          not part of the public ABI in `uform.h` and may change without notice.
 *
 *  Include it after `uform.h`, from tests and benchmarks only (its folder, src/, is on their
 *  include path; it is not installed).
 */
#ifndef UFORM_TESTING_H
#define UFORM_TESTING_H

#include <uform.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The engine's own device kernels, compiled into the library. */
typedef enum uform_kernel_t {
    uform_kernel_empty_k = 0,    /**< Does nothing; one block of one thread. Arguments ignored. */
    uform_kernel_fill_f32_k = 1, /**< Writes `value` into `count` floats at `buffer`. */
    uform_kernel_sleep_k = 2,    /**< One thread spins on the device clock for `value` nanoseconds. */
    uform_kernel_trap_k = 3,     /**< Executes a trap: a deliberate device fault, for tests. */
    uform_kernel_add_f32_k = 4,  /**< Adds `value` to each of `count` floats at `buffer`. */
} uform_kernel_t;

/**
 *  @brief Enqueues one of the engine's kernels on the slot's stream, only from inside a device
 *  callback with the slot it was handed. INVALID_ARGUMENT for a NULL slot, an unknown kernel, a NULL
 *  buffer with a nonzero count, or a negative or non-finite sleep; DEVICE_FAULT when the launch hits
 *  a sticky device error; UNSUPPORTED in a build without GPU kernels or when they cannot load.
 *
 *  @code{.c}
 *  static uform_status_t fill(void *context, uform_device_slot_t const *slot) {
 *      return uform_device_launch(slot, uform_kernel_fill_f32_k, slot->scratch,
 *                                 slot->scratch_bytes / sizeof(float), 1.0);
 *  }
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_device_launch(uform_device_slot_t const *slot, uform_kernel_t kernel,
                                             uint64_t buffer, uint64_t count, double value);

#ifdef __cplusplus
}
#endif

#endif // UFORM_TESTING_H
