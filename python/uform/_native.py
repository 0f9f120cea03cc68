"""The C ABI of ``libuform`` as ctypes declarations, and the loader that finds the library.

Everything here mirrors ``include/uform.h`` field for field and argument for argument; the public
classes in ``uform/__init__.py`` are the only users. Nothing here allocates engine objects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

#: The ABI major version this binding was written against (``UFORM_VERSION_MAJOR``).
ABI_MAJOR = 0

#: The environment variable naming the library file to load, before any other place is tried.
LIBRARY_VARIABLE = "UFORM_LIBRARY"

# Enumerations are `int`-sized in the ABI.
c_enum = c_int


class GPUDeviceStruct(Structure):
    """`uform_gpu_device_t`"""

    _fields_ = [
        ("vendor", c_enum),
        ("vendor_ordinal", c_int32),
        ("gpu_class", c_enum),
        ("compute_units", c_uint32),
        ("memory_bytes", c_uint64),
    ]


class MemoryDomainStruct(Structure):
    """`uform_memory_domain_t`"""

    _fields_ = [
        ("node", c_int32),
        ("cores_count", c_uint32),
        ("memory_bytes", c_uint64),
    ]


class RamOptionsStruct(Structure):
    """`uform_ram_options_t`"""

    _fields_ = [
        ("memory_domains", POINTER(c_int32)),
        ("memory_domains_count", c_size_t),
        ("cpu_class", c_enum),
    ]


class VramOptionsStruct(Structure):
    """`uform_vram_options_t`"""

    _fields_ = [
        ("devices", POINTER(c_int32)),
        ("devices_count", c_size_t),
        ("gpu_class", c_enum),
    ]


class ExecutorDescriptionStruct(Structure):
    """`uform_executor_description_t`"""

    _fields_ = [
        ("kind", c_enum),
        ("threads_count", c_size_t),
        ("domains_count", c_size_t),
        ("devices_count", c_size_t),
        ("cpu_class", c_enum),
        ("gpu_class", c_enum),
        ("mood", c_enum),
        ("deferred_limit", c_size_t),
        ("scratch_limit", c_size_t),
    ]


class DeviceSlotStruct(Structure):
    """`uform_device_slot_t`"""

    _fields_ = [
        ("device_index", c_size_t),
        ("ordinal", c_int32),
        ("gpu_class", c_enum),
        ("stream", c_void_p),
        ("cu_context", c_void_p),
        ("scratch", c_uint64),
        ("scratch_bytes", c_size_t),
    ]


#: `uform_task_callback_t`: void (*)(void *context, size_t task, size_t thread, size_t domain)
TaskCallback = CFUNCTYPE(None, c_void_p, c_size_t, c_size_t, c_size_t)

#: `uform_device_callback_t`: uform_status_t (*)(void *context, uform_device_slot_t const *slot)
DeviceCallback = CFUNCTYPE(c_enum, c_void_p, POINTER(DeviceSlotStruct))


class CallStruct(Structure):
    """`uform_call_t`"""

    _fields_ = [
        ("residency", c_enum),
        ("schedule", c_enum),
        ("tasks", c_size_t),
        ("task", TaskCallback),
        ("device", DeviceCallback),
        ("scratch_bytes", c_size_t),
        ("context", c_void_p),
    ]


UNSUBMITTED = -0x7FFFFFFF  # an outcome's status before the engine saw it: no `uform_status_t` has it


class OutcomeStruct(Structure):
    """`uform_outcome_t`: owned by Python, handed to the engine by address; a ctypes buffer never
    moves, which is what the engine requires until the outcome finishes."""

    _fields_ = [
        ("finished", c_uint32),
        ("status", c_enum),
        ("reserved", c_uint64 * 4),
        ("message", c_char * 256),
    ]


class MeshOptionsStruct(Structure):
    """`uform_mesh_options_t`"""

    _fields_ = [
        ("host_domain_index", c_size_t),
        ("host_domain_count", c_size_t),
        ("gpus_per_multimem_domain", c_size_t),
        ("directory", c_char_p),
        ("job", c_char_p),
        ("timeout_seconds", c_double),
    ]


class MeshDescriptionStruct(Structure):
    """`uform_mesh_description_t`"""

    _fields_ = [
        ("gpus_per_host_domain", c_size_t),
        ("gpus_per_multimem_domain", c_size_t),
        ("gpus_per_colocated_domain", c_size_t),
        ("host_domain_index", c_size_t),
        ("first_gpu_index", c_size_t),
        ("multimem_tier", c_enum),
        ("gpu_class", c_enum),
    ]


_P = POINTER
# name: (restype, argtypes). `c_void_p` stands for every opaque handle (`uform_executor_t`,
# `uform_mesh_t`) and for `fu_pool_t *`.
PROTOTYPES = {
    "uform_version": (c_char_p, []),
    "uform_status_name": (c_char_p, [c_enum]),
    "uform_error_message": (c_char_p, []),
    "uform_cpu_detect": (c_enum, [_P(c_enum), _P(c_uint64)]),
    "uform_cpu_class_features": (c_uint64, [c_enum]),
    "uform_cpu_class_name": (c_char_p, [c_enum]),
    "uform_cpu_feature_name": (c_char_p, [c_uint64]),
    "uform_memory_domains": (c_enum, [_P(MemoryDomainStruct), c_size_t, _P(c_size_t)]),
    "uform_memory_domain_cores": (c_enum, [c_int32, _P(c_int32), c_size_t, _P(c_size_t)]),
    "uform_gpu_devices": (c_enum, [_P(GPUDeviceStruct), c_size_t, _P(c_size_t)]),
    "uform_gpu_device_name": (c_enum, [c_int32, c_char_p, c_size_t]),
    "uform_gpu_status": (c_enum, []),
    "uform_gpu_class_name": (c_char_p, [c_enum]),
    "uform_gpu_vendor_name": (c_char_p, [c_enum]),
    "uform_executor_for_ram": (c_enum, [_P(RamOptionsStruct), c_size_t, c_size_t, _P(c_void_p)]),
    "uform_executor_on_pool": (c_enum, [c_void_p, _P(RamOptionsStruct), c_size_t, _P(c_void_p)]),
    "uform_executor_for_vram": (
        c_enum,
        [_P(VramOptionsStruct), _P(RamOptionsStruct), _P(c_void_p), c_size_t, c_size_t, _P(c_void_p)],
    ),
    "uform_executor_drain": (c_enum, [c_void_p, c_enum]),
    "uform_executor_free": (None, [c_void_p]),
    "uform_executor_describe": (c_enum, [c_void_p, _P(ExecutorDescriptionStruct)]),
    "uform_executor_thread_placement": (c_enum, [c_void_p, c_size_t, _P(c_int32), _P(c_int32)]),
    "uform_executor_call": (c_enum, [c_void_p, _P(CallStruct), _P(OutcomeStruct)]),
    "uform_outcome_poll": (c_enum, [_P(OutcomeStruct)]),
    "uform_outcome_wait": (c_enum, [_P(OutcomeStruct), c_double]),
    "uform_executor_scratch_bytes": (c_enum, [c_void_p, c_size_t, _P(c_size_t)]),
    "uform_executor_scratch_release": (c_enum, [c_void_p]),
    "uform_device_launch": (c_enum, [_P(DeviceSlotStruct), c_enum, c_uint64, c_uint64, c_double]),
    "uform_mesh_bootstrap": (c_enum, [c_void_p, _P(MeshOptionsStruct), _P(c_void_p)]),
    "uform_mesh_describe": (c_enum, [c_void_p, _P(MeshDescriptionStruct)]),
    "uform_mesh_free": (None, [c_void_p]),
    "uform_mesh_all_reduce": (c_enum, [c_void_p, _P(c_uint64), c_size_t, c_enum, _P(OutcomeStruct)]),
    "uform_mesh_all_reduce_host": (c_enum, [c_void_p, _P(c_void_p), c_size_t, c_enum, _P(OutcomeStruct)]),
}


class MissingLibrary(Exception):
    """Raised by `load` when no candidate loads; `Library` turns it into `uform.Error`."""


class MissingSymbol(Exception):
    """Raised when a function this binding needs is absent from the loaded library, unless
    `uform/_errors.py` installed `missing_error` to raise its own `Error` instead."""


#: Builds the exception for a missing symbol; `uform/_errors.py` sets it to `Error(UNSUPPORTED)`.
missing_error = MissingSymbol


class Native:
    """A loaded `libuform` with every prototype of `PROTOTYPES` declared. Functions the file lacks
    (an older or partial build) raise `MissingSymbol` when called, not when loaded."""

    def __init__(self, dll: ctypes.CDLL, path: str):
        self.dll = dll
        self.path = path
        self.missing = []
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                function = getattr(dll, name)
            except AttributeError:
                self.missing.append(name)
                continue
            function.restype = restype
            function.argtypes = argtypes
            setattr(self, name, function)

    def __getattr__(self, name: str):
        # Reached only for names `__init__` did not set: a symbol the library lacks.
        if name.startswith("uform_"):
            raise missing_error(f"{self.path} lacks `{name}`; rebuild libuform from this checkout")
        raise AttributeError(name)


_loaded: dict = {}
_loaded_lock = threading.Lock()


def _package_candidates() -> list:
    """Library files shipped inside the package directory, the unversioned name first."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = glob.glob(os.path.join(here, "libuform.so*")) + glob.glob(os.path.join(here, "libuform.dylib"))
    return sorted(found, key=lambda path: (len(os.path.basename(path)), path))


def candidates(explicit: str | None = None) -> list:
    """Where `load` looks, in order: an explicit path; else `$UFORM_LIBRARY` alone when set; else the
    package directory, `ctypes.util.find_library("uform")`, and the dynamic linker's own search
    (`LD_LIBRARY_PATH`, the ld cache, system directories) for `libuform.so.0` and `libuform.so`."""
    if explicit is not None:
        return [os.fspath(explicit)]
    variable = os.environ.get(LIBRARY_VARIABLE)
    if variable:
        return [variable]
    result = _package_candidates()
    found = ctypes.util.find_library("uform")
    if found:
        result.append(found)
    result += [f"libuform.so.{ABI_MAJOR}", "libuform.so"]
    unique = []
    for candidate in result:
        if candidate not in unique:
            unique.append(candidate)
    return unique


def load(explicit: str | None = None) -> Native:
    """Loads the first candidate that opens; raises `MissingLibrary` naming every place tried and
    why each failed. Loaded libraries are cached by the name they were found under."""
    tried = []
    places = candidates(explicit)
    for candidate in places:
        with _loaded_lock:
            if candidate in _loaded:
                return _loaded[candidate]
            try:
                dll = ctypes.CDLL(candidate)  # CDLL releases the GIL around every call
            except OSError as error:
                tried.append(f"{candidate} ({error})")
                continue
            path = candidate
            try:
                # The file actually mapped, for messages: resolve through the symbol's address.
                info = _dladdr_path(dll)
                if info:
                    path = info
            except Exception:  # pragma: no cover - purely cosmetic
                pass
            native = Native(dll, path)
            _loaded[candidate] = native
            return native
    if explicit is not None:
        origin = "the path given to Library()"
    elif os.environ.get(LIBRARY_VARIABLE):
        origin = f"${LIBRARY_VARIABLE}"
    else:
        state = "empty" if LIBRARY_VARIABLE in os.environ else "unset"
        origin = (
            f"${LIBRARY_VARIABLE} ({state}), the package directory "
            f"{os.path.dirname(os.path.abspath(__file__))}, ctypes.util.find_library('uform'), "
            "and the dynamic linker's search path"
        )
    raise MissingLibrary(
        f"cannot load libuform; looked in {origin}; tried: " + "; ".join(tried)
        + f". Build it (cmake --build build) and set {LIBRARY_VARIABLE} to the .so file"
    )


class _DlInfo(Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]


def _dladdr_path(dll: ctypes.CDLL) -> str | None:
    """The path of the file `dll` was mapped from, through `dladdr` on one of its symbols."""
    libc = ctypes.CDLL(None)
    dladdr = getattr(libc, "dladdr", None)
    if dladdr is None:
        return None
    dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
    dladdr.restype = c_int
    info = _DlInfo()
    address = ctypes.cast(dll.uform_version, c_void_p).value
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.abspath(info.dli_fname.decode(errors="replace"))
