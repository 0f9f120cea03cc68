/**
 *  @file   rendezvous_liveness.c
 *  @brief  Who a mesh process is (host name, boot ID, PID namespace) and whether a process another
 *          file describes still runs, from /proc. See rendezvous.h for how the exchange uses them.
 */
#include "rendezvous_private.h"

#include <ctype.h>    // `isxdigit`
#include <errno.h>    // `errno`
#include <fcntl.h>    // `open`
#include <inttypes.h> // `PRId64`
#include <signal.h>   // `kill`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `strtoull`
#include <string.h>   // `strrchr`
#include <unistd.h>   // `gethostname`, `read`

int rv_read_proc_stat(int64_t pid, char *state, uint64_t *start) {
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

void rv_read_identity(rv_identity_t *identity) {
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

int rv_liveness(rv_identity_t const *self, char const *boot_id, uint64_t pid_namespace, int64_t pid,
                uint64_t pid_start) {
    if (!self->boot_id[0] || strcmp(self->boot_id, boot_id) != 0) return -1;
    if (!self->pid_namespace || self->pid_namespace != pid_namespace) return -1;
    if (pid <= 0) return -1;
    char state = 0;
    uint64_t start = 0;
    int read = rv_read_proc_stat(pid, &state, &start);
    if (read == 0) return 0;
    if (read > 0) {
        if (state == 'Z' || state == 'X' || state == 'x') return 0; // killed, not yet reaped
        if (pid_start && start != pid_start) return 0;            // the PID was reused
        return 1;
    }
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    return 1;
}
