"""`Executor`: the threads or streams a verb runs on (``uform_executor_t``), its factories, its
verbs (`Executor.call`, `for_n`, `for_threads`, `drain`, ...) and its lifetime. Mirrors
``src/executor.c``; the calls it submits are in `uform._calls`, its handle's release in
`uform._lifetime`."""

from __future__ import annotations

import ctypes
import weakref
from typing import Optional

from ._arguments import NULL_ADDRESS, _address, _require, _size
from ._calls import Outcome, _context_address, _device_thunk, _Record, _running_callbacks, _task_thunk
from ._codes import CPUClass, ExecutorKind, GPUClass, Mood, Residency, Schedule, Status, _enum
from ._errors import Error, _check, _message
from ._hardware import Library
from ._lifetime import CLOSED, _Handle, _Owner, _release_executor
from ._native import UNSUBMITTED, CallStruct, ExecutorDescriptionStruct, OutcomeStruct
from ._options import ExecutorDescription, RamOptions, VramOptions


class Executor(_Owner):
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
        self._state = _Handle("executor", library._native, _address(address, "address"))
        self._meshes: weakref.WeakSet = weakref.WeakSet()  # the live `Mesh` objects made over it
        # Frees the handle once: at `close`, when garbage-collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _release_executor, self._state) if self._state.handle else None

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
    def _pending(self) -> list:
        """The deferred calls not yet seen finished, whose records keep their callbacks alive."""
        return self._state.pending

    # Verbs

    def drain(self, mood=Mood.PARKED) -> None:
        """Waits for every call submitted before it, then idle workers adopt ``mood``
        (`uform_executor_drain`). Raises `Error` only for the executor's own failure (a device
        fault, a fork), never a drained call's, which its `Outcome` reports; CONTENDED from
        inside one of its own callbacks."""
        mood = _enum(Mood, mood, "mood")
        self._state.run(lambda: _check(self._native, self._native.uform_executor_drain(self._handle or None, mood)))
        self._prune()

    def describe(self) -> ExecutorDescription:
        """`uform_executor_describe`; the inline executor describes as INLINE with one thread."""
        struct = ExecutorDescriptionStruct()
        self._state.run(lambda: _check(
            self._native, self._native.uform_executor_describe(self._handle or None, ctypes.byref(struct))))
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

        def place():
            status = self._native.uform_executor_thread_placement(
                self._handle or None, _size(thread, "thread"), ctypes.byref(core), ctypes.byref(node)
            )
            _check(self._native, status)

        self._state.run(place)
        return core.value, node.value

    def scratch_bytes(self, device_index: int) -> int:
        """Bytes a VRAM executor holds on its device ``device_index``."""
        result = ctypes.c_size_t()

        def measure():
            status = self._native.uform_executor_scratch_bytes(
                self._handle or None, _size(device_index, "device_index"), ctypes.byref(result)
            )
            _check(self._native, status)

        self._state.run(measure)
        return result.value

    def scratch_release(self) -> None:
        """Waits for the executor's calls, then frees its scratch on every device."""
        self._state.run(lambda: _check(self._native, self._native.uform_executor_scratch_release(self._handle or None)))

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
        task_thunk = _task_thunk(task, record, self._state)
        if task_thunk is not None:
            struct.task = task_thunk
        device_thunk = _device_thunk(device, record, self._state)
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

        def blocking():
            status = invoke(self._handle or None, None)
            return status, (_message(native) if status != 0 else "")

        def deferred():
            # Held before the engine sees the outcome, so an interrupt between the engine's accepting
            # the call and anything after it never drops the record the engine still writes into
            # (and calls back through). Until the engine writes it, the outcome says UNSUBMITTED and
            # `_prune` leaves it (another thread may be submitting it); one an interrupt kept from the
            # engine is let go at close.
            with self._state.lock:
                self._state.pending.append(record)
            status = invoke(self._handle or None, ctypes.byref(record.outcome))
            message = _message(native) if status != 0 else ""
            if status != 0:
                with self._state.lock:
                    self._state.pending = [held for held in self._state.pending if held is not record]
            return status, message

        if not defer:
            status, message = self._state.run(blocking)
            record.keep = []
            if record.error is not None:
                raise record.error
            if status != 0:
                raise Error(status, message)
            return None
        self._prune()
        record.outcome = OutcomeStruct(status=UNSUBMITTED)
        status, message = self._state.run(deferred)
        if status != 0:
            record.keep = []
            raise Error(status, message)
        return Outcome(owner, self, record)

    def _prune(self) -> None:
        """Settles and forgets finished deferred calls, releasing their callbacks and buffers."""
        state = self._state
        with state.lock:
            pending = list(state.pending)
        if not pending:
            return

        def poll() -> list:
            finished = []
            for record in pending:
                if not record.settled and not record.outcome.finished and record.outcome.status == UNSUBMITTED:
                    continue  # being submitted by another thread, or kept from the engine by an interrupt: kept until close
                if not record.settled:
                    status = self._native.uform_outcome_poll(ctypes.byref(record.outcome))
                    if status == Status.PENDING:
                        continue
                    record.settle(status)
                finished.append(record)
            return finished

        finished = self._state.run(poll, allow_closed=True)
        if finished is CLOSED:
            return
        if finished:
            with state.lock:
                done = {id(record) for record in finished}
                state.pending = [record for record in state.pending if id(record) not in done]

    # Lifetime

    def close(self) -> None:
        """Frees the executor (`uform_executor_free`): closes its meshes first, drains, joins its
        threads. Idempotent; the inline executor has nothing to free. Raises `Error(CONTENDED)`
        from inside one of its own callbacks or while another thread is inside one of its verbs.
        Without `close`, the same happens when the executor is garbage-collected or at exit."""
        state = self._state
        if state.closed:
            return
        if state in _running_callbacks():
            raise Error(Status.CONTENDED, "an executor cannot be closed from inside one of its own callbacks")
        busy = Error(Status.CONTENDED, "another thread is inside a call on this executor; close it after")
        with state.lock:
            if state.active:
                raise busy
        for mesh in list(self._meshes):  # meshes first: each must be freed before its executor
            mesh.close()
        with state.lock:
            if state.active:
                raise busy
            state.closed = True
        if self._finalizer is not None:
            self._finalizer()  # `_release_executor`, once: frees, then settles every pending call

    def __repr__(self) -> str:
        if self._closed:
            return "<Executor closed>"
        if not self._handle:
            return "<Executor inline>"
        return f"<Executor 0x{self._handle:x}>"
