# The tokenizer's fuzz target (fuzz/fuzz_tokenizer.c), included from fuzz/CMakeLists.txt.
#
# Always: fuzz_replay_tokenizer replays the kept corpus (fuzz/corpus/tokenizer) through the same
# entry point with the normal compiler and the static library, as the ctest fuzz_replay_tokenizer.
# With -DUFORM_FUZZ=ON and clang: the libFuzzer target fuzz_tokenizer, built from src/text/ and
# src/errors.c with -fsanitize=fuzzer,address,undefined. Run it from the build directory:
#   ./fuzz/fuzz_tokenizer -max_total_time=600 -max_len=4096 NEW_DIR ../fuzz/corpus/tokenizer
# then keep what adds coverage: ./fuzz/fuzz_tokenizer -merge=1 MERGED ../fuzz/corpus/tokenizer NEW_DIR
#
# Record (2026-11-30, 2-core VM, clang 14): 15 minutes (2.5M runs) found a NULL memcpy in the Prepend
# and Replace normalisers with empty content (fixed; its input is kept as
# corpus/tokenizer/regression-prepend-empty-content), then 10 minutes more on the final code (5.2M
# runs, 775 edges) found nothing; then 5 minutes on the code with Metaspace's lead tracking (1.0M
# runs, 801 edges) found nothing. The kept corpus: the merge of all three.
find_package(ZLIB REQUIRED)
set(_uform_tokenizer_fixtures ${PROJECT_SOURCE_DIR}/test/tokenizer)

add_executable(fuzz_replay_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_tokenizer.c)
target_include_directories(fuzz_replay_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(fuzz_replay_tokenizer PRIVATE UFORM_FUZZ_REPLAY
  UFORM_TOKENIZER_FIXTURES="${_uform_tokenizer_fixtures}")
target_link_libraries(fuzz_replay_tokenizer PRIVATE uform_static ZLIB::ZLIB ${NUMA_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS} m)
add_test(NAME fuzz_replay_tokenizer COMMAND fuzz_replay_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/corpus/tokenizer)
set_tests_properties(fuzz_replay_tokenizer PROPERTIES TIMEOUT 300)

if(UFORM_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "UFORM_FUZZ needs clang (e.g. CC=clang-14), not ${CMAKE_C_COMPILER_ID}")
  endif()
  file(GLOB _uform_text_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/text/*.c)
  add_executable(fuzz_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_tokenizer.c ${_uform_text_sources}
    ${PROJECT_SOURCE_DIR}/src/errors.c ${PROJECT_SOURCE_DIR}/src/sync.c ${PROJECT_SOURCE_DIR}/src/files.c
    ${CMAKE_CURRENT_SOURCE_DIR}/stubs.c)
  target_include_directories(fuzz_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
    ${CJSON_INCLUDE} ${UTF8PROC_INCLUDE})
  target_compile_definitions(fuzz_tokenizer PRIVATE UFORM_VERSION_STRING="${PROJECT_VERSION}"
    UFORM_TOKENIZER_FIXTURES="${_uform_tokenizer_fixtures}")
  target_compile_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g)
  target_link_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_tokenizer PRIVATE ${CJSON_LIBRARY} ${UTF8PROC_LIBRARY} ZLIB::ZLIB Threads::Threads m)
endif()
