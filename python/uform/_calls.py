"""One call's life in the binding: the C callbacks a call hands the engine (trampolines into
Python callables, or raw C function pointers), the `_Record` that keeps them alive until the
engine is done, `DeviceSlot` for device callbacks, and the `Outcome` of a deferred call.
Mirrors ``src/`` 's call and outcome code."""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from typing import Optional

from ._arguments import _address, _report_unretrieved, _size
from ._codes import GPUClass, Kernel, Status, _enum
from ._errors import Error, _check, _message
from ._lifetime import CLOSED, _Handle
from ._native import DeviceCallback, OutcomeStruct, TaskCallback


_local = threading.local()


def _running_callbacks() -> list:
    """The states (`_Handle`) of the executors whose Python callback this thread is inside,
    innermost last: a trampoline refers to its executor's state, never to the `Executor`, so a
    pending call does not keep a dropped executor alive."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class DeviceSlot:
    """What a device callback is handed for one device of a VRAM executor (`uform_device_slot_t`),
    valid only while the callback runs."""

    __slots__ = ("device_index", "ordinal", "gpu_class", "stream", "cu_context", "scratch", "scratch_bytes", "_pointer", "_native")

    def __init__(self, pointer, native):
        """Reads the engine's `uform_device_slot_t` at ``pointer``; the trampoline makes one."""
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


def _task_thunk(task, record: _Record, executor: _Handle):
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


def _device_thunk(device, record: _Record, executor: _Handle):
    """The `uform_device_callback_t` for `device`, as `_task_thunk`; the Python callable receives a
    `DeviceSlot` and returns None, or raises (`Error` passes its kind to the engine)."""
    native = _native_callback(device, record, "device", DeviceCallback)
    if native is not _PYTHON_CALLABLE:
        return native
    native = executor.native

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

    def __init__(self, owner, executor, record: _Record):
        """Made by `Executor.call` and `Mesh.all_reduce` with ``defer=True``; ``owner`` is the
        executor or mesh the call was made on, ``executor`` the `Executor` that runs it."""
        self._owner = owner
        self._executor = executor
        self._record = record
        weakref.finalize(self, _drop_outcome, record)

    def _poll(self, timeout: Optional[float]) -> bool:
        """Waits up to `timeout` (None: forever, 0: not at all); True once settled."""
        record = self._record
        if record.settled:
            return True
        state = self._executor._state
        native = state.native

        def poll() -> bool:
            pointer = ctypes.byref(record.outcome)
            if timeout is not None and timeout <= 0:
                status = native.uform_outcome_poll(pointer)
            else:
                # Wait in slices so Ctrl-C and other signal handlers still run in between.
                deadline = None if timeout is None else time.monotonic() + timeout
                while True:
                    slice_ = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                    status = native.uform_outcome_wait(pointer, slice_)
                    if status == Status.CONTENDED:
                        # Waiting from inside the ForkUnion pool the call needs, or from a task of
                        # the call's own host executor, which runs it only after that task: it is still pending
                        # (its buffers stay with the executor), so raise without settling it. (A call
                        # refused with CONTENDED has finished: it settles below.)
                        message = _message(native)
                        if native.uform_outcome_poll(pointer) == Status.PENDING:
                            raise Error(status, message)
                    if status != Status.PENDING or (deadline is not None and time.monotonic() >= deadline):
                        break
            if status == Status.PENDING:
                return False
            record.settle(status)
            return True

        settled = state.run(poll, allow_closed=True)
        if settled is CLOSED:
            return record.settled  # closed: `Executor.close` settled every record
        return settled

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

    def __repr__(self) -> str:
        state = self._record.status if self._record.settled else Status.PENDING
        return f"<Outcome {state!s}>"


def _drop_outcome(record: _Record) -> None:
    """The finalizer of an `Outcome` nobody holds any more: a settled call's exception that was
    never retrieved is printed now; an unsettled call is marked orphaned, so whoever settles it
    (a drain, the next call, the executor's release) prints its exception then."""
    with record.lock:
        report = record.settled and record.error is not None and not record.retrieved
        if report:
            record.retrieved = True
        elif not record.settled:
            record.orphaned = True
    if report:
        _report_unretrieved(record.error)
