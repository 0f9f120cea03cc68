"""The `--cpu-class` switch shared by bench_text.py and bench_image_model.py."""
import os
import sys

# `--cpu-class`: the engine pinned to a class (uform_ram_options_t.cpu_class) and every process's
# libraries bounded to that class's instruction sets through their environment switches: oneDNN
# (the engine's and PyTorch's own) by ONEDNN_/DNNL_MAX_CPU_ISA, PyTorch's ATen kernels by
# ATEN_CPU_CAPABILITY, MKL (PyTorch's f32 products) by MKL_ENABLE_INSTRUCTIONS. ONNX Runtime has no
# such switch: it keeps the machine's widest instructions (the peer keeps that advantage).
CLASS_ISAS = {
    "intel_haswell": {"DNNL_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                      "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "intel_skylake": {"DNNL_MAX_CPU_ISA": "AVX512_CORE", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
                      "ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}


def class_environment(cpu_class):
    """The environment of a process under `--cpu-class` (the current one where none is given)."""
    if not cpu_class:
        return None
    if cpu_class not in CLASS_ISAS:
        sys.exit(f"--cpu-class: one of {', '.join(CLASS_ISAS)} (the classes whose libraries' bounds are known)")
    return dict(os.environ, **CLASS_ISAS[cpu_class])
