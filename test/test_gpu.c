/**
 *  @file   test_gpu.c
 *  @brief  GPU discovery: class and vendor names, the capability-to-class table, class descent,
 *          listing arguments, the no-driver paths (for real, on machines without a GPU), and with a
 *          GPU the listing against `nvidia-smi`.
 *
 *  Without a GPU every check that needs none runs, then the test exits 77 (skipped) with a notice;
 *  a failed check still fails the test.
 */
#define _GNU_SOURCE
#include "check.h"
#include "cuda_driver.h"

#include <ctype.h>  // `tolower`
#include <stdlib.h> // `getenv`

static void test_names(void) {
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_unknown_k), "unknown"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_ampere_k), "nvidia_ampere"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_ada_k), "nvidia_ada"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_hopper_k), "nvidia_hopper"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_blackwell_k), "nvidia_blackwell"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_blackwellrtx_k), "nvidia_blackwellrtx"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_nvidia_rubin_k), "nvidia_rubin"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_amd_cdna3_k), "amd_cdna3"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_amd_cdna4_k), "amd_cdna4"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_amd_cdna5_k), "amd_cdna5"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_apple_metal7_k), "apple_metal7"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_apple_metal9_k), "apple_metal9"));
    CHECK(!strcmp(uform_gpu_class_name(uform_gpu_class_apple_metal10_k), "apple_metal10"));
    CHECK(!strcmp(uform_gpu_class_name((uform_gpu_class_t)13), "invalid"));
    CHECK(!strcmp(uform_gpu_class_name((uform_gpu_class_t)-1), "invalid"));
    CHECK(!strcmp(uform_gpu_vendor_name(uform_gpu_vendor_unknown_k), "unknown"));
    CHECK(!strcmp(uform_gpu_vendor_name(uform_gpu_vendor_nvidia_k), "nvidia"));
    CHECK(!strcmp(uform_gpu_vendor_name(uform_gpu_vendor_amd_k), "amd"));
    CHECK(!strcmp(uform_gpu_vendor_name(uform_gpu_vendor_apple_k), "apple"));
    CHECK(!strcmp(uform_gpu_vendor_name((uform_gpu_vendor_t)4), "invalid"));
    CHECK(!strcmp(uform_gpu_vendor_name((uform_gpu_vendor_t)-7), "invalid"));
}

static void test_class_rules(void) {
    // The header's table: below 8.9 AMPERE, 8.9 ADA, 9.x HOPPER, 10-11 BLACKWELL, 12 RTX, 13+ RUBIN.
    struct {
        int major, minor;
        uform_gpu_class_t expected;
    } const table[] = {
        {7, 0, uform_gpu_class_nvidia_ampere_k},      {7, 5, uform_gpu_class_nvidia_ampere_k},
        {8, 0, uform_gpu_class_nvidia_ampere_k},      {8, 6, uform_gpu_class_nvidia_ampere_k},
        {8, 7, uform_gpu_class_nvidia_ampere_k},      {8, 9, uform_gpu_class_nvidia_ada_k},
        {9, 0, uform_gpu_class_nvidia_hopper_k},      {10, 0, uform_gpu_class_nvidia_blackwell_k},
        {10, 3, uform_gpu_class_nvidia_blackwell_k},  {11, 0, uform_gpu_class_nvidia_blackwell_k},
        {12, 0, uform_gpu_class_nvidia_blackwellrtx_k}, {12, 1, uform_gpu_class_nvidia_blackwellrtx_k},
        {13, 0, uform_gpu_class_nvidia_rubin_k},      {15, 2, uform_gpu_class_nvidia_rubin_k},
    };
    for (size_t index = 0; index < sizeof(table) / sizeof(table[0]); ++index) {
        uform_gpu_class_t got = uform_gpu_class_of_capability(table[index].major, table[index].minor);
        if (got != table[index].expected) {
            fprintf(stderr, "capability %d.%d maps to %s, expected %s\n", table[index].major, table[index].minor,
                    uform_gpu_class_name(got), uform_gpu_class_name(table[index].expected));
            ++check_failures;
        }
    }
    // Descent: AMPERE < ADA < HOPPER < BLACKWELL < RUBIN, AMPERE < ADA < BLACKWELLRTX.
    CHECK(uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_hopper_k));
    CHECK(uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_ada_k));
    CHECK(uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_ampere_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_blackwell_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_blackwellrtx_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_amd_cdna3_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_unknown_k));
    CHECK(uform_gpu_class_runs(uform_gpu_class_nvidia_rubin_k, uform_gpu_class_nvidia_blackwell_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_rubin_k, uform_gpu_class_nvidia_blackwellrtx_k));
    CHECK(uform_gpu_class_runs(uform_gpu_class_nvidia_blackwellrtx_k, uform_gpu_class_nvidia_ada_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_blackwellrtx_k, uform_gpu_class_nvidia_hopper_k));
    CHECK(!uform_gpu_class_runs(uform_gpu_class_nvidia_ampere_k, uform_gpu_class_nvidia_ada_k));
    CHECK(uform_gpu_class_common(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_blackwellrtx_k) ==
          uform_gpu_class_nvidia_ada_k);
    CHECK(uform_gpu_class_common(uform_gpu_class_nvidia_rubin_k, uform_gpu_class_nvidia_hopper_k) ==
          uform_gpu_class_nvidia_hopper_k);
    CHECK(uform_gpu_class_common(uform_gpu_class_nvidia_hopper_k, uform_gpu_class_nvidia_hopper_k) ==
          uform_gpu_class_nvidia_hopper_k);
    CHECK(uform_gpu_class_common(uform_gpu_class_nvidia_ampere_k, uform_gpu_class_nvidia_rubin_k) ==
          uform_gpu_class_nvidia_ampere_k);
    CHECK(uform_gpu_class_common(uform_gpu_class_unknown_k, uform_gpu_class_nvidia_hopper_k) ==
          uform_gpu_class_unknown_k);
}

static void test_listing_arguments(void) {
    size_t count = 12345;
    CHECK_STATUS(uform_gpu_devices(NULL, 0, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("count is NULL");
    CHECK_STATUS(uform_gpu_devices(NULL, 3, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("capacity is 3");
    CHECK(count == 12345); // untouched on failure
    char name[64];
    CHECK_STATUS(uform_gpu_device_name(0, NULL, 64), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NULL");
    CHECK_STATUS(uform_gpu_device_name(0, name, 0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("capacity 0");
    CHECK_STATUS(uform_gpu_device_name(INT32_MAX, name, sizeof(name)), uform_status_invalid_argument_k);
    CHECK_MESSAGE("out of range");
    CHECK_STATUS(uform_gpu_device_name(-1, name, sizeof(name)), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ordinal -1 is out of range");
}

/** The no-driver, no-device paths: an empty listing is OK, the status says why there is none. */
static void test_without_gpu(void) {
    size_t count = 99;
    CHECK_STATUS(uform_gpu_devices(NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 0);
    uform_gpu_device_t devices[2], pattern[2];
    memset(devices, 0xAB, sizeof(devices));
    memset(pattern, 0xAB, sizeof(pattern));
    count = 99;
    CHECK_STATUS(uform_gpu_devices(devices, 2, &count), uform_status_ok_k);
    CHECK(count == 0);
    CHECK(!memcmp(devices, pattern, sizeof(devices))); // nothing written
    CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k);
    char reason[512];
    snprintf(reason, sizeof(reason), "%s", uform_error_message());
    CHECK(strlen(reason) > 10);
    // One of the reasons the header lists: no build support, no library, cuInit failed, no device.
    CHECK(strstr(reason, "built without GPU support") || strstr(reason, "no CUDA driver") ||
          strstr(reason, "cuInit") || strstr(reason, "no GPU") || strstr(reason, "lacks"));
    printf("uform_gpu_status: %s: %s\n", uform_status_name(uform_status_unsupported_k), reason);
    char name[64] = "untouched";
    CHECK_STATUS(uform_gpu_device_name(0, name, sizeof(name)), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ordinal 0 is out of range");
    CHECK(!strcmp(name, "untouched"));
    // The driver table is refused with the same reason.
    uform_cuda_t const *cuda = NULL;
    uform_status_t status = uform_cuda(&cuda);
#if UFORM_WITH_CUDA
    if (status == uform_status_ok_k) {
        // The driver loaded but lists no device: fine, the listing is still empty.
        CHECK(cuda != NULL);
        return;
    }
#endif
    CHECK(status == uform_status_unsupported_k);
    CHECK(cuda == NULL);
    CHECK(strlen(uform_error_message()) > 10);
}

#if UFORM_WITH_CUDA
/** "00000000:3B:00.0" and "0000:3b:00.0" both become "0000:3b:00.0". */
static void normalize_bus_id(char const *in, char *out, size_t capacity) {
    while (*in == ' ') ++in;
    size_t length = strcspn(in, ":");
    if (length > 4 && !strncmp(in, "0000", 4)) in += length - 4;
    size_t written = 0;
    for (; *in && *in != ',' && *in != ' ' && written + 1 < capacity; ++in) out[written++] = (char)tolower((unsigned char)*in);
    out[written] = '\0';
}

/** Compares the listing with `nvidia-smi`, by PCI bus ID: names equal, memory within 1%. */
static void test_against_nvidia_smi(uform_cuda_device_t const *devices, size_t count) {
    if (getenv("FAKE_CUDA_DEVICES")) {
        printf("the fake driver is loaded: its devices are not nvidia-smi's, listing not compared\n");
        return;
    }
    FILE *pipe = popen("nvidia-smi --query-gpu=pci.bus_id,name,memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
    if (!pipe) {
        printf("nvidia-smi is not available: listing not compared\n");
        return;
    }
    char line[512];
    size_t rows = 0, matched = 0;
    while (fgets(line, sizeof(line), pipe)) {
        char *bus = strtok(line, ","), *name = strtok(NULL, ","), *memory = strtok(NULL, ",\n");
        if (!bus || !name || !memory) continue;
        ++rows;
        while (*name == ' ') ++name;
        char bus_id[64];
        normalize_bus_id(bus, bus_id, sizeof(bus_id));
        double const mebibytes = strtod(memory, NULL);
        for (size_t index = 0; index < count; ++index) {
            if (strcmp(devices[index].pci_bus_id, bus_id)) continue;
            ++matched;
            if (strcmp(devices[index].name, name)) {
                fprintf(stderr, "device %zu: uform names it '%s', nvidia-smi '%s'\n", index, devices[index].name, name);
                ++check_failures;
            }
            double const ours = (double)devices[index].memory_bytes / (1024.0 * 1024.0);
            if (ours < mebibytes * 0.99 || ours > mebibytes * 1.01) {
                fprintf(stderr, "device %zu: uform lists %.0f MiB, nvidia-smi %.0f MiB\n", index, ours, mebibytes);
                ++check_failures;
            }
            printf("device %zu (%s): '%s', %.0f MiB; nvidia-smi: '%s', %.0f MiB\n", index, bus_id, devices[index].name,
                   ours, name, mebibytes);
        }
    }
    int const exit_status = pclose(pipe);
    if (rows == 0 || exit_status != 0) {
        printf("nvidia-smi gave no rows: listing not compared\n");
        return;
    }
    CHECK(matched == count); // every listed device is one nvidia-smi shows
    if (!getenv("CUDA_VISIBLE_DEVICES")) CHECK(rows == count);
}

static void test_with_gpu(size_t count) {
    CHECK_STATUS(uform_gpu_status(), uform_status_ok_k);
    uform_gpu_device_t *devices = calloc(count, sizeof(uform_gpu_device_t));
    CHECK_FATAL(devices);
    size_t again = 0;
    // A short buffer gets the first entries and the full count.
    CHECK_STATUS(uform_gpu_devices(devices, 1, &again), uform_status_ok_k);
    CHECK(again == count);
    CHECK_STATUS(uform_gpu_devices(devices, count, &again), uform_status_ok_k);
    uform_cuda_device_t const *internal = NULL;
    size_t internal_count = 0;
    CHECK_STATUS(uform_cuda_devices(&internal, &internal_count), uform_status_ok_k);
    CHECK_FATAL(internal_count == count);
    for (size_t index = 0; index < count; ++index) {
        char name[256], shortened[5];
        CHECK_STATUS(uform_gpu_device_name(index, name, sizeof(name)), uform_status_ok_k);
        CHECK_STATUS(uform_gpu_device_name(index, shortened, sizeof(shortened)), uform_status_ok_k);
        CHECK(strlen(shortened) == (strlen(name) < 4 ? strlen(name) : 4) && !strncmp(shortened, name, strlen(shortened)));
        CHECK(devices[index].vendor == uform_gpu_vendor_nvidia_k);
        CHECK(devices[index].vendor_ordinal == (uform_gpu_ordinal_t)index);
        CHECK(devices[index].compute_units > 0);
        CHECK(devices[index].memory_bytes > ((uint64_t)1 << 30));
        CHECK(devices[index].gpu_class == uform_gpu_class_of_capability(internal[index].major, internal[index].minor));
        printf("GPU %zu: %s, %s, compute capability %d.%d, %u SMs, %.1f GiB, PCI %s, multicast %s\n", index, name,
               uform_gpu_class_name(devices[index].gpu_class), internal[index].major, internal[index].minor,
               devices[index].compute_units, (double)devices[index].memory_bytes / (1 << 30),
               internal[index].pci_bus_id, internal[index].multicast_supported ? "supported" : "absent");
        if (strstr(name, "H200")) {
            CHECK(devices[index].gpu_class == uform_gpu_class_nvidia_hopper_k);
            CHECK(devices[index].compute_units == 132);
            CHECK(devices[index].memory_bytes > (uint64_t)140e9);
        }
    }
    CHECK_STATUS(uform_gpu_device_name(count, (char[8]) {0}, 8), uform_status_invalid_argument_k);
    CHECK_MESSAGE("out of range");
    test_against_nvidia_smi(internal, count);
    free(devices);
}
#endif

int main(void) {
    test_names();
    test_class_rules();
    test_listing_arguments();
    size_t count = 0;
    CHECK_STATUS(uform_gpu_devices(NULL, 0, &count), uform_status_ok_k);
    if (count == 0) {
        test_without_gpu();
        if (check_failures) CHECK_DONE();
        CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k);
        SKIP("no GPU (%s): the no-driver paths passed, the device checks are skipped", uform_error_message());
    }
#if UFORM_WITH_CUDA
    test_with_gpu(count);
#endif
    CHECK_DONE();
}
