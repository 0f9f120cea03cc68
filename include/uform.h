/**
 *  @file   uform.h
 *  @brief  UForm's native engine: hardware discovery, executors, calls and meshes, as a C ABI.
 *
 *  This header is the whole public ABI of `libuform` and its manual. It is read top to bottom in
 *  regions: versions, statuses, CPU classes, memory domains, GPU classes and devices, options,
 *  executors, calls and outcomes, device calls, meshes and collectives. The engine's test kernels
 *  (`uform_kernel_t`, `uform_device_launch`) are not part of it: see src/uform_testing.h.
 *
 *  The engine runs user work ("calls") on executors. An executor is one of:
 *
 *  - the NULL executor (`uform_executor_t` equal to NULL): owns nothing, runs every call inline on
 *    the calling thread, and accepts models of every residency;
 *  - a RAM executor (`uform_executor_for_ram`): host threads pinned one per core of chosen NUMA
 *    nodes, with per-thread state in each thread's own node;
 *  - a pool executor (`uform_executor_on_pool`): schedules onto a live ForkUnion pool the caller
 *    owns, found in the process at run time, so several libraries share one set of threads;
 *  - a VRAM executor (`uform_executor_for_vram`): one CUDA stream per named GPU, driven by the
 *    calling thread, host threads for what devices cannot do, and per-device scratch memory.
 *
 *  @code{.c}
 *  #include <uform.h>
 *  #include <stdio.h>
 *
 *  static void add_one(void *context, size_t task, size_t thread, size_t domain) {
 *      (void)thread, (void)domain;
 *      ((float *)context)[task] += 1.0f;
 *  }
 *
 *  int main(void) {
 *      uform_executor_t executor = NULL;
 *      if (uform_executor_for_ram(NULL, 0, 0, &executor) != uform_status_ok_k) {
 *          fprintf(stderr, "uform: %s\n", uform_error_message());
 *          return 1;
 *      }
 *      float values[1000] = {0};
 *      uform_call_t call = {.schedule = uform_schedule_static_k, .tasks = 1000,
 *                           .task = add_one, .context = values};
 *      uform_status_t status = uform_executor_call(executor, &call, NULL); // blocking
 *      uform_executor_free(executor);
 *      return status == uform_status_ok_k ? 0 : 1;
 *  }
 *  @endcode
 *
 *  Conventions, everywhere below:
 *
 *  - Every fallible function returns a `uform_status_t`. On failure, `uform_error_message` returns,
 *    on the same thread, a sentence naming the bad value and what was expected. No function
 *    prints, aborts or exits on bad input.
 *  - Outputs come last. An output is written only on success, except where a function says so.
 *  - Options pointers may be NULL, which derives every field, exactly as an all-zero struct does.
 *  - Listing functions take `(items, capacity, count)`: `*count` always receives the total number
 *    of items, the first `min(capacity, total)` are written, and `items` may be NULL when
 *    `capacity` is zero, so callers query the size first and then fill.
 *  - Enumerations are `int`-sized; their numeric values are part of the ABI and never change.
 *  - The lifetime rule, the one rule for every handle (executors, meshes, models, and any handle
 *    added later): a handle is valid from its successful creation until it is passed to its free
 *    function; afterwards passing it anywhere, free included, is undefined behaviour, as with
 *    free(3); freeing NULL is a no-op. Other regions refer to this rule rather than restate it.
 *  - Statuses are marked `UFORM_NODISCARD` (`warn_unused_result` on GCC and Clang): a status that is
 *    ignored is a compile-time warning. Define `UFORM_NODISCARD` empty before including this header
 *    to opt out.
 *
 *  Thread safety, the one contract for every function:
 *
 *  - Free functions without a handle (versions, statuses, discovery, `uform_default_threads`,
 *    `uform_gpu_devices`, ...) may be called from any thread at any time, concurrently.
 *    `uform_error_message` is per thread: it describes the last failure on the calling thread only.
 *  - One executor: `uform_executor_call` and `uform_executor_scratch_release` take it one call at
 *    a time; a second thread entering while one is inside gets CONTENDED at once (never a wait).
 *    Use one executor per submitting thread. `uform_executor_drain`, `uform_executor_describe`,
 *    `uform_executor_thread_placement`, `uform_executor_scratch_bytes` and waits on its outcomes
 *    may run concurrently with a call and with each other. `uform_executor_free` must not overlap
 *    any other use of the same executor (the lifetime rule).
 *  - One outcome: polled or waited on by any number of threads at once; handed to one call at a time.
 *  - A mesh's collectives are calls on its executor, so they follow the executor's rule; a model is
 *    immutable once open, so any number of threads and executors may use it at once. Describing
 *    either may run concurrently with anything; freeing either must not overlap any other use.
 *  - From callbacks (a task, a device callback): any function may be called except a call, drain,
 *    scratch release or free on the executor running the callback (CONTENDED, never a deadlock;
 *    free is undefined; a RAM or pool executor answers a scratch release UNSUPPORTED anywhere, as it
 *    holds no device memory), and, inside a pool task, anything that waits for that pool (CONTENDED).
 *    Other executors may be called from a callback.
 *  - After `fork()`: the engine's process-wide locks are taken around the fork, so the child may
 *    create new executors and free inherited handles; every other use of an inherited executor or
 *    mesh (the verbs and `uform_mesh_bootstrap` on one included), and waiting on an outcome pending
 *    at the fork, reports FORKED. A model holds no threads: an inherited one stays usable, with
 *    executors made in the child. VRAM executors and meshes cannot be created in a child forked
 *    after the CUDA driver was initialised (UNSUPPORTED).
 */
#ifndef UFORM_H
#define UFORM_H

#include <stddef.h> // `size_t`
#include <stdint.h> // `int32_t`, `uint64_t`

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Marks a status that must not be ignored; define it empty before the include to opt out. */
#ifndef UFORM_NODISCARD
#if defined(__GNUC__) || defined(__clang__)
#define UFORM_NODISCARD __attribute__((warn_unused_result))
#else
#define UFORM_NODISCARD
#endif
#endif

#if defined(_WIN32)
#define UFORM_API
#else
#define UFORM_API __attribute__((visibility("default")))
#endif

/* ---- Version ---- */

/** @brief The engine's version as numbers; `uform_version` returns the same as a string. */
#define UFORM_VERSION_MAJOR 0
#define UFORM_VERSION_MINOR 1
#define UFORM_VERSION_PATCH 0

/**
 *  @brief The version of the loaded library, "MAJOR.MINOR.PATCH", which may differ from the
 *  macros above when a program runs against another build than it compiled with.
 */
UFORM_API char const *uform_version(void);


/* ---- Statuses ---- */

/**
 *  @brief What a call ended with. Zero is success; every other value has a message, read with
 *  `uform_error_message` on the failing thread, or in `uform_outcome_t::message` for deferred calls.
 *
 *  @code{.c}
 *  uform_status_t status = uform_executor_drain(executor, uform_mood_parked_k);
 *  if (status != uform_status_ok_k)
 *      fprintf(stderr, "%s: %s\n", uform_status_name(status), uform_error_message());
 *  @endcode
 */
typedef enum uform_status_t {
    /** The call did what it was asked. */
    uform_status_ok_k = 0,
    /** Another call held the executor; this one returned at once, having done nothing. Retry, or
     *  give each overlapping thread an executor of its own. Also returned to a callback that calls
     *  into the executor running it, which would otherwise deadlock. */
    uform_status_contended_k = 1,
    /** The request is valid but cannot be served here: no GPU driver or device, no ForkUnion in
     *  the process, no NCCL, a CPU or GPU class above the hardware, borrowed streams, a part of
     *  the ABI this build lacks. The message says which. */
    uform_status_unsupported_k = 2,
    /** Parts that must agree do not: peers of a mesh, or pinned classes of its GPUs. The message
     *  names the field and the processes. */
    uform_status_config_mismatch_k = 3,
    /** An argument is malformed: NULL where a pointer is required, a count out of range, an
     *  unknown NUMA node or device ordinal, a duplicate, an enum value outside its range. */
    uform_status_invalid_argument_k = 4,
    /** Host or device memory ran out. */
    uform_status_out_of_memory_k = 5,
    /** The operating system refused: a thread could not be spawned or pinned, a file could not
     *  be written, a directory could not be read. The message carries `strerror`. */
    uform_status_system_error_k = 6,
    /** A wait for a peer, a device or NCCL outlasted its timeout; the message names who. */
    uform_status_timeout_k = 7,
    /** A device faulted (a trapping kernel, an illegal address). The executor that drove it is
     *  poisoned: every later call on it returns this status, at once; free it. The fault also breaks
     *  the device's primary context for the whole process, so other executors on that device fail
     *  the same way. Host executors keep working. Some drivers go further (seen on H200s with driver
     *  580: a trapping kernel made the process's other GPU and any new context fail too); the
     *  engine then answers DEVICE_FAULT there as well, never garbage or a hang, and the cure is a
     *  new process. */
    uform_status_device_fault_k = 8,
    /** A deferred call found `deferred_limit` deferred calls already tracked; nothing was queued.
     *  Wait for an outcome or drain, then submit again. */
    uform_status_deferred_full_k = 9,
    /** The executor or mesh was created by the parent of this process, before a `fork()`. Its
     *  threads and device contexts did not survive the fork; only `*_free` may be called. Also the
     *  status of an outcome that was pending at the fork, in the child. */
    uform_status_forked_k = 10,
    /** A call naming a residency (RAM or VRAM) met an executor of the other kind. */
    uform_status_residency_mismatch_k = 11,
    /** A bound was passed: a call asked for more device scratch than the executor's
     *  `scratch_limit` allows (the executor stays usable), or an image's header promises more
     *  pixels than a decoder takes (a decompression bomb), or resizing it would pass the largest
     *  side. The message names the bound and the item. */
    uform_status_limit_exceeded_k = 12,
    /** A peer of a mesh died or aborted during a collective; the communicators were aborted. */
    uform_status_peer_lost_k = 13,
    /** Untrusted bytes are malformed: a model file (a truncated or inconsistent safetensors, a
     *  config or tokenizer that is not what its layout requires), an image that does not decode,
     *  or a file in a mesh directory that is garbage, truncated, oversized, a symlink, of another
     *  format version, or claims an index another process claims. The message names the file, or
     *  the item. */
    uform_status_corrupt_file_k = 14,
    /** An outcome that has not finished yet; returned only by `uform_outcome_poll` and
     *  `uform_outcome_wait`, never stored as a finished outcome's status. */
    uform_status_pending_k = 15,
} uform_status_t;

/** @brief The status's constant name without prefix or suffix, as "contended"; "invalid" when out
 *  of range. Never NULL; the string is static. */
UFORM_API char const *uform_status_name(uform_status_t status);

/**
 *  @brief The message of the latest call on this thread that returned a status other than OK, or
 *  "" if none did. Valid until the next failing call on this thread; copy it to keep it.
 */
UFORM_API char const *uform_error_message(void);


/* ---- CPU Classes ---- */

/**
 *  @brief The CPU family dispatch picks, or a placement pins. Each class stands for an exact set
 *  of instruction-set features (`uform_cpu_class_features`), which the CPU must report AND the OS
 *  must enable (XCR0 for AVX, AVX-512 and AMX state on x86; hwcaps on Arm).
 *
 *  Classes are tiers, not vendors: an Intel CPU with every Genoa feature detects as AMD_GENOA or
 *  above. Detection picks the highest-numbered class of the running architecture whose features
 *  are all present. Pinning a class whose features are a subset of the CPU's is allowed and changes
 *  dispatch; pinning one with a missing feature fails with UNSUPPORTED naming the features.
 *
 *  | class              | x86 features it requires (cumulative where noted)                          |
 *  | ------------------ | -------------------------------------------------------------------------- |
 *  | SERIAL             | none: the portable floor, on every architecture                             |
 *  | INTEL_HASWELL      | AVX, AVX2, FMA, F16C, BMI1, BMI2                                            |
 *  | INTEL_SIERRA       | HASWELL + AVX-VNNI                                                          |
 *  | INTEL_SKYLAKE      | HASWELL + AVX-512 F, CD, BW, DQ, VL                                         |
 *  | INTEL_ICELAKE      | SKYLAKE + AVX-512 VNNI, VPOPCNTDQ, VBMI, VBMI2, BITALG, IFMA                |
 *  | AMD_GENOA          | ICELAKE + AVX-512 BF16                                                      |
 *  | INTEL_SAPPHIRE     | GENOA + AVX-512 FP16, AMX-TILE, AMX-BF16, AMX-INT8                          |
 *  | INTEL_GRANITE      | SAPPHIRE + AMX-FP16                                                         |
 *  | INTEL_DIAMOND      | GRANITE + AVX10.2 (CPUID leaf 0x24 version 2 or above)                      |
 *
 *  | class              | Arm features it requires                                                   |
 *  | ------------------ | -------------------------------------------------------------------------- |
 *  | AWS_G2             | NEON (ASIMD)                                                               |
 *  | APPLE_M2           | G2 + DOTPROD, BF16, FHM (fp16 fused multiply-add), I8MM                    |
 *  | APPLE_M4           | M2 + SME                                                                   |
 *  | AWS_G5             | M2 + SVE, SVE2                                                             |
 *  | NVIDIA_VERA        | G5 + FP8DOT (FEAT_FP8DOT2 and FP8DOT4)                                     |
 *
 *  ALIBABA_C930 requires RISC-V RVV 1.0 (RVA23 vectors); the WASM classes and MONOVERSIONED are
 *  never detected by this native multiversioned build and pinning them fails with UNSUPPORTED.
 */
typedef enum uform_cpu_class_t {
    uform_cpu_class_unknown_k = 0,          /**< Derives the CPU's own class. */
    uform_cpu_class_serial_k = 1,           /**< The portable floor: no SIMD assumptions. */
    uform_cpu_class_intel_haswell_k = 2,    /**< Haswell-class x86: AVX2 and FMA. */
    uform_cpu_class_intel_sierra_k = 3,     /**< Sierra Forest-class x86: AVX-VNNI without AVX-512. */
    uform_cpu_class_intel_skylake_k = 4,    /**< Skylake-class x86: the AVX-512 foundation tier. */
    uform_cpu_class_intel_icelake_k = 5,    /**< Icelake-class x86: AVX-512 VNNI and VPOPCNT. */
    uform_cpu_class_amd_genoa_k = 6,        /**< Genoa-class x86: native bf16 dot products over AVX-512. */
    uform_cpu_class_intel_sapphire_k = 7,   /**< Sapphire Rapids-class x86: AVX-512 FP16, AMX-BF16, AMX-INT8. */
    uform_cpu_class_intel_granite_k = 8,    /**< Granite Rapids-class x86: Sapphire plus AMX-FP16. */
    uform_cpu_class_intel_diamond_k = 9,    /**< Diamond Rapids-class x86: Granite plus AVX10.2 FP8 conversions. */
    uform_cpu_class_aws_g2_k = 10,          /**< Graviton2-class Arm, the bare NEON floor. */
    uform_cpu_class_apple_m2_k = 11,        /**< Armv8.6+ NEON: dot products, bf16 and f16 fused multiplies. */
    uform_cpu_class_apple_m4_k = 12,        /**< Apple M4-class Arm: M2 plus SME outer-product tiles. */
    uform_cpu_class_aws_g5_k = 13,          /**< Graviton5-class Arm, Neoverse V3. */
    uform_cpu_class_nvidia_vera_k = 14,     /**< Vera-class Arm with FP8 dot products. */
    uform_cpu_class_alibaba_c930_k = 15,    /**< Alibaba C930-class RISC-V with RVA23 vectors. */
    uform_cpu_class_wasm32_v128_k = 16,     /**< WebAssembly: 32-bit, single-threaded, simd128. */
    uform_cpu_class_wasm64_extended_k = 17, /**< WebAssembly with relaxed SIMD, shared memory, 64-bit. */
    uform_cpu_class_monoversioned_k = 18,   /**< The one class of a monoversioned build. */
} uform_cpu_class_t;

/** @brief One bit per instruction-set feature a class can require; combined in a `uint64_t`. */
typedef enum uform_cpu_feature_t {
    uform_cpu_feature_avx_k = 1ull << 0,
    uform_cpu_feature_avx2_k = 1ull << 1,
    uform_cpu_feature_fma_k = 1ull << 2,
    uform_cpu_feature_f16c_k = 1ull << 3,
    uform_cpu_feature_bmi1_k = 1ull << 4,
    uform_cpu_feature_bmi2_k = 1ull << 5,
    uform_cpu_feature_avxvnni_k = 1ull << 6,
    uform_cpu_feature_avx512f_k = 1ull << 7,
    uform_cpu_feature_avx512cd_k = 1ull << 8,
    uform_cpu_feature_avx512bw_k = 1ull << 9,
    uform_cpu_feature_avx512dq_k = 1ull << 10,
    uform_cpu_feature_avx512vl_k = 1ull << 11,
    uform_cpu_feature_avx512vnni_k = 1ull << 12,
    uform_cpu_feature_avx512vpopcntdq_k = 1ull << 13,
    uform_cpu_feature_avx512vbmi_k = 1ull << 14,
    uform_cpu_feature_avx512vbmi2_k = 1ull << 15,
    uform_cpu_feature_avx512bitalg_k = 1ull << 16,
    uform_cpu_feature_avx512ifma_k = 1ull << 17,
    uform_cpu_feature_avx512bf16_k = 1ull << 18,
    uform_cpu_feature_avx512fp16_k = 1ull << 19,
    uform_cpu_feature_amxtile_k = 1ull << 20,
    uform_cpu_feature_amxbf16_k = 1ull << 21,
    uform_cpu_feature_amxint8_k = 1ull << 22,
    uform_cpu_feature_amxfp16_k = 1ull << 23,
    uform_cpu_feature_avx10_2_k = 1ull << 24,
    uform_cpu_feature_neon_k = 1ull << 32,
    uform_cpu_feature_dotprod_k = 1ull << 33,
    uform_cpu_feature_bf16_k = 1ull << 34,
    uform_cpu_feature_fhm_k = 1ull << 35,
    uform_cpu_feature_i8mm_k = 1ull << 36,
    uform_cpu_feature_sve_k = 1ull << 37,
    uform_cpu_feature_sve2_k = 1ull << 38,
    uform_cpu_feature_sme_k = 1ull << 39,
    uform_cpu_feature_fp8dot_k = 1ull << 40,
    uform_cpu_feature_rvv_k = 1ull << 48,
} uform_cpu_feature_t;

/**
 *  @brief Detects the running CPU: its class and every feature bit it and the OS enable.
 *  @param[out] cpu_class Receives the detected class; may be NULL.
 *  @param[out] features Receives the `uform_cpu_feature_t` bits present; may be NULL.
 *  @return OK; detection itself cannot fail, it falls back to SERIAL.
 *
 *  @code{.c}
 *  uform_cpu_class_t cpu_class; uint64_t features;
 *  uform_cpu_detect(&cpu_class, &features);
 *  printf("%s\n", uform_cpu_class_name(cpu_class)); // "intel_sapphire" on a Sapphire Rapids host
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_cpu_detect(uform_cpu_class_t *cpu_class, uint64_t *features);

/** @brief The feature bits a class requires (see the tables above); 0 for SERIAL, UNKNOWN, the
 *  WASM classes and MONOVERSIONED (which no native CPU runs) and classes out of range. */
UFORM_API uint64_t uform_cpu_class_features(uform_cpu_class_t cpu_class);

/** @brief Lower-case class name as the enum spells it ("amd_genoa"); "invalid" out of range. */
UFORM_API char const *uform_cpu_class_name(uform_cpu_class_t cpu_class);

/** @brief Lower-case name of one feature bit ("avx512bf16"); "invalid" for zero or several bits. */
UFORM_API char const *uform_cpu_feature_name(uint64_t feature);


/* ---- Memory Domains ---- */

/** @brief One NUMA node this process may allocate on, with the cores it may run on there. */
typedef struct uform_memory_domain_t {
    int32_t node;          /**< The NUMA node ID, as the kernel numbers it. */
    uint32_t cores_count;  /**< Cores of this node in the process's affinity and cpuset. */
    uint64_t memory_bytes; /**< Memory the node carries, in bytes. */
} uform_memory_domain_t;

/**
 *  @brief Lists the NUMA nodes the process may allocate on (its cpuset's `mems`) that carry at
 *  least one core the process may run on (its affinity mask), in ascending node order.
 *
 *  @code{.c}
 *  size_t count = 0;
 *  uform_memory_domains(NULL, 0, &count);
 *  uform_memory_domain_t *domains = calloc(count, sizeof *domains);
 *  uform_memory_domains(domains, count, &count);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_memory_domains(uform_memory_domain_t *domains, size_t capacity,
                                                              size_t *count);

/** @brief Lists the cores (logical CPU IDs) of `node` this process may run on, ascending. Fails
 *  with INVALID_ARGUMENT for a node that does not exist or that the process may not allocate on. A
 *  memory-only node (or one none of whose cores the process may run on) is OK with zero cores. */
UFORM_API UFORM_NODISCARD uform_status_t uform_memory_domain_cores(int32_t node, int32_t *cores, size_t capacity,
                                                                   size_t *count);


/* ---- GPU Classes and Devices ---- */

/** @brief A GPU's UForm ordinal: its position in `uform_gpu_devices`, from 0. The one type every
 *  function and struct uses for it; negative values are never valid ordinals. */
typedef int32_t uform_gpu_ordinal_t;

/**
 *  @brief The GPU family dispatch picks, or a placement pins.
 *
 *  NVIDIA devices map from their compute capability (major.minor):
 *  below 8.9 -> AMPERE (every GPU without a class of its own); 8.9 -> ADA; 9.x -> HOPPER;
 *  10.x and 11.x -> BLACKWELL; 12.x -> BLACKWELLRTX; 13.x and above -> RUBIN.
 *  A device runs its own class and every class it descends from: AMPERE < ADA < HOPPER <
 *  BLACKWELL < RUBIN, and AMPERE < ADA < BLACKWELLRTX. Pinning a class the device cannot run fails
 *  with UNSUPPORTED; pinning one it can run is recorded and changes dispatch.
 */
typedef enum uform_gpu_class_t {
    uform_gpu_class_unknown_k = 0,             /**< Derives the devices' own class. */
    uform_gpu_class_nvidia_ampere_k = 1,       /**< Ampere-class NVIDIA and every GPU without a class of its own. */
    uform_gpu_class_nvidia_ada_k = 2,          /**< Ada-class NVIDIA: the fp8 conversions. */
    uform_gpu_class_nvidia_hopper_k = 3,       /**< Hopper-class NVIDIA. */
    uform_gpu_class_nvidia_blackwell_k = 4,    /**< Blackwell-class NVIDIA datacenter parts. */
    uform_gpu_class_nvidia_blackwellrtx_k = 5, /**< Consumer Blackwell NVIDIA. */
    uform_gpu_class_nvidia_rubin_k = 6,        /**< Rubin-class NVIDIA. */
    uform_gpu_class_amd_cdna3_k = 7,           /**< CDNA3 AMD: gfx942, FNUZ fp8. */
    uform_gpu_class_amd_cdna4_k = 8,           /**< CDNA4 AMD: gfx950, OCP fp8. */
    uform_gpu_class_amd_cdna5_k = 9,           /**< CDNA5 AMD: gfx1250. */
    uform_gpu_class_apple_metal7_k = 10,       /**< Apple7-family GPUs and every Apple GPU without a class of its own. */
    uform_gpu_class_apple_metal9_k = 11,       /**< Apple9-family GPUs. */
    uform_gpu_class_apple_metal10_k = 12,      /**< Apple10-family GPUs. */
} uform_gpu_class_t;

/** @brief The GPU vendors one binary drives. This Linux build drives NVIDIA only; AMD and APPLE
 *  are values the listing never returns here. */
typedef enum uform_gpu_vendor_t {
    uform_gpu_vendor_unknown_k = 0, /**< No vendor named. */
    uform_gpu_vendor_nvidia_k = 1,  /**< NVIDIA, through the CUDA driver loaded at run time. */
    uform_gpu_vendor_amd_k = 2,     /**< AMD, through the HIP runtime. */
    uform_gpu_vendor_apple_k = 3,   /**< Apple, through Metal. */
} uform_gpu_vendor_t;

/** @brief One GPU as UForm numbers it: its position in `uform_gpu_devices` is its UForm ordinal,
 *  the number every VRAM placement names it by. */
typedef struct uform_gpu_device_t {
    uform_gpu_vendor_t vendor;   /**< The vendor whose runtime drives the device. */
    uform_gpu_ordinal_t vendor_ordinal; /**< The device's ordinal in its vendor's runtime. */
    uform_gpu_class_t gpu_class; /**< The class whose kernels run on it. */
    uint32_t compute_units;      /**< Streaming multiprocessors or compute units. */
    uint64_t memory_bytes;       /**< Device memory in bytes. */
} uform_gpu_device_t;

/**
 *  @brief Lists every GPU the engine can drive, in the driver's order (after CUDA_VISIBLE_DEVICES
 *  and CUDA_DEVICE_ORDER), so an NVIDIA device's UForm ordinal equals its `vendor_ordinal`. Without
 *  a driver or a device, `*count` is zero and the status OK: no GPU is not an error here
 *  (`uform_gpu_status` says why there are none).
 *
 *  @code{.c}
 *  uform_gpu_device_t devices[16]; size_t count = 0;
 *  uform_gpu_devices(devices, 16, &count);
 *  for (size_t i = 0; i < count && i < 16; ++i) {
 *      char name[256];
 *      uform_gpu_device_name(i, name, sizeof name);
 *      printf("%zu: %s, %u SMs\n", i, name, devices[i].compute_units);
 *  }
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_gpu_devices(uform_gpu_device_t *devices, size_t capacity, size_t *count);

/** @brief The vendor's own name for the device at UForm `ordinal`, NUL-terminated and truncated to
 *  `capacity`. INVALID_ARGUMENT for an ordinal out of range, or a NULL or zero-capacity buffer. */
UFORM_API UFORM_NODISCARD uform_status_t uform_gpu_device_name(uform_gpu_ordinal_t ordinal, char *name,
                                                                               size_t capacity);

/** @brief OK when at least one GPU can be driven; otherwise UNSUPPORTED with the reason in
 *  `uform_error_message`: built without GPU kernels, no driver library, the driver lacks a function
 *  the engine needs, driver initialisation failed (with the driver's error), or no device. */
UFORM_API UFORM_NODISCARD uform_status_t uform_gpu_status(void);

/** @brief Lower-case class name ("nvidia_hopper"); "invalid" out of range. */
UFORM_API char const *uform_gpu_class_name(uform_gpu_class_t gpu_class);

/** @brief Lower-case vendor name ("nvidia"); "invalid" out of range. */
UFORM_API char const *uform_gpu_vendor_name(uform_gpu_vendor_t vendor);


/* ---- Options ---- */

/**
 *  @brief The host memory domains a RAM-resident model and executor place their bytes in, one NUMA
 *  node each. All-zero (or a NULL pointer) derives every node the process may allocate on and the
 *  CPU's own class. Copied by every function that takes it, never borrowed past the call.
 *
 *  A pinned `cpu_class` picks the engine's own kernels (attention, LayerNorm, GELU, pooling) and the
 *  matrix-product path of that class (bf16 natively or widened, oneDNN's packed GEMM, brgemm or the
 *  matmul primitive). Inside oneDNN's kernels the instruction set is chosen once per process, not
 *  per executor: to bound those too, set `ONEDNN_MAX_CPU_ISA` (or `DNNL_MAX_CPU_ISA`, e.g. `AVX2`) in
 *  the environment before the first model is opened, as the benchmarks' `--cpu-class` does. Image
 *  resizing picks its instructions by the CPU alone: its pixels are PIL's on every path.
 *
 *  @code{.c}
 *  int32_t const nodes[] = {0};
 *  uform_ram_options_t ram = {.memory_domains = nodes, .memory_domains_count = 1,
 *                             .cpu_class = uform_cpu_class_intel_haswell_k}; // pin a lower class
 *  @endcode
 */
typedef struct uform_ram_options_t {
    int32_t const *memory_domains; /**< NUMA node IDs; NULL with a zero count derives every node the process
                                        may allocate on; NULL with a nonzero count is INVALID_ARGUMENT. */
    size_t memory_domains_count;   /**< Entries in `memory_domains`; zero derives, whatever the pointer. */
    uform_cpu_class_t cpu_class;   /**< The class to dispatch as; UNKNOWN derives the CPU's own. */
} uform_ram_options_t;

/**
 *  @brief The devices a VRAM-resident model, trainer and executor place their bytes in. All-zero
 *  derives one free device: among the listed devices, those on which no process holds a context
 *  (by NVML's count of compute processes, this process included) are preferred; among those, the
 *  one with the most free memory, then the lowest ordinal. Without NVML (`libnvidia-ml.so.1`, loaded
 *  at run time) it is ordinal 0. Deriving creates no context on any device. Copied, never borrowed
 *  past the call.
 */
typedef struct uform_vram_options_t {
    uform_gpu_ordinal_t const *devices; /**< UForm ordinals (positions in `uform_gpu_devices`); NULL derives one free device. */
    size_t devices_count;        /**< Entries in `devices`; zero derives. */
    uform_gpu_class_t gpu_class; /**< The class every named device dispatches as; UNKNOWN derives the devices' own. */
} uform_vram_options_t;


/* ---- Executors ---- */

/** @brief An executor: threads or streams that run calls. NULL is the inline executor. */
typedef struct uform_executor_s *uform_executor_t;

/** @brief How idle workers wait for the next call. */
typedef enum uform_mood_t {
    /** Sleep in the kernel (futex) after a short spin, so back-to-back calls stay fast and idle
     *  executors burn no CPU; waking a parked worker costs a system call. The spin starts at about
     *  a thousand `pause`s (tens of microseconds) and adapts per thread: a sleep that the next call
     *  cut short (under a millisecond) makes the next spin four times longer, up to 32 times the
     *  first (about a millisecond, yielding the core now and then), and a sleep of 50 ms or more
     *  restores it. So calls that follow each other closely are served by spinning threads, and an
     *  executor left idle spins at most that long before it sleeps. Every executor starts PARKED. */
    uform_mood_parked_k = 0,
    /** Busy-wait with `pause`-class hints: the lowest wake-up latency, a core burnt per worker. */
    uform_mood_spinning_k = 1,
} uform_mood_t;

/** @brief The kind an executor was constructed as. */
typedef enum uform_executor_kind_t {
    uform_executor_kind_inline_k = 0, /**< The NULL executor. */
    uform_executor_kind_ram_k = 1,    /**< `uform_executor_for_ram`. */
    uform_executor_kind_pool_k = 2,   /**< `uform_executor_on_pool`. */
    uform_executor_kind_vram_k = 3,   /**< `uform_executor_for_vram`. */
} uform_executor_kind_t;

/** @brief The default of `deferred_limit` when zero is passed. */
#define UFORM_DEFERRED_LIMIT_DEFAULT 1024

/**
 *  @brief Spawns host threads for RAM-resident models, pinned one per core of the chosen domains.
 *  @param[in] ram The memory domains and CPU class; NULL derives all of them.
 *  @param[in] threads Threads to run calls on, the calling thread of a blocking call included;
 *             zero takes 7/8 of the cores those domains carry, rounded down, at least one.
 *  @param[in] deferred_limit Deferred calls tracked at once; zero takes UFORM_DEFERRED_LIMIT_DEFAULT,
 *             at most 2^20 (INVALID_ARGUMENT above; the same for every executor kind).
 *  @param[out] executor Receives the executor; untouched on failure.
 *
 *  Thread 0 of every call is the calling thread for a blocking call (it is never re-pinned) and an
 *  internal leader thread, pinned to the first chosen core, for a deferred one; threads 1 and up
 *  are spawned workers, pinned one per core in domain order, each with its state allocated on its
 *  own node. Threads spread over the domains in proportion to their cores, each domain's threads
 *  contiguous; a share that does not divide evenly rounds to nearest, halves to the earlier domain
 *  (one thread over two nodes of equal cores runs on the first). Fails with INVALID_ARGUMENT for an unknown or disallowed node, a duplicate node, or
 *  `threads` above the allowed cores of the domains (the engine never oversubscribes); with
 *  UNSUPPORTED for a class above the CPU; with SYSTEM_ERROR if the OS refuses a thread or a pin.
 *
 *  @code{.c}
 *  int32_t const nodes[] = {0};
 *  uform_ram_options_t ram = {.memory_domains = nodes, .memory_domains_count = 1};
 *  uform_executor_t executor;
 *  uform_status_t status = uform_executor_for_ram(&ram, 0, 0, &executor); // 7/8 of node 0's cores
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_for_ram(uform_ram_options_t const *ram, size_t threads,
                                                                size_t deferred_limit, uform_executor_t *executor);

/**
 *  @brief Schedules onto a borrowed ForkUnion pool, so libraries in one process share threads.
 *  @param[in] fu_pool A live ForkUnion `fu_pool_t *`, which must outlive the executor.
 *  @param[in] ram The memory domains and CPU class of the models it drives; NULL derives.
 *  @param[in] deferred_limit As for `uform_executor_for_ram`.
 *  @param[out] executor Receives the executor.
 *
 *  ForkUnion's C ABI (`fu_pool_count_threads`, `fu_pool_for_threads`, `fu_pool_for_n`,
 *  `fu_pool_for_n_dynamic`) is found in the process at run time with `dlsym`; the engine never
 *  links nor ships ForkUnion. Without it: UNSUPPORTED. A NULL pool: INVALID_ARGUMENT. Deferred
 *  calls are handed to the pool by one parked leader thread the executor owns.
 *
 *  ForkUnion runs thread 0 of a round on the thread that submits it: the calling thread for a
 *  blocking call, and for a deferred call the executor's leader, an unpinned thread of the
 *  engine's that is not one of the pool's. Every executor over one pool takes the pool in turn
 *  with the others and with its owner (`uform_pool_lock`): a round waits while another has the
 *  pool. A blocking call or a drain from a thread that holds the pool or runs one of its tasks
 *  (directly, or through a RAM executor's call made there) returns CONTENDED instead of waiting on
 *  itself; a deferred call from there is queued and runs once the pool is free.
 *
 *  @code{.c}
 *  fu_pool_t *pool = fu_pool_new("shared");          // the caller's pool, also used by USearch
 *  fu_pool_spawn(pool, 16, fu_caller_inclusive_k);
 *  uform_executor_t executor;
 *  if (uform_executor_on_pool(pool, NULL, 0, &executor) == uform_status_ok_k) {
 *      uform_executor_call(executor, &call, NULL);   // runs on the pool's threads
 *      uform_executor_free(executor);                // before the pool goes
 *  }
 *  fu_pool_delete(pool);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_on_pool(void *fu_pool, uform_ram_options_t const *ram,
                                                                size_t deferred_limit, uform_executor_t *executor);

/**
 *  @brief Takes a borrowed pool in turn with the engine, so its owner may submit to it directly.
 *  @param[in] fu_pool The `fu_pool_t *` the owner lent to `uform_executor_on_pool` (or will lend).
 *
 *  ForkUnion takes one submitter at a time. Every engine executor over one pool takes the pool's
 *  gate around each round it submits (blocking calls on the calling thread, deferred ones on the
 *  executor's leader), so two engine executors over one pool never submit at once: a round waits
 *  for the one before it. `uform_pool_lock` waits for the same gate (parked after a short spin) and
 *  holds it until `uform_pool_unlock` on the same thread; meanwhile every engine round on the pool
 *  waits. The owner's own use of the pool while an engine call runs on it is the owner's to avoid:
 *  take the pool with `uform_pool_lock` (or `uform_pool_try_lock`) before every direct submission.
 *
 *  Returns INVALID_ARGUMENT for NULL; CONTENDED, at once, when the calling thread already holds the
 *  pool or runs one of its tasks (waiting would wait on itself); OUT_OF_MEMORY. While holding the
 *  pool, do not wait for the engine's calls on it (drain, `uform_outcome_wait` without a timeout,
 *  a blocking call on another thread you wait for, free): they wait for you. Calls and drains on
 *  the pool's executors from the holding thread return CONTENDED. The pool must outlive the hold.
 *
 *  @code{.c}
 *  if (uform_pool_lock(pool) == uform_status_ok_k) {  // the engine's rounds on `pool` wait now
 *      fu_pool_for_n(pool, n, index_vectors, usearch_index);
 *      uform_pool_unlock(pool);
 *  }
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_pool_lock(void *fu_pool);

/** @brief `uform_pool_lock` without waiting: CONTENDED at once while an engine round or another
 *  holder has the pool. */
UFORM_API UFORM_NODISCARD uform_status_t uform_pool_try_lock(void *fu_pool);

/** @brief Releases a hold of `uform_pool_lock` or `uform_pool_try_lock`, on the thread that took it
 *  and in reverse order of several holds. INVALID_ARGUMENT when this thread's innermost hold is not
 *  of `fu_pool` (never taken, already released, or called from inside a task). */
UFORM_API UFORM_NODISCARD uform_status_t uform_pool_unlock(void *fu_pool);

/**
 *  @brief Opens one stream per named GPU, all driven by the calling thread, host threads for the
 *  work devices cannot do, and per-device scratch memory.
 *  @param[in] vram The devices and GPU class; NULL derives one free device.
 *  @param[in] ram Where the host threads live; NULL takes the NUMA node nearest each device.
 *  @param[in] streams Borrowed CUDA streams, one per device; anything but NULL is UNSUPPORTED.
 *  @param[in] scratch_limit Ceiling on device bytes the executor holds per device (scratch is the
 *             only device memory it allocates); zero lets scratch grow as calls ask.
 *  @param[in] deferred_limit As for `uform_executor_for_ram`.
 *  @param[out] executor Receives the executor.
 *
 *  Contexts are the devices' primary contexts, retained only on the devices named (no context is
 *  created on any other device), with one non-blocking stream each. Host decoder threads form a RAM
 *  executor of 7/8 of those nodes' cores (`uform_default_threads`), on the NUMA nodes nearest the
 *  devices (every allowed node when unknown), or on `ram`'s nodes when given. They tokenise texts,
 *  and decode images in waves while the devices run the wave before; idle, they park.
 *
 *  Arguments are checked before the driver is looked at, so messages are the same with and without
 *  GPUs: INVALID_ARGUMENT for a negative or repeated ordinal, a class out of range, `deferred_limit`
 *  above 2^20; UNSUPPORTED for non-NULL `streams`. Then UNSUPPORTED without a driver or device (the
 *  message says which), for a class above a device's, or in a child forked after the driver was
 *  initialised; INVALID_ARGUMENT for an ordinal past the machine's GPUs, which only the driver
 *  can count.
 *
 *  @code{.c}
 *  static uform_status_t enqueue(void *context, uform_device_slot_t const *slot) {
 *      return uform_device_launch(slot, uform_kernel_fill_f32_k, slot->scratch, 1024, 1.0);
 *  }
 *  int32_t const gpus[] = {0, 1};
 *  uform_vram_options_t vram = {.devices = gpus, .devices_count = 2};
 *  uform_executor_t executor;
 *  if (uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor) == uform_status_ok_k) {
 *      uform_call_t call = {.residency = uform_residency_vram_k, .device = enqueue,
 *                           .scratch_bytes = 1024 * sizeof(float)};
 *      uform_outcome_t outcome;
 *      uform_executor_call(executor, &call, &outcome);  // returns once both streams have the work
 *      uform_outcome_wait(&outcome, -1);                  // the devices finished it
 *      uform_executor_free(executor);
 *  }
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_for_vram(uform_vram_options_t const *vram,
                                                                 uform_ram_options_t const *ram, void *const *streams,
                                                                 size_t scratch_limit, size_t deferred_limit,
                                                                 uform_executor_t *executor);

/**
 *  @brief The number of threads a RAM executor of `cores` allowed cores runs when asked for zero
 *  threads (`uform_executor_for_ram`): 7/8 of them rounded down, at least one, so the host keeps
 *  room for the user's own threads. Never fails; safe from any thread.
 *
 *  @code{.c}
 *  size_t const threads = uform_default_threads(32); // 28
 *  @endcode
 */
UFORM_API size_t uform_default_threads(size_t cores);

/**
 *  @brief Waits for every call submitted before it, then idle workers adopt `mood`.
 *
 *  Reports only failures of the executor itself (DEVICE_FAULT for a device that faulted, FORKED
 *  in a child), never a drained call's, which reports through its own outcome. Draining from inside
 *  a callback of the same executor returns CONTENDED. Draining the NULL executor is OK.
 *
 *  @code{.c}
 *  uform_executor_drain(executor, uform_mood_spinning_k); // lowest latency for the next calls
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_drain(uform_executor_t executor, uform_mood_t mood);

/**
 *  @brief Drains, stops and joins the threads, releases streams, scratch and contexts, frees.
 *  NULL is a no-op; the lifetime rule at the top applies. In a forked child it releases only host memory, waiting
 *  for nothing. Freeing from inside one of the executor's own callbacks, while another thread is
 *  inside a call on it, or while this thread holds its pool (`uform_pool_lock`) is undefined.
 */
UFORM_API void uform_executor_free(uform_executor_t executor);

/** @brief What an executor is and where it runs. */
typedef struct uform_executor_description_t {
    uform_executor_kind_t kind;  /**< How it was constructed. */
    size_t threads_count;        /**< Threads a host call runs on (host decoders on VRAM executors). */
    size_t domains_count;        /**< NUMA nodes its threads and memory live on. */
    size_t devices_count;        /**< GPUs it drives; zero unless VRAM. */
    uform_cpu_class_t cpu_class; /**< The class host work dispatches as. */
    uform_gpu_class_t gpu_class; /**< The class device work dispatches as; UNKNOWN unless VRAM. */
    uform_mood_t mood;           /**< The mood idle workers are in. */
    size_t deferred_limit;       /**< Deferred calls it tracks at once. */
    size_t scratch_limit;        /**< Bytes per device it may hold; zero for unlimited. */
} uform_executor_description_t;

/** @brief Describes an executor; the NULL executor describes as INLINE with one thread. */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_describe(uform_executor_t executor,
                                                                 uform_executor_description_t *description);

/** @brief Where thread `thread` of a RAM or VRAM executor's host threads is pinned: its core and
 *  NUMA node. Thread 0's core is the leader's. INVALID_ARGUMENT out of range; UNSUPPORTED for the
 *  NULL and pool executors, whose threads are not the engine's; FORKED in a child process, where
 *  the threads do not exist (nothing is written then). */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_thread_placement(uform_executor_t executor, size_t thread,
                                                                         int32_t *core, int32_t *node);


/* ---- Calls and Outcomes ---- */

/** @brief How a call's tasks map onto threads. */
typedef enum uform_schedule_t {
    /** Tasks [0, tasks) split into one contiguous, near-equal range per thread. */
    uform_schedule_static_k = 0,
    /** Threads take tasks one at a time from a shared counter: for uneven tasks. */
    uform_schedule_dynamic_k = 1,
    /** Broadcast: every thread runs the callback once, with `task` equal to `thread`; `tasks` is
     *  ignored. */
    uform_schedule_threads_k = 2,
} uform_schedule_t;

/** @brief Which executors a call may run on; model verbs name their model's residency. */
typedef enum uform_residency_t {
    uform_residency_any_k = 0,  /**< Any executor. */
    uform_residency_ram_k = 1,  /**< NULL, RAM or pool executors; a VRAM one is RESIDENCY_MISMATCH. */
    uform_residency_vram_k = 2, /**< NULL or VRAM executors; a RAM or pool one is RESIDENCY_MISMATCH. */
} uform_residency_t;

/**
 *  @brief A host task. `task` is the task index, `thread` the index of the thread running it in
 *  [0, threads_count), `domain` the index of that thread's memory domain among the executor's
 *  domains (not the NUMA node ID; `uform_executor_thread_placement` maps it).
 */
typedef void (*uform_task_callback_t)(void *context, size_t task, size_t thread, size_t domain);
/*  On pool executors `thread` and `domain` are the pool's own thread index and colocation index. */

/** @brief What a device callback is handed for one device of a VRAM executor. */
typedef struct uform_device_slot_t {
    size_t device_index;         /**< Position among the executor's devices. */
    uform_gpu_ordinal_t ordinal; /**< UForm ordinal of the device. */
    uform_gpu_class_t gpu_class; /**< The class its kernels dispatch as. */
    void *stream;                /**< The executor's `CUstream` on the device. */
    void *cu_context;            /**< The device's `CUcontext`, current on the thread during the callback. */
    uint64_t scratch;            /**< `CUdeviceptr` of at least `scratch_bytes` bytes, valid for the call. */
    size_t scratch_bytes;        /**< The scratch the call asked for. */
} uform_device_slot_t;

/** @brief A device part: enqueues work on `slot->stream` and returns at once. A status other than
 *  OK fails the call (later devices are not visited). */
typedef uform_status_t (*uform_device_callback_t)(void *context, uform_device_slot_t const *slot);

/**
 *  @brief One unit of user work. Copied at submission.
 *
 *  On RAM and pool executors, `task` runs per `schedule`; `device` must be NULL. On VRAM executors
 *  the host part `task` (if set) runs first on the host decoder threads, at submission and blocking
 *  even for a deferred call (it may overlap earlier deferred device work: that overlap is what
 *  decoders are for); then `device` (if set) is invoked once per device in device order on the
 *  submitting thread, with that device's context current, and the call completes when every stream
 *  has run what it enqueued. A device callback returning a failure fails the call at submission,
 *  after the work already queued on earlier devices finished, deferred calls included. On the NULL executor, `task`
 *  runs inline as one thread; `device` is UNSUPPORTED (there is no stream).
 */
typedef struct uform_call_t {
    uform_residency_t residency;    /**< Executors it may run on. */
    uform_schedule_t schedule;      /**< How `tasks` map onto threads. */
    size_t tasks;                   /**< Tasks for STATIC and DYNAMIC; zero runs nothing and is OK. */
    uform_task_callback_t task;     /**< The host part; NULL for none. */
    uform_device_callback_t device; /**< The device part; VRAM executors only. */
    size_t scratch_bytes;           /**< Device scratch each device slot needs. */
    void *context;                  /**< Handed to both callbacks. */
} uform_call_t;

/**
 *  @brief Where a deferred call reports. The caller owns the memory, which must stay valid and
 *  unmoved until the outcome finishes (`uform_outcome_poll` stops returning PENDING), a drain
 *  returns, or the executor is freed. Read it only through the functions below; a finished outcome
 *  may still be polled after its executor was freed, as it no longer refers to it. A deferred
 *  call's slot is free again by the time its outcome reads finished.
 */
typedef struct uform_outcome_t {
    uint32_t finished;     /**< Nonzero once `status` and `message` are final. */
    uform_status_t status; /**< The call's status once finished. */
    uint64_t reserved[4];  /**< The engine's bookkeeping; do not touch. */
    char message[256];     /**< The failure message once finished; "" on OK. */
} uform_outcome_t;

/**
 *  @brief Runs a call on an executor: blocking when `outcome` is NULL, deferred otherwise.
 *
 *  Blocking: returns when the call finished, with its status. Deferred: returns OK once the call is
 *  queued; the call reports through `outcome` later. Calls on one executor start in submission
 *  order, deferred and blocking alike (a blocking call first waits for the deferred calls before it).
 *
 *  Returns without running anything: CONTENDED if another thread is inside a call on this executor
 *  or the caller is one of its callbacks; DEFERRED_FULL past `deferred_limit` tracked deferred
 *  calls; RESIDENCY_MISMATCH for a residency the executor's kind does not serve, or a device
 *  callback on a RAM or pool executor; UNSUPPORTED for a device callback on the NULL executor;
 *  INVALID_ARGUMENT for a NULL call, no callback at all (a call with a device callback alone on a
 *  host executor is the RESIDENCY_MISMATCH above), or an out-of-range enum; FORKED in a child; DEVICE_FAULT on a poisoned
 *  executor; LIMIT_EXCEEDED for scratch above `scratch_limit`. Whenever it returns a status other
 *  than OK, nothing was queued and `outcome` (if any) is already finished with that same status and
 *  message, so an outcome never stays pending after a refused submission.
 *
 *  @code{.c}
 *  uform_outcome_t outcome;
 *  uform_call_t call = {.schedule = uform_schedule_dynamic_k, .tasks = n, .task = work, .context = data};
 *  if (uform_executor_call(executor, &call, &outcome) == uform_status_ok_k) {
 *      do_other_things();
 *      uform_status_t status = uform_outcome_wait(&outcome, -1); // the call's own status
 *  }
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_call(uform_executor_t executor, uform_call_t const *call,
                                                             uform_outcome_t *outcome);

/** @brief The outcome's status if finished, else PENDING; never blocks. INVALID_ARGUMENT for NULL;
 *  FORKED in a child for an outcome pending at the fork. */
UFORM_API UFORM_NODISCARD uform_status_t uform_outcome_poll(uform_outcome_t *outcome);

/**
 *  @brief Waits up to `timeout_seconds` for the outcome, then returns like `uform_outcome_poll`.
 *
 *  Any value is accepted: a negative one (including -INFINITY) waits forever; zero of either sign
 *  polls; a positive one waits that long, however large (1e30 and INFINITY wait forever in effect);
 *  NaN returns INVALID_ARGUMENT at once, waiting for nothing. Host outcomes wait parked on a futex.
 *  VRAM outcomes poll their devices: spinning for 100 microseconds, then sleeping 20-500
 *  microseconds between polls, or spinning throughout when the executor's mood is SPINNING. In a
 *  child process, an outcome that was pending at the `fork()` finishes with FORKED (its call runs
 *  in the parent only), so even a wait without a timeout returns at once. A wait (any non-zero
 *  timeout) on a pool executor's pending call from a thread that holds its ForkUnion pool
 *  (`uform_pool_lock`) or runs one of the pool's tasks returns CONTENDED at once: the call cannot run
 *  until that thread lets the pool go. Likewise a wait from inside a callback of a RAM or pool
 *  executor on one of that executor's own pending calls (the running call's, or one queued behind
 *  it): CONTENDED at once, since the executor finishes them only after the callback returns. The
 *  outcome stays pending and must stay valid until it finishes; wait for it after leaving the pool
 *  or the callback.
 *
 *  @code{.c}
 *  uform_status_t status = uform_outcome_wait(&outcome, 0.5);  // PENDING after half a second
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_outcome_wait(uform_outcome_t *outcome, double timeout_seconds);


/* ---- Device Calls ---- */

/**
 *  @brief Bytes of scratch a VRAM executor holds on its device `device_index`: the largest call's
 *  `scratch_bytes` so far rounded up to 256, or 0 before the first call asking for scratch and after
 *  a release. INVALID_ARGUMENT out of range; FORKED in a child for any inherited executor;
 *  UNSUPPORTED on other executors.
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_scratch_bytes(uform_executor_t executor, size_t device_index,
                                                                      size_t *bytes);

/** @brief Waits for the executor's calls, then frees its scratch on every device; the executor stays
 *  usable and grows scratch again on demand. CONTENDED while another call holds it; DEVICE_FAULT on a
 *  poisoned executor; FORKED in a child (any inherited executor); UNSUPPORTED on non-VRAM executors. */
UFORM_API UFORM_NODISCARD uform_status_t uform_executor_scratch_release(uform_executor_t executor);

/* ---- Meshes ---- */

/** @brief How a mesh's NVLink domains reduce. */
typedef enum uform_multimem_tier_t {
    /** The NVLink switch reduces through multicast memory. Reported only when every GPU of a
     *  multimem domain reports multicast support and the user opted in with the environment
     *  variable `UFORM_ALLOW_MULTICAST=1`; the engine never creates multicast objects itself. */
    uform_multimem_tier_switch_reduced_k = 0,
    /** Every member reads its peers in a fixed order, where multicast is absent or not opted in. */
    uform_multimem_tier_peer_read_k = 1,
} uform_multimem_tier_t;

/** @brief One process's place among the processes of a run. */
typedef struct uform_mesh_s *uform_mesh_t;

/** @brief The most processes one mesh joins (`host_domain_count`); above it bootstrap is
 *  INVALID_ARGUMENT at once. Each peer costs a joining process about 120 bytes. */
#define UFORM_MESH_PROCESSES_MAX 65536

/** @brief The most GPUs one process of a mesh drives; a peer's file claiming more (or none) is
 *  CORRUPT_FILE, so a mesh never asks NCCL for more than 2^26 ranks. */
#define UFORM_MESH_GPUS_PER_PROCESS_MAX 1024

/**
 *  @brief Where this process sits among the processes training one model, and how they meet.
 *  All-zero is a run with no peers.
 */
typedef struct uform_mesh_options_t {
    size_t host_domain_index;        /**< This process's index among `host_domain_count`. */
    size_t host_domain_count;        /**< Processes in the run; zero or one: no peers; at most
                                          UFORM_MESH_PROCESSES_MAX. */
    size_t gpus_per_multimem_domain; /**< GPUs one NVLink domain spans as the hardware is built (it may
                                          hold GPUs outside the run, so it is reported as given, not
                                          checked against the run's count; every process must give the
                                          same); zero derives the run's GPUs per host, equal on every host. */
    char const *directory;           /**< Directory every process sees; required with peers. A
                                          symbolic link in it is followed only when the effective
                                          user or root owns it. */
    char const *job;                 /**< The run's unique name inside `directory`; required with peers:
                                          1 to 128 of [A-Za-z0-9._-], not "." or "..". */
    double timeout_seconds;          /**< Longest wait for any peer; zero derives 120. */
} uform_mesh_options_t;

/** @brief What a mesh reports about itself; zeroed by a failed `uform_mesh_describe`. */
typedef struct uform_mesh_description_t {
    size_t gpus_per_host_domain;          /**< GPUs this process drives. */
    size_t gpus_per_multimem_domain;      /**< GPUs one NVLink domain spans: the options' value, or the
                                               run's GPUs per host where that was zero. */
    size_t gpus_per_colocated_domain;     /**< GPUs in the whole run. */
    size_t host_domain_index;             /**< This process's index among the run's processes. */
    size_t first_gpu_index;               /**< GPUs of lower-indexed processes: where this process's share begins. */
    uform_multimem_tier_t multimem_tier;  /**< How its NVLink domains reduce. */
    uform_gpu_class_t gpu_class;          /**< The class every GPU of the run dispatches as: bootstrap
                                               refuses processes that dispatch as different classes. */
} uform_mesh_description_t;

/**
 *  @brief Joins this process to the run's mesh, waiting for every peer.
 *  @param[in] executor A VRAM executor whose devices are this process's members; any other kind
 *             is INVALID_ARGUMENT. The executor must outlive the mesh.
 *  @param[in] options Where this process sits; NULL is a run with no peers.
 *  @param[out] mesh Receives the mesh.
 *
 *  With peers, each process writes its facts (format version, run nonce, index, count, GPU count
 *  and class, multimem span, host name, process ID) into `directory/job/` atomically (write, fsync,
 *  rename, mode 0600) and waits for the others. Then NCCL (`libnccl.so.2`, or the path in the
 *  environment variable `UFORM_NCCL_LIBRARY`, loaded at run time; without it UNSUPPORTED) starts one
 *  rank per GPU, its unique ID passed through the same directory. Joining, the ID's exchange and
 *  NCCL's initialisation are each bounded by the timeout (a wait ends within a poll, milliseconds,
 *  of its deadline), so the worst case is three times it; an expired NCCL start is aborted and named
 *  by stage. A run with one GPU in all needs no NCCL. Each process removes its files once NCCL is
 *  up; after a failure its `failed` record stays for the peers, and the next run replaces it.
 *
 *  What fails, and how (every process of the run fails alike, within a poll of learning it):
 *  - Disagreeing peers: CONFIG_MISMATCH naming the field and the processes. The fields: the count,
 *    `gpus_per_multimem_domain`, `UFORM_ALLOW_MULTICAST`, and the GPU class: a mesh runs one class,
 *    so every process's executor must dispatch as the same class (pin one with
 *    `uform_vram_options_t::gpu_class` where their GPUs differ; the message suggests one).
 *  - Absent peers: TIMEOUT naming the indices; a peer on this host that wrote its facts and is gone:
 *    TIMEOUT at once naming its host and PID, unless it published a failure first, which is then
 *    reported instead (with that peer's status, its text quoted: printable, escaped, capped).
 *  - An executor poisoned by a device fault: DEVICE_FAULT with the fault's message (the peers
 *    then fail with it quoted, as below).
 *  - One index claimed by two processes (two live processes, a second `run` file, or a live owner
 *    of an earlier run's file): CORRUPT_FILE on every process, within about a second, naming both.
 *  - The job directory a symbolic link, not owned by the effective user, or writable by group or
 *    others; a file in it that is garbage, truncated, oversized, a link or not a regular file,
 *    another user's, writable by others, or claims more than UFORM_MESH_GPUS_PER_PROCESS_MAX GPUs:
 *    CORRUPT_FILE naming it and what is wrong. Links inside are never followed; another user's files
 *    are never deleted, truncated or replaced. Files of indices at or above the count are never read.
 *
 *  Stale files: process 0 draws a fresh nonce for every run and acknowledges each peer's facts
 *  under it, so files of an earlier run of the same job are never taken for this one's.
 *
 *  The engine sets `NCCL_NVLS_ENABLE=0` before loading NCCL (unless `UFORM_ALLOW_MULTICAST=1`)
 *  and never creates multicast objects. One mesh per executor: a second is INVALID_ARGUMENT. While
 *  a mesh lives, its executor's waits also watch NCCL: a lost peer, or a collective pending past
 *  the timeout, aborts the communicators and fails the wait with PEER_LOST. A wait whose work has
 *  already finished returns at once without looking; the next all-reduce, or a later wait, reports it.
 *
 *  NCCL is started with non-blocking communicators, so that its initialisation is bounded by
 *  `timeout_seconds`; with NCCL 2.18 or later each is then split (`ncclCommSplit`, same ranks, under
 *  the same timeout) into a blocking one that collectives run on, as torch.distributed's do, since
 *  polling a non-blocking communicator costs tens of microseconds per call. An all-reduce kept from
 *  being enqueued by a lost peer is ended by a thread of the mesh, which aborts the communicators
 *  once the call has run past the timeout: the call fails with PEER_LOST. Each mesh of more than one
 *  GPU holds that thread (asleep between calls) until freed. Before NCCL 2.18 collectives run on
 *  the non-blocking communicators, and so they do with the environment variable
 *  `UFORM_MESH_BLOCKING=0` (read at bootstrap; "1", empty or unset: blocking; any other value is
 *  INVALID_ARGUMENT), which also starts no thread. On a lost peer the communicators a collective
 *  runs on are aborted before those they were split from, so PEER_LOST arrives once the timeout
 *  has passed plus the abort itself, which NCCL makes synchronous (measured 0.8-1.3 s past a 10 s
 *  timeout on two H200s with two communicators per rank), on either kind.
 *
 *  @code{.c}
 *  uform_mesh_options_t options = {.host_domain_index = rank, .host_domain_count = 2,
 *                                  .directory = "/shared/uform", .job = "run-42"};
 *  uform_mesh_t mesh;
 *  if (uform_mesh_bootstrap(executor, &options, &mesh) != uform_status_ok_k) ...
 *  uform_mesh_description_t description;
 *  uform_mesh_describe(mesh, &description);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_mesh_bootstrap(uform_executor_t executor, uform_mesh_options_t const *options,
                                                              uform_mesh_t *mesh);

/** @brief Reports the mesh's shape and this process's place in it; zeroes `description` on failure. */
UFORM_API UFORM_NODISCARD uform_status_t uform_mesh_describe(uform_mesh_t mesh, uform_mesh_description_t *description);

/** @brief Leaves the mesh: waits for the executor's calls on it, releases the communicators. NULL
 *  is a no-op. */
UFORM_API void uform_mesh_free(uform_mesh_t mesh);

/** @brief Element types a collective reduces. */
typedef enum uform_dtype_t {
    uform_dtype_f32_k = 0,  /**< IEEE binary32. */
    uform_dtype_bf16_k = 1, /**< bfloat16. */
    uform_dtype_f16_k = 2,  /**< IEEE binary16. */
    uform_dtype_f64_k = 3,  /**< IEEE binary64. */
    uform_dtype_i32_k = 4,  /**< Signed 32-bit integers. */
} uform_dtype_t;

/**
 *  @brief Sums `count` elements in place across every GPU of the run, as a call on the mesh's
 *  executor: blocking when `outcome` is NULL, deferred otherwise, with CONTENDED and ordering as for
 *  every call. `buffers` holds one `CUdeviceptr` per device of this process, in the executor's
 *  device order. A peer lost mid-way fails the call with PEER_LOST once the mesh's timeout has passed (plus the
 *  abort's own second or so, see `uform_mesh_bootstrap`). A call
 *  the executor stops part-way through its devices (a device whose context cannot be made current)
 *  fails with that status having enqueued no collective: the mesh stays usable.
 *
 *  @code{.c}
 *  uint64_t buffers[2] = {gradients_on_gpu0, gradients_on_gpu1};
 *  uform_mesh_all_reduce(mesh, buffers, count, uform_dtype_bf16_k, NULL);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_mesh_all_reduce(uform_mesh_t mesh, uint64_t const *buffers, size_t count,
                                                               uform_dtype_t dtype, uform_outcome_t *outcome);

/**
 *  @brief `uform_mesh_all_reduce` over host memory: `buffers` holds one host pointer per device of
 *  this process, each of `count` elements. Each is copied onto its device's scratch, reduced there
 *  and copied back, all on the device's stream within the one call, so the executor's
 *  `scratch_limit` must allow `count` elements (else LIMIT_EXCEEDED). The host buffers must stay
 *  valid until the call finishes; with pageable (unregistered) memory the copies back are
 *  synchronous, so even a deferred call has finished when it returns.
 *
 *  @code{.c}
 *  float gradients[2][1024]; // one host buffer per GPU of this process
 *  void *buffers[2] = {gradients[0], gradients[1]};
 *  uform_mesh_all_reduce_host(mesh, buffers, 1024, uform_dtype_f32_k, NULL);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_mesh_all_reduce_host(uform_mesh_t mesh, void *const *buffers, size_t count,
                                                                    uform_dtype_t dtype, uform_outcome_t *outcome);



/* ---- Models and Encoders ---- */

/** @brief An open model: one tower (text or image) of a model directory, immutable once open, so
 *  any number of executors on any threads may use it at once. Free with `uform_model_free`. */
typedef struct uform_model_s *uform_model_t;

/** @brief Which tower of a model directory to open. */
typedef enum uform_modality_t {
    uform_modality_text_k = 0,  /**< Texts to embeddings. */
    uform_modality_image_k = 1, /**< Images to embeddings. */
} uform_modality_t;

/**
 *  @brief How to open a model. Copied, never borrowed past `uform_model_open`.
 *
 *  A model directory holds one of two layouts:
 *  - UForm3: `config.json` with `text_encoder` and `image_encoder` sections,
 *    `text_encoder.safetensors`, `image_encoder.safetensors`, `tokenizer.json`; the image tower's
 *    LayerNorm epsilon is `image_encoder.layer_norm_eps` where present (a number in (0, 1) and a
 *    normal float32, else CORRUPT_FILE naming the key), 1e-6 (the `uform` package's) where absent;
 *  - sentence-transformers / Hugging Face BERT: `config.json` (`"model_type": "bert"`),
 *    `model.safetensors` (sharded weights or `pytorch_model.bin` alone: UNSUPPORTED, named),
 *    `tokenizer.json` or `vocab.txt`, and optionally `modules.json` with `1_Pooling/config.json`
 *    (pooling) and a `Normalize` module (L2 normalisation), under the class paths sentence-transformers
 *    wrote before 6.0 (`sentence_transformers.models.Pooling`) and since; the Transformer's files may
 *    lie in a folder of their own ("0_Transformer", as releases before 1.0 saved them). The Pooling
 *    config's `pooling_mode` ("cls", "mean", or a list of one) wins over the older
 *    `pooling_mode_*_token(s)` flags. The tokenizer is what sentence-transformers 6.3 makes of it
 *    through transformers 5: BertTokenizer and its copies (DistilBert, Electra, LayoutLM, MobileBert,
 *    SqueezeBert; the default when `tokenizer_config.json` names no class) rebuild the vocabulary of
 *    `tokenizer.json` (or `vocab.txt`) into BertNormalizer, BertPreTokenizer and WordPiece with
 *    [CLS] $A [SEP], whatever pipeline `tokenizer.json` states, with `tokenizer_config.json`'s
 *    `do_lower_case`, `strip_accents` and `tokenize_chinese_chars` (defaults true, null, true);
 *    PreTrainedTokenizerFast and TokenizersBackend keep `tokenizer.json`'s pipeline; another class is
 *    UNSUPPORTED. `sentence_bert_config.json`'s (or an older release's `sentence_roberta_config.json`
 *    ...) `do_lower_case` lower-cases before it; keyword arguments there that change the model or
 *    tokenizer (`tokenizer_args`, `config_args`, most `model_args`) are UNSUPPORTED by name. The
 *    context is its `max_seq_length` (at most max_position_embeddings), else
 *    min(`tokenizer_config.json`'s `model_max_length`, max_position_embeddings). The prompt that
 *    `config_sentence_transformers.json`'s `default_prompt_name` names goes before every text, as
 *    sentence-transformers' `encode` puts it (so `uform_model_tokenize` shows its ids too); with the
 *    Pooling config's `include_prompt` false it is UNSUPPORTED. A value of the wrong type is
 *    CORRUPT_FILE naming the file and key.
 */
typedef struct uform_model_options_t {
    char const *path;                 /**< The model directory. */
    uform_modality_t modality;        /**< Which tower to open. */
    uform_residency_t residency;      /**< RAM or VRAM; ANY is INVALID_ARGUMENT. */
    uform_ram_options_t const *ram;   /**< RAM: one weights replica per chosen NUMA domain; NULL derives. */
    uform_vram_options_t const *vram; /**< VRAM: one weights copy per chosen device; NULL derives. */
    uform_dtype_t weights_dtype;      /**< What the weights are held and multiplied as: f32, bf16 or f16. */
} uform_model_options_t;

/** @brief What an open model is. */
typedef struct uform_model_description_t {
    uform_modality_t modality;
    uform_residency_t residency;
    uform_dtype_t weights_dtype;
    size_t dimensions;               /**< The embedding width. */
    size_t matryoshka_dimensions[8]; /**< Narrower widths the config names, ascending; zeros after the last. */
    size_t context;                  /**< Text: tokens per text, specials included; longer texts are truncated. */
    size_t image_size;               /**< Image: the side in pixels the tower sees. */
    size_t layers;                   /**< Transformer layers run per item. */
    size_t parameters;               /**< Parameters held per replica. */
    size_t replicas;                 /**< Weights replicas: one per memory domain (RAM) or device (VRAM). */
    size_t hidden;                   /**< The width of the tower's hidden states: one row of features. */
    size_t tokens;                   /**< Rows of one item's features: text: `context`; image: 1 ([CLS]) +
                                          register tokens + patches, `(image_size / patch)^2`. */
} uform_model_description_t;

/**
 *  @brief Opens one tower of a model directory.
 *
 *  An exception to "outputs only on success": every failure but a NULL `model` sets `*model` to
 *  NULL, so a cleanup that frees it (`uform_model_free(NULL)` is a no-op) is always safe.
 *  Fails with INVALID_ARGUMENT for NULL pointers, an unknown modality, residency or dtype, or
 *  ANY residency; CORRUPT_FILE naming the file and the tensor or key for a truncated or lying
 *  safetensors file, malformed JSON, JSON of more values than such a file holds (about a million in
 *  a config or safetensors header, four million in a tokenizer.json: cJSON spends about 80 bytes a
 *  value), a missing tensor or one of the wrong shape, a weight that is NaN or infinite (the tensor
 *  and element named); UNSUPPORTED for a layout, activation, dtype or tokenizer model the engine
 *  does not run, a decoder (`is_decoder`), left truncation, or (where BertTokenizer's pipeline
 *  applies) special tokens other than BERT's in a BERT directory, a context or image sequence past 8,192 tokens (attention holds a tokens x tokens
 *  block of scores per thread), a finite weight that `weights_dtype` cannot hold (past f16's 65504,
 *  say; the value and the dtypes that hold it named), the image modality of a model without an
 *  image tower (a `config.json` without `image_encoder`), or the text modality of a UForm3 model
 *  without a text tower (one with `image_encoder` alone); SYSTEM_ERROR for a file that cannot be
 *  opened or mapped; OUT_OF_MEMORY.
 *
 *  The safetensors files are mapped while opening and copied into the replicas; the open model holds
 *  no file. Replace a model's files by renaming new ones over them, never by truncating them in place
 *  (`cp new old`): a file cut short while another thread or process is opening it ends the mapped read
 *  with SIGBUS, which no status can report.
 *
 *  VRAM residency (text and image towers): the tower is read exactly as for RAM, then one copy of
 *  the weights is uploaded to each device `vram` names (NULL or no devices derives one free device,
 *  as for executors) in the device's primary context, with the engine's kernels and a cuBLASLt
 *  handle; one host copy stays for shapes and tokenising. Image towers fold LayerScale into the
 *  output and down projections as they upload (`ls * (W x + b)` is `(ls W) x + ls b`). cuBLASLt is loaded at run time
 *  (`$UFORM_CUBLASLT`, `libcublasLt.so.13`, `.12`, then under `$CUDA_HOME/lib64` and
 *  `/usr/local/cuda/lib64`). UNSUPPORTED, with the reason, in a build without CUDA, without a driver or device, without cuBLASLt, or for a tower wider than 1024;
 *  INVALID_ARGUMENT for an ordinal out of range or named twice; OUT_OF_MEMORY when a device cannot
 *  hold the weights. `uform_model_describe` reports one replica per device.
 *
 *  @code{.c}
 *  int32_t const gpus[] = {0};
 *  uform_vram_options_t vram = {.devices = gpus, .devices_count = 1};
 *  uform_model_options_t on_gpu = {.path = "all-MiniLM-L6-v2", .modality = uform_modality_text_k,
 *                                  .residency = uform_residency_vram_k, .vram = &vram,
 *                                  .weights_dtype = uform_dtype_bf16_k};
 *  uform_executor_t executor;  // encode on a VRAM executor over the same devices
 *  if (uform_model_open(&on_gpu, &model) == uform_status_ok_k &&
 *      uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor) == uform_status_ok_k)
 *      uform_encode_texts(executor, model, texts, NULL, count, &out, NULL, NULL);
 *  @endcode
 *
 *  @code{.c}
 *  uform_model_options_t options = {.path = "all-MiniLM-L6-v2", .modality = uform_modality_text_k,
 *                                   .residency = uform_residency_ram_k,
 *                                   .weights_dtype = uform_dtype_f32_k};
 *  uform_model_t model = NULL;
 *  if (uform_model_open(&options, &model) != uform_status_ok_k)
 *      fprintf(stderr, "uform: %s\n", uform_error_message());
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_model_open(uform_model_options_t const *options, uform_model_t *model);

/** @brief Describes an open model. INVALID_ARGUMENT for NULL. */
UFORM_API UFORM_NODISCARD uform_status_t uform_model_describe(uform_model_t model, uform_model_description_t *description);

/** @brief Releases the model's weights. NULL is a no-op. The model must not be in use by a call.
 *  Calls keep their activation buffers pooled for the next call (a new buffer is mapped only for a
 *  call larger than the pool holds, and replaces the smaller ones it covers; at most four buffers of
 *  a size per NUMA node, so a burst of deferred calls, each holding its own while queued, leaves
 *  four; 1 GiB in all); freeing the last open model returns the pool to the system. */
UFORM_API void uform_model_free(uform_model_t model);

/**
 *  @brief Tokenizes one UTF-8 text as the model's encoder sees it: specials added, truncated to
 *  the model's context as the model's reference truncates. sentence-transformers layout: as its
 *  tokenizer does, the specials kept ("[CLS] a b [SEP]"). UForm3 layout: as the `uform` package's
 *  text processor does, `tokenizer.json`'s own `truncation` first (specials kept), then the ids
 *  sliced to the context, so a text longer than it loses its closing specials ("[CLS] a b c"); UForm3
 *  towers with RoBERTa positions, where that slice would run past the position table, keep the
 *  specials. The ids are Hugging Face `tokenizers`' for the same `tokenizer.json` (as it reads the
 *  file: Unigram scores from their digits as serde_json parses them, which can differ from the
 *  nearest double by an ULP and decide ties). `uform_encode_texts` encodes these ids. `*count` receives the number of ids, the first `min(capacity, count)` are
 *  written (`ids` may be NULL when `capacity` is zero). INVALID_ARGUMENT for invalid UTF-8 (the
 *  message gives the byte offset) or NULL pointers; UNSUPPORTED for an image model. On any failure
 *  after `model` and `count` were checked, `*count` is 0 (no ids).
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_model_tokenize(uform_model_t model, char const *text, size_t length,
                                                              int32_t *ids, size_t capacity, size_t *count);

/**
 *  @brief Where a verb writes its embeddings: row `i` at `data + i * stride` bytes. Rows need no
 *  alignment (a bf16 row may start at an odd address); every row must lie inside the address space
 *  (INVALID_ARGUMENT where `data + (count - 1) * stride + row` would wrap).
 *
 *  Features, optional: the tower's last hidden states, one row per token, before pooling (what the
 *  `uform` package's encoders return with `return_features=True`, and sentence-transformers'
 *  `token_embeddings`): item `i`'s `tokens` rows of `hidden` elements (`uform_model_description_t`),
 *  packed, at `features + i * features_stride` (no alignment needed, as for rows), in `dtype`. A text's rows are its tokens in order,
 *  specials included (`uform_model_tokenize`), after the last layer the model runs for texts
 *  (UForm3: the last unimodal one, LayerNorm included), then zero rows up to `tokens` (the `uform`
 *  package pads to its context and returns the tower's values for the padding tokens there, which
 *  its attention mask hides; these are zeros). An image's rows are [CLS], the register tokens, then
 *  the patches row by row, after the final LayerNorm. An item that failed (with `statuses`) gets
 *  zero features as it gets a zero row. Asking for features runs a CLS-pooled tower's last layer
 *  for every token (the embeddings are the same up to rounding), and costs the copy. VRAM models
 *  convert each chunk's rows to `dtype` on the device and copy them in one asynchronous copy a chunk
 *  into the model's pinned staging buffer (grown to the call's features, up to 256 MiB of them).
 *  A blocking call writes them into `features` on the executor's decoder threads: from 16 MiB of
 *  features in pieces of at least 4 MiB, each as it lands while the later ones still cross the bus
 *  (the zero rows first, while the devices run), else once every wave finished; a deferred call's
 *  outcome writes them as it finishes, on the thread that settles it. Past 256 MiB, or while two
 *  other calls of the model hold its staging buffers, each item's rows are copied straight into
 *  `features` as its chunk finishes (the device callback waits for those pageable copies). A call
 *  that fails may leave some items' features written. NULL asks for none. INVALID_ARGUMENT for
 *  a `features_stride` that cannot hold an item's features, one without `features`, or items past
 *  the address space.
 *
 *  @code{.c}
 *  uform_model_description_t d;
 *  uform_model_describe(model, &d); // e.g. hidden 384, tokens 256 for all-MiniLM-L6-v2
 *  float *rows = malloc(count * d.dimensions * sizeof(float));
 *  float *tokens = malloc(count * d.tokens * d.hidden * sizeof(float));
 *  uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k, .features = tokens};
 *  if (uform_encode_texts(executor, model, texts, NULL, count, &out, NULL, NULL) == uform_status_ok_k) {
 *      float const *first_token_of_text_2 = tokens + 2 * d.tokens * d.hidden; // its [CLS] row
 *  }
 *  @endcode
 */
typedef struct uform_embeddings_t {
    void *data;             /**< Rows of `dimensions` elements of `dtype`. */
    size_t stride;          /**< Bytes between rows, at least a row's; 0 packs them. */
    size_t dimensions;      /**< 0 takes the model's width; fewer truncates (Matryoshka). */
    uform_dtype_t dtype;    /**< f32, f16 or bf16: of the rows and of the features. */
    int normalize;          /**< Nonzero L2-normalises each row after truncation; the layout's own
                                 normalisation (sentence-transformers' Normalize) applies regardless. */
    void *features;         /**< NULL, or where each item's features go (above). */
    size_t features_stride; /**< Bytes between items' features, at least `tokens * hidden` elements'; 0 packs them. */
} uform_embeddings_t;

/** @brief One image: encoded bytes (JPEG, PNG) when `width` is 0, else 8-bit RGB pixels with
 *  `stride` bytes per row (0: `3 * width`). */
typedef struct uform_image_t {
    void const *data;
    size_t size;
    size_t width, height, stride;
} uform_image_t;

/**
 *  @brief Encodes `count` UTF-8 texts into `embeddings`, as a call on `executor`: blocking when
 *  `outcome` is NULL, deferred otherwise, with CONTENDED, DEFERRED_FULL, FORKED and submission
 *  order exactly as `uform_executor_call`. RESIDENCY_MISMATCH when the executor's kind does not
 *  serve the model's residency or its memory domains are not among the model's.
 *
 *  `lengths` may be NULL for NUL-terminated texts. With `statuses` (one per text), a bad text
 *  (invalid UTF-8) gets INVALID_ARGUMENT and a zero row while the rest are encoded and the call
 *  succeeds; without it, the first bad text fails the whole call, naming its index, and nothing is
 *  written. Texts, lengths, embeddings and statuses must stay valid until a deferred call finishes.
 *
 *  VRAM models encode on VRAM executors whose every device holds a copy of the model
 *  (RESIDENCY_MISMATCH otherwise, naming the device; UNSUPPORTED on the NULL executor, which has no
 *  stream). The batch runs in waves (one below 512 texts; else an eighth of it, then the rest; never
 *  more texts than a quarter of the scratch budget holds embedding rows of, so many short texts are
 *  split to fit, not refused), each
 *  one deferred call on the executor: the host decoder threads tokenise a wave while the devices
 *  run the wave before. A wave's texts, packed without padding, are split over the devices in
 *  proportion to their SMs, each device's share cut into chunks that fit its scratch. A wave asks
 *  for the scratch it needs (at most 4 GiB per device without a `scratch_limit`); under a
 *  `scratch_limit` it is split to fit, and LIMIT_EXCEEDED (with the bytes one text needs) when even
 *  one text cannot. A chunk shape seen before runs as a CUDA graph. The rows (and `statuses`) are
 *  written, in input order, once every wave finished (a failing wave writes none): a blocking call
 *  returns after that; a deferred one returns once its last wave is enqueued (its texts tokenised),
 *  and the rows are written as its outcome finishes, by whichever thread polls, waits for or drains
 *  it (or frees the executor), so the next call's tokenising overlaps this one's device work. The
 *  model must stay open until then. Each model has two pinned host buffers for its jobs, so two
 *  deferred encodes of one model may be in flight at once with overlapped copies; a third meanwhile
 *  runs from unpinned memory in one wave (more where its rows need them) and returns only after the devices ran it (its rows still
 *  written as its outcome finishes). When the executor's
 *  deferred ring is full its waves wait for each other, and a deferred encode meeting a ring full of
 *  other calls gets DEFERRED_FULL. UFORM_GPU_TEXT_WAVE=N (texts per wave, 0 for one; within the rows' cap) overrides the split.
 *  f32 weights compute in f32 (the CPU path's results up to rounding); bf16 and f16 keep activations
 *  in that dtype between kernels, with f32 reductions, and cuBLASLt's tanh-approximated GELU.
 *
 *  A tower that pools the first token (CLS: UForm3's text towers) runs its last layer for that
 *  token alone past the other tokens' keys and values, on CPUs and GPUs alike (so do CLS image
 *  towers, past attention): the other rows of that layer are never read, and each row's products
 *  and norms are its own, so the rows are the whole layer's up to the products' rounding.
 *  `UFORM_CLS_TAIL=0` runs the whole layer, for comparisons.
 *
 *  Signals: while a thread runs a RAM model's layers for a call (the calling thread of a blocking
 *  call included), asynchronous signals (all but SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT
 *  and SIGSYS) are blocked on it, so a handler (a timeout's SIGALRM, a sampling profiler's SIGPROF,
 *  Python's SIGINT) runs on another thread or once the thread's share is done, never inside a
 *  product: oneDNN 2.6's f32 GEMM kernels point the stack pointer into the heap while they run,
 *  where a signal's frame would corrupt it. Images likewise.
 *
 *  @code{.c}
 *  char const *texts[] = {"a cat on a mat", "a dog in the fog"};
 *  float rows[2][384];
 *  uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
 *  uform_status_t status = uform_encode_texts(executor, model, texts, NULL, 2, &out, NULL, NULL);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_encode_texts(uform_executor_t executor, uform_model_t model,
                                                            char const *const *texts, size_t const *lengths, size_t count,
                                                            uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                                            uform_outcome_t *outcome);

/**
 *  @brief Encodes `count` images (JPEG or PNG bytes, or raw RGB pixels) into `embeddings` with a
 *  UForm3 image tower, as one call on `executor`: blocking when `outcome` is NULL, deferred
 *  otherwise, with CONTENDED, DEFERRED_FULL, FORKED, RESIDENCY_MISMATCH and submission order as
 *  `uform_encode_texts`.
 *
 *  The executor's threads decode each image and preprocess it exactly as the `uform` package's
 *  processor with PIL (shorter side resized to the model's `image_size` with PIL's bicubic filter,
 *  centre crop, normalisation with the config's means and deviations), then run the tower (patch
 *  embedding, position embeddings, [CLS] and register tokens, pre-norm blocks with LayerScale,
 *  final LayerNorm, CLS or mean pooling, projection). `dimensions` below the width truncates
 *  (Matryoshka), `normalize` L2-normalises after truncation.
 *
 *  With `statuses` (one per image), an image that cannot be decoded gets its own status
 *  (CORRUPT_FILE for truncated, corrupt, empty or unknown data; LIMIT_EXCEEDED for a decompression
 *  bomb; UNSUPPORTED for a legal file this build's decoders refuse: a lossless JPEG, which needs
 *  libjpeg-turbo 3, or a PNG of more than 1,000 ancillary chunks; INVALID_ARGUMENT for raw pixels
 *  with a bad size or stride) and a zero row, and the call
 *  succeeds; a deferred call writes the statuses while it runs. Without `statuses`, the first such
 *  image (lowest index) fails the whole call with its status, the message naming its index
 *  ("uform_encode_images: image 3: ..."), and no row is written; a deferred call reports that
 *  failure through its outcome (`status` and `message`), its images decoded on the executor's
 *  threads like any other.
 *  Images, embeddings and statuses must stay valid until a deferred call finishes. INVALID_ARGUMENT
 *  for a NULL model, a text model, NULL images, an image whose `data` is NULL while its `size` or
 *  `width` is not zero, or embeddings that do not fit the model (NULL `data` with zero `size` and
 *  `width` is an empty image: CORRUPT_FILE, its own status with `statuses`).
 *
 *  VRAM models encode on VRAM executors as `uform_encode_texts` does (the same residency rules,
 *  waves, device split, scratch chunks and graphs): the executor's host decoder threads decode,
 *  resize and crop each image exactly as above, a wave (up to 128 images; two from 32 images on;
 *  one for raw pixels already of the model's size) while the devices run the wave before, then the
 *  8-bit crops are uploaded (bytes, not floats) and the devices normalise them, lay out the patches
 *  and run the tower. The scratch is planned before anything is decoded: under a `scratch_limit` the
 *  waves are cut into chunks of whole images, and LIMIT_EXCEEDED when even one image cannot fit.
 *  With or without `statuses`, bad images behave as above; rows and statuses are written once every
 *  wave finished, before a blocking call returns or as a deferred call's outcome finishes (a deferred
 *  call returns once its last wave is decoded and enqueued; the model must stay open until its
 *  outcome finishes; two per model in flight at once, as for texts). UFORM_GPU_IMAGE_WAVE=N (images
 *  per wave, 0 for one) overrides the wave size. A device's
 *  share of at least 128 images that fits one chunk runs as two chunks (a fifth, then the rest), the
 *  second's crops uploading on a copy stream while the first's pass runs; UFORM_GPU_UPLOAD_SPLIT=N
 *  sets that threshold (0: never). A smaller share that fits one chunk uploads on that copy stream
 *  into one of two device buffers the model keeps per executor stream (up to 2.5 times the crops of
 *  the largest such share, until the model is freed), used in turn: its upload waits only for the
 *  pass that last read that buffer, so it runs under the pass before (the previous wave's, or a
 *  deferred call's still in flight); UFORM_GPU_ALTERNATE=0 uploads into the scratch instead.
 *
 *  @code{.c}
 *  uform_image_t images[2] = {{.data = jpeg, .size = jpeg_size}, {.data = png, .size = png_size}};
 *  float rows[2][256];
 *  uform_status_t statuses[2];
 *  uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
 *  uform_status_t status = uform_encode_images(executor, model, images, 2, &out, statuses, NULL);
 *  @endcode
 */
UFORM_API UFORM_NODISCARD uform_status_t uform_encode_images(uform_executor_t executor, uform_model_t model,
                                                             uform_image_t const *images, size_t count,
                                                             uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                                             uform_outcome_t *outcome);


#ifdef __cplusplus
}
#endif

#endif // UFORM_H
