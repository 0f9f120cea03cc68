/**
 *  @file   kernels.cu
 *  @brief  The engine's own device kernels, one per `uform_kernel_t`, compiled by nvcc into the
 *          fatbin that `cmake/cuda.cmake` embeds and `vram.c` loads with `cuModuleLoadData`.
 *
 *  Every kernel has C linkage, so `cuModuleGetFunction` finds it by the plain name below. The
 *  launch geometry is chosen by `uform_device_launch` in vram.c: the element-wise kernels walk
 *  their range with a grid-stride loop, so any grid covers any count. No kernel uses shared memory
 *  or atomics, so racecheck has nothing to report on them.
 */
#include <cstdint>

extern "C" __global__ void uform_kernel_empty(void) {}

extern "C" __global__ void uform_kernel_fill_f32(float *buffer, unsigned long long count, float value) {
    unsigned long long const stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long index = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; index < count;
         index += stride)
        buffer[index] = value;
}

extern "C" __global__ void uform_kernel_add_f32(float *buffer, unsigned long long count, float value) {
    unsigned long long const stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long index = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; index < count;
         index += stride)
        buffer[index] += value;
}

/** The device's global nanosecond timer, shared by every SM (unlike `clock64`, which is per SM and
 *  counts cycles at a varying clock). */
static __device__ __forceinline__ unsigned long long uform_global_nanoseconds(void) {
    unsigned long long nanoseconds;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(nanoseconds));
    return nanoseconds;
}

/** One thread waits until `nanoseconds` passed on the global timer, napping between reads so the
 *  SM's other warps (of other kernels) keep their issue slots. */
extern "C" __global__ void uform_kernel_sleep(unsigned long long nanoseconds) {
    unsigned long long const start = uform_global_nanoseconds();
    while (uform_global_nanoseconds() - start < nanoseconds) __nanosleep(1000);
}

/** A deliberate device fault: the `trap` instruction aborts the kernel, and the driver reports a
 *  sticky error (CUDA_ERROR_LAUNCH_FAILED or CUDA_ERROR_ILLEGAL_INSTRUCTION, by driver version) on
 *  the context. Tests use it to check that faults poison executors and never hang. */
extern "C" __global__ void uform_kernel_trap(void) { asm volatile("trap;"); }

/* The text towers' kernels (VRAM models), in the same fatbin. */
#include "kernels/text_gpu.cuh"

/* The image towers' own kernels (patches from 8-bit pixels, token assembly); the rest is text_gpu.cuh's. */
#include "kernels/image_gpu.cuh"
