/**
 *  @file   encode.c
 *  @brief  `uform encode`: texts or images to embeddings with a model directory, through the public
 *          ABI only.
 *
 *      uform encode --model DIR [--format jsonl|npy|f32] [--output FILE] [--dtype f32|bf16]
 *                   [--threads N] [--device N] [--batch N] [TEXT...]
 *      uform encode --model DIR [...] --image FILE... (a directory expands to its .jpg, .jpeg and
 *                   .png files in name order: regular files, not hidden, not in subdirectories; an
 *                   entry it cannot look at fails the run as the same path given alone would)
 *      uform encode --model DIR --features [...]  every token's last hidden state instead
 *
 *  Without TEXT it reads one text per line from standard input (a trailing "\r" is dropped) as the
 *  lines come: a batch takes the first line (waiting for it) and those already there, up to
 *  `--batch` (256; 1,024 texts with `--device`; fewer once its lines hold 64 MiB, or its image files
 *  256 MiB), so memory stays bounded by two batches however long the input, and a writer that
 *  keeps its pipe open gets each line's row once it is encoded. Two batches are in flight: batch k
 *  runs as a deferred encode (on a RAM executor, or a VRAM one with `--device`) while batch k - 1's
 *  rows are written and batch k + 1 is read. `jsonl`, the default, writes one JSON array of numbers
 *  per text, in input order, each number as "%.9g" prints it (the same float32 read back;
 *  format_float.h, seven times faster than printf; with `--device`, on a RAM executor's threads
 *  beside the GPU, 32 rows a task, since one thread formats slower than a GPU encodes;
 *  UFORM_ENCODE_FORMAT_THREADS=N sets their count, 0 none); `f32` raw little-endian rows; `npy` one NumPy
 *  array [texts, dimensions] of float32 (its header rewritten at the end where the output is a file
 *  it can seek in, else the rows are spooled to an unlinked temporary file until the count is known;
 *  a run stopped at a failed item ends standard output's array at the rows before it, as jsonl and
 *  f32 keep them). Each batch's rows are flushed
 *  once written. A progress bar goes to standard error when it is a terminal and there are more
 *  than one batch of items: where the total is known (arguments, images, or standard input from a
 *  regular file, whose lines are counted first, only then) drawn at the start and after each batch on one
 *  line, which it ends when the run ends or before an error is printed; from a pipe, the count
 *  alone from the second batch on. Where the embeddings go to that same terminal, each drawing ends
 *  its line, so that no row starts on the bar's line. Errors print the status name and the engine's
 *  message and exit 1, naming the first text (its index, and its line when read from standard
 *  input) or image file that failed, after the rows of the items before it; usage errors exit 2.
 *  `--output FILE` is written beside it under a temporary name (.uform-XXXXXX in its directory) and
 *  renamed over FILE only when every item was encoded, so a failure leaves FILE as it was, and so
 *  does a signal that ends the process (SIGINT, SIGTERM, SIGPIPE, SIGALRM, ...: temporary_signals),
 *  which removes the temporary; a FILE the caller may not write is refused (as the shell would), and
 *  so is one in a directory it may not write, or another user's in a sticky directory such as /tmp,
 *  where only its owner may replace it. A FILE that is not a regular file, such as a FIFO, or a
 *  symbolic link, is written in place, a link's missing target created; /dev/stdout, /dev/stderr,
 *  /dev/fd/N and /proc/self/fd/N are written through the open descriptor, an appending one still
 *  appending. Standard output
 *  is written batch by batch, so a failure leaves the rows of the items before it there. A write that fails (a full disk, a reader gone from
 *  a pipe) fails the run once that batch was written, naming the output, however long the input.
 *  An embedding that is not finite (arithmetic that overflowed) fails the run rather than print invalid
 *  JSON. `--output ""` and `--model ""` are usage errors.
 *
 *  `--features` writes each item's features (`uform_embeddings_t.features`: the tower's last hidden
 *  states, one row of `hidden` numbers per token) instead of its embedding: in jsonl one JSON array
 *  of rows per item, a text's rows its tokens alone (specials included; `uform_model_tokenize`
 *  counts them), an image's all of them ([CLS], registers, patches); in npy one float32 array
 *  [items, tokens, hidden] and in f32 as many raw rows, a text's zero rows after its tokens
 *  (`uform_model_description_t.tokens` rows an item). Without `--batch`, a batch's features hold at
 *  most 64 MiB.
 */
#define _GNU_SOURCE // `mkostemp`
#include <uform.h>

#include <dirent.h>  // `opendir`
#include <errno.h>   // `errno`
#include <fcntl.h>   // `open`, `O_NONBLOCK`
#include <limits.h>  // `PATH_MAX`
#include <math.h>    // `isfinite`
#include <poll.h>    // `poll`
#include <sched.h>   // `sched_getaffinity`
#include <signal.h>  // `sigaction`
#include <strings.h> // `strcasecmp`
#include <sys/stat.h> // `stat`
#include <stdarg.h>  // `va_list`
#include <stdint.h>  // `uint8_t`
#include <stdio.h>   // `fopen`
#include <stdlib.h>  // `malloc`
#include <string.h>  // `strcmp`
#include <unistd.h>  // `isatty`

#include "format_float.h"  // `format_float_g9`
#include "strict_number.h" // `strict_count`

/** Items per call unless `--batch` says otherwise: on CPU threads, and beside a GPU (`--device`),
 *  where larger calls pay (all-MiniLM-L6-v2 on an H100: 33-44k texts/s at 256, 55-73k at 1,024). */
#define ENCODE_BATCH 256
#define ENCODE_BATCH_DEVICE 1024
/** A batch also ends once its image files or its lines hold this many bytes (two batches are held). */
#define ENCODE_BATCH_IMAGE_BYTES ((size_t)256 << 20)
#define ENCODE_BATCH_TEXT_BYTES ((size_t)64 << 20)
/** The longest line of standard input: a longer one fails the run (it is no text to encode). */
#define ENCODE_LINE_MAX_BYTES ((size_t)64 << 20)
/** The most items `--batch` takes. */
#define ENCODE_BATCH_MAX 65536
/** The largest image file read: larger ones are refused before anything is allocated. */
#define ENCODE_IMAGE_MAX_BYTES ((size_t)1 << 30)
/** The most threads `--threads` takes. */
#define ENCODE_THREADS_MAX 65536
/** With `--features` and no `--batch`, a batch holds at most this many bytes of features. */
#define ENCODE_BATCH_FEATURE_BYTES ((size_t)64 << 20)

static char const encode_usage[] =
    "usage: uform encode --model DIR [--format jsonl|npy|f32] [--output FILE] [--dtype f32|bf16]\n"
    "                    [--threads N] [--device N] [--batch N] [--features] [TEXT...]\n"
    "       uform encode --model DIR [options] --image FILE...\n"
    "\n"
    "Encodes texts into embeddings with the text tower of a model directory (UForm3 or\n"
    "sentence-transformers), or images with its image tower (--image). Without TEXT or --image,\n"
    "reads one text per line from standard input.\n"
    "\n"
    "  --model DIR     the model directory\n"
    "  --format F      jsonl (default: one JSON array per text, in input order), npy (one float32\n"
    "                  array of texts x dimensions) or f32 (raw little-endian float32 rows)\n"
    "  --output FILE   write there instead of standard output\n"
    "  --dtype D       hold and multiply the weights as f32 (default) or bf16\n"
    "  --threads N     threads to encode on (default: every core the process may run on; ignored\n"
    "                  with --device)\n"
    "  --device N      hold the tower on GPU N (VRAM residency) and encode there; tokenising and\n"
    "                  image decoding run on host threads beside it (default: encode on the CPU)\n"
    "  --batch N       items per call (default 256, or 1024 texts with --device; fewer where the\n"
    "                  files or lines reach 256 or 64 MiB); two calls are in flight, so reading and\n"
    "                  writing overlap the encoding\n"
    "  --features      every token's last hidden state instead of the embedding: jsonl one array of\n"
    "                  rows per item (a text's tokens, an image's [CLS], registers and patches), npy\n"
    "                  one array of items x tokens x hidden (a text's zero rows after its tokens), f32\n"
    "                  the same raw\n"
    "  --image FILE... encode images (JPEG, PNG) with the model's image tower instead of texts; every\n"
    "                  argument after it is an image, a directory stands for its .jpg, .jpeg and .png\n"
    "                  files in name order (not hidden ones, not its subdirectories; an argument\n"
    "                  before it is a text: a usage error)\n";

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

/** `text` for a message line: control bytes (a newline in a file name, an escape sequence) as
 *  \xNN, so that a name cannot forge or break lines. Two buffers, used in turn: a message may show two. */
static char const *visible(char const *text) {
    static char buffers[2][PATH_MAX * 4 + 1];
    static int turn;
    char *out = buffers[turn ^= 1];
    size_t used = 0;
    for (unsigned char const *at = (unsigned char const *)text; *at && used + 5 < sizeof buffers[0]; ++at)
        if (*at < 0x20 || *at == 0x7f) used += (size_t)snprintf(out + used, 5, "\\x%02x", *at);
        else out[used++] = (char)*at;
    out[used] = 0;
    return out;
}

static int is_image_name(char const *name) {
    char const *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int compare_names(void const *a, void const *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/** The last directory given to --image that held no image file, for the usage error. */
static char const *empty_image_directory = NULL;

/** Pushes `path`, or a directory's image files in name order; the pushed strings are allocated
 *  (freed through `owned`). Returns 0 on failure, printed. */
static int push_image_path(texts_t *paths, texts_t *owned, char const *path) {
    struct stat info;
    if (stat(path, &info) != 0) {
        fprintf(stderr, "uform encode: cannot read %s: %s\n", visible(path), strerror(errno));
        return 0;
    }
    if (!S_ISDIR(info.st_mode)) {
        char *copy = strdup(path);
        if (!copy || !texts_push(owned, copy, 0)) return free(copy), fputs("uform encode: out of memory\n", stderr), 0;
        return texts_push(paths, copy, strlen(copy));
    }
    DIR *directory = opendir(path);
    if (!directory) {
        fprintf(stderr, "uform encode: cannot list %s: %s\n", visible(path), strerror(errno));
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
            return fputs("uform encode: out of memory\n", stderr), 0;
        }
        snprintf(joined, length, "%s/%s", path, entry->d_name);
        /* An entry that cannot be looked at (a dangling or looping link, a directory that may be
         * listed but not searched) fails as the same path given alone would; one that is no regular
         * file (a FIFO, a device, a directory) is no image and is passed over. */
        struct stat entry_info;
        if (stat(joined, &entry_info) != 0) {
            fprintf(stderr, "uform encode: cannot read %s: %s\n", visible(joined), strerror(errno));
            closedir(directory);
            return 0;
        }
        if (S_ISREG(entry_info.st_mode) && !texts_push(paths, joined, length - 2)) {
            closedir(directory);
            return fputs("uform encode: out of memory\n", stderr), 0;
        }
    }
    closedir(directory);
    if (paths->count == first) empty_image_directory = path;
    if (paths->count > first) qsort(paths->items + first, paths->count - first, sizeof(char *), compare_names);
    for (size_t i = first; i < paths->count; ++i) paths->lengths[i] = strlen(paths->items[i]);
    return 1;
}

/** The progress bar: its unit, whether a drawing of it has left its line open on standard error,
 *  and whether every drawing ends its line (the embeddings go to the same terminal). */
static char const *progress_unit = "texts";
static int progress_open = 0, progress_own_lines = 0;

/** Draws the bar at `done` of `total` items, or, when the total is not known (`known` 0: texts from
 *  a pipe or a terminal), the count alone; `final` ends the line (so does a bar at its total). */
static void progress(size_t done, size_t total, int known, int final) {
    if (known) {
        int width = 40, filled = total ? (int)((double)done / (double)total * width) : 0;
        if (filled > width) filled = width;
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu %s", filled, "########################################", width - filled, "",
                done, total, progress_unit);
        final = final || done >= total;
    }
    else fprintf(stderr, "\r%zu %s", done, progress_unit);
    progress_open = !final && !progress_own_lines;
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

/** Why reading the next batch failed: printed only after the batch before it was written (its rows
 *  and its drawing of the bar come first). */
static char read_failure[PATH_MAX + 256];

__attribute__((format(printf, 1, 2))) static void read_failed(char const *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(read_failure, sizeof read_failure, format, arguments);
    va_end(arguments);
}

/** Reads a whole image file: a regular file of at most ENCODE_IMAGE_MAX_BYTES (never a FIFO or a
 *  device, which could block or never end). NULL with the reason kept in `read_failure`. */
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
        read_failed("uform encode: cannot read %s: %s\n", visible(path), problem);
        free(data);
        return NULL;
    }
    *size = used;
    return data;
}

static int fail_engine(uform_status_t status, char const *what) {
    progress_end();
    fprintf(stderr, "uform encode: %s: %s: %s\n", visible(what), uform_status_name(status), visible(uform_error_message()));
    return 1;
}

/** The header of a version 1.0 npy file of `rows` x `cols` float32 (with `inner`, `rows` x
 *  `cols / inner` x `inner`), always 128 bytes (the dictionary padded with spaces), so that a header
 *  written first can be rewritten in place. */
static void write_npy_header(FILE *out, size_t rows, size_t cols, size_t inner) {
    char header[128];
    int length = inner ? snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu, %zu), }",
                                  rows, cols / inner, inner)
                       : snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }",
                                  rows, cols);
    fwrite("\x93NUMPY\x01\x00", 1, 8, out);
    uint8_t const little[2] = {128 - 10, 0};
    fwrite(little, 1, 2, out);
    fwrite(header, 1, (size_t)length, out);
    for (size_t i = 10 + (size_t)length + 1; i < 128; ++i) fputc(' ', out);
    fputc('\n', out);
}

/** The rows of an npy output: written as they come after a placeholder header that the end rewrites,
 *  where the output is a regular file written at a position it can seek back to (not appending);
 *  else (a pipe, a terminal) spooled to an unlinked temporary file (`tmpfile`, in /tmp)
 *  until the end, when the row count is known, or held in memory where no temporary file can be
 *  made. A run that stops at a failed item still ends its npy: the header counts the rows before it. */
typedef struct npy_rows_t {
    int began;    /**< `npy_begin` ran and `npy_end` has not: there is an array to end. */
    int seekable;
    off_t start;  /**< Where the header goes, when seekable. */
    FILE *spool;  /**< The rows spooled, when not seekable; NULL where `tmpfile` failed. */
    float *rows;  /**< The rows held, when not seekable and without a spool. */
    size_t count, capacity;
    size_t inner; /**< 0: rows of numbers; else each row is rows of `inner` numbers (features). */
} npy_rows_t;

/** Says what could not be done with the npy rows' temporary file (`doing`), and why. */
static void spool_failed(char const *doing, int error) {
    progress_end();
    fprintf(stderr, "uform encode: could not %s: %s\n", doing, strerror(error ? error : EIO));
}

static int npy_begin(npy_rows_t *npy, FILE *out, size_t dims) {
    struct stat info;
    int const fd = fileno(out), flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    npy->began = 1;
    npy->start = ftello(out);
    npy->seekable = flags >= 0 && !(flags & O_APPEND) && fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && npy->start >= 0;
    if (npy->seekable) write_npy_header(out, 0, dims, npy->inner);
    else npy->spool = tmpfile();
    return 1;
}

static int npy_append(npy_rows_t *npy, FILE *out, float const *rows, size_t count, size_t dims) {
    if (!count) return 1;
    if (npy->seekable) return fwrite(rows, sizeof(float) * dims, count, out) == count;
    if (npy->spool) {
        errno = 0;
        if (fwrite(rows, sizeof(float) * dims, count, npy->spool) == count) return 1;
        return spool_failed("spool the npy rows to a temporary file", errno), 0;
    }
    if (npy->count + count > npy->capacity) {
        size_t capacity = npy->capacity ? npy->capacity : 1024;
        while (capacity < npy->count + count) capacity *= 2;
        float *grown = capacity <= SIZE_MAX / sizeof(float) / dims ? realloc(npy->rows, capacity * dims * sizeof(float)) : NULL;
        if (!grown) return fputs("uform encode: out of memory holding the npy rows\n", stderr), 0;
        npy->rows = grown, npy->capacity = capacity;
    }
    memcpy(npy->rows + npy->count * dims, rows, count * dims * sizeof(float));
    npy->count += count;
    return 1;
}

/** Ends the array of the first `count` rows appended: 1 when written; 0 when a write to `out` fails
 *  (`errno` says why); -1 when the spool cannot be read back (said here), with nothing written. */
static int npy_end(npy_rows_t *npy, FILE *out, size_t count, size_t dims) {
    npy->began = 0; /* ended once, even where a write fails: no second header after a failed end */
    if (!npy->seekable) {
        if (npy->spool && (fflush(npy->spool) != 0 || ferror(npy->spool) || fseeko(npy->spool, 0, SEEK_SET) != 0))
            return spool_failed("read back the npy rows' temporary file", errno), -1;
        write_npy_header(out, count, dims, npy->inner);
        if (!npy->spool) return fwrite(npy->rows, sizeof(float) * dims, count, out) == count || !count;
        char chunk[1 << 16];
        for (uint64_t left = (uint64_t)count * dims * sizeof(float); left;) {
            size_t const want = left < sizeof chunk ? (size_t)left : sizeof chunk;
            if (fread(chunk, 1, want, npy->spool) != want) /* the header is out: the output is cut short */
                return spool_failed("read back the npy rows' temporary file", ferror(npy->spool) ? errno : 0), -1;
            if (fwrite(chunk, 1, want, out) != want) return 0;
            left -= want;
        }
        return 1;
    }
    off_t const end = ftello(out);
    if (fflush(out) != 0 || end < 0 || fseeko(out, npy->start, SEEK_SET) != 0) return 0;
    write_npy_header(out, count, dims, npy->inner);
    return fflush(out) == 0 && fseeko(out, end, SEEK_SET) == 0;
}

/** Where the embeddings go: standard output, FILE in place (not a regular file), or a temporary
 *  file beside FILE renamed over it on success. */
typedef struct output_t {
    FILE *file;
    char const *path;  /**< FILE, or NULL for standard output. */
    char *temporary;   /**< The temporary's path while one is written, else NULL. */
} output_t;

/** Says that writing `name` failed and why (EIO where no call left a reason); returns 1. */
static int output_failed(char const *name, int error) {
    progress_end();
    fprintf(stderr, "uform encode: could not write %s: %s\n", name ? visible(name) : "standard output",
            strerror(error ? error : EIO));
    return 1;
}

/** While the temporary exists, every signal whose default action ends the process and that is not a
 *  crash (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGPROF,
 *  SIGIO, SIGPWR, SIGXCPU and SIGXFSZ, the CPU and file size limits) removes it before it ends the
 *  process (as it would have), so that an interrupted run too leaves FILE as it was. A signal the
 *  process ignores or handles keeps its disposition. */
#define TEMPORARY_SIGNALS 14
static int const temporary_signals[TEMPORARY_SIGNALS] = {SIGINT,  SIGTERM,   SIGHUP,  SIGQUIT, SIGPIPE,
                                                         SIGALRM, SIGUSR1,   SIGUSR2, SIGVTALRM, SIGPROF,
                                                         SIGIO,   SIGPWR,    SIGXCPU, SIGXFSZ};
static struct sigaction temporary_previous[TEMPORARY_SIGNALS];
static int temporary_guarded[TEMPORARY_SIGNALS];
static char temporary_path[PATH_MAX + 16]; /**< The handler's copy: async-signal-safe to read. */

static void temporary_remove_and_die(int number) {
    unlink(temporary_path);
    struct sigaction fallback = {.sa_handler = SIG_DFL};
    sigaction(number, &fallback, NULL);
    raise(number); /* blocked until the handler returns, then the default action: the end */
}

static void temporary_guard(char const *path) {
    if ((size_t)snprintf(temporary_path, sizeof temporary_path, "%s", path) >= sizeof temporary_path) return;
    struct sigaction handler = {.sa_handler = temporary_remove_and_die};
    sigemptyset(&handler.sa_mask);
    for (int i = 0; i < TEMPORARY_SIGNALS; ++i) sigaddset(&handler.sa_mask, temporary_signals[i]);
    for (int i = 0; i < TEMPORARY_SIGNALS; ++i)
        temporary_guarded[i] = sigaction(temporary_signals[i], NULL, &temporary_previous[i]) == 0 &&
                               temporary_previous[i].sa_handler == SIG_DFL &&
                               sigaction(temporary_signals[i], &handler, NULL) == 0;
}

/** Gives the signals their actions back once the temporary was renamed or removed. */
static void temporary_unguard(void) {
    for (int i = 0; i < TEMPORARY_SIGNALS; ++i)
        if (temporary_guarded[i]) sigaction(temporary_signals[i], &temporary_previous[i], NULL), temporary_guarded[i] = 0;
}

/** The descriptor that `path` names (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), else -1. */
static int descriptor_named(char const *path) {
    if (!strcmp(path, "/dev/stdout")) return STDOUT_FILENO;
    if (!strcmp(path, "/dev/stderr")) return STDERR_FILENO;
    char const *digits = !strncmp(path, "/dev/fd/", 8)         ? path + 8
                         : !strncmp(path, "/proc/self/fd/", 14) ? path + 14
                                                                : NULL;
    size_t number = 0;
    return digits && strict_count(digits, 0, INT_MAX, false, &number) ? (int)number : -1;
}

static int output_open(output_t *output, char const *path) {
    *output = (output_t){.file = stdout, .path = path};
    if (!path) return 1;
    /* One of the open descriptors is written as it is (appending where the shell opened it so), not
     * reopened and truncated; descriptor 1 through standard output's stream, so that a closed one
     * fails as plain standard output does. */
    int const named = descriptor_named(path);
    if (named == STDOUT_FILENO) return 1;
    if (named >= 0) {
        int const flags = fcntl(named, F_GETFL);
        int const copy = flags < 0 || (flags & O_ACCMODE) == O_RDONLY ? (errno = EBADF, -1)
                                                                       : fcntl(named, F_DUPFD_CLOEXEC, 3);
        if (copy < 0 || !(output->file = fdopen(copy, "wb"))) {
            fprintf(stderr, "uform encode: cannot write %s: %s\n", visible(path), strerror(errno));
            if (copy >= 0) close(copy);
            output->file = stdout;
            return 0;
        }
        return 1;
    }
    struct stat info;
    /* A symbolic link is written through, its target created where missing (renaming over it would
     * replace the link itself). */
    int link = lstat(path, &info) == 0 && S_ISLNK(info.st_mode);
    int exists = stat(path, &info) == 0;
    if (link || (exists && !S_ISREG(info.st_mode))) {
        if (exists && S_ISDIR(info.st_mode)) {
            fprintf(stderr, "uform encode: cannot write %s: Is a directory\n", visible(path));
            return 0;
        }
        if (!(output->file = fopen(path, "wb"))) {
            fprintf(stderr, "uform encode: cannot write %s: %s\n", visible(path), strerror(errno));
            output->file = stdout;
            return 0;
        }
        return 1;
    }
    /* A file the shell could not write is refused, not replaced. */
    if (exists && faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0) {
        fprintf(stderr, "uform encode: cannot write %s: %s\n", visible(path), strerror(errno));
        return 0;
    }
    /* The temporary is DIR/.uform-XXXXXX, short, so that a FILE name of NAME_MAX bytes fits. */
    char const *slash = strrchr(path, '/');
    int const directory_length = slash ? (int)(slash - path + 1) : 0;
    char directory[PATH_MAX];
    snprintf(directory, sizeof directory, "%.*s", slash ? (slash == path ? 1 : directory_length - 1) : 1,
             slash ? path : ".");
    /* Another user's FILE in a sticky directory (/tmp) that is not ours either: renaming over it
     * would be refused at the end, after all the work (EPERM), so it is refused now. */
    if (exists && info.st_uid != geteuid() && geteuid() != 0) {
        struct stat parent;
        if (stat(directory, &parent) == 0 && (parent.st_mode & S_ISVTX) && parent.st_uid != geteuid()) {
            fprintf(stderr,
                    "uform encode: cannot write %s: it belongs to user %u in a sticky directory, where only its "
                    "owner may replace it; remove it or write another file\n",
                    visible(path), (unsigned)info.st_uid);
            return 0;
        }
    }
    size_t length = (size_t)directory_length + 16;
    output->temporary = malloc(length);
    if (!output->temporary) return fputs("uform encode: out of memory\n", stderr), 0;
    snprintf(output->temporary, length, "%.*s.uform-XXXXXX", directory_length, path);
    int fd = mkostemp(output->temporary, O_CLOEXEC);
    if (fd < 0) {
        int const error = errno;
        if (error == EACCES || error == EPERM || error == EROFS) /* FILE may be writable, its directory is not */
            fprintf(stderr, "uform encode: cannot write %s: cannot create its temporary file in the directory %s: %s\n",
                    visible(path), visible(directory), strerror(error));
        else fprintf(stderr, "uform encode: cannot write %s: %s\n", visible(path), strerror(error));
        free(output->temporary), output->temporary = NULL;
        return 0;
    }
    temporary_guard(output->temporary);
    /* The mode a new file would get (0666 less the umask), or the replaced file's. */
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = exists ? (info.st_mode & 07777) : (0666 & ~mask);
    if (fchmod(fd, mode) != 0 || !(output->file = fdopen(fd, "wb"))) {
        fprintf(stderr, "uform encode: cannot write %s: %s\n", visible(output->temporary), strerror(errno));
        close(fd), unlink(output->temporary), temporary_unguard();
        free(output->temporary), output->temporary = NULL, output->file = stdout;
        return 0;
    }
    return 1;
}

/** Flushes and closes the output; on success renames the temporary over FILE, on failure removes it.
 *  Returns `code`, or 1 where writing failed. */
static int output_close(output_t *output, int code) {
    if (output->file == stdout) {
        errno = 0;
        if (code == 0 && (fflush(stdout) != 0 || ferror(stdout))) code = output_failed(NULL, errno);
        return code;
    }
    if (fclose(output->file) != 0 && code == 0) code = output_failed(output->path, errno);
    if (output->temporary) {
        if (code == 0 && rename(output->temporary, output->path) != 0) code = output_failed(output->path, errno);
        if (code != 0) unlink(output->temporary);
        temporary_unguard();
        free(output->temporary);
    }
    output->file = stdout;
    return code;
}

/** Names the item `index` of the run: its file for images, its index (and line of standard input)
 *  for texts. */
static void item_name(char *name, size_t size, int images, texts_t const *items, size_t index, int from_stdin) {
    if (images) snprintf(name, size, "%s", visible(items->items[index]));
    else if (from_stdin) snprintf(name, size, "text %zu (line %zu of standard input)", index, index + 1);
    else snprintf(name, size, "text %zu", index);
}

/** Lines of standard input as they come: `read` into a buffer that grows to hold the longest line. */
typedef struct line_reader_t {
    int fd;
    char *buffer;
    size_t start, end, capacity; /**< The unread bytes are [start, end). */
    size_t scanned;              /**< [start, scanned) holds no newline (a long line is searched once). */
    size_t lines;                /**< Lines returned so far. */
    int at_end, failed;          /**< Failed: every later call fails (`read_failure` says why). */
} line_reader_t;

typedef enum { reader_line_k, reader_end_k, reader_stall_k, reader_error_k } reader_result_t;

/** Fails the reader at a line longer than ENCODE_LINE_MAX_BYTES, its line end aside, naming it. */
static reader_result_t line_too_long(line_reader_t *reader) {
    read_failed("uform encode: line %zu of standard input is longer than %zu MiB\n", reader->lines + 1,
                ENCODE_LINE_MAX_BYTES >> 20);
    return reader->failed = 1, reader_error_k;
}

/** The next line (without its "\n", or a "\r\n"'s "\r"), valid until the next call. With `may_wait`
 *  0 it returns `reader_stall_k` rather than wait for input that has not come yet. A last line
 *  without "\n" counts; nothing after the last "\n" is no line. An error's reason goes to
 *  `read_failure`, and every later call fails too. */
static reader_result_t reader_next(line_reader_t *reader, int may_wait, char const **line, size_t *length) {
    if (reader->failed) return reader_error_k;
    for (;;) {
        char *start = reader->buffer + reader->start;
        size_t const from = reader->scanned > reader->start ? reader->scanned : reader->start;
        char *newline = reader->end > from ? memchr(reader->buffer + from, '\n', reader->end - from) : NULL;
        reader->scanned = reader->end; /* no newline before it, unless one was just found */
        if (newline || (reader->at_end && reader->end > reader->start)) {
            size_t size = newline ? (size_t)(newline - start) : reader->end - reader->start;
            reader->start += size + (newline != NULL), reader->scanned = reader->start;
            if (size && start[size - 1] == '\r') --size;
            if (size > ENCODE_LINE_MAX_BYTES) return line_too_long(reader);
            *line = start, *length = size, ++reader->lines;
            return reader_line_k;
        }
        if (reader->at_end) return reader_end_k;
        if (!may_wait) {
            struct pollfd ready = {.fd = reader->fd, .events = POLLIN};
            if (poll(&ready, 1, 0) == 0) return reader_stall_k;
        }
        if (reader->start) {
            memmove(reader->buffer, reader->buffer + reader->start, reader->end - reader->start);
            reader->end -= reader->start, reader->scanned -= reader->start, reader->start = 0;
        }
        /* /dev/zero, or a file that is not text: more than the longest line and a '\r' held. */
        if (reader->end > ENCODE_LINE_MAX_BYTES + 1) return line_too_long(reader);
        if (reader->end == reader->capacity) {
            size_t capacity = reader->capacity ? reader->capacity * 2 : (size_t)1 << 20;
            char *grown = capacity > reader->capacity ? realloc(reader->buffer, capacity) : NULL;
            if (!grown) {
                read_failed("uform encode: out of memory reading standard input\n");
                return reader->failed = 1, reader_error_k;
            }
            reader->buffer = grown, reader->capacity = capacity;
        }
        ssize_t got = read(reader->fd, reader->buffer + reader->end, reader->capacity - reader->end);
        if (got > 0) reader->end += (size_t)got;
        else if (got == 0) reader->at_end = 1;
        else if (errno == EAGAIN || errno == EWOULDBLOCK) { /* a non-blocking standard input */
            if (!may_wait) return reader_stall_k;
            struct pollfd ready = {.fd = reader->fd, .events = POLLIN};
            (void)poll(&ready, 1, -1);
        }
        else if (errno != EINTR) {
            read_failed("uform encode: cannot read standard input: %s\n", strerror(errno));
            return reader->failed = 1, reader_error_k;
        }
    }
}

/** Where `fd` is a regular file, counts the lines from its position on (as `reader_next` will read
 *  them) without moving it, into `*count`; returns 1 then, else 0 (a pipe or a terminal: no total). */
static int count_regular_lines(int fd, size_t *count) {
    struct stat info;
    off_t position = lseek(fd, 0, SEEK_CUR);
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || position < 0) return 0;
    static char chunk[1 << 16];
    size_t lines = 0;
    char last = '\n';
    for (;;) {
        ssize_t got = pread(fd, chunk, sizeof chunk, position);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        for (char const *cursor = chunk, *end = chunk + got; (cursor = memchr(cursor, '\n', (size_t)(end - cursor)));
             ++cursor)
            ++lines;
        last = chunk[got - 1], position += got;
    }
    *count = lines + (last != '\n');
    return 1;
}

/** One batch of items and where it goes: the texts (pointers into the arguments, or copies of
 *  standard input's lines in `arena`) or images (file contents), the rows and statuses its deferred
 *  encode writes, and its outcome. */
typedef struct batch_t {
    size_t first, count;
    char const **texts;
    size_t *lengths;
    size_t *offsets; /**< The lines' offsets in `arena` while it may still move. */
    char *arena;
    size_t arena_capacity;
    uform_image_t *images;
    float *rows;
    float *features;       /**< With `--features`: [capacity][tokens * hidden]. */
    size_t *feature_rows;  /**< With `--features`: each item's rows to write in jsonl. */
    uform_status_t *statuses;
    uform_embeddings_t embeddings;
    uform_outcome_t outcome;
    int in_flight;
} batch_t;

static int batch_allocate(batch_t *batch, size_t capacity, size_t dims, size_t feature_floats, int images, int copies) {
    batch->rows = malloc(capacity * dims * sizeof(float));
    if (feature_floats) {
        batch->features = capacity <= SIZE_MAX / sizeof(float) / feature_floats
                              ? malloc(capacity * feature_floats * sizeof(float)) : NULL;
        batch->feature_rows = malloc(capacity * sizeof(size_t));
        if (!batch->features || !batch->feature_rows) return 0;
    }
    batch->statuses = malloc(capacity * sizeof(uform_status_t));
    if (images) batch->images = calloc(capacity, sizeof(uform_image_t));
    if (copies) {
        batch->texts = malloc(capacity * sizeof(char *));
        batch->lengths = malloc(capacity * sizeof(size_t)), batch->offsets = malloc(capacity * sizeof(size_t));
    }
    batch->embeddings = (uform_embeddings_t){.data = batch->rows, .dtype = uform_dtype_f32_k, .features = batch->features};
    return batch->rows && batch->statuses && (!images || batch->images) && (!copies || (batch->texts && batch->lengths && batch->offsets));
}

static void batch_release_images(batch_t *batch) {
    for (size_t i = 0; batch->images && i < batch->count; ++i) free((void *)batch->images[i].data), batch->images[i].data = NULL;
}

/** Waits for a batch still in flight (after a failure elsewhere), dropping its rows. */
static void batch_settle(batch_t *batch) {
    if (batch->in_flight) {
        uform_status_t dropped = uform_outcome_wait(&batch->outcome, -1);
        (void)dropped, batch->in_flight = 0;
    }
    batch_release_images(batch);
}

static void batch_free(batch_t *batch) {
    batch_release_images(batch);
    free(batch->rows), free(batch->features), free(batch->feature_rows), free(batch->statuses), free(batch->images),
        free(batch->arena);
    if (batch->lengths) free((void *)batch->texts);
    free(batch->lengths), free(batch->offsets);
}

/** Fills `batch` with the next items of the command line's list (texts, or image files read whole).
 *  Returns 1 with items, 0 at the end, or -1 when a file could not be read (why: `read_failure`). */
static int batch_from_list(batch_t *batch, texts_t const *items, int images, size_t *next, size_t capacity) {
    size_t count = items->count - *next < capacity ? items->count - *next : capacity, bytes = 0;
    batch->first = *next, batch->count = 0;
    if (!images) batch->texts = (char const **)items->items + *next, batch->lengths = NULL;
    for (size_t i = 0; images && i < count; ++i) {
        if (i && bytes >= ENCODE_BATCH_IMAGE_BYTES) { /* large files: a shorter batch */
            count = i;
            break;
        }
        size_t size = 0;
        void *data = read_image_file(items->items[*next + i], &size);
        if (!data && !i) return -1;
        if (!data) { /* the images before it are encoded; the next batch fails reading it again */
            count = i;
            break;
        }
        batch->images[i] = (uform_image_t){.data = data, .size = size};
        batch->count = i + 1, bytes += size;
    }
    batch->count = count, *next += count;
    return (int)(count > 0);
}

/** Fills `batch` with lines of standard input: the first (waiting for it only when `may_wait`),
 *  then those already there, up to `capacity`, so a slow writer's lines are encoded as they come.
 *  Returns 1 with lines, 0 at the end, 2 when no line is there yet and it may not wait, -1 on an
 *  error (kept for `read_failure`). */
static int batch_from_reader(batch_t *batch, line_reader_t *reader, size_t *next, size_t capacity, int may_wait) {
    size_t used = 0, count = 0, *offsets = batch->offsets;
    batch->first = *next, batch->count = 0;
    while (count < capacity && used < ENCODE_BATCH_TEXT_BYTES) { /* long lines: a shorter batch */
        char const *line = NULL;
        size_t length = 0;
        reader_result_t result = reader_next(reader, count == 0 && may_wait, &line, &length);
        if (result == reader_error_k && !count) return -1;
        if (result == reader_error_k) break; /* the lines before it are encoded; the next batch fails */
        if (result == reader_stall_k && count == 0) return 2;
        if (result != reader_line_k) break;
        if (used + length + 1 > batch->arena_capacity || !batch->arena) {
            size_t grown_capacity = batch->arena_capacity ? batch->arena_capacity : (size_t)1 << 16;
            while (grown_capacity < used + length + 1) grown_capacity *= 2;
            char *grown = realloc(batch->arena, grown_capacity);
            if (!grown) {
                read_failed("uform encode: out of memory reading standard input\n");
                return -1;
            }
            batch->arena = grown, batch->arena_capacity = grown_capacity;
        }
        memcpy(batch->arena + used, line, length);
        batch->arena[used + length] = '\0';
        offsets[count] = used, batch->lengths[count++] = length;
        used += length + 1;
    }
    for (size_t i = 0; i < count; ++i) batch->texts[i] = batch->arena + offsets[i];
    batch->count = count, *next += count;
    return count > 0;
}

/** What every batch of a run shares. */
typedef struct run_t {
    uform_executor_t executor;
    uform_model_t model;
    int images, from_stdin, jsonl;
    texts_t const *items; /**< The command line's texts or image files. */
    size_t dims;
    size_t tokens, hidden; /**< With `--features`: rows an item and numbers a row; else 0. */
    npy_rows_t *npy;      /**< NULL unless the format is npy. */
    FILE *output;
    char const *output_path; /**< FILE, or NULL for standard output: the name a write error gives. */
    size_t done, total;   /**< Items written; the total where known. */
    int total_known, show;
    size_t drawn_at;      /**< The count the last drawing after a batch showed; 0 before one. */
    size_t batch;         /**< Items per batch. */
    size_t const *read;   /**< Items read so far. */
    char *line;           /**< JSON rows: one, or a round's chunks with `formatter`. */
    size_t line_capacity;
    uform_executor_t formatter; /**< Threads that format JSON rows in parallel, or NULL (one thread). */
} run_t;

/** JSON rows of this many numbers at most take at most this many bytes each ("%.9g" and ", "). */
static size_t json_row_bytes(size_t dims) { return dims * (FORMAT_FLOAT_CAPACITY + 1) + 4; }

/** Writes rows as one JSON array each, "[a, b, ...]\n". */
static size_t format_json_rows(char *out, float const *rows, size_t count, size_t dims) {
    char *cursor = out;
    for (size_t i = 0; i < count; ++i) {
        *cursor++ = '[';
        for (size_t j = 0; j < dims; ++j) {
            if (j) *cursor++ = ',', *cursor++ = ' ';
            cursor += format_float_g9(cursor, rows[i * dims + j]);
        }
        *cursor++ = ']', *cursor++ = '\n';
    }
    return (size_t)(cursor - out);
}

/** Rows per task when the formatter's threads share a batch, and rows per round of tasks (which
 *  bounds the buffer: 2,048 rows of 768 numbers are 38 MiB at most). */
#define ENCODE_FORMAT_CHUNK 32
#define ENCODE_FORMAT_ROUND 2048

typedef struct format_job_t {
    float const *rows;
    size_t dims, count;
    char *buffer;    /**< Task t writes at `buffer + t * stride`. */
    size_t stride;
    size_t *lengths; /**< Bytes task t wrote. */
} format_job_t;

static void format_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    format_job_t const *job = (format_job_t const *)context;
    size_t const first = task * ENCODE_FORMAT_CHUNK, count = job->count - first < ENCODE_FORMAT_CHUNK ? job->count - first
                                                                                                      : ENCODE_FORMAT_CHUNK;
    job->lengths[task] = format_json_rows(job->buffer + task * job->stride, job->rows + first * job->dims, count, job->dims);
}

/** Writes a batch's rows as JSON lines: on the formatter's threads, chunk by chunk in input order,
 *  where there is one and more than a chunk of rows; else here. */
static void write_json_rows(run_t *run, float const *rows, size_t count) {
    size_t const dims = run->dims, stride = ENCODE_FORMAT_CHUNK * json_row_bytes(dims);
    for (size_t first = 0; first < count;) {
        size_t const round = count - first < ENCODE_FORMAT_ROUND ? count - first : ENCODE_FORMAT_ROUND;
        size_t const tasks = (round + ENCODE_FORMAT_CHUNK - 1) / ENCODE_FORMAT_CHUNK;
        size_t lengths[ENCODE_FORMAT_ROUND / ENCODE_FORMAT_CHUNK];
        int parallel = run->formatter && tasks > 1;
        if (parallel && tasks * stride > run->line_capacity) {
            char *grown = realloc(run->line, tasks * stride);
            if (grown) run->line = grown, run->line_capacity = tasks * stride;
            else parallel = 0;
        }
        format_job_t job = {.rows = rows + first * dims, .dims = dims, .count = round, .buffer = run->line,
                            .stride = stride, .lengths = lengths};
        uform_call_t call = {.schedule = uform_schedule_dynamic_k, .tasks = tasks, .task = format_task, .context = &job};
        if (parallel && uform_executor_call(run->formatter, &call, NULL) == uform_status_ok_k)
            for (size_t t = 0; t < tasks; ++t) fwrite(run->line + t * stride, 1, lengths[t], run->output);
        else
            for (size_t i = 0; i < round; ++i)
                fwrite(run->line, 1, format_json_rows(run->line, rows + (first + i) * dims, 1, dims), run->output);
        first += round;
    }
}

/** Bytes one item's features take as JSON at most: `rows` rows of `hidden` numbers, "[[...], [...]]\n". */
static size_t json_item_bytes(size_t rows, size_t hidden) { return rows * (json_row_bytes(hidden) + 2) + 4; }

/** Writes one item's `rows` feature rows as one JSON array of arrays, "[[a, b], [c, d]]\n". */
static size_t format_json_item(char *out, float const *features, size_t rows, size_t hidden) {
    char *cursor = out;
    *cursor++ = '[';
    for (size_t t = 0; t < rows; ++t) {
        if (t) *cursor++ = ',', *cursor++ = ' ';
        cursor += format_json_rows(cursor, features + t * hidden, 1, hidden) - 1; /* without its "\n" */
    }
    *cursor++ = ']', *cursor++ = '\n';
    return (size_t)(cursor - out);
}

typedef struct format_features_t {
    float const *features;  /**< The round's first item's. */
    size_t const *rows;     /**< Its items' rows to write. */
    size_t item, hidden;    /**< Numbers an item holds, numbers a row. */
    char *buffer;           /**< Item t's JSON at `buffer + t * stride`. */
    size_t stride;
    size_t *lengths;
} format_features_t;

static void format_features_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    format_features_t const *job = (format_features_t const *)context;
    job->lengths[task] = format_json_item(job->buffer + task * job->stride, job->features + task * job->item,
                                          job->rows[task], job->hidden);
}

/** Writes a batch's features as JSON lines, one item a line: in rounds of items whose JSON fits the
 *  line buffer grown to 64 MiB (or one item, however large), on the formatter's threads where there
 *  is one and more than one item in the round. Returns 0 when out of memory (said here). */
static int write_json_features(run_t *run, float const *features, size_t const *rows, size_t count) {
    size_t const item = run->tokens * run->hidden, stride = json_item_bytes(run->tokens, run->hidden);
    size_t const per_round = stride < ENCODE_BATCH_FEATURE_BYTES ? ENCODE_BATCH_FEATURE_BYTES / stride : 1;
    size_t lengths[ENCODE_FORMAT_ROUND];
    for (size_t first = 0; first < count;) {
        size_t round = count - first < per_round ? count - first : per_round;
        if (round > ENCODE_FORMAT_ROUND) round = ENCODE_FORMAT_ROUND;
        if (round * stride > run->line_capacity) {
            char *grown = realloc(run->line, round * stride);
            if (!grown) {
                progress_end();
                fputs("uform encode: out of memory formatting the features\n", stderr);
                return 0;
            }
            run->line = grown, run->line_capacity = round * stride;
        }
        format_features_t job = {.features = features + first * item, .rows = rows + first, .item = item,
                                 .hidden = run->hidden, .buffer = run->line, .stride = stride, .lengths = lengths};
        uform_call_t call = {.schedule = uform_schedule_dynamic_k, .tasks = round, .task = format_features_task,
                             .context = &job};
        if (!(run->formatter && round > 1 && uform_executor_call(run->formatter, &call, NULL) == uform_status_ok_k))
            for (size_t t = 0; t < round; ++t) format_features_task(&job, t, 0, 0);
        for (size_t t = 0; t < round; ++t) fwrite(run->line + t * stride, 1, lengths[t], run->output);
        first += round;
    }
    return 1;
}

/** Submits a filled batch as a deferred encode. A refused submission finishes its outcome at once
 *  with the reason (`batch_report`); returns 0 then. */
static int batch_submit(run_t *run, batch_t *batch) {
    batch->outcome = (uform_outcome_t){0};
    uform_status_t status =
        run->images ? uform_encode_images(run->executor, run->model, batch->images, batch->count, &batch->embeddings,
                                          batch->statuses, &batch->outcome)
                    : uform_encode_texts(run->executor, run->model, batch->texts, batch->lengths, batch->count,
                                         &batch->embeddings, batch->statuses, &batch->outcome);
    batch->in_flight = 1;
    return status == uform_status_ok_k;
}

/** Prints a batch's failed call: the status and the engine's message. */
static void batch_report(run_t *run, batch_t *batch) {
    progress_end();
    fprintf(stderr, "uform encode: %s %zu to %zu: %s: %s\n", run->images ? "images" : "texts", batch->first,
            batch->first + batch->count - 1, uform_status_name(batch->outcome.status), batch->outcome.message);
}

/** True where all `count` values are finite. */
static int all_finite(float const *values, size_t count) {
    for (size_t i = 0; i < count; ++i)
        if (!isfinite(values[i])) return 0;
    return 1;
}

/** Writes a finished batch's rows; on a failed item writes the rows of the items before it, prints
 *  it (by index and line or file, with the engine's reason) and returns 0. */
static int batch_write(run_t *run, batch_t *batch) {
    char name[PATH_MAX + 64];
    size_t const dims = run->dims, item = run->tokens * run->hidden;
    float const *rows = batch->rows;
    /* The items written: those before the first that failed or came out not finite. */
    size_t good = 0;
    char const *not_finite = NULL;
    for (; good < batch->count && batch->statuses[good] == uform_status_ok_k; ++good) {
        if (!all_finite(rows + good * dims, dims)) not_finite = "the embedding is";
        else if (item && !all_finite(batch->features + good * item, item)) not_finite = "the features are";
        if (not_finite) break;
    }
    for (size_t i = 0; item && i < good; ++i) {
        size_t tokens = run->tokens;
        if (!run->images && uform_model_tokenize(run->model, batch->texts[i],
                                                 batch->lengths ? batch->lengths[i] : strlen(batch->texts[i]), NULL, 0,
                                                 &tokens) != uform_status_ok_k)
            tokens = run->tokens; /* it encoded, so it tokenizes; were it not so, every row */
        batch->feature_rows[i] = tokens < run->tokens ? tokens : run->tokens;
    }
    errno = 0;
    int written = 1;
    if (item) { /* the features instead of the rows */
        if (run->jsonl) written = write_json_features(run, batch->features, batch->feature_rows, good);
        else if (run->npy) written = npy_append(run->npy, run->output, batch->features, good, item);
        else fwrite(batch->features, sizeof(float) * item, good, run->output);
    }
    else if (run->jsonl) write_json_rows(run, rows, good);
    else if (run->npy) written = npy_append(run->npy, run->output, rows, good, dims);
    else fwrite(rows, sizeof(float) * dims, good, run->output);
    if (!written) { /* a spool that failed said so; rows that did not reach the output say it here */
        if (ferror(run->output)) output_failed(run->output_path, errno);
        return 0;
    }
    run->done += good;
    /* Each batch's rows as soon as they exist, for a reader at the other end of a pipe; a write that
     * failed (a full disk, a reader gone) ends the run here, not after the rest of the input. */
    if (fflush(run->output) != 0 || ferror(run->output)) return output_failed(run->output_path, errno), 0;
    if (good < batch->count) {
        progress_end();
        item_name(name, sizeof name, run->images, run->items, batch->first + good, run->from_stdin);
        if (not_finite) {
            fprintf(stderr, "uform encode: %s: %s not finite (the model's arithmetic overflowed f32: weights or activations too large)\n", name,
                    not_finite);
            return 0;
        }
        /* The engine's reason: the item again alone, without statuses, so that the engine says why. */
        uform_embeddings_t one = {.data = batch->rows, .dtype = uform_dtype_f32_k};
        uform_status_t alone =
            run->images ? uform_encode_images(run->executor, run->model, batch->images + good, 1, &one, NULL, NULL)
                        : uform_model_tokenize(run->model, batch->texts[good],
                                               batch->lengths ? batch->lengths[good] : strlen(batch->texts[good]), NULL,
                                               0, &(size_t){0});
        char const *reason = alone != uform_status_ok_k ? uform_error_message() : "", *prefix = "uform_encode_images: image 0: ";
        if (!strncmp(reason, prefix, strlen(prefix))) reason += strlen(prefix); /* the file names the image */
        fprintf(stderr, "uform encode: %s: %s: %s\n", name, uform_status_name(batch->statuses[good]), visible(reason));
        return 0;
    }
    /* The bar: where the total is known, after every batch; else from the second batch on. */
    if (run->show && (run->total_known || *run->read > run->batch)) {
        progress(run->done, run->total > run->done ? run->total : run->done, run->total_known, 0);
        run->drawn_at = run->done;
    }
    return 1;
}

/** Waits for a submitted batch, then writes it (`batch_write`); its image files are released either way. */
static int batch_finish(run_t *run, batch_t *batch) {
    uform_status_t status = uform_outcome_wait(&batch->outcome, -1);
    batch->in_flight = 0;
    int written = status == uform_status_ok_k && batch_write(run, batch);
    if (status != uform_status_ok_k) batch_report(run, batch);
    batch_release_images(batch);
    return written;
}

int uform_command_encode(int argc, char **argv) {
    char const *model_path = NULL, *format = "jsonl", *output_path = NULL, *dtype = "f32";
    long threads = 0, device = -1, batch = 0;
    int threads_given = 0;
    texts_t texts = {0}, owned = {0};
    int from_arguments = 0, images = 0, features = 0;
    for (int i = 0; i < argc; ++i) {
        char const *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(encode_usage, stdout);
            lists_free(&texts, &owned);
            return output_close(&(output_t){.file = stdout}, 0);
        }
        else if (!strcmp(a, "--model") && has_value) model_path = argv[++i];
        else if (!strcmp(a, "--format") && has_value) format = argv[++i];
        else if (!strcmp(a, "--output") && has_value) output_path = argv[++i];
        else if (!strcmp(a, "--dtype") && has_value) dtype = argv[++i];
        else if ((!strcmp(a, "--threads") || !strcmp(a, "--device") || !strcmp(a, "--batch")) && has_value) {
            char const kind = a[2]; /* 't', 'd' or 'b' */
            size_t const lowest = kind == 'b' ? 1 : 0, highest = kind == 't' ? ENCODE_THREADS_MAX : kind == 'd' ? 4095 : ENCODE_BATCH_MAX;
            size_t value = 0;
            if (!strict_count(argv[++i], lowest, highest, false, &value)) {
                fprintf(stderr, "uform encode: %s takes %s, not '%s'\n%s", a,
                        kind == 't'   ? "a count from 0 to 65536"
                        : kind == 'd' ? "a GPU ordinal from 0 to 4095"
                                      : "a count from 1 to 65536",
                        argv[i], encode_usage);
                lists_free(&texts, &owned);
                return 2;
            }
            *(kind == 't' ? &threads : kind == 'd' ? &device : &batch) = (long)value;
            threads_given |= kind == 't';
        }
        else if (!strcmp(a, "--features")) features = 1;
        else if (!strcmp(a, "--image")) {
            if (!images && texts.count) { /* "uform encode --model M cat.jpg --image": that item is a text */
                fprintf(stderr,
                        "uform encode: '%s' came before --image, as a text; a run encodes texts or images, and "
                        "image files go after --image\n%s",
                        texts.items[0], encode_usage);
                lists_free(&texts, &owned);
                return 2;
            }
            images = 1, from_arguments = 1;
        }
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
    int const batch_given = batch != 0;
    if (!batch) batch = device >= 0 && !images ? ENCODE_BATCH_DEVICE : ENCODE_BATCH;
    int bad_usage = 0;
    if (!model_path) fputs("uform encode: --model DIR is required\n", stderr), bad_usage = 1;
    else if (!*model_path) fputs("uform encode: --model takes a model directory, not ''\n", stderr), bad_usage = 1;
    if (strcmp(format, "jsonl") && strcmp(format, "npy") && strcmp(format, "f32"))
        fprintf(stderr, "uform encode: --format is jsonl, npy or f32, not '%s'\n", format), bad_usage = 1;
    if (strcmp(dtype, "f32") && strcmp(dtype, "bf16"))
        fprintf(stderr, "uform encode: --dtype is f32 or bf16, not '%s'\n", dtype), bad_usage = 1;
    if (images && !texts.count && empty_image_directory)
        fprintf(stderr, "uform encode: --image needs at least one image file; the directory %s holds no .jpg, .jpeg or "
                        ".png file\n",
                visible(empty_image_directory)),
            bad_usage = 1;
    else if (images && !texts.count) fputs("uform encode: --image needs at least one image file\n", stderr), bad_usage = 1;
    if (output_path && !*output_path) fputs("uform encode: --output takes a file name, not ''\n", stderr), bad_usage = 1;
    if (bad_usage) {
        fputs(encode_usage, stderr);
        lists_free(&texts, &owned);
        return 2;
    }

    /* Texts from standard input, one per line, read as they come (or the arguments). */
    line_reader_t reader = {.fd = STDIN_FILENO};
    size_t total = texts.count; /* items, where known before the run: the bar's end */
    int total_known = 1;
    /* Counted only for the bar, drawn where standard error is a terminal (a large file takes a while). */
    if (!from_arguments) total_known = isatty(STDERR_FILENO) && count_regular_lines(STDIN_FILENO, &total);

    int code = 1;
    uform_model_t model = NULL;
    uform_executor_t executor = NULL;
    output_t output = {.file = stdout};
    batch_t slots[2] = {{0}, {0}};
    npy_rows_t npy_rows = {0};
    run_t run = {0};
    uform_executor_t formatter = NULL;
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
    /* The engine's default leaves an eighth of the cores to the caller's own threads; this process has
     * only its reader and writer beside the encoding, so by default every allowed core encodes (2
     * cores: 2 threads instead of 1, all-MiniLM-L6-v2 1.3-1.5x faster), or the engine's default where
     * the executor cannot take them all. */
    cpu_set_t allowed;
    size_t const cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? (size_t)CPU_COUNT(&allowed) : 0;
    size_t const encode_threads = device < 0 && !threads_given && cores > 1 ? cores : (size_t)threads;
    status = device >= 0 ? uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor)
                         : uform_executor_for_ram(NULL, encode_threads, 0, &executor);
    if (status != uform_status_ok_k && device < 0 && encode_threads != (size_t)threads)
        status = uform_executor_for_ram(NULL, (size_t)threads, 0, &executor);
    if (status != uform_status_ok_k) {
        code = fail_engine(status, "starting the threads");
        goto done;
    }
    if (!output_open(&output, output_path)) goto done;
    size_t const dims = description.dimensions;
    size_t const feature_floats = features ? description.tokens * description.hidden : 0;
    /* Each item's output: its embedding, or its features. */
    size_t const out_floats = features ? feature_floats : dims;
    if (features && !batch_given && (size_t)batch * feature_floats * sizeof(float) > ENCODE_BATCH_FEATURE_BYTES) {
        size_t const fitting = ENCODE_BATCH_FEATURE_BYTES / (feature_floats * sizeof(float));
        batch = fitting ? (long)fitting : 1;
    }
    npy_rows.inner = features ? description.hidden : 0;
    int const npy = !strcmp(format, "npy"), jsonl = !strcmp(format, "jsonl");
    if (images) progress_unit = "images";
    for (int k = 0; k < 2; ++k)
        if (!batch_allocate(&slots[k], (size_t)batch, dims, feature_floats, images, !from_arguments)) {
            fputs("uform encode: out of memory for the embeddings\n", stderr);
            goto done;
        }
    if (npy && !npy_begin(&npy_rows, output.file, out_floats)) goto done;
    size_t next = 0; /* items read so far */
    run = (run_t){.executor = executor, .model = model, .images = images, .from_stdin = !from_arguments,
                  .items = &texts, .dims = dims, .jsonl = jsonl,
                  .tokens = features ? description.tokens : 0, .hidden = features ? description.hidden : 0, .npy = npy ? &npy_rows : NULL, .output = output.file,
                  .output_path = output_path,
                  .total = total, .total_known = total_known, .batch = (size_t)batch, .read = &next,
                  .line = jsonl ? malloc(json_row_bytes(dims)) : NULL, .line_capacity = jsonl ? json_row_bytes(dims) : 0};
    if (jsonl && !run.line) {
        fputs("uform encode: out of memory for the embeddings\n", stderr);
        goto done;
    }
    /* JSON rows are formatted on threads of their own where one thread could not keep up: beside a
     * GPU (whose host cores are otherwise idle), or as UFORM_ENCODE_FORMAT_THREADS=N asks (0: none). */
    char const *format_threads = getenv("UFORM_ENCODE_FORMAT_THREADS");
    long formatter_threads = device >= 0 ? 0 : -1; /* 0: the executor's default, 7/8 of the cores */
    if (format_threads && *format_threads) {
        size_t asked = 0;
        formatter_threads = strict_count(format_threads, 1, ENCODE_THREADS_MAX, false, &asked) ? (long)asked : -1;
    }
    if (jsonl && formatter_threads >= 0 &&
        uform_executor_for_ram(NULL, (size_t)formatter_threads, 0, &formatter) != uform_status_ok_k)
        formatter = NULL; /* more threads than cores asked, or none to be had: one thread formats */
    run.formatter = formatter;
    run.show = isatty(STDERR_FILENO) && (!total_known || total > (size_t)batch);
    progress_own_lines = same_terminal_as_stderr(output.file);
    if (run.show && total_known) progress(0, total, 1, 0);

    /* Two batches in turn: batch k is submitted as a deferred encode, then batch k - 1 is waited for
     * and written while k runs, then batch k + 1 is read. */
    int failed = 0;
    for (size_t current = 0;; current ^= 1) {
        batch_t *filling = &slots[current], *previous = &slots[current ^ 1];
        int filled = from_arguments ? batch_from_list(filling, &texts, images, &next, (size_t)batch)
                                    : batch_from_reader(filling, &reader, &next, (size_t)batch, !previous->in_flight);
        if (filled == 2) { /* no line there yet: the batch before is written while the writer is awaited */
            if (!batch_finish(&run, previous)) {
                failed = 1;
                break;
            }
            filled = batch_from_reader(filling, &reader, &next, (size_t)batch, 1);
        }
        int const submitted = filled > 0 && batch_submit(&run, filling);
        /* The first failure is the one printed: the batch before's, then this one's reading or call. */
        if (previous->in_flight && !batch_finish(&run, previous)) failed = 1;
        else if (filled < 0) failed = 1, progress_end(), fputs(read_failure, stderr);
        else if (filled > 0 && !submitted) failed = 1, batch_report(&run, filling);
        if (failed || filled == 0) break;
    }
    if (failed) goto done; /* where a batch still in flight is settled */
    if (run.show && run.drawn_at && (!total_known || run.done != run.total)) {
        if (run.drawn_at == run.done) progress_end(); /* the last drawing showed the count: end its line */
        else progress(run.done, run.done, total_known, 1);
    }
    errno = 0;
    int const ended = npy ? npy_end(&npy_rows, output.file, run.done, out_floats) : 1;
    if (ended < 0) goto done;
    if (!ended || fflush(output.file) != 0 || ferror(output.file)) {
        output_failed(output_path, errno);
        goto done;
    }
    code = 0;
done:
    for (int k = 0; k < 2; ++k) batch_settle(&slots[k]);
    /* Stopped at an item, the output still sound: standard output's npy, or one written in place (an
     * --output that is no regular file: a FIFO, a device), holds the rows before that item, as jsonl
     * and f32 do (a regular --output FILE is left as it was, its temporary discarded). */
    if (code && npy_rows.began && !output.temporary && !ferror(output.file) &&
        !(npy_rows.spool && ferror(npy_rows.spool))) {
        errno = 0;
        int const rows_ended =
            npy_end(&npy_rows, output.file, run.done, run.hidden ? run.tokens * run.hidden : run.dims);
        if (rows_ended == 0 || (rows_ended > 0 && fflush(output.file) != 0)) output_failed(output_path, errno);
    }
    code = output_close(&output, code);
    uform_executor_free(executor);
    uform_executor_free(formatter);
    uform_model_free(model);
    for (int k = 0; k < 2; ++k) batch_free(&slots[k]);
    if (npy_rows.spool) fclose(npy_rows.spool);
    free(npy_rows.rows), free(reader.buffer), free(run.line);
    lists_free(&texts, &owned);
    return code;
}
