"""The machine as the engine sees it: `Library` (the loaded ``libuform``, its version and status
names, CPU detection and classes, NUMA domains and their cores, the GPUs it can drive), and the
values it lists, `MemoryDomain` and `GPUDevice`. Mirrors ``src/`` 's hardware and library files."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Optional

from . import _native
from ._arguments import _int32_array
from ._codes import CPUClass, GPUClass, GPUVendor, Status, _enum
from ._errors import Error, _check
from ._native import GPUDeviceStruct, MemoryDomainStruct


@dataclass(frozen=True)
class MemoryDomain:
    """One NUMA node this process may allocate on, `uform_memory_domain_t`."""

    node: int
    cores_count: int
    memory_bytes: int


class GPUDevice:
    """One GPU as UForm numbers it, `uform_gpu_device_t`: its position in `Library.gpu_devices`
    (its ``ordinal``) is the number every VRAM placement names it by."""

    __slots__ = ("vendor", "vendor_ordinal", "gpu_class", "compute_units", "memory_bytes", "ordinal", "_library")

    def __init__(
        self,
        vendor: GPUVendor = GPUVendor.UNKNOWN,
        vendor_ordinal: int = 0,
        gpu_class: GPUClass = GPUClass.UNKNOWN,
        compute_units: int = 0,
        memory_bytes: int = 0,
        *,
        ordinal: Optional[int] = None,
        library: Optional["Library"] = None,
    ):
        """An empty entry by default, as the seed's `GPUDevice()`; listings fill every field."""
        self.vendor = _enum(GPUVendor, vendor, "vendor")
        self.vendor_ordinal = vendor_ordinal
        self.gpu_class = _enum(GPUClass, gpu_class, "gpu_class")
        self.compute_units = compute_units
        self.memory_bytes = memory_bytes
        self.ordinal = ordinal
        self._library = library

    def name(self) -> str:
        """The vendor's own name for the device. Calls `uform_gpu_device_name` with its ordinal."""
        if self._library is None or self.ordinal is None:
            raise Error(
                Status.INVALID_ARGUMENT,
                "this GPUDevice was not listed by Library.gpu_devices, so it has no ordinal to name",
            )
        native = self._library._native
        buffer = ctypes.create_string_buffer(256)
        _check(native, native.uform_gpu_device_name(self.ordinal, buffer, len(buffer)))
        return buffer.value.decode("utf-8", errors="replace")

    def _key(self):
        return (self.vendor, self.vendor_ordinal, self.gpu_class, self.compute_units, self.memory_bytes, self.ordinal)

    def __eq__(self, other):
        return isinstance(other, GPUDevice) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"GPUDevice(ordinal={self.ordinal}, vendor={self.vendor!s}, vendor_ordinal={self.vendor_ordinal}, "
            f"gpu_class={self.gpu_class!s}, compute_units={self.compute_units}, memory_bytes={self.memory_bytes})"
        )


class _DeviceList(list):
    """`Library.gpu_devices`: a list, also callable as the Mojo method (`library.gpu_devices()`)."""

    def __call__(self):
        return self


class Library:
    """The loaded engine. Holds the ``ctypes.CDLL``, so every `Executor` and `Mesh` made from it
    (each keeps a reference) can still reach `uform_executor_free` and `uform_mesh_free`.

    ``Library(path)`` loads that file. ``Library()`` looks, in order, at ``$UFORM_LIBRARY`` (alone,
    when set), ``libuform.so*`` next to this package (where ``pip install`` puts a bundled copy),
    ``ctypes.util.find_library("uform")``, then ``libuform.so.0`` and ``libuform.so`` through the
    dynamic linker (``LD_LIBRARY_PATH``, the ld cache). When none loads it raises `Error` with kind
    UNSUPPORTED, naming every place it tried and why each failed. Loading twice maps one copy.
    """

    def __init__(self, path: Optional[str] = None):
        """Loads ``path``, or searches as the class says; checks the library's ABI major. An empty
        ``path`` is INVALID_ARGUMENT, not a search."""
        if path is not None and not os.fspath(path):
            raise Error(Status.INVALID_ARGUMENT,
                        "path is empty; name the libuform file to load, or pass None to search")
        try:
            self._native = _native.load(path)
        except _native.MissingLibrary as error:
            raise Error(Status.UNSUPPORTED, str(error)) from None
        version = self.version
        try:
            major = int(version.split(".")[0])
        except ValueError:
            major = -1
        if major != _native.ABI_MAJOR:
            raise Error(
                Status.UNSUPPORTED,
                f"{self.path} is libuform {version}; this binding speaks ABI {_native.ABI_MAJOR}.x",
            )

    @property
    def path(self) -> str:
        """The file the engine was loaded from."""
        return self._native.path

    @property
    def version(self) -> str:
        """`uform_version`: "MAJOR.MINOR.PATCH" of the loaded library."""
        return self._native.uform_version().decode()

    def status_name(self, status) -> str:
        """`uform_status_name`: the engine's lower-case name of a status ("contended")."""
        return self._native.uform_status_name(int(status)).decode()

    @property
    def gpu_devices(self) -> list:
        """Every GPU the engine can drive, as `GPUDevice` objects in UForm ordinal order; empty
        without a driver or a device (`gpu_status` says why). Calls `uform_gpu_devices`."""
        native = self._native
        count = ctypes.c_size_t(0)
        _check(native, native.uform_gpu_devices(None, 0, ctypes.byref(count)))
        array = (GPUDeviceStruct * max(count.value, 1))()
        _check(native, native.uform_gpu_devices(array, count.value, ctypes.byref(count)))
        return _DeviceList(
            GPUDevice(
                GPUVendor(entry.vendor),
                entry.vendor_ordinal,
                GPUClass(entry.gpu_class),
                entry.compute_units,
                entry.memory_bytes,
                ordinal=ordinal,
                library=self,
            )
            for ordinal, entry in enumerate(array[: min(count.value, len(array))])
        )

    def gpu_status(self) -> None:
        """Returns when at least one GPU can be driven; else raises `Error(UNSUPPORTED)` whose
        message says why not (no kernels in this build, no driver, no device)."""
        _check(self._native, self._native.uform_gpu_status())

    def cpu_detect(self) -> tuple:
        """`uform_cpu_detect`: the running CPU's `CPUClass` and its `uform_cpu_feature_t` bits."""
        cpu_class = ctypes.c_int(0)
        features = ctypes.c_uint64(0)
        _check(self._native, self._native.uform_cpu_detect(ctypes.byref(cpu_class), ctypes.byref(features)))
        return CPUClass(cpu_class.value), features.value

    @property
    def cpu_class(self) -> CPUClass:
        """The class detection picks for this CPU."""
        return self.cpu_detect()[0]

    def cpu_class_features(self, cpu_class) -> int:
        """`uform_cpu_class_features`: the feature bits `cpu_class` requires."""
        return self._native.uform_cpu_class_features(_enum(CPUClass, cpu_class, "cpu_class"))

    def cpu_feature_names(self, features: int) -> list:
        """The lower-case names of every bit set in `features` ("avx2", "avx512bf16", ...)."""
        names = []
        for bit in range(64):
            if features >> bit & 1:
                names.append(self._native.uform_cpu_feature_name(1 << bit).decode())
        return names

    @property
    def memory_domains(self) -> list:
        """`uform_memory_domains`: the NUMA nodes this process may allocate on and run on."""
        native = self._native
        count = ctypes.c_size_t(0)
        _check(native, native.uform_memory_domains(None, 0, ctypes.byref(count)))
        array = (MemoryDomainStruct * max(count.value, 1))()
        _check(native, native.uform_memory_domains(array, count.value, ctypes.byref(count)))
        return [
            MemoryDomain(entry.node, entry.cores_count, entry.memory_bytes)
            for entry in array[: min(count.value, len(array))]
        ]

    def memory_domain_cores(self, node: int) -> list:
        """`uform_memory_domain_cores`: the cores of `node` this process may run on."""
        native = self._native
        node = _int32_array([node], "node")[0]
        count = ctypes.c_size_t(0)
        _check(native, native.uform_memory_domain_cores(node, None, 0, ctypes.byref(count)))
        array = (ctypes.c_int32 * max(count.value, 1))()
        _check(native, native.uform_memory_domain_cores(node, array, count.value, ctypes.byref(count)))
        return list(array[: min(count.value, len(array))])

    def __repr__(self) -> str:
        return f"Library({self.path!r}, version={self.version!r})"
