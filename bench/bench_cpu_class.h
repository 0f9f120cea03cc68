/**
 *  @file   bench_cpu_class.h
 *  @brief  `--cpu-class NAME` for the CPU benchmarks (bench_text, bench_image_model): the class to
 *          pin the RAM executor to (`uform_ram_options_t.cpu_class`), by `uform_cpu_class_name`.
 */
#ifndef UFORM_BENCH_CPU_CLASS_H
#define UFORM_BENCH_CPU_CLASS_H

#include <uform.h>
#include <stdbool.h>
#include <string.h>

/** The class named `name` (as `uform_cpu_class_name` spells it, e.g. "intel_haswell"; not UNKNOWN). */
static inline bool bench_cpu_class(char const *name, uform_cpu_class_t *cpu_class) {
    for (int c = uform_cpu_class_serial_k; c <= uform_cpu_class_monoversioned_k; ++c)
        if (!strcmp(name, uform_cpu_class_name((uform_cpu_class_t)c))) return *cpu_class = (uform_cpu_class_t)c, true;
    return false;
}

#endif // UFORM_BENCH_CPU_CLASS_H
