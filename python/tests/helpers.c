/**
 *  @file   helpers.c
 *  @brief  C helpers for the Python binding's tests: raw task callbacks that take no GIL, and the
 *          sizes and offsets of every public struct as the C compiler lays them out, so the tests
 *          can check the ctypes declarations of `uform/_native.py` against `uform.h` itself.
 *
 *  Built by test/CMakeLists.txt as a module (path in $UFORM_TEST_HELPERS), or compiled on the fly
 *  by the tests with `cc` when run outside ctest.
 */
#include <uform.h>
#include "uform_testing.h" // `uform_kernel_t`, test-only

#include <stddef.h> // `offsetof`
#include <stdint.h> // `uint32_t`

#define UFORM_PYTHON_TEST_API __attribute__((visibility("default")))

/** A `uform_task_callback_t`: increments `((uint32_t *)context)[task]` atomically. */
UFORM_PYTHON_TEST_API void uform_python_test_mark(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    __atomic_fetch_add(&((uint32_t *)context)[task], 1u, __ATOMIC_RELAXED);
}

/** A `uform_task_callback_t`: records `thread + 1` into `((uint32_t *)context)[task]`. */
UFORM_PYTHON_TEST_API void uform_python_test_thread(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    __atomic_store_n(&((uint32_t *)context)[task], (uint32_t)(thread + 1), __ATOMIC_RELAXED);
}

/** One struct (`field` NULL: size and alignment) or one field (size and offset). */
typedef struct uform_python_layout_t {
    char const *type;
    char const *field;
    size_t size;
    size_t offset_or_alignment;
} uform_python_layout_t;

#define LAYOUT_TYPE(type) {#type, NULL, sizeof(type), _Alignof(type)}
#define LAYOUT_FIELD(type, field) {#type, #field, sizeof(((type *)0)->field), offsetof(type, field)}

static uform_python_layout_t const uform_python_layouts[] = {
    LAYOUT_TYPE(uform_gpu_device_t),
    LAYOUT_FIELD(uform_gpu_device_t, vendor),
    LAYOUT_FIELD(uform_gpu_device_t, vendor_ordinal),
    LAYOUT_FIELD(uform_gpu_device_t, gpu_class),
    LAYOUT_FIELD(uform_gpu_device_t, compute_units),
    LAYOUT_FIELD(uform_gpu_device_t, memory_bytes),

    LAYOUT_TYPE(uform_memory_domain_t),
    LAYOUT_FIELD(uform_memory_domain_t, node),
    LAYOUT_FIELD(uform_memory_domain_t, cores_count),
    LAYOUT_FIELD(uform_memory_domain_t, memory_bytes),

    LAYOUT_TYPE(uform_ram_options_t),
    LAYOUT_FIELD(uform_ram_options_t, memory_domains),
    LAYOUT_FIELD(uform_ram_options_t, memory_domains_count),
    LAYOUT_FIELD(uform_ram_options_t, cpu_class),

    LAYOUT_TYPE(uform_vram_options_t),
    LAYOUT_FIELD(uform_vram_options_t, devices),
    LAYOUT_FIELD(uform_vram_options_t, devices_count),
    LAYOUT_FIELD(uform_vram_options_t, gpu_class),

    LAYOUT_TYPE(uform_executor_description_t),
    LAYOUT_FIELD(uform_executor_description_t, kind),
    LAYOUT_FIELD(uform_executor_description_t, threads_count),
    LAYOUT_FIELD(uform_executor_description_t, domains_count),
    LAYOUT_FIELD(uform_executor_description_t, devices_count),
    LAYOUT_FIELD(uform_executor_description_t, cpu_class),
    LAYOUT_FIELD(uform_executor_description_t, gpu_class),
    LAYOUT_FIELD(uform_executor_description_t, mood),
    LAYOUT_FIELD(uform_executor_description_t, deferred_limit),
    LAYOUT_FIELD(uform_executor_description_t, scratch_limit),

    LAYOUT_TYPE(uform_device_slot_t),
    LAYOUT_FIELD(uform_device_slot_t, device_index),
    LAYOUT_FIELD(uform_device_slot_t, ordinal),
    LAYOUT_FIELD(uform_device_slot_t, gpu_class),
    LAYOUT_FIELD(uform_device_slot_t, stream),
    LAYOUT_FIELD(uform_device_slot_t, cu_context),
    LAYOUT_FIELD(uform_device_slot_t, scratch),
    LAYOUT_FIELD(uform_device_slot_t, scratch_bytes),

    LAYOUT_TYPE(uform_call_t),
    LAYOUT_FIELD(uform_call_t, residency),
    LAYOUT_FIELD(uform_call_t, schedule),
    LAYOUT_FIELD(uform_call_t, tasks),
    LAYOUT_FIELD(uform_call_t, task),
    LAYOUT_FIELD(uform_call_t, device),
    LAYOUT_FIELD(uform_call_t, scratch_bytes),
    LAYOUT_FIELD(uform_call_t, context),

    LAYOUT_TYPE(uform_outcome_t),
    LAYOUT_FIELD(uform_outcome_t, finished),
    LAYOUT_FIELD(uform_outcome_t, status),
    LAYOUT_FIELD(uform_outcome_t, reserved),
    LAYOUT_FIELD(uform_outcome_t, message),

    LAYOUT_TYPE(uform_mesh_options_t),
    LAYOUT_FIELD(uform_mesh_options_t, host_domain_index),
    LAYOUT_FIELD(uform_mesh_options_t, host_domain_count),
    LAYOUT_FIELD(uform_mesh_options_t, gpus_per_multimem_domain),
    LAYOUT_FIELD(uform_mesh_options_t, directory),
    LAYOUT_FIELD(uform_mesh_options_t, job),
    LAYOUT_FIELD(uform_mesh_options_t, timeout_seconds),

    LAYOUT_TYPE(uform_mesh_description_t),
    LAYOUT_FIELD(uform_mesh_description_t, gpus_per_host_domain),
    LAYOUT_FIELD(uform_mesh_description_t, gpus_per_multimem_domain),
    LAYOUT_FIELD(uform_mesh_description_t, gpus_per_colocated_domain),
    LAYOUT_FIELD(uform_mesh_description_t, host_domain_index),
    LAYOUT_FIELD(uform_mesh_description_t, first_gpu_index),
    LAYOUT_FIELD(uform_mesh_description_t, multimem_tier),
    LAYOUT_FIELD(uform_mesh_description_t, gpu_class),

    LAYOUT_TYPE(uform_model_options_t),
    LAYOUT_FIELD(uform_model_options_t, path),
    LAYOUT_FIELD(uform_model_options_t, modality),
    LAYOUT_FIELD(uform_model_options_t, residency),
    LAYOUT_FIELD(uform_model_options_t, ram),
    LAYOUT_FIELD(uform_model_options_t, vram),
    LAYOUT_FIELD(uform_model_options_t, weights_dtype),

    LAYOUT_TYPE(uform_model_description_t),
    LAYOUT_FIELD(uform_model_description_t, modality),
    LAYOUT_FIELD(uform_model_description_t, residency),
    LAYOUT_FIELD(uform_model_description_t, weights_dtype),
    LAYOUT_FIELD(uform_model_description_t, dimensions),
    LAYOUT_FIELD(uform_model_description_t, matryoshka_dimensions),
    LAYOUT_FIELD(uform_model_description_t, context),
    LAYOUT_FIELD(uform_model_description_t, image_size),
    LAYOUT_FIELD(uform_model_description_t, layers),
    LAYOUT_FIELD(uform_model_description_t, parameters),
    LAYOUT_FIELD(uform_model_description_t, replicas),
    LAYOUT_FIELD(uform_model_description_t, hidden),
    LAYOUT_FIELD(uform_model_description_t, tokens),

    LAYOUT_TYPE(uform_embeddings_t),
    LAYOUT_FIELD(uform_embeddings_t, data),
    LAYOUT_FIELD(uform_embeddings_t, stride),
    LAYOUT_FIELD(uform_embeddings_t, dimensions),
    LAYOUT_FIELD(uform_embeddings_t, dtype),
    LAYOUT_FIELD(uform_embeddings_t, normalize),
    LAYOUT_FIELD(uform_embeddings_t, features),
    LAYOUT_FIELD(uform_embeddings_t, features_stride),

    LAYOUT_TYPE(uform_image_t),
    LAYOUT_FIELD(uform_image_t, data),
    LAYOUT_FIELD(uform_image_t, size),
    LAYOUT_FIELD(uform_image_t, width),
    LAYOUT_FIELD(uform_image_t, height),
    LAYOUT_FIELD(uform_image_t, stride),
};

/** Points `*layouts` at the table and returns its length. */
UFORM_PYTHON_TEST_API size_t uform_python_test_layouts(uform_python_layout_t const **layouts) {
    *layouts = uform_python_layouts;
    return sizeof(uform_python_layouts) / sizeof(uform_python_layouts[0]);
}

/** The numeric value of every enumerator the binding mirrors, by its C name, for the tests. */
typedef struct uform_python_constant_t {
    char const *name;
    long long value;
} uform_python_constant_t;

#define CONSTANT(name) {#name, (long long)(name)}

static uform_python_constant_t const uform_python_constants[] = {
    CONSTANT(uform_status_ok_k), CONSTANT(uform_status_contended_k), CONSTANT(uform_status_unsupported_k),
    CONSTANT(uform_status_config_mismatch_k), CONSTANT(uform_status_invalid_argument_k),
    CONSTANT(uform_status_out_of_memory_k), CONSTANT(uform_status_system_error_k), CONSTANT(uform_status_timeout_k),
    CONSTANT(uform_status_device_fault_k), CONSTANT(uform_status_deferred_full_k), CONSTANT(uform_status_forked_k),
    CONSTANT(uform_status_residency_mismatch_k), CONSTANT(uform_status_limit_exceeded_k),
    CONSTANT(uform_status_peer_lost_k), CONSTANT(uform_status_corrupt_file_k), CONSTANT(uform_status_pending_k),

    CONSTANT(uform_cpu_class_unknown_k), CONSTANT(uform_cpu_class_serial_k), CONSTANT(uform_cpu_class_intel_haswell_k),
    CONSTANT(uform_cpu_class_intel_sierra_k), CONSTANT(uform_cpu_class_intel_skylake_k),
    CONSTANT(uform_cpu_class_intel_icelake_k), CONSTANT(uform_cpu_class_amd_genoa_k),
    CONSTANT(uform_cpu_class_intel_sapphire_k), CONSTANT(uform_cpu_class_intel_granite_k),
    CONSTANT(uform_cpu_class_intel_diamond_k), CONSTANT(uform_cpu_class_aws_g2_k), CONSTANT(uform_cpu_class_apple_m2_k),
    CONSTANT(uform_cpu_class_apple_m4_k), CONSTANT(uform_cpu_class_aws_g5_k), CONSTANT(uform_cpu_class_nvidia_vera_k),
    CONSTANT(uform_cpu_class_alibaba_c930_k), CONSTANT(uform_cpu_class_wasm32_v128_k),
    CONSTANT(uform_cpu_class_wasm64_extended_k), CONSTANT(uform_cpu_class_monoversioned_k),

    CONSTANT(uform_gpu_class_unknown_k), CONSTANT(uform_gpu_class_nvidia_ampere_k), CONSTANT(uform_gpu_class_nvidia_ada_k),
    CONSTANT(uform_gpu_class_nvidia_hopper_k), CONSTANT(uform_gpu_class_nvidia_blackwell_k),
    CONSTANT(uform_gpu_class_nvidia_blackwellrtx_k), CONSTANT(uform_gpu_class_nvidia_rubin_k),
    CONSTANT(uform_gpu_class_amd_cdna3_k), CONSTANT(uform_gpu_class_amd_cdna4_k), CONSTANT(uform_gpu_class_amd_cdna5_k),
    CONSTANT(uform_gpu_class_apple_metal7_k), CONSTANT(uform_gpu_class_apple_metal9_k),
    CONSTANT(uform_gpu_class_apple_metal10_k),

    CONSTANT(uform_gpu_vendor_unknown_k), CONSTANT(uform_gpu_vendor_nvidia_k), CONSTANT(uform_gpu_vendor_amd_k),
    CONSTANT(uform_gpu_vendor_apple_k),

    CONSTANT(uform_multimem_tier_switch_reduced_k), CONSTANT(uform_multimem_tier_peer_read_k),
    CONSTANT(uform_mood_parked_k), CONSTANT(uform_mood_spinning_k),
    CONSTANT(uform_executor_kind_inline_k), CONSTANT(uform_executor_kind_ram_k), CONSTANT(uform_executor_kind_pool_k),
    CONSTANT(uform_executor_kind_vram_k),
    CONSTANT(uform_schedule_static_k), CONSTANT(uform_schedule_dynamic_k), CONSTANT(uform_schedule_threads_k),
    CONSTANT(uform_residency_any_k), CONSTANT(uform_residency_ram_k), CONSTANT(uform_residency_vram_k),
    CONSTANT(uform_dtype_f32_k), CONSTANT(uform_dtype_bf16_k), CONSTANT(uform_dtype_f16_k), CONSTANT(uform_dtype_f64_k),
    CONSTANT(uform_dtype_i32_k),
    CONSTANT(uform_kernel_empty_k), CONSTANT(uform_kernel_fill_f32_k), CONSTANT(uform_kernel_sleep_k),
    CONSTANT(uform_kernel_trap_k), CONSTANT(uform_kernel_add_f32_k),
    CONSTANT(UFORM_DEFERRED_LIMIT_DEFAULT),
};

/** Points `*constants` at the table and returns its length. */
UFORM_PYTHON_TEST_API size_t uform_python_test_constants(uform_python_constant_t const **constants) {
    *constants = uform_python_constants;
    return sizeof(uform_python_constants) / sizeof(uform_python_constants[0]);
}
