"""Who owns a native handle and how it is let go, for `Executor`, `Mesh` and `Model`.

Each of them keeps its handle in a `_Handle` (the handle, the library's functions, a lock, the
count of threads inside one of its verbs) and registers a ``weakref.finalize`` over that state,
never over the Python object itself. So one release function frees the handle exactly once,
whichever comes first:

- ``close()`` (or the end of a ``with`` block) checks that no thread is inside a verb, then calls
  the finalizer, which runs the release and detaches it;
- the garbage collector, when the object becomes unreachable: the finalizer runs then, with only
  the state, which holds no reference back to the object (so a dropped object is never kept alive
  by its own finalizer, and nothing is freed twice: the release takes the handle under the lock);
- interpreter exit: ``weakref.finalize`` calls the finalizers still registered from its ``atexit``
  hook, newest first (a mesh before the executor it was made over), while Python callbacks of
  deferred calls can still run. A verb a thread is still inside then (a daemon thread's, which
  exit does not join) is waited for, as ``uform_executor_free`` drains the deferred calls: freeing
  the handle under it, or leaving it running into the C library's own exit handlers, crashes the
  process (see `_Handle.take`).

A forked child inherits the states and their finalizers, exactly as it inherits the objects: it may
free them (the engine's ``*_free`` releases only host memory there), and every other verb on them
reports FORKED; one a parent's thread was inside a verb on at the fork is left unfreed (leaked)
there. Nothing here runs inside ``__del__``.

One reference does lead back: an executor's state holds the records of its deferred calls until a
drain, a wait, the next call or the release sees them finished, and a record holds the call's
callbacks. A callback that refers to its own executor therefore keeps that executor alive until
then (at the latest until exit), where the cycle collector used to free it earlier.
"""

from __future__ import annotations

import os
import threading

from ._codes import Status
from ._errors import Error


class _Closed:
    """The type of `CLOSED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSED"


CLOSED = _Closed()  # what `_Handle.run` with ``allow_closed`` returns for a closed handle


class _Handle:
    """The native side of one `Executor`, `Mesh` or `Model`: everything its finalizer needs and
    nothing that refers back to the Python object.

    ``active`` counts threads inside a C function on the handle (see `run`), ``closed`` is set
    once ``close`` or the finalizer took the handle, ``leaked`` when a forked child's finalizer
    left it to a parent's call (`take`). An executor's state also holds its pending
    deferred calls (``pending``: the records that keep their callbacks alive until they finish)
    and the states of its meshes (``meshes``), freed before it; a mesh's state names its
    executor's (``parent``)."""

    __slots__ = ("noun", "native", "handle", "lock", "idle", "active", "closed", "leaked", "process", "pending",
                 "meshes", "parent", "__weakref__")

    def __init__(self, noun: str, native, handle: int, *, closed: bool = False):
        self.noun = noun
        self.native = native
        self.handle = handle
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)  # notified when ``active`` drops to 0
        self.active = 0
        self.closed = closed
        self.leaked = False
        self.process = os.getpid()
        self.pending: list = []
        self.meshes: set = set()
        self.parent = None

    def take(self) -> int:
        """Marks the state closed, so no verb starts on it, and returns its handle, once; 0 on every
        later call. A verb still running on it is waited for first (the lock released meanwhile),
        so the handle is never freed under a call. Only the release at interpreter exit meets one:
        a daemon thread's, since ``close`` refuses and a running verb keeps its object reachable.
        In a forked child such a count is a parent's thread's, which will never finish here: the
        handle is left (``leaked``) instead, and 0 returned."""
        with self.lock:
            self.closed = True
            if self.active and self.process != os.getpid():
                self.leaked = True
            while self.active and not self.leaked:
                self.idle.wait(0.1)  # in slices: `run` leaves ``active`` without a notify if interrupted
            if self.leaked:
                return 0
            handle, self.handle = self.handle, 0
        return handle

    def run(self, function, *args, allow_closed: bool = False):
        """Returns ``function(*args)`` with this thread counted in ``active`` meanwhile, so `close`
        from another thread refuses (CONTENDED) and the release at exit (`take`) waits for it
        instead of freeing the handle under it: every Python call into a C function on an
        executor, mesh or model runs inside one. A closed handle raises `Error(INVALID_ARGUMENT)`
        "the <noun> is closed", or with ``allow_closed`` returns `CLOSED`, ``function`` not called.
        Nesting is fine (a model's encode runs its executor's inside its own).

        Interrupt-safe: an exception a Python signal handler raises (KeyboardInterrupt) never
        leaves the count behind. CPython runs handlers only at a function's entry, after a call to
        a C function returns, at a backward jump, and inside a blocked lock acquire (which then
        gives up without the lock); never between the loads, stores and arithmetic below, nor in
        ``with``'s entry once the lock is taken. So the count and the flag saying this frame took
        it (``counted``) change together, in this one frame, with no such point between them; the
        ``finally`` gives it back (before anything it calls) whatever ``function`` raised or was
        interrupted by. A context manager could not: its ``__exit__`` is entered through a check.
        Where the ``finally``'s acquire itself is interrupted (the lock was busy), the count is
        given back without the lock, which under the GIL is one indivisible step (no check point
        inside ``-=``), and `take` finds it by waiting in slices rather than by a notify."""
        counted = False
        try:
            with self.lock:
                if self.closed:
                    if allow_closed:
                        return CLOSED
                    raise Error(Status.INVALID_ARGUMENT, f"the {self.noun} is closed")
                self.active += 1
                counted = True  # no check point since the line above
            return function(*args)
        finally:
            if counted:
                try:
                    with self.lock:  # interrupted only before it holds the lock
                        self.active -= 1
                        counted = False
                        if not self.active:
                            self.idle.notify_all()
                finally:
                    if counted:
                        self.active -= 1


class _Owner:
    """What `Executor`, `Mesh` and `Model` share as owners of a `_Handle` in ``self._state``, made
    with ``self._library``: the handle's properties and ``with`` support (the block's end calls
    ``close``); their verbs call into C through ``self._state.run``. Freeing at garbage collection
    and at exit is their ``weakref.finalize``."""

    _state: _Handle

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Frees the handle; each owner defines it."""
        raise NotImplementedError

    @property
    def library(self):
        """The loaded engine the handle was made with, kept so the shared object stays mapped while
        the handle lives."""
        return self._library

    def _close_state(self) -> bool:
        """Marks the handle closed, so no verb starts on it: False when it already was, and
        `Error(CONTENDED)`, changing nothing, while another thread is inside a verb on it. The
        caller then runs the finalizer, which frees it once."""
        state = self._state
        with state.lock:
            if state.closed:
                return False
            if state.active:
                raise Error(Status.CONTENDED, f"another thread is inside a call on this {state.noun}; close it after")
            state.closed = True
        return True

    @property
    def address(self) -> int:
        """The opaque handle (`uform_executor_t`, `uform_mesh_t`, `uform_model_t`) as an integer;
        `NULL_ADDRESS` for the inline executor. Raises `Error(INVALID_ARGUMENT)` once closed, so it
        never hands out a dangling pointer."""
        if self._closed:
            raise Error(Status.INVALID_ARGUMENT, f"the {self._state.noun} is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether `close` ran (for a mesh also its executor's close), or the release at exit."""
        return self._state.closed

    @property
    def _handle(self) -> int:
        return self._state.handle

    @property
    def _closed(self) -> bool:
        return self._state.closed


def _release_mesh(state: _Handle) -> None:
    """The finalizer of a `Mesh`: `uform_mesh_free`, once."""
    handle = state.take()
    parent = state.parent
    if parent is not None:
        with parent.lock:
            parent.meshes.discard(state)
    if handle:
        state.native.uform_mesh_free(handle)


def _release_executor(state: _Handle) -> None:
    """The finalizer of an `Executor`: frees the meshes made over it that are not freed yet (a
    mesh's finalizer may run after its executor's when both die in one garbage cycle), then
    `uform_executor_free`, which drains every call, so each pending outcome is final; its
    executor is gone, so the record reads the struct itself rather than `uform_outcome_poll`.
    An executor left to a parent's call in a forked child is left whole, meshes and pending
    calls included."""
    handle = state.take()
    if state.leaked:
        return
    for mesh in list(state.meshes):
        _release_mesh(mesh)
    if handle:
        state.native.uform_executor_free(handle)
    with state.lock:
        pending, state.pending = state.pending, []
    for record in pending:
        if not record.settled:
            finished = record.outcome.finished
            record.settle(record.outcome.status if finished else Status.PENDING)


def _release_model(state: _Handle) -> None:
    """The finalizer of a `Model`: `uform_model_free` (through ``state.native``, the model
    functions), once, after any call still using it (see `_Handle.take`)."""
    handle = state.take()
    if handle:
        state.native["uform_model_free"](handle)
