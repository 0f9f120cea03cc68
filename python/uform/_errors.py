"""The engine's failures as Python exceptions: `Error`, the base every failure is an instance of,
and one subclass per `Status`, so a caller can catch a kind (``except uform.TimeoutError``) or all
(``except uform.Error``). Constructing ``Error(kind, message)`` gives the subclass of ``kind``;
subclasses also derive from the built-in exception of the same meaning where one exists
(`InvalidArgumentError` is a `ValueError`, `TimeoutError` the built-in `TimeoutError`). Every class pickles to itself. Re-exported by `uform`."""

from __future__ import annotations

import builtins

from . import _native
from ._codes import Status


class Error(Exception):
    """Every failure the engine reports: ``kind`` is the `Status`, ``message`` the engine's
    sentence (read with `uform_error_message` on the failing thread right after the call, or from
    the outcome of a deferred call). ``Error(kind, message)`` is an instance of the subclass for
    ``kind`` (`Error` itself for a status without one)."""

    _by_status: dict = {}

    def __new__(cls, kind, message: str = ""):
        kind = Status(int(kind))
        if cls is Error:
            cls = Error._by_status.get(kind, Error)
        return super().__new__(cls, kind, message)

    def __init__(self, kind, message: str = ""):
        """``kind`` a `Status` (or its value), ``message`` the sentence naming the bad value."""
        kind = Status(int(kind))
        super().__init__(kind, message)
        self.kind = kind
        self.message = message

    __module__ = "uform"

    def __reduce__(self):
        return (type(self), (self.kind, self.message))

    def __str__(self) -> str:
        return f"{self.kind.name}: {self.message}" if self.message else self.kind.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!s}, {self.message!r})"


def _kind(status: Status):
    """Declares the subclass of `Error` raised for `status`."""

    def declare(cls):
        Error._by_status[status] = cls
        cls.status = status
        cls.__module__ = "uform"  # named, printed and pickled as `uform.<Name>`, its public home
        return cls

    return declare


@_kind(Status.CONTENDED)
class ContendedError(Error):
    """CONTENDED: the executor is busy with another caller's call (the gate was taken)."""


@_kind(Status.UNSUPPORTED)
class UnsupportedError(Error):
    """UNSUPPORTED: this build, machine or library cannot do it (no CUDA, no NCCL, no such symbol)."""


@_kind(Status.CONFIG_MISMATCH)
class ConfigMismatchError(Error):
    """CONFIG_MISMATCH: peers or options disagree."""


@_kind(Status.INVALID_ARGUMENT)
class InvalidArgumentError(Error, ValueError):
    """INVALID_ARGUMENT: a bad value, named in the message. Also a `ValueError`."""


@_kind(Status.OUT_OF_MEMORY)
class OutOfMemoryError(Error):
    """OUT_OF_MEMORY: host or device memory ran out (not a `MemoryError`, which CPython reserves
    for its own allocator)."""


@_kind(Status.SYSTEM_ERROR)
class SystemCallError(Error):
    """SYSTEM_ERROR: an operating-system call failed (named with its errno in the message)."""


@_kind(Status.TIMEOUT)
class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - the built-in's meaning, by kind
    """TIMEOUT: a bounded wait ran out. Also the built-in `TimeoutError`."""


@_kind(Status.DEVICE_FAULT)
class DeviceFaultError(Error):
    """DEVICE_FAULT: the GPU or its driver failed; the executor is no longer usable."""


@_kind(Status.DEFERRED_FULL)
class DeferredFullError(Error):
    """DEFERRED_FULL: the executor's ring of deferred calls is full; drain it first."""


@_kind(Status.FORKED)
class ForkedError(Error):
    """FORKED: the object was made before this process forked and cannot be used in the child."""


@_kind(Status.RESIDENCY_MISMATCH)
class ResidencyMismatchError(Error):
    """RESIDENCY_MISMATCH: a buffer lives where the executor cannot reach it."""


@_kind(Status.LIMIT_EXCEEDED)
class LimitExceededError(Error):
    """LIMIT_EXCEEDED: a size or count above what the engine supports."""


@_kind(Status.PEER_LOST)
class PeerLostError(Error):
    """PEER_LOST: a peer process of a mesh died or stopped answering."""


@_kind(Status.CORRUPT_FILE)
class CorruptFileError(Error):
    """CORRUPT_FILE: a file (weights, a rendezvous record) is malformed."""


@_kind(Status.PENDING)
class PendingError(Error):
    """PENDING: the outcome of a deferred call is not known yet."""


ERRORS = tuple(sorted(Error._by_status.values(), key=lambda cls: int(cls.status)))

_native.missing_error = lambda message: Error(Status.UNSUPPORTED, message)


def _message(native) -> str:
    raw = native.uform_error_message()
    return raw.decode("utf-8", errors="replace") if raw else ""


def _check(native, status: int) -> None:
    """Raises the `Error` subclass for a failing status, reading the message on this thread at once."""
    if status != 0:
        raise Error(status, _message(native))
