/**
 *  @file   files.c
 *  @brief  Opening the files a model directory names (configurations, safetensors, tokenizers)
 *          without trusting what they are: a FIFO, a device or a directory in a model's place is
 *          refused, never waited on or read without end.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>  // `errno`, `ENOENT`
#include <fcntl.h>  // `open`, `O_NONBLOCK`, `fcntl`
#include <stdlib.h> // `malloc`, `free`
#include <string.h> // `strerror`
#include <sys/stat.h> // `fstat`, `S_ISREG`
#include <unistd.h> // `close`

int uform_open_regular_file(char const *path, struct stat *info, int *missing) {
    if (missing) *missing = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; O_NOCTTY: a terminal
     * never becomes the process's controlling one. A regular file ignores both. */
    int const fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int const error = errno;
        if (error == ENOENT && missing) {
            *missing = 1;
            return -1;
        }
        uform_fail(uform_status_system_error_k, "%s: cannot open: %s", path, strerror(error));
        return -1;
    }
    if (fstat(fd, info) != 0) {
        int const error = errno;
        close(fd);
        uform_fail(uform_status_system_error_k, "%s: cannot stat: %s", path, strerror(error));
        return -1;
    }
    if (!S_ISREG(info->st_mode)) {
        close(fd);
        uform_fail(uform_status_system_error_k, "%s: not a regular file (%s)", path,
                   S_ISDIR(info->st_mode)    ? "a directory"
                   : S_ISFIFO(info->st_mode) ? "a FIFO"
                   : S_ISCHR(info->st_mode)  ? "a character device"
                   : S_ISBLK(info->st_mode)  ? "a block device"
                   : S_ISSOCK(info->st_mode) ? "a socket"
                                             : "not a file");
        return -1;
    }
    int const flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

uform_status_t uform_read_regular_file(char const *path, size_t max_bytes, uform_status_t too_large, char **text,
                                       size_t *length, int *missing) {
    *text = NULL, *length = 0;
    struct stat info;
    int const fd = uform_open_regular_file(path, &info, missing);
    if (fd < 0) return missing && *missing ? uform_status_ok_k : uform_status_system_error_k;
    if ((unsigned long long)info.st_size > (unsigned long long)max_bytes) {
        close(fd);
        return uform_fail(too_large, "%s: %lld bytes, more than the %zu such a file may have", path,
                          (long long)info.st_size, max_bytes);
    }
    size_t const size = (size_t)info.st_size;
    char *buffer = (char *)malloc(size + 1);
    if (!buffer) {
        close(fd);
        return uform_fail(uform_status_out_of_memory_k, "%s: out of memory for %zu bytes", path, size);
    }
    size_t done = 0;
    while (done < size) {
        ssize_t const got = read(fd, buffer + done, size - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int const error = errno;
            close(fd);
            free(buffer);
            return uform_fail(uform_status_system_error_k, "%s: read error: %s", path, strerror(error));
        }
        if (got == 0) break; /* shrank while reading: take what there is */
        done += (size_t)got;
    }
    close(fd);
    buffer[done] = '\0';
    *text = buffer, *length = done;
    return uform_status_ok_k;
}
