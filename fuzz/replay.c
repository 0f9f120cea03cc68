/**
 *  @file   replay.c
 *  @brief  Replays fuzzing corpora through a libFuzzer entry point without libFuzzer, so ctest
 *          re-runs every kept input with the normal compiler (and under the sanitizer builds).
 *
 *  usage: fuzz_replay_X FILE_OR_DIRECTORY...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size);

static int replay_file(char const *path, size_t *count) {
    FILE *file = fopen(path, "rb");
    if (!file) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t capacity = 4096, size = 0;
    uint8_t *data = malloc(capacity);
    for (size_t got; data && (got = fread(data + size, 1, capacity - size, file)) > 0;) {
        size += got;
        if (size == capacity) {
            uint8_t *grown = realloc(data, capacity *= 2);
            if (!grown) free(data);
            data = grown;
        }
    }
    fclose(file);
    if (!data) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    /* An exact-size copy, so reads past the input's end are caught by AddressSanitizer. */
    uint8_t *exact = malloc(size ? size : 1);
    if (!exact) {
        free(data);
        return 1;
    }
    memcpy(exact, data, size);
    free(data);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    ++*count;
    return 0;
}

static int replay_path(char const *path, size_t *count) {
    struct stat info;
    if (stat(path, &info) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(info.st_mode)) return replay_file(path, count);
    DIR *directory = opendir(path);
    if (!directory) return 1;
    int failures = 0;
    for (struct dirent *entry; (entry = readdir(directory));) {
        if (entry->d_name[0] == '.') continue;
        char child[4096];
        snprintf(child, sizeof(child), "%s/%s", path, entry->d_name);
        failures += replay_path(child, count);
    }
    closedir(directory);
    return failures;
}

int main(int argc, char **argv) {
    size_t count = 0;
    int failures = 0;
    for (int i = 1; i < argc; ++i) failures += replay_path(argv[i], &count);
    printf("replayed %zu inputs\n", count);
    if (!count) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    return failures ? 1 : 0;
}
