"""`Mesh`: one process's place among the processes of a run (``uform_mesh_t``), and the
all-reduce over its devices, with the checks that turn Python buffers (device pointers,
``__cuda_array_interface__`` objects, host buffers) into what the engine reads. Mirrors
``src/mesh.c``."""

from __future__ import annotations

import ctypes
import weakref
from typing import Iterable, Optional, Sequence

from ._arguments import _address, _require, _size
from ._calls import Outcome, _Record
from ._codes import DType, GPUClass, MultimemTier, Status, _enum
from ._errors import Error, _check
from ._executor import Executor
from ._hardware import Library
from ._lifetime import _Handle, _Owner, _release_mesh
from ._native import MeshDescriptionStruct
from ._options import MeshDescription, MeshOptions

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


class Mesh(_Owner):
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
        handle = _address(address, "address")
        self._state = _Handle("mesh", library._native, handle, closed=not handle)
        self._executor = executor
        # Frees the handle once: at `close`, when garbage-collected, or at interpreter exit
        # (before its executor: finalizers made later run first, and the executor frees the
        # states of its meshes first in any case).
        self._finalizer = weakref.finalize(self, _release_mesh, self._state) if handle else None
        if executor is not None and handle:
            self._state.parent = executor._state
            with executor._state.lock:
                executor._state.meshes.add(self._state)
            executor._meshes.add(self)

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

        def bootstrap() -> "Mesh":
            status = native.uform_mesh_bootstrap(executor._handle or None, ctypes.byref(struct), ctypes.byref(handle))
            _check(native, status)
            return cls(library=executor.library, address=handle.value, executor=executor)

        return executor._state.run(bootstrap)

    @property
    def executor(self) -> Optional[Executor]:
        """The executor the mesh was bootstrapped over, kept alive by the mesh."""
        return self._executor

    def describe(self) -> MeshDescription:
        """Reports the mesh's shape and this process's place in it (`uform_mesh_describe`)."""
        struct = MeshDescriptionStruct()
        self._state.run(lambda: _check(
            self._native, self._native.uform_mesh_describe(self._handle, ctypes.byref(struct))))
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

        def submit():
            if self._executor is None:
                raise Error(Status.UNSUPPORTED, "all_reduce needs a mesh made by Mesh.bootstrap, which knows its executor")
            return self._executor._submit(record, invoke, defer, owner=self)

        return self._state.run(submit)

    def close(self) -> None:
        """Leaves the mesh (`uform_mesh_free`): waits for the executor's calls on it, releases the
        communicators. Idempotent; `Error(CONTENDED)` while another thread is inside one of its
        verbs. Without `close`, the same happens when the mesh is garbage-collected or at exit."""
        if not self._close_state():
            return
        if self._executor is not None:
            self._executor._meshes.discard(self)
        if self._finalizer is not None:
            self._finalizer()  # `_release_mesh`, once

    def __repr__(self) -> str:
        return "<Mesh closed>" if self._closed else f"<Mesh 0x{self._handle:x}>"
