"""UForm's native engine from Python: the names and shapes of the Mojo API, over ``libuform``.

Standard library only: ``ctypes`` over ``libuform.so``, found through ``$UFORM_LIBRARY``, next to
this package, or on the dynamic linker's path (see `Library`).

>>> from uform import Library, Executor, RamOptions, Mood
>>> library = Library()
>>> with Executor.for_ram(library, RamOptions.on([0]), threads=2) as threads:
...     threads.for_n(8, lambda task, thread, domain: None)
...     threads.drain(Mood.SPINNING)

Every failure of the engine raises an `Error`, whose ``kind`` is a `Status` and whose ``message``
is the engine's sentence naming the bad value; its class is the subclass for the kind
(`ContendedError`, `InvalidArgumentError`, which is also a `ValueError`, `TimeoutError`, which is
also the built-in one, ...), so ``except uform.Error`` catches all and ``except uform.TimeoutError``
one kind. Enumerations live in ``uform._codes`` and the errors in ``uform._errors``, both
re-exported here. Misuse of Python types (a string
where a number belongs, a callback that is not callable) raises the usual ``TypeError``.
"""

from __future__ import annotations

import atexit
import ctypes
import operator
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from . import _native
from ._codes import (  # noqa: F401 - re-exported
    CPUClass,
    DType,
    ExecutorKind,
    GPUClass,
    GPUVendor,
    Kernel,
    Mood,
    MultimemTier,
    Residency,
    Schedule,
    Status,
    _Code,
    _enum,
)
from ._errors import (  # noqa: F401 - re-exported
    ConfigMismatchError,
    ContendedError,
    CorruptFileError,
    DeferredFullError,
    DeviceFaultError,
    Error,
    ForkedError,
    InvalidArgumentError,
    LimitExceededError,
    OutOfMemoryError,
    PeerLostError,
    PendingError,
    ResidencyMismatchError,
    SystemCallError,
    TimeoutError,
    UnsupportedError,
    _check,
    _message,
)
from ._native import (
    CallStruct,
    DeviceCallback,
    ExecutorDescriptionStruct,
    GPUDeviceStruct,
    MemoryDomainStruct,
    MeshDescriptionStruct,
    MeshOptionsStruct,
    OutcomeStruct,
    RamOptionsStruct,
    TaskCallback,
    VramOptionsStruct,
)

__version__ = "0.1.0"

__all__ = [
    "CPUClass",
    "ConfigMismatchError",
    "ContendedError",
    "CorruptFileError",
    "DeferredFullError",
    "DeviceFaultError",
    "ForkedError",
    "InvalidArgumentError",
    "LimitExceededError",
    "OutOfMemoryError",
    "PeerLostError",
    "PendingError",
    "ResidencyMismatchError",
    "SystemCallError",
    "TimeoutError",
    "UnsupportedError",
    "DEFERRED_LIMIT_DEFAULT",
    "DType",
    "DeviceSlot",
    "Error",
    "Executor",
    "ExecutorDescription",
    "ExecutorKind",
    "GPUClass",
    "GPUDevice",
    "GPUVendor",
    "Kernel",
    "Library",
    "MemoryDomain",
    "Modality",
    "Model",
    "ModelDescription",
    "Mesh",
    "MeshDescription",
    "MeshOptions",
    "Mood",
    "MultimemTier",
    "NULL_ADDRESS",
    "Outcome",
    "RamOptions",
    "Residency",
    "Schedule",
    "Status",
    "VramOptions",
    "get_model",
]

#: The address of the NULL executor: `Executor(library)` runs every call inline.
NULL_ADDRESS = 0

#: `UFORM_DEFERRED_LIMIT_DEFAULT`: what `deferred_limit=0` takes.
DEFERRED_LIMIT_DEFAULT = 1024

_SIZE_MAX = 2**64 - 1


# region Errors


def _size(value, name: str) -> int:
    """A `size_t` argument: a non-negative integer below 2**64, else `Error(INVALID_ARGUMENT)`."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {value!r}") from None
    if value < 0 or value > _SIZE_MAX:
        raise Error(Status.INVALID_ARGUMENT, f"{name} must be in [0, 2**64), got {value}")
    return value


def _address(value, name: str) -> int:
    """A pointer argument: an integer address, a `ctypes.c_void_p`, or None for NULL."""
    if value is None:
        return 0
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    return _size(value, name)


def _int32_array(values, name: str):
    """A tuple of int32 values, or `Error(INVALID_ARGUMENT)` naming the one that does not fit."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of integers, not {values!r}")
    result = []
    for position, value in enumerate(values):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name}[{position}] must be an integer, not {value!r}") from None
        if not -(2**31) <= value < 2**31:
            raise Error(Status.INVALID_ARGUMENT, f"{name}[{position}] = {value} does not fit an int32")
        result.append(value)
    return tuple(result)


def _report_unretrieved(error: BaseException) -> None:
    """Prints an exception of a deferred call nobody waited for, as asyncio does for tasks."""
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        sys.stderr.write("uform: a deferred call's callback raised, and its Outcome was never waited for:\n" + text)
    except Exception:  # pragma: no cover - interpreter shutting down
        pass


# endregion Errors

# region Library and devices


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


# endregion Library and devices

# region Options


class RamOptions:
    """The host memory domains a RAM-resident model and executor place their bytes in, one NUMA
    node each (`uform_ram_options_t`). ``RamOptions()`` derives every node the process may
    allocate on; `RamOptions.on` names them. Copied by every verb, never borrowed past it."""

    __slots__ = ("memory_domains", "cpu_class")

    def __init__(self, *, cpu_class=CPUClass.UNKNOWN):
        """Derives every memory domain the process may allocate on."""
        self.memory_domains: Optional[tuple] = None
        self.cpu_class = _enum(CPUClass, cpu_class, "cpu_class")

    @staticmethod
    def on(memory_domains: Iterable[int], cpu_class=CPUClass.UNKNOWN) -> "RamOptions":
        """Names the NUMA node IDs explicitly; `MemoryDomain` objects stand for their nodes. An
        empty sequence derives, as zero entries do in C."""
        options = RamOptions(cpu_class=cpu_class)
        if isinstance(memory_domains, Iterable) and not isinstance(memory_domains, (str, bytes)):
            memory_domains = [domain.node if isinstance(domain, MemoryDomain) else domain for domain in memory_domains]
        options.memory_domains = _int32_array(memory_domains, "memory_domains")
        return options

    @property
    def memory_domains_count(self) -> int:
        """Entries in `memory_domains`; zero derives."""
        return len(self.memory_domains) if self.memory_domains else 0

    def arguments(self) -> RamOptionsStruct:
        """The C layout. The struct holds a reference to its node array (ctypes keeps it in the
        struct's `_objects`), so the array lives exactly as long as the struct the verb passes."""
        struct = RamOptionsStruct()
        if self.memory_domains:
            struct.memory_domains = (ctypes.c_int32 * len(self.memory_domains))(*self.memory_domains)
            struct.memory_domains_count = len(self.memory_domains)
        struct.cpu_class = self.cpu_class
        return struct

    def __eq__(self, other):
        return isinstance(other, RamOptions) and (self.memory_domains, self.cpu_class) == (
            other.memory_domains,
            other.cpu_class,
        )

    def __repr__(self) -> str:
        if self.memory_domains is None:
            return f"RamOptions(cpu_class={self.cpu_class!s})"
        return f"RamOptions.on({list(self.memory_domains)}, cpu_class={self.cpu_class!s})"


class VramOptions:
    """The devices a VRAM-resident model, trainer and executor place their bytes in
    (`uform_vram_options_t`). ``VramOptions()`` derives one free device; `VramOptions.on` names
    UForm ordinals (positions in `Library.gpu_devices`)."""

    __slots__ = ("devices", "gpu_class")

    def __init__(self, *, gpu_class=GPUClass.UNKNOWN):
        """Derives one free device."""
        self.devices: Optional[tuple] = None
        self.gpu_class = _enum(GPUClass, gpu_class, "gpu_class")

    @staticmethod
    def on(devices: Iterable[int], gpu_class=GPUClass.UNKNOWN) -> "VramOptions":
        """Names the device ordinals explicitly; `GPUDevice` objects stand for their ordinals."""
        options = VramOptions(gpu_class=gpu_class)
        ordinals = []
        for device in devices:
            if isinstance(device, GPUDevice):
                if device.ordinal is None:
                    raise Error(Status.INVALID_ARGUMENT, "a GPUDevice not listed by Library.gpu_devices has no ordinal")
                device = device.ordinal
            ordinals.append(device)
        options.devices = _int32_array(ordinals, "devices")
        return options

    @property
    def devices_count(self) -> int:
        """Entries in `devices`; zero derives."""
        return len(self.devices) if self.devices else 0

    def arguments(self) -> VramOptionsStruct:
        """The C layout, holding its ordinal array (see `RamOptions.arguments`)."""
        struct = VramOptionsStruct()
        if self.devices:
            struct.devices = (ctypes.c_int32 * len(self.devices))(*self.devices)
            struct.devices_count = len(self.devices)
        struct.gpu_class = self.gpu_class
        return struct

    def __eq__(self, other):
        return isinstance(other, VramOptions) and (self.devices, self.gpu_class) == (other.devices, other.gpu_class)

    def __repr__(self) -> str:
        if self.devices is None:
            return f"VramOptions(gpu_class={self.gpu_class!s})"
        return f"VramOptions.on({list(self.devices)}, gpu_class={self.gpu_class!s})"


@dataclass
class MeshOptions:
    """Where this process sits among the processes training one model, and how they meet
    (`uform_mesh_options_t`). The default is a run with no peers."""

    host_domain_index: int = 0
    host_domain_count: int = 0
    gpus_per_multimem_domain: int = 0
    directory: str = ""
    job: str = ""
    timeout_seconds: float = 0.0

    def arguments(self) -> MeshOptionsStruct:
        """The C layout; ctypes keeps the encoded strings alive as long as the struct."""
        struct = MeshOptionsStruct()
        struct.host_domain_index = _size(self.host_domain_index, "host_domain_index")
        struct.host_domain_count = _size(self.host_domain_count, "host_domain_count")
        struct.gpus_per_multimem_domain = _size(self.gpus_per_multimem_domain, "gpus_per_multimem_domain")
        struct.directory = self.directory.encode() if self.directory else None
        struct.job = self.job.encode() if self.job else None
        struct.timeout_seconds = float(self.timeout_seconds)
        return struct


@dataclass
class MeshDescription:
    """What a mesh reports about itself (`uform_mesh_description_t`); all zero by default, which is
    what a failed report leaves."""

    gpus_per_host_domain: int = 0
    gpus_per_multimem_domain: int = 0
    gpus_per_colocated_domain: int = 0
    host_domain_index: int = 0
    first_gpu_index: int = 0
    multimem_tier: MultimemTier = MultimemTier.SWITCH_REDUCED
    gpu_class: GPUClass = GPUClass.UNKNOWN


@dataclass
class ExecutorDescription:
    """What an executor is and where it runs (`uform_executor_description_t`)."""

    kind: ExecutorKind
    threads_count: int
    domains_count: int
    devices_count: int
    cpu_class: CPUClass
    gpu_class: GPUClass
    mood: Mood
    deferred_limit: int
    scratch_limit: int


# endregion Options

# region Calls


_local = threading.local()


def _running_callbacks() -> list:
    """Executors whose Python callback this thread is inside, innermost last."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class DeviceSlot:
    """What a device callback is handed for one device of a VRAM executor (`uform_device_slot_t`),
    valid only while the callback runs."""

    __slots__ = ("device_index", "ordinal", "gpu_class", "stream", "cu_context", "scratch", "scratch_bytes", "_pointer", "_native")

    def __init__(self, pointer, native):
        slot = pointer.contents
        self.device_index = slot.device_index
        self.ordinal = slot.ordinal
        self.gpu_class = GPUClass(slot.gpu_class)
        self.stream = slot.stream or 0
        self.cu_context = slot.cu_context or 0
        self.scratch = slot.scratch
        self.scratch_bytes = slot.scratch_bytes
        self._pointer = pointer
        self._native = native

    def launch(self, kernel, buffer: Optional[int] = None, count: Optional[int] = None, value: float = 0.0) -> None:
        """Enqueues one of the engine's kernels on this slot's stream (`uform_device_launch`).
        `buffer` defaults to the slot's scratch and `count` to the floats that scratch holds."""
        if self._pointer is None:
            raise Error(Status.INVALID_ARGUMENT, "a DeviceSlot is valid only inside its device callback")
        buffer = self.scratch if buffer is None else _size(buffer, "buffer")
        count = self.scratch_bytes // 4 if count is None else _size(count, "count")
        kernel = _enum(Kernel, kernel, "kernel")
        _check(self._native, self._native.uform_device_launch(self._pointer, kernel, buffer, count, float(value)))

    def __repr__(self) -> str:
        return (
            f"DeviceSlot(device_index={self.device_index}, ordinal={self.ordinal}, gpu_class={self.gpu_class!s}, "
            f"scratch=0x{self.scratch:x}, scratch_bytes={self.scratch_bytes})"
        )


# The status a Python device callback returns to the engine when it raised something other than
# `Error`; the call then fails and the binding re-raises the Python exception instead.
_DEVICE_CALLBACK_FAILED = Status.INVALID_ARGUMENT


class _Record:
    """Everything one call needs alive until the engine is done with it: the ctypes thunks, the
    user's callables and context, the buffers of a collective, the outcome struct of a deferred
    call, and the first exception a Python callback raised. Owned by the executor while pending,
    so a dropped `Outcome` never frees memory the engine still writes."""

    __slots__ = (
        "keep",
        "outcome",
        "error",
        "lock",
        "settled",
        "status",
        "message",
        "retrieved",
        "orphaned",
    )

    def __init__(self):
        self.keep = []
        self.outcome: Optional[OutcomeStruct] = None
        self.error: Optional[BaseException] = None
        self.lock = threading.Lock()
        self.settled = False
        self.status = Status.PENDING
        self.message = ""
        self.retrieved = False
        self.orphaned = False

    def capture(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error

    def settle(self, status: int) -> None:
        """Records the finished outcome and lets go of what the engine no longer calls. Several
        threads may observe the end at once (a wait, a drain's prune); the first one settles."""
        with self.lock:
            if self.settled:
                return
            self.status = Status(status)
            if self.outcome is not None:
                self.message = self.outcome.message.decode("utf-8", errors="replace")
            self.keep = []
            self.settled = True
            report = self.orphaned and self.error is not None and not self.retrieved
            if report:
                self.retrieved = True
        if report:
            _report_unretrieved(self.error)


_PYTHON_CALLABLE = object()  # `_native_callback`'s answer for a Python callable, which needs a trampoline


def _native_callback(callback, record: "_Record", name: str, prototype):
    """The C callback for ``callback`` when it needs no trampoline: None for None, the address
    itself for a raw C function pointer (an int, a `c_void_p`, or a ctypes function object, kept
    alive in ``record``). `_PYTHON_CALLABLE` for a Python callable; TypeError for anything else."""
    if callback is None:
        return None
    if isinstance(callback, ctypes._CFuncPtr):
        record.keep.append(callback)
        return prototype(ctypes.cast(callback, ctypes.c_void_p).value)
    if isinstance(callback, (int, ctypes.c_void_p)) and not isinstance(callback, bool):
        address = _address(callback, name)
        return prototype(address) if address else None
    if not callable(callback):
        raise TypeError(f"{name} must be a callable, a C function address or None, not {callback!r}")
    return _PYTHON_CALLABLE


def _task_thunk(task, record: _Record, executor: "Executor"):
    """The `uform_task_callback_t` for `task`: NULL for None; the address itself for a raw C
    function pointer (an int, a `c_void_p`, or a ctypes function object); otherwise a trampoline
    into the Python callable `task(task_index, thread, domain)` that takes the GIL per task."""
    native = _native_callback(task, record, "task", TaskCallback)
    if native is not _PYTHON_CALLABLE:
        return native

    def trampoline(_context, index, thread, domain):
        if record.error is not None:
            return  # a task already raised: the rest of the call is skipped
        stack = _running_callbacks()
        stack.append(executor)
        try:
            task(index, thread, domain)
        except BaseException as error:  # noqa: B902 - every exception is re-raised after the call
            record.capture(error)
        finally:
            stack.pop()

    thunk = TaskCallback(trampoline)
    record.keep.append(thunk)
    return thunk


def _device_thunk(device, record: _Record, executor: "Executor"):
    """The `uform_device_callback_t` for `device`, as `_task_thunk`; the Python callable receives a
    `DeviceSlot` and returns None, or raises (`Error` passes its kind to the engine)."""
    native = _native_callback(device, record, "device", DeviceCallback)
    if native is not _PYTHON_CALLABLE:
        return native
    native = executor._native

    def trampoline(_context, pointer):
        if record.error is not None:
            return int(_DEVICE_CALLBACK_FAILED)
        stack = _running_callbacks()
        stack.append(executor)
        slot = DeviceSlot(pointer, native)
        try:
            device(slot)
            return int(Status.OK)
        except Error as error:
            record.capture(error)
            return int(error.kind) if error.kind not in (Status.OK, Status.PENDING) else int(_DEVICE_CALLBACK_FAILED)
        except BaseException as error:  # noqa: B902
            record.capture(error)
            return int(_DEVICE_CALLBACK_FAILED)
        finally:
            slot._pointer = None
            stack.pop()

    thunk = DeviceCallback(trampoline)
    record.keep.append(thunk)
    return thunk


def _context_address(context, record: _Record) -> int:
    """The `void *context` handed to C callbacks: an int address, None, or a ctypes object (whose
    address is taken and which is kept alive with the call). Python callbacks ignore it."""
    if context is None:
        return 0
    if isinstance(context, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)) and not isinstance(
        context, ctypes.c_void_p
    ):
        record.keep.append(context)
        return ctypes.addressof(context)
    return _address(context, "context")


class Outcome:
    """The report of a deferred call (`uform_outcome_t`). Keeps its executor (or mesh) alive, and
    the executor keeps the call's callbacks, context and buffers alive until it finishes, even
    when this object is dropped earlier."""

    __slots__ = ("_owner", "_executor", "_record", "__weakref__")

    def __init__(self, owner, executor: "Executor", record: _Record):
        self._owner = owner
        self._executor = executor
        self._record = record

    def _poll(self, timeout: Optional[float]) -> bool:
        """Waits up to `timeout` (None: forever, 0: not at all); True once settled."""
        record = self._record
        if record.settled:
            return True
        executor = self._executor
        native = executor._native
        with executor._using(allow_closed=True) as open_:
            if not open_:
                return record.settled  # closed: `Executor.close` settled every record
            pointer = ctypes.byref(record.outcome)
            if timeout is not None and timeout <= 0:
                status = native.uform_outcome_poll(pointer)
            else:
                # Wait in slices so Ctrl-C and other signal handlers still run in between.
                deadline = None if timeout is None else time.monotonic() + timeout
                while True:
                    slice_ = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                    status = native.uform_outcome_wait(pointer, slice_)
                    if status != Status.PENDING or (deadline is not None and time.monotonic() >= deadline):
                        break
            if status == Status.PENDING:
                return False
            record.settle(status)
        return True

    def done(self) -> bool:
        """Whether the call finished (`uform_outcome_poll`); never blocks, never raises for the
        call's own failure."""
        return self._poll(0)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits up to `timeout` seconds (None: until it finishes). Returns True when the call
        finished successfully, False when it is still running after `timeout`; raises the first
        exception a Python callback raised, else `Error` with the call's status and message."""
        if not self._poll(timeout):
            return False
        record = self._record
        if record.error is not None:
            record.retrieved = True
            raise record.error
        if record.status != Status.OK:
            raise Error(record.status, record.message)
        return True

    @property
    def status(self) -> Status:
        """The call's `Status` once finished, else `Status.PENDING`."""
        self._poll(0)
        return self._record.status if self._record.settled else Status.PENDING

    @property
    def message(self) -> str:
        """The engine's failure message once finished; "" on success or while pending."""
        self._poll(0)
        return self._record.message

    def __del__(self):
        record = getattr(self, "_record", None)
        if record is None:
            return
        if record.settled:
            if record.error is not None and not record.retrieved:
                record.retrieved = True
                _report_unretrieved(record.error)
        else:
            record.orphaned = True

    def __repr__(self) -> str:
        state = self._record.status if self._record.settled else Status.PENDING
        return f"<Outcome {state!s}>"


# endregion Calls

# region Executors

_live_executors: "weakref.WeakSet[Executor]" = weakref.WeakSet()


class _Using:
    """`with owner._using():` marks a Python thread inside a C function on an executor or mesh, so
    `close` from another thread refuses (CONTENDED) instead of freeing the handle under it."""

    __slots__ = ("owner", "allow_closed", "open")

    def __init__(self, owner, allow_closed):
        self.owner = owner
        self.allow_closed = allow_closed
        self.open = False

    def __enter__(self) -> bool:
        owner = self.owner
        with owner._lock:
            if owner._closed:
                if self.allow_closed:
                    return False
                raise Error(Status.INVALID_ARGUMENT, f"the {type(owner).__name__.lower()} is closed")
            owner._active += 1
            self.open = True
        return True

    def __exit__(self, *exc):
        if self.open:
            with self.owner._lock:
                self.owner._active -= 1
        return False


class _Closing:
    """Lifetimes shared by `Executor` and `Mesh`: closed at the end of a ``with`` block and when
    garbage-collected; subclasses provide ``close`` and ``_closed``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception:  # pragma: no cover - nothing to raise into from a finalizer
            pass


class Executor(_Closing):
    """The threads or streams a verb runs on (`uform_executor_t`), freed when it goes out of scope,
    when `close` is called, or at the end of a ``with`` block, whichever comes first.

    ``Executor(library)`` owns nothing: every call handed it runs inline on the calling thread.
    The factories `for_ram`, `on_pool` and `for_vram` fix a kind. An executor runs one call at a
    time: a call finding another one holding it raises `Error` with kind `Status.CONTENDED` at
    once, having run nothing, so threads that genuinely overlap take one executor apiece.
    """

    def __init__(self, library: Library, *, address: int = NULL_ADDRESS):
        """The caller-thread executor; with ``address``, adopts a handle already spawned (the
        factories hand theirs over this way) and frees it when done."""
        if not isinstance(library, Library):
            raise TypeError(f"library must be a uform.Library, not {library!r}")
        self._library = library
        self._native = library._native
        self._handle = _address(address, "address")
        self._closed = False
        self._lock = threading.Lock()
        self._active = 0
        self._pending: list = []
        self._meshes: "weakref.WeakSet[Mesh]" = weakref.WeakSet()
        if self._handle:
            _live_executors.add(self)

    # Construction

    @classmethod
    def for_ram(
        cls, library: Library, ram: Optional[RamOptions] = None, threads: int = 0, deferred_limit: int = 0
    ) -> "Executor":
        """Spawns host threads for RAM-resident models, pinned one per core of the domains
        (`uform_executor_for_ram`). ``threads=0`` takes 7/8 of the cores those domains carry.
        Raises `Error`: INVALID_ARGUMENT for an unknown, disallowed or duplicate node or too many
        threads; UNSUPPORTED for a class above the CPU; SYSTEM_ERROR if the OS refuses a thread."""
        cls._check_library(library)
        ram = RamOptions() if ram is None else ram
        _require(ram, RamOptions, "ram")
        struct = ram.arguments()
        handle = ctypes.c_void_p()
        native = library._native
        status = native.uform_executor_for_ram(
            ctypes.byref(struct), _size(threads, "threads"), _size(deferred_limit, "deferred_limit"), ctypes.byref(handle)
        )
        _check(native, status)
        return cls(library, address=handle.value)

    @classmethod
    def on_pool(
        cls, library: Library, pool: int, ram: Optional[RamOptions] = None, deferred_limit: int = 0
    ) -> "Executor":
        """Schedules onto a borrowed ForkUnion pool (`uform_executor_on_pool`): ``pool`` is the
        integer address of a live ``fu_pool_t`` that must outlive the executor. Raises `Error`:
        UNSUPPORTED when the process has no ForkUnion, INVALID_ARGUMENT for a zero address."""
        cls._check_library(library)
        ram = RamOptions() if ram is None else ram
        _require(ram, RamOptions, "ram")
        struct = ram.arguments()
        handle = ctypes.c_void_p()
        native = library._native
        status = native.uform_executor_on_pool(
            _address(pool, "pool") or None,
            ctypes.byref(struct),
            _size(deferred_limit, "deferred_limit"),
            ctypes.byref(handle),
        )
        _check(native, status)
        return cls(library, address=handle.value)

    @classmethod
    def for_vram(
        cls,
        library: Library,
        vram: Optional[VramOptions] = None,
        ram: Optional[RamOptions] = None,
        streams=0,
        scratch_limit: int = 0,
        deferred_limit: int = 0,
    ) -> "Executor":
        """Opens one stream per named device, all driven by the calling thread, plus host threads
        (`uform_executor_for_vram`). ``ram=None`` places host threads on the node nearest each
        device. ``streams``: 0/None, or borrowed CUDA streams (a sequence of addresses, or the
        address of such an array), which the engine refuses with UNSUPPORTED for now. Raises
        `Error` with UNSUPPORTED without a driver or device, and the message says which."""
        cls._check_library(library)
        vram = VramOptions() if vram is None else vram
        _require(vram, VramOptions, "vram")
        vram_struct = vram.arguments()
        ram_struct = None
        if ram is not None:
            _require(ram, RamOptions, "ram")
            ram_struct = ram.arguments()
        streams_pointer = None
        if streams is None or (isinstance(streams, int) and not isinstance(streams, bool)) or isinstance(
            streams, ctypes.c_void_p
        ):
            address = _address(streams, "streams")
            streams_pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p)) if address else None
        else:
            values = [_address(stream, "streams[]") for stream in streams]
            streams_pointer = (ctypes.c_void_p * max(len(values), 1))(*values)
        handle = ctypes.c_void_p()
        native = library._native
        status = native.uform_executor_for_vram(
            ctypes.byref(vram_struct),
            ctypes.byref(ram_struct) if ram_struct is not None else None,
            streams_pointer,
            _size(scratch_limit, "scratch_limit"),
            _size(deferred_limit, "deferred_limit"),
            ctypes.byref(handle),
        )
        _check(native, status)
        return cls(library, address=handle.value)

    @staticmethod
    def _check_library(library):
        if not isinstance(library, Library):
            raise TypeError(f"library must be a uform.Library, not {library!r}")

    # Identity

    @property
    def library(self) -> Library:
        """The loaded engine, kept so the shared object stays mapped while the handle lives."""
        return self._library

    @property
    def address(self) -> int:
        """The opaque `uform_executor_t` as an integer; `NULL_ADDRESS` for the inline executor.
        Raises `Error(INVALID_ARGUMENT)` once closed, so it never hands out a dangling pointer."""
        if self._closed:
            raise Error(Status.INVALID_ARGUMENT, "the executor is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

    def _using(self, allow_closed: bool = False) -> _Using:
        return _Using(self, allow_closed)

    # Verbs

    def drain(self, mood=Mood.PARKED) -> None:
        """Waits for every call submitted before it, then idle workers adopt ``mood``
        (`uform_executor_drain`). Raises `Error` only for the executor's own failure (a device
        fault, a fork), never a drained call's, which its `Outcome` reports; CONTENDED from
        inside one of its own callbacks."""
        mood = _enum(Mood, mood, "mood")
        with self._using():
            _check(self._native, self._native.uform_executor_drain(self._handle or None, mood))
        self._prune()

    def describe(self) -> ExecutorDescription:
        """`uform_executor_describe`; the inline executor describes as INLINE with one thread."""
        struct = ExecutorDescriptionStruct()
        with self._using():
            _check(self._native, self._native.uform_executor_describe(self._handle or None, ctypes.byref(struct)))
        return ExecutorDescription(
            kind=ExecutorKind(struct.kind),
            threads_count=struct.threads_count,
            domains_count=struct.domains_count,
            devices_count=struct.devices_count,
            cpu_class=CPUClass(struct.cpu_class),
            gpu_class=GPUClass(struct.gpu_class),
            mood=Mood(struct.mood),
            deferred_limit=struct.deferred_limit,
            scratch_limit=struct.scratch_limit,
        )

    def thread_placement(self, thread: int) -> tuple:
        """`(core, node)` thread `thread` is pinned to (`uform_executor_thread_placement`)."""
        core = ctypes.c_int32()
        node = ctypes.c_int32()
        with self._using():
            status = self._native.uform_executor_thread_placement(
                self._handle or None, _size(thread, "thread"), ctypes.byref(core), ctypes.byref(node)
            )
            _check(self._native, status)
        return core.value, node.value

    def scratch_bytes(self, device_index: int) -> int:
        """Bytes a VRAM executor holds on its device ``device_index``."""
        result = ctypes.c_size_t()
        with self._using():
            status = self._native.uform_executor_scratch_bytes(
                self._handle or None, _size(device_index, "device_index"), ctypes.byref(result)
            )
            _check(self._native, status)
        return result.value

    def scratch_release(self) -> None:
        """Waits for the executor's calls, then frees its scratch on every device."""
        with self._using():
            _check(self._native, self._native.uform_executor_scratch_release(self._handle or None))

    def call(
        self,
        *,
        tasks: int = 0,
        task=None,
        device=None,
        schedule=Schedule.STATIC,
        residency=Residency.ANY,
        scratch_bytes: int = 0,
        context=None,
        defer: bool = False,
    ) -> Optional[Outcome]:
        """Runs one `uform_call_t` (`uform_executor_call`): blocking, returning None, or with
        ``defer=True`` queued, returning an `Outcome`.

        ``task`` is a Python callable ``task(task_index, thread, domain)``, or a raw C
        ``uform_task_callback_t`` (an integer address or a ctypes function object) that receives
        ``context`` (an integer address, or a ctypes object whose address is taken). ``device`` is
        likewise a Python callable ``device(slot: DeviceSlot)`` or a raw ``uform_device_callback_t``.

        Python callbacks take the GIL for every task, so they run one at a time whatever the
        executor's thread count: the verb from Python is for orchestration and tests; real work
        runs in C callbacks, which take no GIL. The first exception a Python callback raises is
        kept, the remaining tasks of the call are skipped, and the exception is re-raised here
        (blocking) or by `Outcome.wait` (deferred) once the call finished.

        Raises `Error`: CONTENDED when another call holds the executor (nothing ran), or the
        engine's status (DEFERRED_FULL, RESIDENCY_MISMATCH, INVALID_ARGUMENT, ...).
        """
        schedule = _enum(Schedule, schedule, "schedule")
        residency = _enum(Residency, residency, "residency")
        record = _Record()
        struct = CallStruct()
        struct.residency = residency
        struct.schedule = schedule
        struct.tasks = _size(tasks, "tasks")
        struct.scratch_bytes = _size(scratch_bytes, "scratch_bytes")
        struct.context = _context_address(context, record) or None
        task_thunk = _task_thunk(task, record, self)
        if task_thunk is not None:
            struct.task = task_thunk
        device_thunk = _device_thunk(device, record, self)
        if device_thunk is not None:
            struct.device = device_thunk
        return self._submit(record, lambda handle, outcome: self._native.uform_executor_call(
            handle, ctypes.byref(struct), outcome), defer, owner=self)

    def for_n(self, n: int, fn, schedule=Schedule.STATIC, defer: bool = False, context=None) -> Optional[Outcome]:
        """Runs ``fn(task, thread, domain)`` for every task in [0, n): STATIC splits the range into
        one contiguous share per thread, DYNAMIC hands tasks out one at a time. See `call`."""
        return self.call(tasks=n, task=fn, schedule=schedule, context=context, defer=defer)

    def for_threads(self, fn, defer: bool = False, context=None) -> Optional[Outcome]:
        """Runs ``fn(thread, thread, domain)`` once on every thread of the executor. See `call`."""
        return self.call(task=fn, schedule=Schedule.THREADS, context=context, defer=defer)

    def _submit(self, record: _Record, invoke, defer: bool, owner) -> Optional[Outcome]:
        """Runs `invoke(handle, outcome_pointer)` under the close guard; raises what it reports."""
        native = self._native
        if not defer:
            with self._using():
                status = invoke(self._handle or None, None)
                message = _message(native) if status != 0 else ""
            record.keep = []
            if record.error is not None:
                raise record.error
            if status != 0:
                raise Error(status, message)
            return None
        self._prune()
        record.outcome = OutcomeStruct()
        with self._using():
            status = invoke(self._handle or None, ctypes.byref(record.outcome))
            message = _message(native) if status != 0 else ""
            if status == 0:
                with self._lock:
                    self._pending.append(record)
        if status != 0:
            record.keep = []
            raise Error(status, message)
        return Outcome(owner, self, record)

    def _prune(self) -> None:
        """Settles and forgets finished deferred calls, releasing their callbacks and buffers."""
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return
        finished = []
        with self._using(allow_closed=True) as open_:
            if not open_:
                return
            for record in pending:
                if not record.settled:
                    status = self._native.uform_outcome_poll(ctypes.byref(record.outcome))
                    if status == Status.PENDING:
                        continue
                    record.settle(status)
                finished.append(record)
        if finished:
            with self._lock:
                done = {id(record) for record in finished}
                self._pending = [record for record in self._pending if id(record) not in done]

    # Lifetime

    def close(self) -> None:
        """Frees the executor (`uform_executor_free`): closes its meshes first, drains, joins its
        threads. Idempotent; the inline executor has nothing to free. Raises `Error(CONTENDED)`
        from inside one of its own callbacks or while another thread is inside one of its verbs."""
        if self._closed:
            return
        if self in _running_callbacks():
            raise Error(Status.CONTENDED, "an executor cannot be closed from inside one of its own callbacks")
        busy = Error(Status.CONTENDED, "another thread is inside a call on this executor; close it after")
        with self._lock:
            if self._active:
                raise busy
        for mesh in list(self._meshes):  # meshes first: each must be freed before its executor
            mesh.close()
        with self._lock:
            if self._active:
                raise busy
            self._closed = True
            handle, self._handle = self._handle, 0
        if handle:
            self._native.uform_executor_free(handle)
        # Free drained every call, so each outcome is final; its executor is gone, so read the
        # struct directly rather than through `uform_outcome_poll`, which may consult it.
        with self._lock:
            pending, self._pending = self._pending, []
        for record in pending:
            if not record.settled:
                finished = record.outcome.finished
                record.settle(record.outcome.status if finished else Status.PENDING)
        _live_executors.discard(self)

    def __repr__(self) -> str:
        if self._closed:
            return "<Executor closed>"
        if not self._handle:
            return "<Executor inline>"
        return f"<Executor 0x{self._handle:x}>"


def _require(value, cls, name: str) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a uform.{cls.__name__}, not {value!r}")


@atexit.register
def _close_all_executors() -> None:
    """Frees every executor still alive while the interpreter can still run callbacks; after this,
    a deferred Python callback on an engine thread would find no interpreter to run in."""
    for executor in list(_live_executors):
        try:
            executor.close()
        except Exception:
            pass


# endregion Executors

# region Meshes

_TYPESTRS = {
    DType.F32: ("<f4", 4),
    DType.F16: ("<f2", 2),
    DType.BF16: (None, 2),  # no standard typestr; torch refuses to export bfloat16 this way
    DType.F64: ("<f8", 8),
    DType.I32: ("<i4", 4),
}


_HOST_FORMATS = {
    DType.F32: ("f",),
    DType.F16: ("e",),
    DType.BF16: None,  # no buffer-protocol format of its own: any 2-byte element is accepted
    DType.F64: ("d",),
    DType.I32: ("i", "l"),
}


def _host_buffer(buffer, position: int, dtype: DType):
    """`(ctypes view, elements)` of one host all-reduce buffer: any writable, C-contiguous object
    with the buffer protocol (bytearray, array.array, NumPy arrays, ...) whose elements are of
    ``dtype``'s size (and format, where the format names one). The ctypes view pins the buffer for
    the call and carries its address."""
    try:
        view = memoryview(buffer)
    except TypeError:
        return None
    if view.readonly:
        raise Error(Status.INVALID_ARGUMENT, f"buffers[{position}] is read-only; all_reduce sums in place")
    if not view.c_contiguous:
        raise Error(Status.INVALID_ARGUMENT, f"buffers[{position}] is not contiguous")
    _, expected_size = _TYPESTRS[dtype]
    formats = _HOST_FORMATS[dtype]
    element_format = view.format.lstrip("@=<")
    raw_bytes = element_format in ("B", "b", "c")
    if raw_bytes:
        if view.nbytes % expected_size:
            raise Error(Status.INVALID_ARGUMENT, f"buffers[{position}] holds {view.nbytes} bytes, not whole {dtype!s} elements")
    elif view.itemsize != expected_size or (formats is not None and element_format not in formats):
        raise Error(
            Status.INVALID_ARGUMENT,
            f"buffers[{position}] holds {view.format!r} elements of {view.itemsize} bytes, which do not match {dtype!s}",
        )
    pinned = (ctypes.c_char * max(view.nbytes, 1)).from_buffer(view.cast("B")) if view.nbytes else None
    return pinned, view.nbytes // expected_size


def _device_buffer(buffer, position: int, dtype: DType):
    """`(address, elements or None)` of one all-reduce buffer: an integer device pointer, or an
    object exposing ``__cuda_array_interface__`` (torch CUDA tensors, CuPy and Numba arrays),
    which must be C-contiguous, writable and of `dtype`'s element size."""
    if isinstance(buffer, int) and not isinstance(buffer, bool):
        return _size(buffer, f"buffers[{position}]"), None
    interface = getattr(buffer, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(
            f"buffers[{position}] must be a device pointer (int), expose __cuda_array_interface__, "
            f"or be host memory with the buffer protocol, not {buffer!r}"
        )
    address, read_only = interface["data"]
    if read_only:
        raise Error(Status.INVALID_ARGUMENT, f"buffers[{position}] is read-only; all_reduce sums in place")
    shape = tuple(interface.get("shape", ()))
    typestr = interface.get("typestr", "")
    itemsize = int(typestr[2:]) if len(typestr) > 2 and typestr[2:].isdigit() else 0
    expected_typestr, expected_size = _TYPESTRS[dtype]
    if (expected_typestr and typestr.replace("|", "<").replace("=", "<") != expected_typestr) or itemsize != expected_size:
        raise Error(
            Status.INVALID_ARGUMENT,
            f"buffers[{position}] holds {typestr!r} elements, which do not match {dtype!s}",
        )
    strides = interface.get("strides")
    elements = 1
    for extent in shape:
        elements *= extent
    if strides is not None:
        expected = itemsize
        for extent, stride in reversed(list(zip(shape, strides))):
            if extent > 1 and stride != expected:
                raise Error(Status.INVALID_ARGUMENT, f"buffers[{position}] is not contiguous")
            expected *= extent
    return int(address or 0), elements


class Mesh(_Closing):
    """One process's place among the processes of a run (`uform_mesh_t`). Holds its executor,
    which therefore outlives it; closing the executor closes its meshes first. Freed when it goes
    out of scope, by `close`, or at the end of a ``with`` block."""

    def __init__(self, *, library: Library, address: int, executor: Optional[Executor] = None):
        """Adopts a handle the engine just created over ``executor``; `bootstrap` is how one is
        made. Without ``executor``, `all_reduce` is refused (the executor guards its calls)."""
        if not isinstance(library, Library):
            raise TypeError(f"library must be a uform.Library, not {library!r}")
        self._library = library
        self._native = library._native
        self._handle = _address(address, "address")
        self._executor = executor
        self._lock = threading.Lock()
        self._active = 0
        self._closed = not self._handle

    @classmethod
    def bootstrap(cls, executor: Executor, options: Optional[MeshOptions] = None) -> "Mesh":
        """Joins this process to the run's mesh, waiting for every peer (`uform_mesh_bootstrap`).
        ``executor`` must be a VRAM executor (any other kind raises `Error(INVALID_ARGUMENT)`).
        Raises `Error` with CONFIG_MISMATCH when peers disagree, TIMEOUT for absent peers,
        CORRUPT_FILE for a hostile file, UNSUPPORTED without NCCL."""
        _require(executor, Executor, "executor")
        options = MeshOptions() if options is None else options
        _require(options, MeshOptions, "options")
        struct = options.arguments()
        handle = ctypes.c_void_p()
        native = executor._native
        with executor._using():
            status = native.uform_mesh_bootstrap(executor._handle or None, ctypes.byref(struct), ctypes.byref(handle))
            _check(native, status)
            mesh = cls(library=executor.library, address=handle.value, executor=executor)
            executor._meshes.add(mesh)
        return mesh

    @property
    def library(self) -> Library:
        return self._library

    @property
    def executor(self) -> Optional[Executor]:
        """The executor the mesh was bootstrapped over, kept alive by the mesh."""
        return self._executor

    @property
    def address(self) -> int:
        """The opaque `uform_mesh_t` as an integer; `Error(INVALID_ARGUMENT)` once closed."""
        if self._closed:
            raise Error(Status.INVALID_ARGUMENT, "the mesh is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

    def _using(self, allow_closed: bool = False) -> _Using:
        return _Using(self, allow_closed)

    def describe(self) -> MeshDescription:
        """Reports the mesh's shape and this process's place in it (`uform_mesh_describe`)."""
        struct = MeshDescriptionStruct()
        with self._using():
            _check(self._native, self._native.uform_mesh_describe(self._handle, ctypes.byref(struct)))
        return MeshDescription(
            gpus_per_host_domain=struct.gpus_per_host_domain,
            gpus_per_multimem_domain=struct.gpus_per_multimem_domain,
            gpus_per_colocated_domain=struct.gpus_per_colocated_domain,
            host_domain_index=struct.host_domain_index,
            first_gpu_index=struct.first_gpu_index,
            multimem_tier=MultimemTier(struct.multimem_tier),
            gpu_class=GPUClass(struct.gpu_class),
        )

    def all_reduce(
        self, buffers: Sequence, count: Optional[int] = None, dtype=DType.F32, defer: bool = False
    ) -> Optional[Outcome]:
        """Sums ``count`` elements in place across every GPU of the run (`uform_mesh_all_reduce`),
        as a call on the mesh's executor: blocking (returns None), or deferred with ``defer=True``
        (returns an `Outcome`), raising `Error(CONTENDED)` as every call does.

        ``buffers`` holds one buffer per device of this process, in the executor's device order,
        all of one kind:

        - device memory: integer device pointers (``CUdeviceptr``), or objects exposing
          ``__cuda_array_interface__`` (torch CUDA tensors, CuPy arrays), contiguous, writable and
          of ``dtype``'s element type, reduced in place (`uform_mesh_all_reduce`). Producers must
          have finished (e.g. ``torch.cuda.synchronize()``): the engine reduces on its own streams
          and does not wait on the interface's ``stream``;
        - host memory: writable, contiguous objects with the buffer protocol (bytearray,
          array.array, NumPy arrays), staged through each device's scratch and copied back
          (`uform_mesh_all_reduce_host`); with pageable memory even a deferred call has finished
          when it returns.

        ``count=None`` takes the element count of the array objects, which must agree. The buffer
        objects stay alive (and host buffers pinned against resizing) until the call finishes."""
        dtype = _enum(DType, dtype, "dtype")
        if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Iterable):
            raise TypeError(f"buffers must be a sequence of device buffers, not {buffers!r}")
        buffers = list(buffers)
        addresses = []
        sizes = []
        pinned = []
        kinds = set()
        for position, buffer in enumerate(buffers):
            host = None
            if not isinstance(buffer, int) and getattr(buffer, "__cuda_array_interface__", None) is None:
                host = _host_buffer(buffer, position, dtype)
            if host is not None:
                view, elements = host
                pinned.append(view)
                addresses.append(ctypes.addressof(view) if view is not None else 0)
                sizes.append((position, elements))
                kinds.add("host")
                continue
            address, elements = _device_buffer(buffer, position, dtype)
            addresses.append(address)
            kinds.add("device")
            if elements is not None:
                sizes.append((position, elements))
        if len(kinds) > 1:
            raise Error(Status.INVALID_ARGUMENT, "buffers mix host memory and device memory; pass one kind")
        host_memory = kinds == {"host"}
        if count is None:
            if not sizes or len(sizes) != len(buffers):
                raise Error(Status.INVALID_ARGUMENT, "count is required when buffers are raw device pointers")
            count = sizes[0][1]
            for position, elements in sizes:
                if elements != count:
                    raise Error(
                        Status.INVALID_ARGUMENT,
                        f"buffers[{position}] holds {elements} elements, buffers[0] holds {count}",
                    )
        count = _size(count, "count")
        for position, elements in sizes:
            if elements < count:
                raise Error(
                    Status.INVALID_ARGUMENT, f"buffers[{position}] holds {elements} elements, fewer than count={count}"
                )
        record = _Record()
        if host_memory:
            array = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        else:
            array = (ctypes.c_uint64 * max(len(addresses), 1))(*addresses)
        record.keep.extend([array, buffers, pinned])
        native = self._native

        def invoke(_executor_handle, outcome):
            if host_memory:
                return native.uform_mesh_all_reduce_host(self._handle, array, count, dtype, outcome)
            return native.uform_mesh_all_reduce(self._handle, array, count, dtype, outcome)

        with self._using():
            if self._executor is None:
                raise Error(Status.UNSUPPORTED, "all_reduce needs a mesh made by Mesh.bootstrap, which knows its executor")
            return self._executor._submit(record, invoke, defer, owner=self)

    def close(self) -> None:
        """Leaves the mesh (`uform_mesh_free`): waits for the executor's calls on it, releases the
        communicators. Idempotent; `Error(CONTENDED)` while another thread is inside one of its
        verbs."""
        with self._lock:
            if self._closed:
                return
            if self._active:
                raise Error(Status.CONTENDED, "another thread is inside a call on this mesh; close it after")
            self._closed = True
            handle, self._handle = self._handle, 0
        if self._executor is not None:
            self._executor._meshes.discard(self)
        self._native.uform_mesh_free(handle)

    def __repr__(self) -> str:
        return "<Mesh closed>" if self._closed else f"<Mesh 0x{self._handle:x}>"


# endregion Meshes


# Models and encoders (python/uform/models.py), last: they use the classes above.
from .models import Modality, Model, ModelDescription, get_model  # noqa: E402
