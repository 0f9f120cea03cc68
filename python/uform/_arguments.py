"""Python values to the C types of the ABI: sizes, addresses, int32 arrays, checked before the
engine is called, so a value C cannot carry raises `Error(INVALID_ARGUMENT)` naming it and a
Python type mistake raises `TypeError`. Also the report of an exception nobody waited for."""

from __future__ import annotations

import ctypes
import operator
import sys
import traceback
from typing import Iterable

from ._codes import Status
from ._errors import Error

#: The address of the NULL executor: `Executor(library)` runs every call inline.
NULL_ADDRESS = 0

#: `UFORM_DEFERRED_LIMIT_DEFAULT`: what `deferred_limit=0` takes.
DEFERRED_LIMIT_DEFAULT = 1024

_SIZE_MAX = 2**64 - 1


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


def _require(value, cls, name: str) -> None:
    """TypeError unless ``value`` is a ``cls`` (a binding class such as `RamOptions`)."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a uform.{cls.__name__}, not {value!r}")


def _report_unretrieved(error: BaseException) -> None:
    """Prints an exception of a deferred call nobody waited for, as asyncio does for tasks."""
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        sys.stderr.write("uform: a deferred call's callback raised, and its Outcome was never waited for:\n" + text)
    except Exception:  # pragma: no cover - interpreter shutting down
        pass
