# Placeholder until the GPU work lands: no CUDA at all.
set(UFORM_CUDA_INCLUDE "")
set(UFORM_CUDA_DEFINITIONS "")
set(UFORM_GPU_OBJECTS "")
set(UFORM_GPU_DEPENDS "")
