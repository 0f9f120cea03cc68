/**
 *  @file   encode.c
 *  @brief  `uform encode`: texts or images to embeddings with a model directory, through the public
 *          ABI only.
 *
 *      uform encode --model DIR [--format jsonl|npy|f32] [--output FILE] [--dtype f32|bf16]
 *                   [--threads N] [TEXT...]
 *      uform encode --model DIR [...] --image FILE... (a directory expands to its .jpg, .jpeg and
 *                   .png files in name order)
 *
 *  Without TEXT it reads one text per line from standard input (a trailing "\r" is dropped). Texts
 *  are encoded in batches of 256 on a RAM executor. `jsonl`, the default, writes one JSON array of
 *  numbers per text, in input order; `f32` raw little-endian rows; `npy` one NumPy array [texts,
 *  dimensions] of float32. A progress bar goes to standard error when it is a terminal and there
 *  are more than 256 texts: drawn at the start and after each batch on one line, which it ends when
 *  the run ends or before an error is printed; where the embeddings go to that same terminal, each
 *  drawing ends its line, so that no row starts on the bar's line. Errors print the status name and
 *  the engine's message and exit 1, naming the first text (its index, and its line when read from
 *  standard input) or image file that failed; usage errors exit 2. `--output FILE` is written
 *  beside it under a temporary name and renamed over FILE only when every item was encoded, so a
 *  failure leaves FILE as it was (a FILE that is not a regular file, such as /dev/stdout or a FIFO,
 *  or a symbolic link, is written in place); standard output is written batch by batch, so a
 *  failure leaves the batches before it there. An embedding that is not finite (weights that hold
 *  NaN) fails the run rather than print invalid JSON.
 */
#define _GNU_SOURCE // `mkostemp`
#include <uform.h>

#include <dirent.h>  // `opendir`
#include <errno.h>   // `errno`
#include <fcntl.h>   // `open`, `O_NONBLOCK`
#include <limits.h>  // `PATH_MAX`
#include <math.h>    // `isfinite`
#include <strings.h> // `strcasecmp`
#include <sys/stat.h> // `stat`
#include <stdint.h>  // `uint8_t`
#include <stdio.h>   // `fopen`
#include <stdlib.h>  // `malloc`
#include <string.h>  // `strcmp`
#include <unistd.h>  // `isatty`

#define ENCODE_BATCH 256
/** The largest image file read: larger ones are refused before anything is allocated. */
#define ENCODE_IMAGE_MAX_BYTES ((size_t)1 << 30)
/** The most threads `--threads` takes. */
#define ENCODE_THREADS_MAX 65536

static char const encode_usage[] =
    "usage: uform encode --model DIR [--format jsonl|npy|f32] [--output FILE] [--dtype f32|bf16]\n"
    "                    [--threads N] [--device N] [TEXT...]\n"
    "       uform encode --model DIR [options] --image FILE...\n"
    "\n"
    "Encodes texts into embeddings with the text tower of a model directory (UForm3 or\n"
    "sentence-transformers). Without TEXT, reads one text per line from standard input.\n"
    "\n"
    "  --model DIR     the model directory\n"
    "  --format F      jsonl (default: one JSON array per text, in input order), npy (one float32\n"
    "                  array of texts x dimensions) or f32 (raw little-endian float32 rows)\n"
    "  --output FILE   write there instead of standard output\n"
    "  --dtype D       hold and multiply the weights as f32 (default) or bf16\n"
    "  --threads N     threads to encode on (default: 7/8 of the cores)\n"
    "  --device N      hold the tower on GPU N (VRAM residency) and encode there; tokenising and\n"
    "                  image decoding run on host threads beside it (default: encode on the CPU)\n"
    "  --image FILE... encode images (JPEG, PNG) with the model's image tower instead of texts; every\n"
    "                  argument after it is an image, a directory stands for its .jpg, .jpeg and .png\n"
    "                  files in name order\n";

typedef struct texts_t {
    char **items;
    size_t *lengths;
    size_t count, capacity;
} texts_t;

static int texts_push(texts_t *texts, char *text, size_t length) {
    if (texts->count == texts->capacity) {
        size_t capacity = texts->capacity ? texts->capacity * 2 : 1024;
        char **items = realloc(texts->items, capacity * sizeof *items);
        if (!items) return 0;
        texts->items = items;
        size_t *lengths = realloc(texts->lengths, capacity * sizeof *lengths);
        if (!lengths) return 0;
        texts->lengths = lengths, texts->capacity = capacity;
    }
    texts->items[texts->count] = text, texts->lengths[texts->count++] = length;
    return 1;
}

/** Frees the lists of the command line: the strings `owned` holds, and both arrays. */
static void lists_free(texts_t *texts, texts_t *owned) {
    for (size_t k = 0; k < owned->count; ++k) free(owned->items[k]);
    free(owned->items), free(owned->lengths), free(texts->items), free(texts->lengths);
    *texts = (texts_t){0}, *owned = (texts_t){0};
}

static int is_image_name(char const *name) {
    char const *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int compare_names(void const *a, void const *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/** Pushes `path`, or a directory's image files in name order; the pushed strings are allocated
 *  (freed through `owned`). Returns 0 on failure, printed. */
static int push_image_path(texts_t *paths, texts_t *owned, char const *path) {
    struct stat info;
    if (stat(path, &info) != 0) {
        fprintf(stderr, "uform encode: cannot read %s: %s\n", path, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(info.st_mode)) {
        char *copy = strdup(path);
        if (!copy || !texts_push(owned, copy, 0)) return free(copy), 0;
        return texts_push(paths, copy, strlen(copy));
    }
    DIR *directory = opendir(path);
    if (!directory) {
        fprintf(stderr, "uform encode: cannot list %s: %s\n", path, strerror(errno));
        return 0;
    }
    size_t first = paths->count;
    for (struct dirent *entry; (entry = readdir(directory));) {
        if (entry->d_name[0] == '.' || !is_image_name(entry->d_name)) continue;
        size_t length = strlen(path) + strlen(entry->d_name) + 2;
        char *joined = malloc(length);
        if (!joined || !texts_push(owned, joined, 0)) {
            free(joined);
            closedir(directory);
            return 0;
        }
        snprintf(joined, length, "%s/%s", path, entry->d_name);
        struct stat entry_info;
        if (stat(joined, &entry_info) == 0 && S_ISREG(entry_info.st_mode) && !texts_push(paths, joined, length - 2)) {
            closedir(directory);
            return 0;
        }
    }
    closedir(directory);
    if (paths->count > first) qsort(paths->items + first, paths->count - first, sizeof(char *), compare_names);
    for (size_t i = first; i < paths->count; ++i) paths->lengths[i] = strlen(paths->items[i]);
    return 1;
}

/** The progress bar: its unit, whether a drawing of it has left its line open on standard error,
 *  and whether every drawing ends its line (the embeddings go to the same terminal). */
static char const *progress_unit = "texts";
static int progress_open = 0, progress_own_lines = 0;

static void progress(size_t done, size_t total) {
    int width = 40, filled = total ? (int)((double)done / (double)total * width) : 0;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu %s", filled, "########################################", width - filled, "",
            done, total, progress_unit);
    progress_open = done != total && !progress_own_lines;
    if (!progress_open) fputc('\n', stderr);
    fflush(stderr);
}

/** Ends the line a drawing of the bar left open, so that a message starts a line of its own. */
static void progress_end(void) {
    if (progress_open) fputc('\n', stderr), progress_open = 0;
}

/** Whether `file` is the terminal standard error is (the same character device). */
static int same_terminal_as_stderr(FILE *file) {
    struct stat a, b;
    int fd = fileno(file);
    return fd >= 0 && isatty(fd) && fstat(fd, &a) == 0 && fstat(STDERR_FILENO, &b) == 0 && S_ISCHR(a.st_mode) &&
           S_ISCHR(b.st_mode) && a.st_rdev == b.st_rdev;
}

/** Reads a whole image file: a regular file of at most ENCODE_IMAGE_MAX_BYTES (never a FIFO or a
 *  device, which could block or never end). NULL with the reason printed. */
static char *read_image_file(char const *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat info;
    char const *problem = NULL;
    if (fd < 0) problem = strerror(errno);
    else if (fstat(fd, &info) != 0) problem = strerror(errno);
    else if (!S_ISREG(info.st_mode)) problem = "not a regular file";
    else if ((unsigned long long)info.st_size > ENCODE_IMAGE_MAX_BYTES) problem = "larger than 1 GiB";
    char *data = problem ? NULL : malloc((size_t)info.st_size + 1);
    if (!problem && !data) problem = "out of memory";
    size_t used = 0;
    while (!problem && used < (size_t)info.st_size) {
        ssize_t got = read(fd, data + used, (size_t)info.st_size - used);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) problem = strerror(errno);
        if (got <= 0) break;
        used += (size_t)got;
    }
    if (fd >= 0) close(fd);
    if (problem) {
        progress_end();
        fprintf(stderr, "uform encode: cannot read %s: %s\n", path, problem);
        free(data);
        return NULL;
    }
    *size = used;
    return data;
}

static int fail_engine(uform_status_t status, char const *what) {
    progress_end();
    fprintf(stderr, "uform encode: %s: %s: %s\n", what, uform_status_name(status), uform_error_message());
    return 1;
}

static void write_npy_header(FILE *out, size_t rows, size_t cols) {
    char header[128];
    int length = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows,
                          cols);
    size_t total = 10 + (size_t)length + 1, padded = (total + 63) / 64 * 64;
    fwrite("\x93NUMPY\x01\x00", 1, 8, out);
    uint16_t header_length = (uint16_t)(padded - 10);
    uint8_t little[2] = {(uint8_t)(header_length & 0xFF), (uint8_t)(header_length >> 8)};
    fwrite(little, 1, 2, out);
    fwrite(header, 1, (size_t)length, out);
    for (size_t i = total; i < padded; ++i) fputc(' ', out);
    fputc('\n', out);
}

/** Where the embeddings go: standard output, FILE in place (not a regular file), or a temporary
 *  file beside FILE renamed over it on success. */
typedef struct output_t {
    FILE *file;
    char const *path;  /**< FILE, or NULL for standard output. */
    char *temporary;   /**< The temporary's path while one is written, else NULL. */
} output_t;

static int output_open(output_t *output, char const *path) {
    *output = (output_t){.file = stdout, .path = path};
    if (!path) return 1;
    struct stat info;
    /* A symbolic link is written through (renaming over it would replace the link itself). */
    int link = lstat(path, &info) == 0 && S_ISLNK(info.st_mode);
    int exists = stat(path, &info) == 0;
    if (exists && (link || !S_ISREG(info.st_mode))) {
        if (S_ISDIR(info.st_mode)) {
            fprintf(stderr, "uform encode: cannot write %s: Is a directory\n", path);
            return 0;
        }
        if (!(output->file = fopen(path, "wb"))) {
            fprintf(stderr, "uform encode: cannot write %s: %s\n", path, strerror(errno));
            output->file = stdout;
            return 0;
        }
        return 1;
    }
    size_t length = strlen(path) + 16;
    output->temporary = malloc(length);
    if (!output->temporary) return fputs("uform encode: out of memory\n", stderr), 0;
    snprintf(output->temporary, length, "%s.XXXXXX", path);
    int fd = mkostemp(output->temporary, O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "uform encode: cannot write %s: %s\n", path, strerror(errno));
        free(output->temporary), output->temporary = NULL;
        return 0;
    }
    /* The mode a new file would get (0666 less the umask), or the replaced file's. */
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = exists ? (info.st_mode & 07777) : (0666 & ~mask);
    if (fchmod(fd, mode) != 0 || !(output->file = fdopen(fd, "wb"))) {
        fprintf(stderr, "uform encode: cannot write %s: %s\n", output->temporary, strerror(errno));
        close(fd), unlink(output->temporary);
        free(output->temporary), output->temporary = NULL, output->file = stdout;
        return 0;
    }
    return 1;
}

/** Flushes and closes the output; on success renames the temporary over FILE, on failure removes it.
 *  Returns `code`, or 1 where writing failed. */
static int output_close(output_t *output, int code) {
    if (output->file == stdout) {
        if (code == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
            fprintf(stderr, "uform encode: could not write the output: %s\n", strerror(errno));
            code = 1;
        }
        return code;
    }
    if (fclose(output->file) != 0 && code == 0) {
        fprintf(stderr, "uform encode: could not write %s: %s\n", output->path, strerror(errno));
        code = 1;
    }
    if (output->temporary) {
        if (code == 0 && rename(output->temporary, output->path) != 0) {
            fprintf(stderr, "uform encode: could not write %s: %s\n", output->path, strerror(errno));
            code = 1;
        }
        if (code != 0) unlink(output->temporary);
        free(output->temporary);
    }
    output->file = stdout;
    return code;
}

/** Names the item `index` of the run: its file for images, its index (and line of standard input)
 *  for texts. */
static void item_name(char *name, size_t size, int images, texts_t const *texts, size_t index, int from_stdin) {
    if (images) snprintf(name, size, "%s", texts->items[index]);
    else if (from_stdin) snprintf(name, size, "text %zu (line %zu of standard input)", index, index + 1);
    else snprintf(name, size, "text %zu", index);
}

int uform_command_encode(int argc, char **argv) {
    char const *model_path = NULL, *format = "jsonl", *output_path = NULL, *dtype = "f32";
    long threads = 0, device = -1;
    texts_t texts = {0}, owned = {0};
    int from_arguments = 0, images = 0;
    for (int i = 0; i < argc; ++i) {
        char const *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(encode_usage, stdout);
            lists_free(&texts, &owned);
            return 0;
        }
        else if (!strcmp(a, "--model") && has_value) model_path = argv[++i];
        else if (!strcmp(a, "--format") && has_value) format = argv[++i];
        else if (!strcmp(a, "--output") && has_value) output_path = argv[++i];
        else if (!strcmp(a, "--dtype") && has_value) dtype = argv[++i];
        else if ((!strcmp(a, "--threads") || !strcmp(a, "--device")) && has_value) {
            int is_threads = a[2] == 't';
            char *end = NULL;
            errno = 0;
            long value = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || errno == ERANGE || value < 0 || value > (is_threads ? ENCODE_THREADS_MAX : 4095)) {
                fprintf(stderr, "uform encode: %s takes %s, not '%s'\n%s", a,
                        is_threads ? "a count from 0 to 65536" : "a GPU ordinal from 0 to 4095", argv[i], encode_usage);
                lists_free(&texts, &owned);
                return 2;
            }
            *(is_threads ? &threads : &device) = value;
        }
        else if (!strcmp(a, "--image")) images = 1, from_arguments = 1;
        else if (!strcmp(a, "--")) {
            for (++i; i < argc; ++i) {
                if (images ? !push_image_path(&texts, &owned, argv[i]) : !texts_push(&texts, argv[i], strlen(argv[i]))) {
                    if (!images) fputs("uform encode: out of memory\n", stderr);
                    lists_free(&texts, &owned);
                    return 1;
                }
                from_arguments = 1;
            }
        }
        /* "--name" and "-x" are options; a text that starts so goes after "--". */
        else if (a[0] == '-' && (a[1] == '-' || (((a[1] | 32) >= 'a' && (a[1] | 32) <= 'z') && !a[2]))) {
            fprintf(stderr, "uform encode: unknown option or missing value: '%s' (texts that start with '-' go after '--')\n%s",
                    a, encode_usage);
            lists_free(&texts, &owned);
            return 2;
        }
        else if (images) {
            if (!push_image_path(&texts, &owned, a)) {
                lists_free(&texts, &owned);
                return 1;
            }
        }
        else if (!texts_push(&texts, argv[i], strlen(argv[i]))) {
            fputs("uform encode: out of memory\n", stderr);
            lists_free(&texts, &owned);
            return 1;
        }
        else from_arguments = 1;
    }
    int bad_usage = 0;
    if (!model_path) fputs("uform encode: --model DIR is required\n", stderr), bad_usage = 1;
    if (strcmp(format, "jsonl") && strcmp(format, "npy") && strcmp(format, "f32"))
        fprintf(stderr, "uform encode: --format is jsonl, npy or f32, not '%s'\n", format), bad_usage = 1;
    if (strcmp(dtype, "f32") && strcmp(dtype, "bf16"))
        fprintf(stderr, "uform encode: --dtype is f32 or bf16, not '%s'\n", dtype), bad_usage = 1;
    if (images && !texts.count) fputs("uform encode: --image needs at least one image file\n", stderr), bad_usage = 1;
    if (bad_usage) {
        fputs(encode_usage, stderr);
        lists_free(&texts, &owned);
        return 2;
    }

    /* Texts from standard input, one per line. */
    char *buffer = NULL;
    if (!from_arguments) {
        size_t size = 0, capacity = 0;
        for (;;) {
            if (size + 65536 > capacity) {
                capacity = capacity ? capacity * 2 : 1 << 20;
                char *grown = realloc(buffer, capacity);
                if (!grown) {
                    fputs("uform encode: out of memory reading standard input\n", stderr);
                    free(buffer);
                    lists_free(&texts, &owned);
                    return 1;
                }
                buffer = grown;
            }
            size_t got = fread(buffer + size, 1, capacity - size - 1, stdin);
            size += got;
            if (got == 0) break;
        }
        if (ferror(stdin)) {
            fprintf(stderr, "uform encode: cannot read standard input: %s\n", strerror(errno));
            free(buffer);
            lists_free(&texts, &owned);
            return 1;
        }
        buffer[size] = '\0';
        for (size_t start = 0; start < size;) {
            char *newline = memchr(buffer + start, '\n', size - start);
            size_t end = newline ? (size_t)(newline - buffer) : size, length = end - start;
            if (length && buffer[start + length - 1] == '\r') --length;
            buffer[start + length] = '\0';
            if (!texts_push(&texts, buffer + start, length)) {
                fputs("uform encode: out of memory\n", stderr);
                free(buffer);
                lists_free(&texts, &owned);
                return 1;
            }
            start = end + 1;
        }
    }

    int code = 1;
    uform_model_t model = NULL;
    uform_executor_t executor = NULL;
    float *rows = NULL, *all = NULL;
    output_t output = {.file = stdout};
    uform_image_t *batch_images = NULL;
    uform_status_t *statuses = NULL;
    int32_t const ordinal[1] = {(int32_t)device};
    uform_vram_options_t vram = {.devices = ordinal, .devices_count = 1};
    uform_model_options_t options = {.path = model_path, .modality = images ? uform_modality_image_k : uform_modality_text_k,
                                     .residency = device >= 0 ? uform_residency_vram_k : uform_residency_ram_k,
                                     .vram = device >= 0 ? &vram : NULL,
                                     .weights_dtype = strcmp(dtype, "bf16") ? uform_dtype_f32_k : uform_dtype_bf16_k};
    uform_status_t status = uform_model_open(&options, &model);
    if (status != uform_status_ok_k) {
        code = fail_engine(status, model_path);
        goto done;
    }
    uform_model_description_t description;
    status = uform_model_describe(model, &description);
    if (status != uform_status_ok_k) {
        code = fail_engine(status, "describing the model");
        goto done;
    }
    status = device >= 0 ? uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor)
                         : uform_executor_for_ram(NULL, (size_t)threads, 0, &executor);
    if (status != uform_status_ok_k) {
        code = fail_engine(status, "starting the threads");
        goto done;
    }
    if (!output_open(&output, output_path)) goto done;
    size_t dims = description.dimensions;
    int npy = !strcmp(format, "npy"), jsonl = !strcmp(format, "jsonl");
    rows = malloc(ENCODE_BATCH * dims * sizeof(float));
    statuses = malloc(ENCODE_BATCH * sizeof(uform_status_t));
    if (npy) all = malloc((texts.count ? texts.count : 1) * dims * sizeof(float));
    if (images) batch_images = calloc(ENCODE_BATCH, sizeof(uform_image_t)), progress_unit = "images";
    if (!rows || !statuses || (npy && !all) || (images && !batch_images)) {
        fputs("uform encode: out of memory for the embeddings\n", stderr);
        goto done;
    }
    int show = isatty(STDERR_FILENO) && texts.count > ENCODE_BATCH;
    progress_own_lines = same_terminal_as_stderr(output.file);
    if (show) progress(0, texts.count);
    for (size_t first = 0; first < texts.count; first += ENCODE_BATCH) {
        size_t count = texts.count - first < ENCODE_BATCH ? texts.count - first : ENCODE_BATCH;
        float *target = npy ? all + first * dims : rows;
        uform_embeddings_t embeddings = {.data = target, .dtype = uform_dtype_f32_k};
        if (images) {
            for (size_t i = 0; i < count; ++i) {
                size_t size = 0;
                void *data = read_image_file(texts.items[first + i], &size);
                if (!data) {
                    for (size_t k = 0; k < i; ++k) free((void *)batch_images[k].data);
                    goto done;
                }
                batch_images[i] = (uform_image_t){.data = data, .size = size};
            }
            status = uform_encode_images(executor, model, batch_images, count, &embeddings, statuses, NULL);
        }
        else
            status = uform_encode_texts(executor, model, (char const *const *)texts.items + first, texts.lengths + first,
                                        count, &embeddings, statuses, NULL);
        char name[PATH_MAX + 64];
        if (status != uform_status_ok_k) {
            snprintf(name, sizeof name, "%s %zu to %zu", images ? "images" : "texts", first, first + count - 1);
            code = fail_engine(status, name);
        }
        /* The first item that failed, by its index and line or its file, with the engine's reason:
         * the item again alone, without statuses, so that the engine says why. */
        for (size_t i = 0; status == uform_status_ok_k && i < count; ++i) {
            if (statuses[i] == uform_status_ok_k) continue;
            progress_end();
            item_name(name, sizeof name, images, &texts, first + i, !from_arguments);
            uform_status_t alone =
                images ? uform_encode_images(executor, model, batch_images + i, 1, &embeddings, NULL, NULL)
                       : uform_model_tokenize(model, texts.items[first + i], texts.lengths[first + i], NULL, 0, &(size_t){0});
            char const *reason = alone != uform_status_ok_k ? uform_error_message() : "", *prefix = "uform_encode_images: image 0: ";
            if (!strncmp(reason, prefix, strlen(prefix))) reason += strlen(prefix); /* the file names the image */
            fprintf(stderr, "uform encode: %s: %s: %s\n", name, uform_status_name(statuses[i]), reason);
            status = statuses[i];
        }
        if (images)
            for (size_t i = 0; i < count; ++i) free((void *)batch_images[i].data), batch_images[i].data = NULL;
        if (status != uform_status_ok_k) goto done;
        for (size_t i = 0; i < count; ++i)
            for (size_t j = 0; j < dims; ++j)
                if (!isfinite(target[i * dims + j])) {
                    progress_end();
                    item_name(name, sizeof name, images, &texts, first + i, !from_arguments);
                    fprintf(stderr, "uform encode: %s: the embedding is not finite (the model's weights hold NaN or "
                                    "infinity)\n", name);
                    goto done;
                }
        if (jsonl)
            for (size_t i = 0; i < count; ++i) {
                fputc('[', output.file);
                for (size_t j = 0; j < dims; ++j) fprintf(output.file, j ? ", %.9g" : "%.9g", (double)target[i * dims + j]);
                fputs("]\n", output.file);
            }
        else if (!npy) fwrite(target, sizeof(float), count * dims, output.file);
        if (show && progress_own_lines) fflush(output.file); /* the rows before the bar's line */
        if (show) progress(first + count, texts.count);
    }
    if (npy) {
        write_npy_header(output.file, texts.count, dims);
        fwrite(all, sizeof(float), texts.count * dims, output.file);
    }
    if (fflush(output.file) != 0 || ferror(output.file)) {
        fprintf(stderr, "uform encode: could not write the output: %s\n", strerror(errno));
        goto done;
    }
    code = 0;
done:
    code = output_close(&output, code);
    free(batch_images), free(statuses);
    free(rows), free(all), free(buffer);
    lists_free(&texts, &owned);
    uform_executor_free(executor);
    uform_model_free(model);
    return code;
}
