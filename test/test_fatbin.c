/**
 *  @file   test_fatbin.c
 *  @brief  The kernels' fatbin as src/kernels_fatbin.c embeds it (`.incbin`): every byte of the file
 *          nvcc wrote, 64-byte aligned, starting with the fatbin magic that `cuModuleLoadData` checks,
 *          and its size. Skipped in builds without CUDA, which embed nothing.
 */
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if UFORM_WITH_CUDA
#include "cuda_driver.h"

int main(void) {
    CHECK(uform_kernels_fatbin_size > 16);
    CHECK((uintptr_t)uform_kernels_fatbin % 64 == 0);
    uint32_t magic = 0;
    memcpy(&magic, uform_kernels_fatbin, sizeof magic);
    CHECK(magic == 0xBA55ED50u); // the fatbin container's magic, little-endian
    FILE *file = fopen(UFORM_TEST_FATBIN_PATH, "rb");
    CHECK_FATAL(file != NULL);
    fseek(file, 0, SEEK_END);
    long const size = ftell(file);
    fseek(file, 0, SEEK_SET);
    CHECK(size > 0 && (size_t)size == uform_kernels_fatbin_size);
    unsigned char *bytes = malloc(size > 0 ? (size_t)size : 1);
    CHECK_FATAL(bytes != NULL);
    CHECK(fread(bytes, 1, (size_t)size, file) == (size_t)size);
    fclose(file);
    CHECK(memcmp(bytes, uform_kernels_fatbin, (size_t)size) == 0);
    free(bytes);
    printf("fatbin: %zu bytes embedded, identical to %s\n", uform_kernels_fatbin_size, UFORM_TEST_FATBIN_PATH);
    return check_failures ? 1 : 0;
}
#else
int main(void) {
    printf("SKIPPED: a build without CUDA embeds no kernels\n");
    return check_failures ? 1 : 77;
}
#endif
