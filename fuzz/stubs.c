/**
 *  @file   stubs.c
 *  @brief  What src/sync.c calls from the thread pool (src/host.c), which the libFuzzer targets do
 *          not link (they are built from the parsers' own sources): they start no pool, so there
 *          are no gates to reset after a fork.
 */
#include "internal.h"

void uform_pool_gates_after_fork(void) {}
