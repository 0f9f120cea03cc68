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
one kind. Misuse of Python types (a string where a number belongs, a callback that is not
callable) raises the usual ``TypeError``.

The package is split by concept like ``src/``, and every public name is re-exported here (import
them from ``uform``; the modules are private):

- ``_codes``: the enumerations (`Status`, `CPUClass`, `Mood`, ...);
- ``_errors``: `Error` and its subclass per kind;
- ``_native``: the library's loading and its C layouts;
- ``_arguments``: Python values to C types, checked;
- ``_hardware``: `Library`, `MemoryDomain`, `GPUDevice`;
- ``_options``: `RamOptions`, `VramOptions`, `MeshOptions` and the descriptions;
- ``_calls``: callbacks, `DeviceSlot`, `Outcome`;
- ``_lifetime``: how executors, meshes and models free their handles (``weakref.finalize``);
- ``_executor``: `Executor`; ``_mesh``: `Mesh`; ``models``: `Model`, `get_model` and the encoders;
- ``_inputs``: the model verbs' texts, images and paths as C reads them, checked.
"""

from __future__ import annotations

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
from ._native import (  # noqa: F401 - the C layouts, importable from here as before the split
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


from ._arguments import (  # noqa: E402 - re-exported
    DEFERRED_LIMIT_DEFAULT,
    NULL_ADDRESS,
    _address,
    _int32_array,
    _report_unretrieved,
    _require,
    _size,
)
from ._calls import DeviceSlot, Outcome, _Record, _running_callbacks  # noqa: E402
from ._executor import Executor  # noqa: E402
from ._hardware import GPUDevice, Library, MemoryDomain  # noqa: E402
from ._mesh import Mesh  # noqa: E402
from ._options import ExecutorDescription, MeshDescription, MeshOptions, RamOptions, VramOptions  # noqa: E402

# Models and encoders (python/uform/models.py), last: they use the classes above.
from .models import Modality, Model, ModelDescription, get_model  # noqa: E402


def _public_module() -> None:
    """Names every public class by ``uform``, where users import it from, as before the split:
    ``repr``, ``help`` and pickles say ``uform.Executor``, not the private module it lives in."""
    split = {f"{__name__}.{module}" for module in ("_arguments", "_calls", "_executor", "_hardware", "_mesh", "_options")}
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and value.__module__ in split:
            value.__module__ = __name__


_public_module()
