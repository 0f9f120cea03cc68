# The tokenizer benchmark (bench_tokenizer.c), included from bench/CMakeLists.txt: one thread
# encoding the committed corpus; bench_tokenizer.py runs it beside Hugging Face tokenizers.
find_package(ZLIB REQUIRED)
add_executable(bench_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/bench_tokenizer.c)
target_include_directories(bench_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(bench_tokenizer PRIVATE UFORM_TOKENIZER_FIXTURES="${PROJECT_SOURCE_DIR}/test/tokenizer")
target_link_libraries(bench_tokenizer PRIVATE uform_static ZLIB::ZLIB ${NUMA_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS} m)
# A smoke run (not a timed test): 2,000 texts once through each tokenizer, the ids counted twice.
add_test(NAME bench_tokenizer_smoke COMMAND bench_tokenizer --quick minilm unigram unigram_bytes)
set_tests_properties(bench_tokenizer_smoke PROPERTIES TIMEOUT 300)
uform_bench_rejects(bench_tokenizer "--rounds,-1" "--rounds,0" "--rounds,5x")
