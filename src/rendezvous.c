/**
 *  @file   rendezvous.c
 *  @brief  The directory exchange of meshes: facts, the stale-run scheme, agreement, the blob.
 *          See rendezvous.h for the files and the scheme.
 */
#include "rendezvous.h"

#include "cuda_driver.h" // `uform_gpu_class_common`, `uform_gpu_class_runs`

#include <ctype.h>      // `isxdigit`
#include <dirent.h>     // `fdopendir`, `readdir`
#include <errno.h>      // `errno`
#include <fcntl.h>      // `openat`, `O_NOFOLLOW`
#include <inttypes.h>   // `PRIx64`
#include <limits.h>     // `PATH_MAX`
#include <math.h>       // `isfinite`
#include <signal.h>     // `kill`
#include <stdio.h>      // `snprintf`
#include <stdlib.h>     // `calloc`
#include <string.h>     // `strcmp`
#include <sys/random.h> // `getrandom`
#include <sys/stat.h>   // `fstatat`, `mkdirat`
#include <time.h>       // `clock_gettime`
#include <unistd.h>     // `gethostname`, `fsync`

void (*uform_rendezvous_test_hook)(char const *stage, char const *name) = NULL;

static void hook(char const *stage, char const *name) {
    if (uform_rendezvous_test_hook) uform_rendezvous_test_hook(stage, name);
}

#define RV_MESSAGE 480 // fits `uform_fail`'s 512-byte buffer with a prefix

/* ---- Small helpers ---- */

static uint64_t random_u64(void) {
    uint64_t value = 0;
    while (value == 0) {
        if (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
            // No entropy source: mix the clock, the PID and a counter; tokens only need uniqueness.
            static _Atomic uint64_t counter = 0;
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            value = ((uint64_t)now.tv_nsec << 20) ^ (uint64_t)now.tv_sec ^ ((uint64_t)getpid() << 40) ^
                    (counter += 0x9E3779B97F4A7C15ull);
            value ^= value >> 31, value *= 0xBF58476D1CE4E5B9ull, value ^= value >> 29;
        }
    }
    return value;
}

static double wall_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/** Parses a decimal without sign, spaces or overflow. */
static bool parse_unsigned(char const *text, uint64_t limit, uint64_t *value) {
    if (!text || !*text || strlen(text) > 20) return false;
    uint64_t result = 0;
    for (char const *c = text; *c; ++c) {
        if (*c < '0' || *c > '9') return false;
        uint64_t digit = (uint64_t)(*c - '0');
        if (result > (UINT64_MAX - digit) / 10) return false;
        result = result * 10 + digit;
    }
    if (result > limit) return false;
    *value = result;
    return true;
}

static bool parse_hex(char const *text, uint64_t *value) {
    size_t length = strlen(text);
    if (length == 0 || length > 16) return false;
    uint64_t result = 0;
    for (size_t i = 0; i < length; ++i) {
        char c = text[i];
        if (!isxdigit((unsigned char)c)) return false;
        result = (result << 4) | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    *value = result;
    return true;
}

/** Writes "1, 3-5, 9" into `out` for the indices where `absent[i]`, truncating with "...". */
static void format_indices(bool const *absent, size_t count, char *out, size_t capacity) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count; ++i) {
        if (!absent[i]) continue;
        size_t j = i;
        while (j + 1 < count && absent[j + 1]) ++j;
        char piece[48];
        if (j == i) snprintf(piece, sizeof piece, "%s%zu", used ? ", " : "", i);
        else snprintf(piece, sizeof piece, "%s%zu-%zu", used ? ", " : "", i, j);
        size_t length = strlen(piece);
        if (used + length + 4 >= capacity) {
            snprintf(out + used, capacity - used, ", ...");
            return;
        }
        memcpy(out + used, piece, length + 1);
        used += length;
        i = j;
    }
}

/* ---- Who this process is ---- */

typedef struct identity_t {
    char host[128];
    char boot_id[40];
    uint64_t pid_namespace;
} identity_t;

/** Reads state and start time (field 22, clock ticks since boot) of a process from /proc. Returns
 *  1 when read, 0 when the process does not exist, -1 when /proc cannot tell. */
static int read_proc_stat(int64_t pid, char *state, uint64_t *start) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%" PRId64 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) return -1;
    text[length] = '\0';
    char *close_paren = strrchr(text, ')'); // the command name may hold spaces and parentheses
    if (!close_paren || close_paren[1] != ' ') return -1;
    char *cursor = close_paren + 2;
    *state = *cursor;
    // Fields after the name start at 3 (state); the start time is field 22.
    for (int field = 3; field < 22; ++field) {
        cursor = strchr(cursor, ' ');
        if (!cursor) return -1;
        ++cursor;
    }
    *start = strtoull(cursor, NULL, 10);
    return 1;
}

static void read_identity(identity_t *identity) {
    memset(identity, 0, sizeof *identity);
    if (gethostname(identity->host, sizeof identity->host - 1) != 0) snprintf(identity->host, sizeof identity->host, "unknown");
    for (char *c = identity->host; *c; ++c)
        if (*c <= ' ' || *c > '~') *c = '?';
    if (!identity->host[0]) snprintf(identity->host, sizeof identity->host, "unknown");
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t length = read(fd, identity->boot_id, sizeof identity->boot_id - 1);
        close(fd);
        if (length < 0) length = 0;
        identity->boot_id[length] = '\0';
        for (char *c = identity->boot_id; *c; ++c)
            if (!isxdigit((unsigned char)*c) && *c != '-') {
                *c = '\0';
                break;
            }
    }
    struct stat namespace_stat;
    if (stat("/proc/self/ns/pid", &namespace_stat) == 0) identity->pid_namespace = (uint64_t)namespace_stat.st_ino;
}

/** Whether a process a file describes still runs: 1 alive, 0 gone, -1 cannot tell (another host
 *  or PID namespace, or no /proc). */
static int process_liveness(identity_t const *self, char const *boot_id, uint64_t pid_namespace, int64_t pid,
                            uint64_t pid_start) {
    if (!self->boot_id[0] || strcmp(self->boot_id, boot_id) != 0) return -1;
    if (!self->pid_namespace || self->pid_namespace != pid_namespace) return -1;
    if (pid <= 0) return -1;
    char state = 0;
    uint64_t start = 0;
    int read = read_proc_stat(pid, &state, &start);
    if (read == 0) return 0;
    if (read > 0) {
        if (state == 'Z' || state == 'X' || state == 'x') return 0; // killed, not yet reaped
        if (pid_start && start != pid_start) return 0;            // the PID was reused
        return 1;
    }
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    return 1;
}

/* ---- Files: records, reading and writing ---- */

#define RECORD_PAIRS 32

/** One parsed file: its header and its key-value lines, pointing into the read text. */
typedef struct record_t {
    uint32_t version;
    char kind[16];
    uint64_t nonce;
    size_t pairs;
    char const *keys[RECORD_PAIRS];
    char const *values[RECORD_PAIRS];
} record_t;

static char const *record_get(record_t const *record, char const *key) {
    for (size_t i = 0; i < record->pairs; ++i)
        if (strcmp(record->keys[i], key) == 0) return record->values[i];
    return NULL;
}

typedef enum load_t { load_absent_k, load_ok_k, load_other_version_k } load_t;

struct uform_rendezvous_t;
static uform_status_t corrupt(struct uform_rendezvous_t const *rv, char const *name, char const *format, ...)
    UFORM_PRINTF(3, 4);

/** Splits `text` (NUL-terminated, modified in place) into a record. Returns load_ok_k,
 *  load_other_version_k (only `version` and `nonce` are valid) or writes why it is garbage. */
static int parse_record(char *text, size_t length, record_t *record, char *why, size_t why_size) {
    memset(record, 0, sizeof *record);
    if (strlen(text) != length) return snprintf(why, why_size, "holds NUL bytes"), -1;
    char *line = text;
    char *newline = strchr(line, '\n');
    if (!newline) return snprintf(why, why_size, "is garbage or truncated (no complete header line)"), -1;
    *newline = '\0';
    char magic[16], kind[16], nonce[24];
    unsigned version = 0;
    int consumed = 0;
    if (sscanf(line, "%15s %u %15s %23s%n", magic, &version, kind, nonce, &consumed) != 4 ||
        strcmp(magic, "uform-mesh") != 0 || line[consumed] != '\0')
        return snprintf(why, why_size, "is garbage (no 'uform-mesh' header)"), -1;
    if (!parse_hex(nonce, &record->nonce)) return snprintf(why, why_size, "is garbage (bad nonce '%.20s')", nonce), -1;
    record->version = version;
    snprintf(record->kind, sizeof record->kind, "%s", kind);
    if (version != UFORM_RENDEZVOUS_FORMAT) return load_other_version_k;
    bool ended = false;
    for (line = newline + 1; *line; line = newline + 1) {
        newline = strchr(line, '\n');
        if (!newline) return snprintf(why, why_size, "is truncated (its last line has no newline)"), -1;
        *newline = '\0';
        if (ended) return snprintf(why, why_size, "is garbage (text after 'end')"), -1;
        if (strcmp(line, "end") == 0) {
            ended = true;
            continue;
        }
        char *space = strchr(line, ' ');
        if (!space || space == line) return snprintf(why, why_size, "is garbage (line '%.40s')", line), -1;
        *space = '\0';
        if (record_get(record, line)) return snprintf(why, why_size, "is garbage (key '%.40s' twice)", line), -1;
        if (record->pairs == RECORD_PAIRS) return snprintf(why, why_size, "is garbage (too many lines)"), -1;
        record->keys[record->pairs] = line;
        record->values[record->pairs] = space + 1;
        ++record->pairs;
    }
    if (!ended) return snprintf(why, why_size, "is truncated (no 'end' line)"), -1;
    return load_ok_k;
}

/** The cache key of a file: a rename always brings a new inode, so a changed key means new text. */
typedef struct file_key_t {
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_key_t;

static bool key_equal(file_key_t const *key, struct stat const *st) {
    // No ctime: a rename changes it, and the writer compares what it wrote before its rename.
    return key->exists && key->dev == st->st_dev && key->ino == st->st_ino && key->size == st->st_size &&
           key->mtime.tv_sec == st->st_mtim.tv_sec && key->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static void key_set(file_key_t *key, struct stat const *st) {
    key->exists = true, key->dev = st->st_dev, key->ino = st->st_ino, key->size = st->st_size;
    key->mtime = st->st_mtim;
}

/* ---- The run ---- */

typedef enum slot_kind_t {
    slot_none_k = 0, /**< No file. */
    slot_stale_k,    /**< A file of another nonce: an earlier run's; ignored. */
    slot_facts_k,    /**< Facts under the current nonce. */
    slot_failed_k,   /**< A failure record under the current nonce: that process gave up. */
} slot_kind_t;

/** What is known of one `process-<i>` file. */
typedef struct slot_t {
    size_t index;
    file_key_t key;
    slot_kind_t kind;
    uform_rendezvous_facts_t facts; /**< Valid for slot_facts_k. */
    uint64_t first_token;           /**< The first token seen under the current nonce. */
    int64_t first_pid;
    char first_host[128];
    uint64_t acked_token; /**< Process 0: the token its `ack-<i>` carries. */
    bool present;         /**< Seen by the latest directory scan. */
    uform_status_t failed_status; /**< For slot_failed_k: the status that process failed with... */
    char failed_message[400];     /**< ...and its message. */
} slot_t;

/** What is known of `run`. */
typedef struct run_info_t {
    file_key_t key;
    bool valid;          /**< Parsed, this format. */
    uint32_t version;    /**< Of the file, also when another format. */
    uint64_t nonce, token;
    int64_t pid;
    uint64_t pid_start, pid_namespace;
    char host[128], boot_id[40];
} run_info_t;

struct uform_rendezvous_t {
    int dirfd;
    DIR *dir;
    char path[PATH_MAX]; /**< `directory/job`, for messages. */
    size_t index, count;
    double timeout;
    identity_t identity;
    uform_rendezvous_facts_t self;
    uint64_t nonce;    /**< The adopted run nonce; zero before one was read. */
    uint64_t token;    /**< This process's, drawn at start. */
    bool trusted;      /**< Process 0, or acknowledged by it under `nonce`. */
    bool written;      /**< Own facts are on disk under `nonce`. */
    bool disputed;     /**< Own file holds a dispute record: publish no failure over it. */
    file_key_t own_key; /**< The key of the facts file this process last wrote. */
    slot_t *slots;     /**< [count] */
    slot_t *extras;    /**< Files claiming indices at or above `count`. */
    size_t extras_count, extras_capacity;
    run_info_t run;
    file_key_t ack_key;
    char *text; /**< Scratch for reading: UFORM_RENDEZVOUS_FILE_LIMIT + 2 bytes. */
    char blob_names[8][48];
    size_t blob_count;
    uform_rendezvous_facts_t *peers; /**< After joining: [count]. */
};

static uform_status_t corrupt(struct uform_rendezvous_t const *rv, char const *name, char const *format, ...) {
    char why[RV_MESSAGE];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(why, sizeof why, format, arguments);
    va_end(arguments);
    return uform_fail(uform_status_corrupt_file_k, "mesh file '%.200s/%s' %s", rv->path, name, why);
}

/** Reads a file of the job directory into `rv->text` and parses it. Symlinks, non-regular files,
 *  files writable by others, oversized and malformed files are CORRUPT_FILE. */
static uform_status_t load_file(uform_rendezvous_t *rv, char const *name, struct stat *st, record_t *record,
                                load_t *load) {
    *load = load_absent_k;
    if (fstatat(rv->dirfd, name, st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return uform_status_ok_k;
        return uform_fail(uform_status_system_error_k, "cannot inspect mesh file '%.200s/%s': %s", rv->path, name,
                          strerror(errno));
    }
    if (S_ISLNK(st->st_mode)) return corrupt(rv, name, "is a symbolic link; mesh files are never followed");
    if (!S_ISREG(st->st_mode)) return corrupt(rv, name, "is not a regular file");
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return corrupt(rv, name, "is writable by group or others (mode %04o); mesh files are 0600",
                       (unsigned)(st->st_mode & 07777));
    if (st->st_size > (off_t)UFORM_RENDEZVOUS_FILE_LIMIT)
        return corrupt(rv, name, "is oversized (%lld bytes, the limit is %u)", (long long)st->st_size,
                       UFORM_RENDEZVOUS_FILE_LIMIT);
    int fd = openat(rv->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return uform_status_ok_k;
        if (errno == ELOOP) return corrupt(rv, name, "is a symbolic link; mesh files are never followed");
        return uform_fail(uform_status_system_error_k, "cannot open mesh file '%.200s/%s': %s", rv->path, name,
                          strerror(errno));
    }
    // Read from the opened file, which may differ from what fstatat saw if it was replaced since.
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return corrupt(rv, name, "is not a regular file");
    }
    size_t length = 0;
    while (length <= UFORM_RENDEZVOUS_FILE_LIMIT) {
        ssize_t got = read(fd, rv->text + length, UFORM_RENDEZVOUS_FILE_LIMIT + 1 - length);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int error = errno;
            close(fd);
            return uform_fail(uform_status_system_error_k, "cannot read mesh file '%.200s/%s': %s", rv->path, name,
                              strerror(error));
        }
        if (got == 0) break;
        length += (size_t)got;
    }
    close(fd);
    if (length > UFORM_RENDEZVOUS_FILE_LIMIT)
        return corrupt(rv, name, "is oversized (over %u bytes)", UFORM_RENDEZVOUS_FILE_LIMIT);
    rv->text[length] = '\0';
    char why[160];
    int parsed = parse_record(rv->text, length, record, why, sizeof why);
    if (parsed < 0) return corrupt(rv, name, "%s", why);
    *load = (load_t)parsed;
    return uform_status_ok_k;
}

/** Writes `text` to `name` atomically: a dot-named temporary (O_EXCL, 0600), fsync, rename,
 *  directory fsync. Fills `key` with the written file's identity when asked. */
static uform_status_t write_file(uform_rendezvous_t *rv, char const *name, char const *text, file_key_t *key) {
    char temporary[96];
    snprintf(temporary, sizeof temporary, ".tmp.%s.%lld.%016" PRIx64, name, (long long)getpid(), random_u64());
    int fd = openat(rv->dirfd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return uform_fail(uform_status_system_error_k, "cannot create '%.200s/%s': %s", rv->path, temporary,
                          strerror(errno));
    size_t length = strlen(text), written = 0;
    int error = 0;
    if (fchmod(fd, 0600) != 0) error = errno;
    while (!error && written < length) {
        ssize_t put = write(fd, text + written, length - written);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) error = put < 0 ? errno : EIO;
        else written += (size_t)put;
    }
    if (!error && fsync(fd) != 0) error = errno;
    struct stat st;
    if (!error && fstat(fd, &st) != 0) error = errno;
    if (close(fd) != 0 && !error) error = errno;
    if (!error) {
        hook("temporary-written", name);
        if (renameat(rv->dirfd, temporary, rv->dirfd, name) != 0) error = errno;
    }
    if (error) {
        unlinkat(rv->dirfd, temporary, 0);
        return uform_fail(uform_status_system_error_k, "cannot write mesh file '%.200s/%s': %s", rv->path, name,
                          strerror(error));
    }
    fsync(rv->dirfd); // the rename's durability; a failure here changes nothing a live run sees
    if (key) key_set(key, &st);
    hook("renamed", name);
    return uform_status_ok_k;
}

/* ---- Facts as text ---- */

static void facts_to_text(uform_rendezvous_facts_t const *facts, char *text, size_t capacity) {
    snprintf(text, capacity,
             "uform-mesh %u facts %016" PRIx64 "\n"
             "token %016" PRIx64 "\n"
             "index %zu\n"
             "count %zu\n"
             "gpus %zu\n"
             "gpu_class %d\n"
             "gpu_class_pinned %d\n"
             "gpu_floor %d\n"
             "multimem_span %zu\n"
             "multicast_supported %d\n"
             "multicast_allowed %d\n"
             "host %s\n"
             "boot_id %s\n"
             "pid_namespace %" PRIu64 "\n"
             "pid %" PRId64 "\n"
             "pid_start %" PRIu64 "\n"
             "started %.6f\n"
             "end\n",
             facts->format_version ? facts->format_version : UFORM_RENDEZVOUS_FORMAT, facts->nonce, facts->token,
             facts->process_index, facts->process_count, facts->gpus_count, (int)facts->gpu_class,
             facts->gpu_class_pinned ? 1 : 0, (int)facts->gpu_floor, facts->multimem_span,
             facts->multicast_supported ? 1 : 0, facts->multicast_allowed ? 1 : 0, facts->host,
             facts->boot_id[0] ? facts->boot_id : "-", facts->pid_namespace, facts->pid, facts->pid_start,
             facts->started);
}

#define GPU_CLASS_LAST uform_gpu_class_apple_metal10_k
#define SIZE_LIMIT ((uint64_t)1 << 40)

/** Reads the fields every file about a process carries (host, boot ID, namespace, PID, start). */
static bool parse_process_fields(record_t const *record, char *host, char *boot_id, uint64_t *pid_namespace,
                                 int64_t *pid, uint64_t *pid_start, char const **bad) {
    char const *value;
    uint64_t number;
    if (!(value = record_get(record, *bad = "host")) || !*value || strlen(value) >= 128) return false;
    snprintf(host, 128, "%s", value);
    if (!(value = record_get(record, *bad = "boot_id")) || strlen(value) >= 40) return false;
    snprintf(boot_id, 40, "%s", strcmp(value, "-") == 0 ? "" : value);
    if (!parse_unsigned(record_get(record, *bad = "pid_namespace"), UINT64_MAX, pid_namespace)) return false;
    if (!parse_unsigned(record_get(record, *bad = "pid"), INT64_MAX, &number) || number == 0) return false;
    *pid = (int64_t)number;
    if (!parse_unsigned(record_get(record, *bad = "pid_start"), UINT64_MAX, pid_start)) return false;
    return true;
}

static bool parse_facts(record_t const *record, uform_rendezvous_facts_t *facts, char const **bad) {
    memset(facts, 0, sizeof *facts);
    uint64_t number;
    char const *value;
    facts->format_version = record->version;
    facts->nonce = record->nonce;
    if (!parse_hex((value = record_get(record, *bad = "token")) ? value : "", &facts->token) || !facts->token)
        return false;
    if (!parse_unsigned(record_get(record, *bad = "count"), SIZE_LIMIT, &number) || number < 2) return false;
    facts->process_count = (size_t)number;
    if (!parse_unsigned(record_get(record, *bad = "index"), facts->process_count - 1, &number)) return false;
    facts->process_index = (size_t)number;
    if (!parse_unsigned(record_get(record, *bad = "gpus"), SIZE_LIMIT, &number) || number == 0) return false;
    facts->gpus_count = (size_t)number;
    if (!parse_unsigned(record_get(record, *bad = "gpu_class"), GPU_CLASS_LAST, &number) || number == 0) return false;
    facts->gpu_class = (uform_gpu_class_t)number;
    if (!parse_unsigned(record_get(record, *bad = "gpu_class_pinned"), 1, &number)) return false;
    facts->gpu_class_pinned = number != 0;
    if (!parse_unsigned(record_get(record, *bad = "gpu_floor"), GPU_CLASS_LAST, &number) || number == 0) return false;
    facts->gpu_floor = (uform_gpu_class_t)number;
    if (!parse_unsigned(record_get(record, *bad = "multimem_span"), SIZE_LIMIT, &number)) return false;
    facts->multimem_span = (size_t)number;
    if (!parse_unsigned(record_get(record, *bad = "multicast_supported"), 1, &number)) return false;
    facts->multicast_supported = number != 0;
    if (!parse_unsigned(record_get(record, *bad = "multicast_allowed"), 1, &number)) return false;
    facts->multicast_allowed = number != 0;
    if (!parse_process_fields(record, facts->host, facts->boot_id, &facts->pid_namespace, &facts->pid,
                              &facts->pid_start, bad))
        return false;
    if (!(value = record_get(record, *bad = "started"))) return false;
    char *end = NULL;
    facts->started = strtod(value, &end);
    if (!end || *end || !isfinite(facts->started)) return false;
    if (record->pairs != 16) return (*bad = "(unknown keys)"), false;
    return true;
}

static bool parse_failure(record_t const *record, uform_rendezvous_facts_t *facts, uform_status_t *status,
                          char *message, char const **bad) {
    memset(facts, 0, sizeof *facts);
    uint64_t number;
    char const *value;
    if (!parse_hex((value = record_get(record, *bad = "token")) ? value : "", &facts->token) || !facts->token)
        return false;
    if (!parse_unsigned(record_get(record, *bad = "index"), SIZE_LIMIT, &number)) return false;
    facts->process_index = (size_t)number;
    if (!parse_unsigned(record_get(record, *bad = "status"), uform_status_pending_k, &number) || number == 0)
        return false;
    *status = (uform_status_t)number;
    if (!parse_unsigned(record_get(record, *bad = "pid"), INT64_MAX, &number) || number == 0) return false;
    facts->pid = (int64_t)number;
    if (!(value = record_get(record, *bad = "host")) || !*value || strlen(value) >= 128) return false;
    snprintf(facts->host, sizeof facts->host, "%s", value);
    if (!(value = record_get(record, *bad = "message")) || strlen(value) >= 400) return false;
    snprintf(message, 400, "%s", value);
    if (record->pairs != 6) return (*bad = "(unknown keys)"), false;
    return true;
}

/* ---- Options ---- */

static uform_status_t check_job(char const *job) {
    if (!job) return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::job is required with peers");
    size_t length = strlen(job);
    if (length == 0 || length > 128)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::job must be 1 to 128 characters, not %zu", length);
    if (strcmp(job, ".") == 0 || strcmp(job, "..") == 0)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::job must not be '%s'", job);
    for (size_t i = 0; i < length; ++i) {
        unsigned char c = (unsigned char)job[i];
        if (!(isalnum(c) && c < 128) && c != '.' && c != '_' && c != '-')
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_mesh_options_t::job may hold only [A-Za-z0-9._-], not byte 0x%02x at %zu", c, i);
    }
    return uform_status_ok_k;
}

uform_status_t uform_rendezvous_check_options(uform_mesh_options_t const *options) {
    if (!options) return uform_status_ok_k;
    if (options->host_domain_count > 1 && options->host_domain_index >= options->host_domain_count)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::host_domain_index %zu is not below host_domain_count %zu",
                          options->host_domain_index, options->host_domain_count);
    if (options->host_domain_count <= 1 && options->host_domain_index != 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::host_domain_index %zu needs a host_domain_count above it, not %zu",
                          options->host_domain_index, options->host_domain_count);
    if (options->host_domain_count > SIZE_LIMIT)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::host_domain_count %zu is implausible",
                          options->host_domain_count);
    if (options->gpus_per_multimem_domain > SIZE_LIMIT)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::gpus_per_multimem_domain %zu is implausible",
                          options->gpus_per_multimem_domain);
    if (!isfinite(options->timeout_seconds) || options->timeout_seconds < 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::timeout_seconds must be zero (120 s) or positive, not %g",
                          options->timeout_seconds);
    if (options->host_domain_count <= 1) return uform_status_ok_k;
    if (!options->directory || !options->directory[0])
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_options_t::directory is required with %zu processes", options->host_domain_count);
    if (strlen(options->directory) > PATH_MAX - 200)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_options_t::directory is too long (%zu bytes)",
                          strlen(options->directory));
    return check_job(options->job);
}

/** Opens (creating, 0700, as `mkdir -p` would) `directory/job` as a directory descriptor. */
static uform_status_t open_job_directory(uform_rendezvous_t *rv, char const *directory, char const *job) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", directory);
    for (char *slash = path + 1;; ++slash) {
        bool end = *slash == '\0';
        if (*slash != '/' && !end) continue;
        *slash = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return uform_fail(uform_status_system_error_k, "cannot create mesh directory '%.200s': %s", path,
                              strerror(errno));
        if (end) break;
        *slash = '/';
    }
    int parent = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0)
        return uform_fail(uform_status_system_error_k, "cannot open mesh directory '%.200s': %s", path, strerror(errno));
    if (mkdirat(parent, job, 0700) != 0 && errno != EEXIST) {
        int error = errno;
        close(parent);
        return uform_fail(uform_status_system_error_k, "cannot create mesh job directory '%.200s/%s': %s", directory,
                          job, strerror(error));
    }
    rv->dirfd = openat(parent, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int error = errno;
    close(parent);
    snprintf(rv->path, sizeof rv->path, "%s/%s", directory, job);
    if (rv->dirfd < 0) {
        if (error == ELOOP || error == ENOTDIR)
            return uform_fail(uform_status_corrupt_file_k, "mesh job directory '%.200s' is %s", rv->path,
                              error == ELOOP ? "a symbolic link" : "not a directory");
        return uform_fail(uform_status_system_error_k, "cannot open mesh job directory '%.200s': %s", rv->path,
                          strerror(error));
    }
    int dup_fd = dup(rv->dirfd);
    rv->dir = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!rv->dir) {
        if (dup_fd >= 0) close(dup_fd);
        return uform_fail(uform_status_system_error_k, "cannot list mesh job directory '%.200s': %s", rv->path,
                          strerror(errno));
    }
    return uform_status_ok_k;
}

/* ---- Joining ---- */

static void slot_reset(slot_t *slot) {
    size_t index = slot->index;
    memset(slot, 0, sizeof *slot);
    slot->index = index;
}

static slot_t *slot_for(uform_rendezvous_t *rv, size_t index) {
    if (index < rv->count) return &rv->slots[index];
    for (size_t i = 0; i < rv->extras_count; ++i)
        if (rv->extras[i].index == index) return &rv->extras[i];
    if (rv->extras_count == rv->extras_capacity) {
        size_t capacity = rv->extras_capacity ? rv->extras_capacity * 2 : 8;
        slot_t *grown = realloc(rv->extras, capacity * sizeof *grown);
        if (!grown) return NULL;
        rv->extras = grown, rv->extras_capacity = capacity;
    }
    slot_t *slot = &rv->extras[rv->extras_count++];
    memset(slot, 0, sizeof *slot);
    slot->index = index;
    return slot;
}

static uform_status_t duplicate_claim(uform_rendezvous_t const *rv, size_t index, int64_t pid_a, char const *host_a,
                                      int64_t pid_b, char const *host_b) {
    return uform_fail(uform_status_corrupt_file_k,
                      "mesh file '%.200s/process-%zu': process index %zu is claimed by two processes: pid %" PRId64
                      " on host %s and pid %" PRId64 " on host %s",
                      rv->path, index, index, pid_a, host_a, pid_b, host_b);
}

/** Replaces this process's facts file with a record naming both claimants, so the other claimant
 *  (whose file this was) fails too, then fails with CORRUPT_FILE. */
static uform_status_t dispute(uform_rendezvous_t *rv, int64_t other_pid, char const *other_host) {
    char name[40], text[768];
    snprintf(name, sizeof name, "process-%zu", rv->index);
    snprintf(text, sizeof text,
             "uform-mesh %u disputed %016" PRIx64 "\nindex %zu\npid_a %" PRId64 "\nhost_a %s\npid_b %" PRId64
             "\nhost_b %s\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->index, rv->self.pid, rv->self.host, other_pid, other_host);
    write_file(rv, name, text, NULL); // best effort: the status below is what matters here
    rv->own_key.exists = false;
    rv->disputed = true;
    return duplicate_claim(rv, rv->index, rv->self.pid, rv->self.host, other_pid, other_host);
}

static uform_status_t disputed_record(uform_rendezvous_t *rv, char const *name, record_t const *record) {
    uint64_t index = 0, pid_a = 0, pid_b = 0;
    char const *host_a = record_get(record, "host_a"), *host_b = record_get(record, "host_b");
    if (!parse_unsigned(record_get(record, "index"), SIZE_LIMIT, &index) ||
        !parse_unsigned(record_get(record, "pid_a"), INT64_MAX, &pid_a) ||
        !parse_unsigned(record_get(record, "pid_b"), INT64_MAX, &pid_b) || !host_a || !host_b)
        return corrupt(rv, name, "is garbage (a malformed dispute record)");
    return duplicate_claim(rv, (size_t)index, (int64_t)pid_a, host_a, (int64_t)pid_b, host_b);
}

static uform_status_t write_own_facts(uform_rendezvous_t *rv) {
    char name[40], text[1024];
    snprintf(name, sizeof name, "process-%zu", rv->index);
    rv->self.nonce = rv->nonce;
    facts_to_text(&rv->self, text, sizeof text);
    uform_status_t status = write_file(rv, name, text, &rv->own_key);
    if (status == uform_status_ok_k) rv->written = true;
    return status;
}

/** Reads `process-<index>` into its slot when it changed, classifying it against the nonce. */
static uform_status_t refresh_slot(uform_rendezvous_t *rv, slot_t *slot, bool *changed) {
    char name[40];
    snprintf(name, sizeof name, "process-%zu", slot->index);
    struct stat st;
    if (fstatat(rv->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            return uform_fail(uform_status_system_error_k, "cannot inspect mesh file '%.200s/%s': %s", rv->path, name,
                              strerror(errno));
        if (slot->key.exists) *changed = true;
        slot->key.exists = false;
        slot->kind = slot_none_k;
        return uform_status_ok_k;
    }
    if (key_equal(&slot->key, &st)) return uform_status_ok_k;
    *changed = true;
    bool own = slot->index == rv->index;
    if (own && key_equal(&rv->own_key, &st)) { // the file this process wrote
        key_set(&slot->key, &st);
        slot->kind = slot_facts_k;
        slot->facts = rv->self;
        return uform_status_ok_k;
    }
    record_t record;
    load_t load;
    uform_status_t status = load_file(rv, name, &st, &record, &load);
    if (status != uform_status_ok_k) return status;
    if (load == load_absent_k) {
        slot->key.exists = false;
        slot->kind = slot_none_k;
        return uform_status_ok_k;
    }
    key_set(&slot->key, &st);
    if (load == load_other_version_k) {
        if (own || record.nonce == rv->nonce)
            return corrupt(rv, name, "is of format version %u; this library reads and writes version %u",
                           record.version, UFORM_RENDEZVOUS_FORMAT);
        slot->kind = slot_stale_k;
        return uform_status_ok_k;
    }
    if (strcmp(record.kind, "disputed") == 0) {
        if (!own && record.nonce != rv->nonce) return (slot->kind = slot_stale_k), uform_status_ok_k;
        return disputed_record(rv, name, &record);
    }
    uform_rendezvous_facts_t facts;
    char const *bad = "";
    bool failed = strcmp(record.kind, "failed") == 0;
    if (failed) {
        if (!parse_failure(&record, &facts, &slot->failed_status, slot->failed_message, &bad))
            return corrupt(rv, name, "is garbage (field '%s')", bad);
    }
    else if (strcmp(record.kind, "facts") != 0) return corrupt(rv, name, "is of unexpected kind '%s'", record.kind);
    else if (!parse_facts(&record, &facts, &bad)) return corrupt(rv, name, "is garbage (field '%s')", bad);
    if (facts.process_index != slot->index)
        return corrupt(rv, name, "claims index %zu in its text", facts.process_index);
    if (own) { // another process wrote over this process's facts: it claims the same index
        if (facts.token != rv->token) return dispute(rv, facts.pid, facts.host);
        slot->kind = slot_facts_k;
        slot->facts = rv->self;
        return uform_status_ok_k;
    }
    if (record.nonce != rv->nonce) return (slot->kind = slot_stale_k), uform_status_ok_k;
    if (slot->first_token && slot->first_token != facts.token)
        return duplicate_claim(rv, slot->index, slot->first_pid, slot->first_host, facts.pid, facts.host);
    if (!slot->first_token) {
        slot->first_token = facts.token, slot->first_pid = facts.pid;
        snprintf(slot->first_host, sizeof slot->first_host, "%s", facts.host);
    }
    slot->kind = failed ? slot_failed_k : slot_facts_k;
    if (failed) { // keep the facts read before, if any; name and PID come with the record
        slot->facts.pid = facts.pid, slot->facts.token = facts.token, slot->facts.process_index = facts.process_index;
        snprintf(slot->facts.host, sizeof slot->facts.host, "%s", facts.host);
    }
    else slot->facts = facts;
    return uform_status_ok_k;
}

/** The failure a peer published, as this process reports it. */
static uform_status_t peer_failed(uform_rendezvous_t const *rv, slot_t const *slot) {
    return uform_fail(slot->failed_status, "mesh '%.160s': process %zu (host %.64s, pid %" PRId64 ") failed: %s",
                      rv->path, slot->index, slot->facts.host, slot->facts.pid, slot->failed_message);
}

/** Replaces this process's facts with a record of its failure, so peers still waiting stop at once
 *  with the same status. Best effort: the caller fails anyway. */
static void publish_failure(uform_rendezvous_t *rv, uform_status_t status, char const *message) {
    if (!rv->written || rv->disputed || rv->dirfd < 0) return;
    char prefix[PATH_MAX + 16], name[40], text[1024], line[400];
    snprintf(prefix, sizeof prefix, "mesh '%s': ", rv->path);
    if (strncmp(message, prefix, strlen(prefix)) == 0) message += strlen(prefix);
    snprintf(line, sizeof line, "%s", message);
    for (char *c = line; *c; ++c)
        if (*c == '\n' || *c == '\r') *c = ' ';
    snprintf(name, sizeof name, "process-%zu", rv->index);
    snprintf(text, sizeof text,
             "uform-mesh %u failed %016" PRIx64 "\nindex %zu\ntoken %016" PRIx64 "\nstatus %d\npid %" PRId64
             "\nhost %s\nmessage %s\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->index, rv->token, (int)status, rv->self.pid, rv->self.host, line);
    if (write_file(rv, name, text, &rv->own_key) == uform_status_ok_k) rv->disputed = true; // written once
}

void uform_rendezvous_publish_failure(uform_rendezvous_t *rendezvous, uform_status_t status, char const *message) {
    if (rendezvous && status != uform_status_ok_k) publish_failure(rendezvous, status, message ? message : "");
}

/** Reads `run` when it changed. Garbage is CORRUPT_FILE; another format version is kept as not
 *  (yet) this run's. */
static uform_status_t refresh_run(uform_rendezvous_t *rv, bool *changed) {
    struct stat st;
    if (fstatat(rv->dirfd, "run", &st, AT_SYMLINK_NOFOLLOW) == 0 && key_equal(&rv->run.key, &st))
        return uform_status_ok_k;
    record_t record;
    load_t load;
    uform_status_t status = load_file(rv, "run", &st, &record, &load);
    if (status != uform_status_ok_k) return status;
    *changed = true;
    memset(&rv->run, 0, sizeof rv->run);
    if (load == load_absent_k) return uform_status_ok_k;
    key_set(&rv->run.key, &st);
    rv->run.version = record.version;
    rv->run.nonce = record.nonce;
    if (load == load_other_version_k) return uform_status_ok_k;
    if (strcmp(record.kind, "run") != 0) return corrupt(rv, "run", "is of unexpected kind '%s'", record.kind);
    char const *bad = "", *token = record_get(&record, "token");
    uint64_t count = 0;
    if (!token || !parse_hex(token, &rv->run.token) || !rv->run.token || record.nonce == 0 ||
        !parse_unsigned(record_get(&record, "count"), SIZE_LIMIT, &count) ||
        !parse_process_fields(&record, rv->run.host, rv->run.boot_id, &rv->run.pid_namespace, &rv->run.pid,
                              &rv->run.pid_start, &bad) ||
        record.pairs != 8)
        return corrupt(rv, "run", "is garbage (field '%s')", *bad ? bad : "token, count or unknown keys");
    rv->run.valid = true;
    return uform_status_ok_k;
}

static uform_status_t write_run(uform_rendezvous_t *rv) {
    char text[768];
    snprintf(text, sizeof text,
             "uform-mesh %u run %016" PRIx64 "\ntoken %016" PRIx64 "\ncount %zu\nhost %s\nboot_id %s\n"
             "pid_namespace %" PRIu64 "\npid %" PRId64 "\npid_start %" PRIu64 "\nstarted %.6f\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, rv->token, rv->count, rv->self.host,
             rv->self.boot_id[0] ? rv->self.boot_id : "-", rv->self.pid_namespace, rv->self.pid, rv->self.pid_start,
             rv->self.started);
    return write_file(rv, "run", text, &rv->run.key);
}

/** Whether `ack-<index>` acknowledges this process's token under the adopted nonce. */
static uform_status_t refresh_ack(uform_rendezvous_t *rv, bool *acknowledged) {
    char name[40];
    snprintf(name, sizeof name, "ack-%zu", rv->index);
    struct stat st;
    if (fstatat(rv->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && key_equal(&rv->ack_key, &st))
        return uform_status_ok_k;
    record_t record;
    load_t load;
    uform_status_t status = load_file(rv, name, &st, &record, &load);
    if (status != uform_status_ok_k) return status;
    rv->ack_key.exists = false;
    if (load != load_ok_k) return uform_status_ok_k; // absent, or another format (an earlier run's)
    key_set(&rv->ack_key, &st);
    if (strcmp(record.kind, "ack") != 0) return corrupt(rv, name, "is of unexpected kind '%s'", record.kind);
    uint64_t token = 0, index = 0;
    char const *value = record_get(&record, "token");
    if (!value || !parse_hex(value, &token) || !parse_unsigned(record_get(&record, "index"), SIZE_LIMIT, &index) ||
        index != rv->index || record.pairs != 2)
        return corrupt(rv, name, "is garbage");
    if (record.nonce == rv->nonce && token == rv->token) *acknowledged = true;
    return uform_status_ok_k;
}

static uform_status_t write_ack(uform_rendezvous_t *rv, slot_t *slot) {
    char name[40], text[256];
    snprintf(name, sizeof name, "ack-%zu", slot->index);
    snprintf(text, sizeof text, "uform-mesh %u ack %016" PRIx64 "\nindex %zu\ntoken %016" PRIx64 "\nend\n",
             UFORM_RENDEZVOUS_FORMAT, rv->nonce, slot->index, slot->facts.token);
    uform_status_t status = write_file(rv, name, text, NULL);
    if (status == uform_status_ok_k) slot->acked_token = slot->facts.token;
    return status;
}

/** Lists `process-<i>` files and refreshes every slot seen. A hostile file of another index is
 *  recorded as `*hostile` (the first one, its message in `hostile_message`) and the listing goes on,
 *  so process 0 still sees and acknowledges everyone; other failures return at once. */
static uform_status_t scan(uform_rendezvous_t *rv, bool *changed, uform_status_t *hostile, char *hostile_message) {
    for (size_t i = 0; i < rv->count; ++i) rv->slots[i].present = false;
    for (size_t i = 0; i < rv->extras_count; ++i) rv->extras[i].present = false;
    rewinddir(rv->dir);
    for (size_t pass = 0; pass < 2; ++pass) {
        // Pass 0 refreshes listed files; pass 1 refreshes remembered files the listing missed
        // (removed, or a listing that raced a rename).
        struct dirent *entry = NULL;
        size_t next = 0;
        for (;;) {
            slot_t *slot = NULL;
            if (pass == 0) {
                if (!(entry = readdir(rv->dir))) break;
                uint64_t index;
                char const *digits = entry->d_name + 8;
                if (strncmp(entry->d_name, "process-", 8) != 0 || !parse_unsigned(digits, SIZE_LIMIT, &index) ||
                    (digits[0] == '0' && digits[1]))
                    continue;
                if (!(slot = slot_for(rv, (size_t)index)))
                    return uform_fail(uform_status_out_of_memory_k, "out of memory listing '%.200s'", rv->path);
                slot->present = true;
            }
            else {
                if (next == rv->count + rv->extras_count) break;
                slot = next < rv->count ? &rv->slots[next] : &rv->extras[next - rv->count];
                ++next;
                if (slot->present || !slot->key.exists) continue;
            }
            uform_status_t status = refresh_slot(rv, slot, changed);
            if (status == uform_status_ok_k) continue;
            if (status != uform_status_corrupt_file_k || slot->index == rv->index) return status;
            slot->kind = slot_none_k;
            slot->key.exists = false; // read it again next time: it may have been replaced
            if (*hostile == uform_status_ok_k) {
                *hostile = status;
                snprintf(hostile_message, 512, "%s", uform_error_message());
            }
        }
    }
    return uform_status_ok_k;
}

/** The facts under the current nonce, lowest index first. */
static size_t gather(uform_rendezvous_t *rv, uform_rendezvous_facts_t const **facts, size_t capacity) {
    size_t count = 0;
    for (size_t i = 0; i < rv->count && count < capacity; ++i)
        if (rv->slots[i].kind == slot_facts_k) facts[count++] = &rv->slots[i].facts;
    // Extras are few: sort them by index with an insertion pass.
    size_t first_extra = count;
    for (size_t i = 0; i < rv->extras_count && count < capacity; ++i) {
        if (rv->extras[i].kind != slot_facts_k) continue;
        size_t at = count++;
        while (at > first_extra && facts[at - 1]->process_index > rv->extras[i].index) facts[at] = facts[at - 1], --at;
        facts[at] = &rv->extras[i].facts;
    }
    return count;
}

/** Checks the fields every process must agree on, field by field over processes in index order,
 *  so every process that sees the same files names the same disagreement. */
static uform_status_t check_agreement(uform_rendezvous_facts_t const *const *facts, size_t count) {
    if (count < 2) return uform_status_ok_k;
    uform_rendezvous_facts_t const *first = facts[0];
    for (size_t i = 1; i < count; ++i)
        if (facts[i]->process_count != first->process_count)
            return uform_fail(uform_status_config_mismatch_k,
                              "mesh processes %zu and %zu disagree on host_domain_count: %zu vs %zu",
                              first->process_index, facts[i]->process_index, first->process_count,
                              facts[i]->process_count);
    for (size_t i = 1; i < count; ++i)
        if (facts[i]->multimem_span != first->multimem_span)
            return uform_fail(uform_status_config_mismatch_k,
                              "mesh processes %zu and %zu disagree on gpus_per_multimem_domain: %zu vs %zu "
                              "(zero derives)",
                              first->process_index, facts[i]->process_index, first->multimem_span,
                              facts[i]->multimem_span);
    for (size_t i = 1; i < count; ++i)
        if (facts[i]->multicast_allowed != first->multicast_allowed)
            return uform_fail(uform_status_config_mismatch_k,
                              "mesh processes %zu and %zu disagree on UFORM_ALLOW_MULTICAST: %s vs %s",
                              first->process_index, facts[i]->process_index,
                              first->multicast_allowed ? "1" : "not 1", facts[i]->multicast_allowed ? "1" : "not 1");
    uform_rendezvous_facts_t const *pinned = NULL;
    for (size_t i = 0; i < count; ++i) {
        if (!facts[i]->gpu_class_pinned) continue;
        if (!pinned) pinned = facts[i];
        else if (facts[i]->gpu_class != pinned->gpu_class)
            return uform_fail(uform_status_config_mismatch_k,
                              "mesh processes %zu and %zu pin different GPU classes: %s vs %s",
                              pinned->process_index, facts[i]->process_index, uform_gpu_class_name(pinned->gpu_class),
                              uform_gpu_class_name(facts[i]->gpu_class));
    }
    if (pinned) {
        for (size_t i = 0; i < count; ++i)
            if (!uform_gpu_class_runs(facts[i]->gpu_floor, pinned->gpu_class))
                return uform_fail(uform_status_config_mismatch_k,
                                  "mesh process %zu pins GPU class %s, which the GPUs of process %zu (%s) cannot run",
                                  pinned->process_index, uform_gpu_class_name(pinned->gpu_class),
                                  facts[i]->process_index, uform_gpu_class_name(facts[i]->gpu_floor));
        return uform_status_ok_k;
    }
    uform_gpu_class_t meet = first->gpu_floor;
    for (size_t i = 1; i < count; ++i)
        if ((meet = uform_gpu_class_common(meet, facts[i]->gpu_floor)) == uform_gpu_class_unknown_k)
            return uform_fail(uform_status_config_mismatch_k,
                              "mesh processes %zu (%s) and %zu (%s) have no GPU class in common",
                              first->process_index, uform_gpu_class_name(first->gpu_floor), facts[i]->process_index,
                              uform_gpu_class_name(facts[i]->gpu_floor));
    return uform_status_ok_k;
}

/** Describes why a process other than 0 was never acknowledged, for its TIMEOUT message. */
static void describe_run_file(uform_rendezvous_t const *rv, char *out, size_t capacity) {
    if (!rv->run.key.exists) {
        snprintf(out, capacity, "process 0 never wrote 'run'");
        return;
    }
    if (!rv->run.valid) {
        snprintf(out, capacity, "'run' is of format version %u, an earlier run's or another library's",
                 rv->run.version);
        return;
    }
    int alive = process_liveness(&rv->identity, rv->run.boot_id, rv->run.pid_namespace, rv->run.pid, rv->run.pid_start);
    snprintf(out, capacity,
             "'run' was written by pid %" PRId64 " on host %.64s, which %s: an earlier run's process 0, or "
             "one that already failed",
             rv->run.pid, rv->run.host,
             alive == 0 ? "is gone" : alive > 0 ? "still runs but never acknowledged this process" : "may be gone");
}

/** How long process 0 keeps acknowledging late arrivals after it found a failure, so they see it
 *  too, when not every expected process has arrived yet. */
#define RV_FAILURE_HOLD 2.0

static uform_status_t join_loop(uform_rendezvous_t *rv, double deadline) {
    double interval = 0.001, interval_limit = 0.010 * (double)(rv->count / 64 + 1);
    double next_liveness = 0, hold_until = 0;
    char failure_message[512] = "", held_message[512] = "";
    uform_status_t held = uform_status_ok_k;
    bool *absent = calloc(rv->count, sizeof(bool));
    uform_rendezvous_facts_t const **facts = calloc(rv->count + 64, sizeof *facts);
    if (!absent || !facts) {
        free(absent), free((void *)facts);
        return uform_fail(uform_status_out_of_memory_k, "out of memory joining a mesh of %zu processes", rv->count);
    }
    uform_status_t status = uform_status_ok_k;
    for (bool rescanned = false;; rescanned = false) {
        hook("waiting", "");
        bool changed = false;
        uform_status_t failure = uform_status_ok_k; // found this pass; process 0 may hold it a while
        // 1. The run file: process 0 checks nobody else claims index 0; others adopt its nonce.
        if ((status = refresh_run(rv, &changed)) != uform_status_ok_k) break;
        if (rv->index == 0) {
            if (rv->run.valid && rv->run.token != rv->token) {
                status = duplicate_claim(rv, 0, rv->self.pid, rv->self.host, rv->run.pid, rv->run.host);
                break;
            }
            if (!rv->run.key.exists && (status = write_run(rv)) != uform_status_ok_k) break;
        }
        else if (rv->run.valid && rv->run.nonce != rv->nonce) {
            rv->nonce = rv->run.nonce; // a new run, or the first one seen: start over under it
            rv->trusted = false;
            for (size_t i = 0; i < rv->count; ++i) slot_reset(&rv->slots[i]);
            rv->extras_count = 0;
            rv->ack_key.exists = false;
            if ((status = write_own_facts(rv)) != uform_status_ok_k) break;
        }
        // 2. Before its acknowledgement a process checks only its own file (for a second claimant).
        if (rv->written && !rv->trusted) {
            if ((status = refresh_slot(rv, &rv->slots[rv->index], &changed)) != uform_status_ok_k) break;
            if ((status = refresh_ack(rv, &rv->trusted)) != uform_status_ok_k) break;
            if (rv->trusted) changed = true;
        }
        size_t missing = 0;
    rescan:
        if (rv->trusted) {
            if ((status = scan(rv, &changed, &failure, failure_message)) != uform_status_ok_k) break;
            if (rv->slots[rv->index].kind != slot_facts_k) { // removed by someone: write it again
                if ((status = write_own_facts(rv)) != uform_status_ok_k) break;
                continue;
            }
            size_t known = gather(rv, facts, rv->count + 64);
            if (rv->index == 0)
                for (size_t i = 0; i < rv->count + rv->extras_count && status == uform_status_ok_k; ++i) {
                    slot_t *slot = i < rv->count ? &rv->slots[i] : &rv->extras[i - rv->count];
                    if (slot->index != 0 && slot->kind == slot_facts_k && slot->acked_token != slot->facts.token)
                        status = write_ack(rv, slot);
                }
            if (status != uform_status_ok_k) break;
            missing = 0;
            for (size_t i = 0; i < rv->count; ++i)
                missing += (absent[i] = rv->slots[i].kind != slot_facts_k && rv->slots[i].kind != slot_failed_k);
            if (!failure && (failure = check_agreement(facts, known)) != uform_status_ok_k)
                snprintf(failure_message, sizeof failure_message, "%s", uform_error_message());
            for (size_t i = 0; i < rv->count && !failure; ++i)
                if (rv->slots[i].kind == slot_failed_k) {
                    failure = peer_failed(rv, &rv->slots[i]);
                    snprintf(failure_message, sizeof failure_message, "%s", uform_error_message());
                }
            // 3. Trusted peers on this host that wrote facts and are gone end the wait now, and a
            //    complete set whose member is gone is no run: checked before every success.
            double now = uform_now_seconds();
            bool complete = !failure && missing == 0;
            if (!failure && (complete || now >= next_liveness || rescanned)) {
                next_liveness = now + 0.02;
                slot_t const *gone = NULL;
                for (size_t i = 0; i < rv->count && !gone; ++i) {
                    slot_t const *slot = &rv->slots[i];
                    if (slot->kind == slot_facts_k && i != rv->index &&
                        process_liveness(&rv->identity, slot->facts.boot_id, slot->facts.pid_namespace,
                                         slot->facts.pid, slot->facts.pid_start) == 0)
                        gone = slot;
                }
                if (complete && !gone) break; // joined
                if (gone && !complete && !rescanned) { // what it saw before dying shows in a new listing
                    rescanned = true;
                    goto rescan;
                }
                if (gone) {
                    char others[200];
                    format_indices(absent, rv->count, others, sizeof others);
                    failure = uform_fail(uform_status_timeout_k,
                                         "mesh '%.200s': process %zu of %zu (host %s, pid %" PRId64
                                         ") wrote its facts and is gone; absent: %s",
                                         rv->path, gone->index, rv->count, gone->facts.host, gone->facts.pid,
                                         missing ? others : "none");
                    snprintf(failure_message, sizeof failure_message, "%s", uform_error_message());
                }
            }
            if (failure) {
                // Others fail at once; process 0 first lets every expected process in (briefly),
                // reporting the first failure it found.
                if (!held) held = failure, snprintf(held_message, sizeof held_message, "%s", failure_message);
                if (!hold_until) hold_until = now + RV_FAILURE_HOLD < deadline ? now + RV_FAILURE_HOLD : deadline;
                if (rv->index != 0 || missing == 0 || now >= hold_until) {
                    status = uform_fail(held, "%s", held_message);
                    break;
                }
            }
            else hold_until = 0, held = uform_status_ok_k;
        }
        // 4. The deadline.
        if (uform_now_seconds() >= deadline) {
            if (held) {
                status = uform_fail(held, "%s", held_message);
                break;
            }
            if (!rv->trusted) {
                char why[400];
                describe_run_file(rv, why, sizeof why);
                status = uform_fail(uform_status_timeout_k,
                                    "mesh '%.200s': process %zu of %zu was not acknowledged by process 0 within %g s; "
                                    "%s",
                                    rv->path, rv->index, rv->count, rv->timeout, why);
                break;
            }
            char list[200];
            format_indices(absent, rv->count, list, sizeof list);
            bool one = missing == 1;
            status = uform_fail(uform_status_timeout_k, "mesh '%.200s': process%s %s of %zu did not write %s facts within %g s",
                                rv->path, one ? "" : "es", list, rv->count, one ? "its" : "their", rv->timeout);
            break;
        }
        interval = changed ? 0.001 : (interval * 1.5 > interval_limit ? interval_limit : interval * 1.5);
        double left = deadline - uform_now_seconds();
        uform_sleep_seconds(left < interval ? (left > 0 ? left : 0) : interval);
    }
    free(absent);
    free((void *)facts);
    return status;
}

uform_status_t uform_rendezvous_join(uform_mesh_options_t const *options, uform_rendezvous_facts_t const *local,
                                     uform_rendezvous_t **rendezvous) {
    if (!options || !local || !rendezvous)
        return uform_fail(uform_status_invalid_argument_k, "uform_rendezvous_join needs options, facts and an output");
    uform_status_t status = uform_rendezvous_check_options(options);
    if (status != uform_status_ok_k) return status;
    if (options->host_domain_count < 2)
        return uform_fail(uform_status_invalid_argument_k, "a rendezvous needs at least two processes, not %zu",
                          options->host_domain_count);
    if (local->gpus_count == 0 || local->gpus_count > SIZE_LIMIT)
        return uform_fail(uform_status_invalid_argument_k, "a mesh process needs at least one GPU, not %zu",
                          local->gpus_count);
    if (local->gpu_class <= uform_gpu_class_unknown_k || local->gpu_class > GPU_CLASS_LAST ||
        local->gpu_floor <= uform_gpu_class_unknown_k || local->gpu_floor > GPU_CLASS_LAST)
        return uform_fail(uform_status_invalid_argument_k, "mesh facts need known GPU classes, not %d and %d",
                          (int)local->gpu_class, (int)local->gpu_floor);

    double start = uform_now_seconds();
    uform_rendezvous_t *rv = calloc(1, sizeof *rv);
    if (rv) rv->text = malloc(UFORM_RENDEZVOUS_FILE_LIMIT + 2);
    if (rv) rv->slots = calloc(options->host_domain_count, sizeof *rv->slots);
    if (!rv || !rv->text || !rv->slots) {
        if (rv) free(rv->text), free(rv->slots);
        free(rv);
        return uform_fail(uform_status_out_of_memory_k, "out of memory joining a mesh of %zu processes",
                          options->host_domain_count);
    }
    rv->dirfd = -1;
    rv->index = options->host_domain_index;
    rv->count = options->host_domain_count;
    rv->timeout = options->timeout_seconds > 0 ? options->timeout_seconds : 120.0;
    for (size_t i = 0; i < rv->count; ++i) rv->slots[i].index = i;
    read_identity(&rv->identity);
    rv->token = random_u64();
    rv->self = *local;
    rv->self.token = rv->token;
    rv->self.process_index = rv->index;
    rv->self.process_count = rv->count;
    rv->self.pid = (int64_t)getpid();
    char state;
    if (read_proc_stat(rv->self.pid, &state, &rv->self.pid_start) <= 0) rv->self.pid_start = 0;
    rv->self.pid_namespace = rv->identity.pid_namespace;
    rv->self.started = wall_seconds();
    // A caller may name the host itself (tests simulate several hosts); otherwise this one's.
    if (!local->host[0]) snprintf(rv->self.host, sizeof rv->self.host, "%s", rv->identity.host);
    if (!local->boot_id[0] && !local->host[0])
        snprintf(rv->self.boot_id, sizeof rv->self.boot_id, "%s", rv->identity.boot_id);
    for (char *c = rv->self.host; *c; ++c)
        if (*c <= ' ' || *c > '~') *c = '?';
    for (char *c = rv->self.boot_id; *c; ++c)
        if (*c <= ' ' || *c > '~') *c = '?';

    status = open_job_directory(rv, options->directory, options->job);
    // Claim the index: what an earlier run left is removed, unless a live process on this host
    // still owns it, which makes two claimants.
    if (status == uform_status_ok_k) {
        char name[40];
        snprintf(name, sizeof name, "process-%zu", rv->index);
        struct stat st;
        record_t record;
        load_t load = load_absent_k;
        uform_rendezvous_facts_t old;
        char const *bad;
        if (fstatat(rv->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_size <= (off_t)UFORM_RENDEZVOUS_FILE_LIMIT &&
            load_file(rv, name, &st, &record, &load) == uform_status_ok_k && load == load_ok_k &&
            strcmp(record.kind, "facts") == 0 && parse_facts(&record, &old, &bad) &&
            process_liveness(&rv->identity, old.boot_id, old.pid_namespace, old.pid, old.pid_start) == 1 &&
            old.pid != rv->self.pid) {
            rv->nonce = old.nonce;
            status = dispute(rv, old.pid, old.host);
        }
        else if (unlinkat(rv->dirfd, name, 0) != 0 && errno != ENOENT)
            status = uform_fail(uform_status_system_error_k, "cannot remove the stale '%.200s/%s': %s", rv->path, name,
                                strerror(errno));
    }
    if (status == uform_status_ok_k && rv->index == 0) {
        rv->nonce = random_u64();
        rv->trusted = true;
        status = write_own_facts(rv);
        if (status == uform_status_ok_k) status = write_run(rv);
    }
    if (status == uform_status_ok_k) status = join_loop(rv, start + rv->timeout);
    if (status == uform_status_ok_k) {
        rv->peers = calloc(rv->count, sizeof *rv->peers);
        if (!rv->peers) status = uform_fail(uform_status_out_of_memory_k, "out of memory");
        else
            for (size_t i = 0; i < rv->count; ++i) rv->peers[i] = rv->slots[i].facts;
    }
    if (status != uform_status_ok_k) {
        char message[512];
        snprintf(message, sizeof message, "%s", uform_error_message());
        publish_failure(rv, status, message);
        uform_rendezvous_leave(rv, false);
        return uform_fail(status, "%s", message);
    }
    *rendezvous = rv;
    return uform_status_ok_k;
}

uform_rendezvous_facts_t const *uform_rendezvous_peers(uform_rendezvous_t const *rendezvous, size_t *count) {
    if (count) *count = rendezvous ? rendezvous->count : 0;
    return rendezvous ? rendezvous->peers : NULL;
}

/* ---- Describing ---- */

static void describe_tier_and_class(uform_rendezvous_facts_t const *facts, size_t count,
                                    uform_mesh_description_t *description) {
    bool switch_reduced = true;
    uform_gpu_class_t gpu_class = uform_gpu_class_unknown_k;
    for (size_t i = 0; i < count; ++i) {
        switch_reduced = switch_reduced && facts[i].multicast_supported && facts[i].multicast_allowed;
        if (facts[i].gpu_class_pinned) gpu_class = facts[i].gpu_class;
    }
    if (gpu_class == uform_gpu_class_unknown_k) {
        gpu_class = facts[0].gpu_floor;
        for (size_t i = 1; i < count; ++i) gpu_class = uform_gpu_class_common(gpu_class, facts[i].gpu_floor);
    }
    description->multimem_tier = switch_reduced ? uform_multimem_tier_switch_reduced_k : uform_multimem_tier_peer_read_k;
    description->gpu_class = gpu_class;
}

void uform_rendezvous_describe_alone(uform_rendezvous_facts_t const *local, uform_mesh_description_t *description) {
    memset(description, 0, sizeof *description);
    description->gpus_per_host_domain = local->gpus_count;
    description->gpus_per_colocated_domain = local->gpus_count;
    description->gpus_per_multimem_domain = local->multimem_span ? local->multimem_span : local->gpus_count;
    describe_tier_and_class(local, 1, description);
}

/** Processes share a host when they share a boot ID (one kernel: one NVLink domain, also across
 *  containers); without boot IDs, when they share a host name. */
static bool same_host(uform_rendezvous_facts_t const *a, uform_rendezvous_facts_t const *b) {
    if (a->boot_id[0] && b->boot_id[0]) return strcmp(a->boot_id, b->boot_id) == 0;
    return strcmp(a->host, b->host) == 0;
}

uform_status_t uform_rendezvous_describe(uform_rendezvous_t const *rv, uform_mesh_description_t *description) {
    if (!rv || !rv->peers || !description)
        return uform_fail(uform_status_invalid_argument_k, "uform_rendezvous_describe needs a joined run and an output");
    uform_rendezvous_facts_t const *facts = rv->peers;
    uform_mesh_description_t result = {0};
    result.host_domain_index = rv->index;
    result.gpus_per_host_domain = facts[rv->index].gpus_count;
    for (size_t i = 0; i < rv->count; ++i) {
        result.gpus_per_colocated_domain += facts[i].gpus_count;
        if (i < rv->index) result.first_gpu_index += facts[i].gpus_count;
    }
    if (facts[0].multimem_span) result.gpus_per_multimem_domain = facts[0].multimem_span;
    else {
        // Derived: the run's GPUs on this host, which must be the same number on every host.
        size_t reference = 0, reference_process = 0;
        for (size_t i = 0; i < rv->count; ++i) {
            bool first_of_host = true;
            for (size_t j = 0; j < i && first_of_host; ++j) first_of_host = !same_host(&facts[i], &facts[j]);
            if (!first_of_host) continue;
            size_t gpus = 0;
            for (size_t j = i; j < rv->count; ++j)
                if (same_host(&facts[i], &facts[j])) gpus += facts[j].gpus_count;
            if (i == 0) reference = gpus, reference_process = i;
            else if (gpus != reference) {
                memset(description, 0, sizeof *description);
                return uform_fail(uform_status_config_mismatch_k,
                                  "mesh hosts hold different numbers of the run's GPUs, so gpus_per_multimem_domain "
                                  "cannot be derived: host %s (process %zu) has %zu, host %s (process %zu) has %zu; "
                                  "set it explicitly",
                                  facts[reference_process].host, reference_process, reference, facts[i].host, i, gpus);
            }
        }
        result.gpus_per_multimem_domain = reference;
    }
    describe_tier_and_class(facts, rv->count, &result);
    *description = result;
    return uform_status_ok_k;
}

uform_status_t uform_rendezvous_watch(uform_rendezvous_t *rv) {
    if (!rv || !rv->peers) return uform_status_ok_k;
    bool changed = false;
    uform_status_t hostile = uform_status_ok_k;
    char hostile_message[512];
    uform_status_t status = scan(rv, &changed, &hostile, hostile_message);
    if (status != uform_status_ok_k) return status;
    for (size_t i = 0; i < rv->count; ++i) {
        slot_t const *slot = &rv->slots[i];
        if (i == rv->index) continue;
        if (slot->kind == slot_failed_k) return peer_failed(rv, slot);
        if (slot->kind == slot_facts_k &&
            process_liveness(&rv->identity, slot->facts.boot_id, slot->facts.pid_namespace, slot->facts.pid,
                             slot->facts.pid_start) == 0)
            return uform_fail(uform_status_peer_lost_k,
                              "mesh '%.200s': process %zu of %zu (host %s, pid %" PRId64 ") is gone", rv->path, i,
                              rv->count, slot->facts.host, slot->facts.pid);
    }
    return uform_status_ok_k;
}

/* ---- Blobs ---- */

uform_status_t uform_rendezvous_share_blob(uform_rendezvous_t *rv, char const *name, void *bytes, size_t size) {
    if (!rv || !rv->peers || !name || !bytes || size == 0 || size > UFORM_RENDEZVOUS_BLOB_LIMIT)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_rendezvous_share_blob needs a joined run, a name and 1 to %u bytes",
                          UFORM_RENDEZVOUS_BLOB_LIMIT);
    size_t name_length = strlen(name);
    bool name_ok = name_length > 0 && name_length <= 32;
    for (size_t i = 0; i < name_length && name_ok; ++i)
        name_ok = (isalnum((unsigned char)name[i]) && (unsigned char)name[i] < 128) || name[i] == '_' || name[i] == '-';
    if (!name_ok) return uform_fail(uform_status_invalid_argument_k, "blob name '%.40s' is not 1 to 32 of [A-Za-z0-9_-]", name);
    char file[48];
    snprintf(file, sizeof file, "blob-%s", name);
    if (rv->index == 0) {
        size_t text_size = size * 2 + 256;
        char *text = malloc(text_size);
        if (!text) return uform_fail(uform_status_out_of_memory_k, "out of memory sharing blob '%s'", name);
        int used = snprintf(text, text_size, "uform-mesh %u blob %016" PRIx64 "\nsize %zu\nbytes ",
                            UFORM_RENDEZVOUS_FORMAT, rv->nonce, size);
        for (size_t i = 0; i < size; ++i) used += snprintf(text + used, text_size - (size_t)used, "%02x", ((unsigned char *)bytes)[i]);
        snprintf(text + used, text_size - (size_t)used, "\nend\n");
        uform_status_t status = write_file(rv, file, text, NULL);
        free(text);
        if (status == uform_status_ok_k && rv->blob_count < 8)
            snprintf(rv->blob_names[rv->blob_count++], sizeof rv->blob_names[0], "%s", file);
        return status;
    }
    double start = uform_now_seconds(), interval = 0.001, next_watch = 0;
    uform_rendezvous_facts_t const *zero = &rv->peers[0];
    for (;;) {
        struct stat st;
        record_t record;
        load_t load;
        uform_status_t status = load_file(rv, file, &st, &record, &load);
        if (status != uform_status_ok_k) return status;
        if (load == load_other_version_k && record.nonce == rv->nonce)
            return corrupt(rv, file, "is of format version %u; this library reads and writes version %u",
                           record.version, UFORM_RENDEZVOUS_FORMAT);
        if (load == load_ok_k && record.nonce == rv->nonce) {
            uint64_t declared = 0;
            char const *hex = record_get(&record, "bytes");
            if (strcmp(record.kind, "blob") != 0 || record.pairs != 2 ||
                !parse_unsigned(record_get(&record, "size"), UFORM_RENDEZVOUS_BLOB_LIMIT, &declared) || !hex ||
                strlen(hex) != declared * 2)
                return corrupt(rv, file, "is garbage");
            if (declared != size)
                return corrupt(rv, file, "holds %" PRIu64 " bytes, this process expects %zu", declared, size);
            for (size_t i = 0; i < size; ++i) {
                uint64_t byte;
                char pair[3] = {hex[2 * i], hex[2 * i + 1], 0};
                if (!parse_hex(pair, &byte)) return corrupt(rv, file, "is garbage (bad hex)");
                ((unsigned char *)bytes)[i] = (unsigned char)byte;
            }
            return uform_status_ok_k;
        }
        if (uform_now_seconds() >= next_watch) { // a peer that failed or died ends the wait
            next_watch = uform_now_seconds() + 0.01;
            if ((status = uform_rendezvous_watch(rv)) != uform_status_ok_k) {
                char message[512];
                snprintf(message, sizeof message, "%s", uform_error_message());
                return uform_fail(status == uform_status_peer_lost_k ? uform_status_timeout_k : status,
                                  "%s (waiting for blob '%s')", message, name);
            }
        }
        if (uform_now_seconds() - start >= rv->timeout)
            return uform_fail(uform_status_timeout_k,
                              "mesh '%.200s': process 0 (host %s, pid %" PRId64 ") did not share '%s' within %g s",
                              rv->path, zero->host, zero->pid, name, rv->timeout);
        uform_sleep_seconds(interval);
        interval = interval * 1.5 > 0.01 ? 0.01 : interval * 1.5;
    }
}

/* ---- Leaving ---- */

/** Removes `name` if it still carries this run's nonce (a later run may have replaced it). */
static void remove_if_ours(uform_rendezvous_t *rv, char const *name) {
    struct stat st;
    record_t record;
    load_t load;
    if (load_file(rv, name, &st, &record, &load) == uform_status_ok_k && load == load_ok_k && record.nonce == rv->nonce)
        unlinkat(rv->dirfd, name, 0);
}

void uform_rendezvous_leave(uform_rendezvous_t *rv, bool remove_files) {
    if (!rv) return;
    if (remove_files && rv->dirfd >= 0 && rv->nonce) {
        char name[40];
        snprintf(name, sizeof name, "process-%zu", rv->index);
        remove_if_ours(rv, name);
        snprintf(name, sizeof name, "ack-%zu", rv->index);
        remove_if_ours(rv, name);
        if (rv->index == 0) {
            for (size_t i = 0; i < rv->blob_count; ++i) remove_if_ours(rv, rv->blob_names[i]);
            remove_if_ours(rv, "run");
        }
        fsync(rv->dirfd);
    }
    if (rv->dir) closedir(rv->dir);
    if (rv->dirfd >= 0) close(rv->dirfd);
    free(rv->text);
    free(rv->slots);
    free(rv->extras);
    free(rv->peers);
    free(rv);
}
