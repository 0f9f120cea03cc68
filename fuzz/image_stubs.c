/**
 *  @file   image_stubs.c
 *  @brief  What src/sync.c calls from the thread pool (src/host.c), which the image fuzz target
 *          does not link: the target starts no pool, so there are no gates to reset after a fork.
 */
#include "internal.h"

void uform_pool_gates_after_fork(void) {}
