# The image decoder's fuzzing (included from fuzz/CMakeLists.txt, after the UFORM_FUZZ option).
#
# Always: fuzz/corpus/image replays through fuzz_image.c's entry point with the normal compiler
# (and the sanitizer builds), as the ctest fuzz_replay_image.
# With -DUFORM_FUZZ=ON and clang: the libFuzzer target fuzz_image, built from src/image's sources
# with -fsanitize=fuzzer,address,undefined, against Debian's libjpeg-turbo and libspng:
#   CC=clang-14 cmake -S . -B build-fuzz -G Ninja -DUFORM_FUZZ=ON && cmake --build build-fuzz --target fuzz_image
#   build-fuzz/fuzz/fuzz_image -max_total_time=600 -rss_limit_mb=2048 fuzz/corpus/image
add_executable(fuzz_replay_image ${CMAKE_CURRENT_SOURCE_DIR}/replay.c ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_image.c)
target_include_directories(fuzz_replay_image PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(fuzz_replay_image PRIVATE uform_static ${NUMA_LIBRARY} ${UFORM_IMAGE_LIBRARIES} Threads::Threads
                      ${CMAKE_DL_LIBS} m)
add_test(NAME fuzz_replay_image COMMAND fuzz_replay_image ${CMAKE_CURRENT_SOURCE_DIR}/corpus/image)
set_tests_properties(fuzz_replay_image PROPERTIES TIMEOUT 300)

if(UFORM_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "UFORM_FUZZ needs clang (e.g. CC=clang-14), not ${CMAKE_C_COMPILER_ID}")
  endif()
  add_executable(fuzz_image ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_image.c ${PROJECT_SOURCE_DIR}/src/image/decode.c
                 ${PROJECT_SOURCE_DIR}/src/image/resize.c ${PROJECT_SOURCE_DIR}/src/image/resize_x86.c
                 ${PROJECT_SOURCE_DIR}/src/errors.c ${PROJECT_SOURCE_DIR}/src/sync.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/stubs.c)
  target_include_directories(fuzz_image PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                             ${JPEG_INCLUDE} ${SPNG_INCLUDE})
  target_compile_definitions(fuzz_image PRIVATE UFORM_VERSION_STRING="${PROJECT_VERSION}")
  target_compile_options(fuzz_image PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g
                         -ffp-contract=off)
  target_link_options(fuzz_image PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_image PRIVATE ${UFORM_IMAGE_LIBRARIES} m)
endif()
