/**
 *  @file   rendezvous_files.c
 *  @brief  The directory exchange's files: the job directory opened under StrictModes-like rules,
 *          records parsed and checked, files read without following links and written atomically,
 *          and removed only when the effective user owns them. See rendezvous.h for the format.
 */
#include "rendezvous_private.h"

#include <ctype.h>      // `isxdigit`
#include <dirent.h>     // `fdopendir`, `readdir`
#include <errno.h>      // `errno`
#include <fcntl.h>      // `openat`, `O_NOFOLLOW`
#include <inttypes.h>   // `PRIx64`
#include <stdarg.h>     // `va_list`
#include <stdio.h>      // `snprintf`
#include <stdlib.h>     // `malloc`
#include <string.h>     // `strcmp`
#include <sys/random.h> // `getrandom`
#include <time.h>       // `clock_gettime`
#include <unistd.h>     // `geteuid`, `fsync`

void (*uform_rendezvous_test_hook)(char const *stage, char const *name) = NULL;

void rv_hook(char const *stage, char const *name) {
    if (uform_rendezvous_test_hook) uform_rendezvous_test_hook(stage, name);
}

uint64_t rv_random_u64(void) {
    uint64_t value = 0;
    while (value == 0) {
        if (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
            // No entropy source: mix the clock, the PID and a counter; tokens only need uniqueness.
            static _Atomic uint64_t counter = 0;
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            value = ((uint64_t)now.tv_nsec << 20) ^ (uint64_t)now.tv_sec ^ ((uint64_t)getpid() << 40) ^
                    (atomic_fetch_add(&counter, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull);
            value ^= value >> 31, value *= 0xBF58476D1CE4E5B9ull, value ^= value >> 29;
        }
    }
    return value;
}

/* ---- Values ---- */

bool rv_parse_unsigned(char const *text, uint64_t limit, uint64_t *value) {
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

bool rv_parse_hex(char const *text, uint64_t *value) {
    if (!text) return false;
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

void rv_quote(char const *text, size_t limit, char *out, size_t capacity) {
    size_t used = 0, taken = 0;
    if (capacity < 8) {
        if (capacity) out[0] = '\0';
        return;
    }
    out[used++] = '"';
    for (; text && text[taken] && taken < limit; ++taken) {
        unsigned char c = (unsigned char)text[taken];
        char piece[8];
        if (c == '"' || c == '\\') snprintf(piece, sizeof piece, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f) piece[0] = (char)c, piece[1] = '\0';
        else snprintf(piece, sizeof piece, "\\x%02x", c);
        size_t length = strlen(piece);
        if (used + length + 5 >= capacity) break; // room for `"...` and the NUL
        memcpy(out + used, piece, length);
        used += length;
    }
    out[used++] = '"';
    if (text && text[taken]) memcpy(out + used, "...", 3), used += 3;
    out[used] = '\0';
}

/* ---- Records ---- */

char const *rv_record_get(rv_record_t const *record, char const *key) {
    for (size_t i = 0; i < record->pairs; ++i)
        if (strcmp(record->keys[i], key) == 0) return record->values[i];
    return NULL;
}

bool rv_record_keys(rv_record_t const *record, char const *const *keys, char *bad, size_t capacity) {
    size_t expected = 0;
    for (; keys[expected]; ++expected)
        if (!rv_record_get(record, keys[expected])) {
            snprintf(bad, capacity, "lacks key '%s'", keys[expected]);
            return false;
        }
    for (size_t i = 0; i < record->pairs; ++i) {
        bool known = false;
        for (size_t k = 0; k < expected && !known; ++k) known = strcmp(record->keys[i], keys[k]) == 0;
        if (!known) {
            char quoted[64];
            rv_quote(record->keys[i], 40, quoted, sizeof quoted);
            snprintf(bad, capacity, "has unknown key %s", quoted);
            return false;
        }
    }
    return true;
}

/** Splits `text` (NUL-terminated, modified in place) into a record: 1 for this format, 2 for another
 *  version (only `version` and `nonce` valid), -1 with `why` for garbage. */
static int parse_record(char *text, size_t length, rv_record_t *record, char *why, size_t why_size) {
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
    if (!rv_parse_hex(nonce, &record->nonce)) {
        char quoted[48];
        rv_quote(nonce, 20, quoted, sizeof quoted);
        return snprintf(why, why_size, "is garbage (bad nonce %s)", quoted), -1;
    }
    record->version = version;
    snprintf(record->kind, sizeof record->kind, "%s", kind);
    if (version != UFORM_RENDEZVOUS_FORMAT) return 2;
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
        char quoted[64];
        rv_quote(line, 40, quoted, sizeof quoted);
        if (!space || space == line) return snprintf(why, why_size, "is garbage (line %s)", quoted), -1;
        *space = '\0';
        if (rv_record_get(record, line)) return snprintf(why, why_size, "is garbage (key %s twice)", quoted), -1;
        if (record->pairs == RV_RECORD_PAIRS) return snprintf(why, why_size, "is garbage (too many lines)"), -1;
        record->keys[record->pairs] = line;
        record->values[record->pairs] = space + 1;
        ++record->pairs;
    }
    if (!ended) return snprintf(why, why_size, "is truncated (no 'end' line)"), -1;
    return 1;
}

/* ---- Keys ---- */

bool rv_key_equal(rv_key_t const *key, struct stat const *st) {
    // No ctime: a rename changes it, and the writer compares what it wrote before its rename.
    return key->exists && key->ino == (uint64_t)st->st_ino && key->size == (uint32_t)st->st_size &&
           key->mtime_ns == (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

void rv_key_set(rv_key_t *key, struct stat const *st) {
    key->exists = true, key->ino = (uint64_t)st->st_ino, key->size = (uint32_t)st->st_size;
    key->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* ---- The job directory ---- */

uform_status_t rv_corrupt(rv_directory_t const *dir, char const *name, char const *format, ...) {
    char why[480];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(why, sizeof why, format, arguments);
    va_end(arguments);
    return uform_fail(uform_status_corrupt_file_k, "mesh file '%.200s/%s' %s", dir->path, name, why);
}

/** Makes (0700) and stats `name` under `parent` without following it. */
static int stat_or_make(int parent, char const *name, struct stat *st) {
    if (fstatat(parent, name, st, AT_SYMLINK_NOFOLLOW) == 0) return 0;
    if (errno != ENOENT) return -1;
    if (mkdirat(parent, name, 0700) != 0 && errno != EEXIST) return -1;
    return fstatat(parent, name, st, AT_SYMLINK_NOFOLLOW);
}

uform_status_t rv_open_directory(rv_directory_t *dir, char const *directory, char const *job,
                                 rv_identity_t const *identity) {
    dir->fd = -1;
    dir->euid = geteuid();
    snprintf(dir->path, sizeof dir->path, "%s/%s", directory, job);
    // Temporaries name their writer's boot and PID namespace, so stale ones can be told apart.
    snprintf(dir->boot_prefix, sizeof dir->boot_prefix, "%.8s-%" PRIx64, identity->boot_id[0] ? identity->boot_id : "noboot",
             identity->pid_namespace);
    dir->text = malloc(UFORM_RENDEZVOUS_FILE_LIMIT + 2);
    if (!dir->text) return uform_fail(uform_status_out_of_memory_k, "out of memory opening '%.200s'", dir->path);

    // Walk `directory` one component at a time, creating what is missing (0700).
    char walk[4096];
    snprintf(walk, sizeof walk, "%s", directory);
    int current = open(directory[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (current < 0)
        return uform_fail(uform_status_system_error_k, "cannot open the root of mesh directory '%.200s': %s", directory,
                          strerror(errno));
    for (char *cursor = walk; cursor;) {
        char *component = cursor, *slash = strchr(cursor, '/');
        if (slash) *slash = '\0', cursor = slash + 1;
        else cursor = NULL;
        if (!*component || strcmp(component, ".") == 0) continue;
        struct stat st;
        if (stat_or_make(current, component, &st) != 0) {
            int error = errno;
            close(current);
            return uform_fail(uform_status_system_error_k, "cannot create mesh directory '%.200s' (at '%.100s'): %s",
                              directory, component, strerror(error));
        }
        bool link = S_ISLNK(st.st_mode);
        if (link && st.st_uid != dir->euid && st.st_uid != 0) {
            close(current);
            return uform_fail(uform_status_corrupt_file_k,
                              "mesh directory '%.200s': its component '%.100s' is a symbolic link owned by uid %u; "
                              "only links owned by this user (uid %u) or root are followed",
                              directory, component, (unsigned)st.st_uid, (unsigned)dir->euid);
        }
        int opened = openat(current, component, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (link ? 0 : O_NOFOLLOW));
        int error = errno;
        close(current);
        if (opened < 0)
            return uform_fail(uform_status_system_error_k, "cannot open mesh directory '%.200s' (at '%.100s'): %s",
                              directory, component, strerror(error));
        current = opened;
    }

    // The job directory itself: never a link, ours, and writable by nobody else.
    struct stat st;
    if (stat_or_make(current, job, &st) != 0) {
        int error = errno;
        close(current);
        return uform_fail(uform_status_system_error_k, "cannot create mesh job directory '%.200s': %s", dir->path,
                          strerror(error));
    }
    if (S_ISLNK(st.st_mode)) {
        close(current);
        return uform_fail(uform_status_corrupt_file_k,
                          "mesh job directory '%.200s' is a symbolic link; it must be a directory of its own, never "
                          "followed",
                          dir->path);
    }
    dir->fd = S_ISDIR(st.st_mode) ? openat(current, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    int error = errno;
    close(current);
    if (!S_ISDIR(st.st_mode))
        return uform_fail(uform_status_corrupt_file_k, "mesh job directory '%.200s' is not a directory", dir->path);
    if (dir->fd < 0 || fstat(dir->fd, &st) != 0)
        return uform_fail(uform_status_system_error_k, "cannot open mesh job directory '%.200s': %s", dir->path,
                          strerror(dir->fd < 0 ? error : errno));
    if (st.st_uid != dir->euid)
        return uform_fail(uform_status_corrupt_file_k,
                          "mesh job directory '%.200s' is owned by uid %u, not by this process's effective user "
                          "(uid %u); a job directory must belong to the user running the mesh",
                          dir->path, (unsigned)st.st_uid, (unsigned)dir->euid);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return uform_fail(uform_status_corrupt_file_k,
                          "mesh job directory '%.200s' is writable by group or others (mode %04o); it must be "
                          "writable by its owner only (0700)",
                          dir->path, (unsigned)(st.st_mode & 07777));
    return uform_status_ok_k;
}

void rv_close_directory(rv_directory_t *dir) {
    if (dir->fd >= 0) close(dir->fd);
    dir->fd = -1;
    free(dir->text);
    dir->text = NULL;
}

/* ---- Reading, writing, removing ---- */

/** Refuses what a mesh file must never be; `st` from fstatat or fstat. */
static uform_status_t check_file(rv_directory_t const *dir, char const *name, struct stat const *st) {
    if (S_ISLNK(st->st_mode)) return rv_corrupt(dir, name, "is a symbolic link; mesh files are never followed");
    if (!S_ISREG(st->st_mode)) return rv_corrupt(dir, name, "is not a regular file");
    if (st->st_uid != dir->euid)
        return rv_corrupt(dir, name, "is owned by uid %u, not by this process's effective user (uid %u)",
                          (unsigned)st->st_uid, (unsigned)dir->euid);
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return rv_corrupt(dir, name, "is writable by group or others (mode %04o); mesh files are 0600",
                          (unsigned)(st->st_mode & 07777));
    if (st->st_size > (off_t)UFORM_RENDEZVOUS_FILE_LIMIT)
        return rv_corrupt(dir, name, "is oversized (%lld bytes, the limit is %u)", (long long)st->st_size,
                          UFORM_RENDEZVOUS_FILE_LIMIT);
    return uform_status_ok_k;
}

uform_status_t rv_load(rv_directory_t *dir, char const *name, struct stat *st, rv_record_t *record, rv_load_t *load) {
    *load = rv_absent_k;
    if (fstatat(dir->fd, name, st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return uform_status_ok_k;
        return uform_fail(uform_status_system_error_k, "cannot inspect mesh file '%.200s/%s': %s", dir->path, name,
                          strerror(errno));
    }
    uform_status_t status = check_file(dir, name, st);
    if (status != uform_status_ok_k) return status;
    int fd = openat(dir->fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return uform_status_ok_k;
        if (errno == ELOOP) return rv_corrupt(dir, name, "is a symbolic link; mesh files are never followed");
        return uform_fail(uform_status_system_error_k, "cannot open mesh file '%.200s/%s': %s", dir->path, name,
                          strerror(errno));
    }
    // Judge the opened file, which may differ from what fstatat saw if it was replaced since.
    if (fstat(fd, st) != 0 || (status = check_file(dir, name, st)) != uform_status_ok_k) {
        close(fd);
        return status != uform_status_ok_k ? status : rv_corrupt(dir, name, "cannot be inspected once opened");
    }
    size_t length = 0;
    while (length <= UFORM_RENDEZVOUS_FILE_LIMIT) {
        ssize_t got = read(fd, dir->text + length, UFORM_RENDEZVOUS_FILE_LIMIT + 1 - length);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int error = errno;
            close(fd);
            return uform_fail(uform_status_system_error_k, "cannot read mesh file '%.200s/%s': %s", dir->path, name,
                              strerror(error));
        }
        if (got == 0) break;
        length += (size_t)got;
    }
    close(fd);
    if (length > UFORM_RENDEZVOUS_FILE_LIMIT)
        return rv_corrupt(dir, name, "is oversized (over %u bytes)", UFORM_RENDEZVOUS_FILE_LIMIT);
    dir->text[length] = '\0';
    char why[160];
    int parsed = parse_record(dir->text, length, record, why, sizeof why);
    if (parsed < 0) return rv_corrupt(dir, name, "%s", why);
    *load = parsed == 1 ? rv_loaded_k : rv_other_version_k;
    return uform_status_ok_k;
}

uform_status_t rv_write(rv_directory_t *dir, char const *name, char const *text, rv_key_t *key) {
    struct stat st;
    if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != dir->euid))
        return rv_corrupt(dir, name, "is %s owned by uid %u; it is never replaced (this process runs as uid %u)",
                          S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISREG(st.st_mode) ? "a file" : "a non-regular file",
                          (unsigned)st.st_uid, (unsigned)dir->euid);
    char temporary[192];
    snprintf(temporary, sizeof temporary, ".tmp.%s.%s.%lld.%016" PRIx64, name, dir->boot_prefix, (long long)getpid(),
             rv_random_u64());
    int fd = openat(dir->fd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return uform_fail(uform_status_system_error_k, "cannot create '%.200s/%s': %s", dir->path, temporary,
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
    if (!error && fstat(fd, &st) != 0) error = errno;
    if (close(fd) != 0 && !error) error = errno;
    if (!error) {
        rv_hook("temporary-written", name);
        if (renameat(dir->fd, temporary, dir->fd, name) != 0) error = errno;
    }
    if (error) {
        unlinkat(dir->fd, temporary, 0);
        return uform_fail(uform_status_system_error_k, "cannot write mesh file '%.200s/%s': %s", dir->path, name,
                          strerror(error));
    }
    fsync(dir->fd); // the rename's durability; a failure here changes nothing a live run sees
    if (key) rv_key_set(key, &st);
    rv_hook("renamed", name);
    return uform_status_ok_k;
}

void rv_remove(rv_directory_t *dir, char const *name, rv_key_t const *key) {
    struct stat st;
    if (dir->fd < 0 || fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (!S_ISREG(st.st_mode) || st.st_uid != dir->euid) return;
    if (key && !rv_key_equal(key, &st)) return;
    unlinkat(dir->fd, name, 0);
}

void rv_remove_stale_temporaries(rv_directory_t *dir, rv_identity_t const *identity) {
    if (!identity->boot_id[0] || !identity->pid_namespace) return; // PIDs of an unknown boot say nothing
    int listing = dup(dir->fd);
    DIR *stream = listing >= 0 ? fdopendir(listing) : NULL;
    if (!stream) {
        if (listing >= 0) close(listing);
        return;
    }
    for (struct dirent *entry; (entry = readdir(stream));) {
        char const *name = entry->d_name;
        if (strncmp(name, ".tmp.", 5) != 0) continue;
        // `.tmp.<name>.<boot>.<pid>.<random>`: read from the end.
        char copy[256];
        snprintf(copy, sizeof copy, "%s", name);
        char *random_dot = strrchr(copy, '.');
        if (!random_dot || random_dot == copy) continue;
        *random_dot = '\0';
        char *pid_dot = strrchr(copy, '.');
        if (!pid_dot) continue;
        *pid_dot = '\0';
        char *boot_dot = strrchr(copy, '.');
        uint64_t pid = 0;
        if (!boot_dot || strcmp(boot_dot + 1, dir->boot_prefix) != 0 || !rv_parse_unsigned(pid_dot + 1, INT32_MAX, &pid) ||
            pid == (uint64_t)getpid())
            continue;
        char state = 0;
        uint64_t start = 0;
        int alive = rv_read_proc_stat((int64_t)pid, &state, &start);
        if (alive == 0 || (alive > 0 && (state == 'Z' || state == 'X'))) rv_remove(dir, name, NULL);
    }
    closedir(stream);
}
