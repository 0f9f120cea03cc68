/**
 *  @file   consumer.c
 *  @brief  A program built against an installed UForm (find_package or pkg-config), as a user's
 *          would be: prints what it learns so the install test can check it, exits 1 on failure.
 */
#include <uform.h>

#include <stdio.h>
#include <string.h>

static void record(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    ((size_t *)context)[task] = task + 1;
}

int main(void) {
    // The header this program compiled with and the library it runs against must agree.
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", UFORM_VERSION_MAJOR, UFORM_VERSION_MINOR, UFORM_VERSION_PATCH);
    printf("version=%s\n", uform_version());
    if (strcmp(expected, uform_version()) != 0) {
        fprintf(stderr, "consumer: compiled against %s, running %s\n", expected, uform_version());
        return 1;
    }

    uform_cpu_class_t cpu_class = uform_cpu_class_unknown_k;
    uint64_t features = 0;
    if (uform_cpu_detect(&cpu_class, &features) != uform_status_ok_k) {
        fprintf(stderr, "consumer: uform_cpu_detect: %s\n", uform_error_message());
        return 1;
    }
    printf("cpu_class=%s\n", uform_cpu_class_name(cpu_class));

    uform_executor_t executor = NULL;
    uform_status_t status = uform_executor_for_ram(NULL, 0, 0, &executor);
    if (status != uform_status_ok_k) {
        fprintf(stderr, "consumer: uform_executor_for_ram: %s: %s\n", uform_status_name(status), uform_error_message());
        return 1;
    }
    enum { tasks = 1000 };
    static size_t values[tasks];
    uform_call_t call = {.schedule = uform_schedule_static_k, .tasks = tasks, .task = record, .context = values};
    status = uform_executor_call(executor, &call, NULL);
    uform_executor_free(executor);
    if (status != uform_status_ok_k) {
        fprintf(stderr, "consumer: uform_executor_call: %s: %s\n", uform_status_name(status), uform_error_message());
        return 1;
    }
    size_t sum = 0;
    for (size_t i = 0; i < tasks; ++i) sum += values[i];
    printf("sum=%zu\n", sum); // 500500 when every task ran once
    return sum == (size_t)tasks * (tasks + 1) / 2 ? 0 : 1;
}
