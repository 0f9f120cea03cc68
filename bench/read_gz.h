/**
 *  @file   read_gz.h
 *  @brief  The whole of a gzip file (zlib) in memory, for the benchmarks that read the committed
 *          tokenizer fixtures (bench_tokenizer.c, bench_text_gpu.c).
 */
#ifndef UFORM_BENCH_READ_GZ_H
#define UFORM_BENCH_READ_GZ_H

#include <stdlib.h>
#include <zlib.h>

/** The file's decompressed bytes, NUL-terminated (`*size` before the NUL), or NULL. Free it. */
static inline char *read_gz(char const *path, size_t *size) {
    gzFile file = gzopen(path, "rb");
    if (!file) return NULL;
    size_t capacity = 1 << 20, used = 0;
    char *data = (char *)malloc(capacity + 1);
    for (int got; data && (got = gzread(file, data + used, (unsigned)(capacity - used))) > 0;) {
        used += (size_t)got;
        if (used == capacity) {
            char *grown = (char *)realloc(data, (capacity *= 2) + 1);
            if (!grown) free(data);
            data = grown;
        }
    }
    gzclose(file);
    if (data) data[used] = 0;
    *size = used;
    return data;
}

#endif // UFORM_BENCH_READ_GZ_H
