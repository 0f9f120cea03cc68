# CUDA support, decided at configure time by UFORM_WITH_CUDA (AUTO, ON or OFF).
#
# Only the toolkit's `nvcc` and its headers (`cuda.h`, `cudaTypedefs.h`) are used at build time,
# both found with CMake's `find_package(CUDAToolkit)`.
# The library never links `libcuda` nor `libcudart`: `src/gpu.c` opens `libcuda.so.1` with `dlopen`
# at run time, so one binary runs on machines with and without GPUs.
#
# With CUDA, `src/kernels.cu` is compiled by nvcc into one fatbin holding SASS for sm_80 (Ampere,
# and by binary compatibility sm_86 and sm_89), sm_90 and sm_90a (Hopper), plus PTX for compute_90 that the
# driver compiles for newer GPUs (Blackwell, Rubin). `src/kernels_fatbin.c` embeds that fatbin with
# the assembler's `.incbin` (`uform_kernels_fatbin`, 64-byte aligned), which the VRAM executor and the
# VRAM text and image towers hand to `cuModuleLoadData`; nothing is generated but the fatbin itself.
#
# Sets for the top-level CMakeLists.txt:
#   UFORM_CUDA_ENABLED      ON or OFF
#   UFORM_CUDA_INCLUDE      the toolkit's include directory, or empty
#   UFORM_CUDA_DEFINITIONS  UFORM_WITH_CUDA=1 with CUDA, UFORM_WITH_CUDA=0 without
#   UFORM_GPU_DEPENDS       the custom target producing the fatbin, or empty
#   UFORM_CUDA_ONLY_SOURCES the sources a build without CUDA leaves out (it compiles `*_stub.c`)

set(UFORM_CUDA_ENABLED OFF)
set(UFORM_CUDA_INCLUDE "")
set(UFORM_CUDA_DEFINITIONS "UFORM_WITH_CUDA=0")
set(UFORM_GPU_DEPENDS "")

string(TOUPPER "${UFORM_WITH_CUDA}" _uform_with_cuda)
if(NOT _uform_with_cuda MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|YES|NO|1|0)$")
  message(FATAL_ERROR "UFORM_WITH_CUDA must be AUTO, ON or OFF, not '${UFORM_WITH_CUDA}'")
endif()

if(NOT _uform_with_cuda MATCHES "^(OFF|FALSE|NO|0)$")
  # CMake's own FindCUDAToolkit finds nvcc and the headers beside it (CUDAToolkit_ROOT, CUDACXX,
  # CUDA_PATH, nvcc on PATH, /usr/local/cuda); CUDA_HOME, which this build honoured before, is
  # passed to it as CUDAToolkit_ROOT. Nothing is linked from it: only nvcc and the include directory.
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND DEFINED ENV{CUDA_HOME})
    set(CUDAToolkit_ROOT "$ENV{CUDA_HOME}")
  endif()
  find_package(CUDAToolkit QUIET)
  set(UFORM_NVCC "")
  set(UFORM_CUDA_HEADERS "")
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
    set(UFORM_NVCC "${CUDAToolkit_NVCC_EXECUTABLE}")
    # The driver API's headers, from the same toolkit as that nvcc.
    foreach(_uform_include ${CUDAToolkit_INCLUDE_DIRS})
      if(NOT UFORM_CUDA_HEADERS AND EXISTS "${_uform_include}/cuda.h" AND EXISTS "${_uform_include}/cudaTypedefs.h")
        set(UFORM_CUDA_HEADERS "${_uform_include}")
      endif()
    endforeach()
  endif()
  if(UFORM_NVCC AND UFORM_CUDA_HEADERS)
    set(UFORM_CUDA_ENABLED ON)
  elseif(_uform_with_cuda MATCHES "^(ON|TRUE|YES|1)$")
    message(FATAL_ERROR "UFORM_WITH_CUDA=ON, but the CUDA toolkit is incomplete: nvcc '${UFORM_NVCC}', "
                        "cuda.h in '${UFORM_CUDA_HEADERS}'. Set CUDAToolkit_ROOT, CUDA_HOME or CUDACXX, or configure with "
                        "-DUFORM_WITH_CUDA=OFF")
  else()
    message(STATUS "uform: no CUDA toolkit (nvcc and cuda.h) found, building without GPU support")
  endif()
else()
  message(STATUS "uform: UFORM_WITH_CUDA=OFF, building without GPU support")
endif()

if(UFORM_CUDA_ENABLED)
  set(UFORM_NVCC_FLAGS "" CACHE STRING "Extra flags for nvcc when compiling src/kernels.cu")
  set(_uform_fatbin "${CMAKE_CURRENT_BINARY_DIR}/uform_kernels.fatbin")
  separate_arguments(_uform_nvcc_extra UNIX_COMMAND "${UFORM_NVCC_FLAGS}")
  # Every header kernels.cu includes (src/kernels/*.cuh): a change to any rebuilds the fatbin.
  file(GLOB _uform_kernel_headers CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/src/kernels/*.cuh")
  add_custom_command(
    OUTPUT "${_uform_fatbin}"
    COMMAND "${UFORM_NVCC}" -fatbin -O3 -std=c++17 -lineinfo
            -gencode=arch=compute_80,code=sm_80
            -gencode=arch=compute_90,code=sm_90
            -gencode=arch=compute_90a,code=sm_90a
            -gencode=arch=compute_90,code=compute_90
            ${_uform_nvcc_extra}
            -o "${_uform_fatbin}" "${CMAKE_CURRENT_SOURCE_DIR}/src/kernels.cu"
    DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/src/kernels.cu" ${_uform_kernel_headers}
    COMMENT "nvcc: compiling the engine's kernels into a fatbin (sm_80, sm_90, sm_90a, compute_90)"
    VERBATIM)
  add_custom_target(uform_kernels DEPENDS "${_uform_fatbin}")
  # `.incbin` reads the fatbin when kernels_fatbin.c is assembled: its path is a definition of that
  # file alone, and a new fatbin rebuilds it.
  set_source_files_properties("${CMAKE_CURRENT_SOURCE_DIR}/src/kernels_fatbin.c" PROPERTIES
    COMPILE_DEFINITIONS "UFORM_KERNELS_FATBIN=\"${_uform_fatbin}\""
    OBJECT_DEPENDS "${_uform_fatbin}")

  set(UFORM_CUDA_INCLUDE "${UFORM_CUDA_HEADERS}")
  set(UFORM_CUDA_DEFINITIONS "UFORM_WITH_CUDA=1")
  set(UFORM_GPU_DEPENDS uform_kernels)
  message(STATUS "uform: CUDA kernels with ${UFORM_NVCC}, headers in ${UFORM_CUDA_HEADERS}")
endif()

# The sources that need the CUDA driver; a build without CUDA compiles their `*_stub.c` instead.
set(UFORM_CUDA_ONLY_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/gpu_driver.c ${CMAKE_CURRENT_SOURCE_DIR}/src/kernels_fatbin.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/vram.c ${CMAKE_CURRENT_SOURCE_DIR}/src/vram_create.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/vram_launch.c ${CMAKE_CURRENT_SOURCE_DIR}/src/vram_queue.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/text_vram.c ${CMAKE_CURRENT_SOURCE_DIR}/src/models/text_vram_encode.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/text_vram_launch.c ${CMAKE_CURRENT_SOURCE_DIR}/src/models/vram_tower.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/vram_tower_exec.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/models/image_vram.c ${CMAKE_CURRENT_SOURCE_DIR}/src/models/image_vram_encode.c
  ${CMAKE_CURRENT_SOURCE_DIR}/src/mesh_device.c)
