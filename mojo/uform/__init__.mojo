"""UForm for Mojo: executors, meshes and hardware classes over the C engine, `libuform`.

`from uform import Library, Executor, RamOptions, VramOptions, Mood, ...`

Every type here wraps a C twin it names (`uform_executor_t`, `uform_mesh_t`, `uform_cpu_class_t`,
...) and every method calls the C function its docstring names.
"""

from .errors import Status, Error
from .classes import CPUClass, GPUClass, GPUVendor, MultimemTier, Mood, Schedule, ExecutorKind
from .library import Library, GPUDevice, Address, NULL_ADDRESS, ABI_MAJOR, LIBRARY_VARIABLE
from .options import RamOptions, VramOptions, RamOptionsArguments, VramOptionsArguments
from .executor import (
    Executor,
    ExecutorDescription,
    Outcome,
    TaskFunction,
    ContextTaskFunction,
    DEFERRED_LIMIT_DEFAULT,
)
from .mesh import Mesh, MeshOptions, MeshDescription
