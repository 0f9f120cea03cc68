"""What the binding's tests share: the loaded engine, the C helpers, and hardware facts.

Run from the repository root after building libuform:

    UFORM_LIBRARY=build/libuform.so PYTHONPATH=python python -m unittest discover -s python/tests -v

ctest sets the same variables (see test/CMakeLists.txt), plus $UFORM_TEST_HELPERS, the helpers
module it built from tests/helpers.c; without it the helpers are compiled here with `cc`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import uform

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(os.path.dirname(HERE))


@functools.lru_cache(maxsize=None)
def library() -> uform.Library:
    """The engine under test; raises `uform.Error` (naming where it looked) if it cannot load."""
    return uform.Library()


class Layout(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_char_p),
        ("field", ctypes.c_char_p),
        ("size", ctypes.c_size_t),
        ("offset_or_alignment", ctypes.c_size_t),
    ]


class Constant(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_longlong)]


_compiled_directory = None


@functools.lru_cache(maxsize=None)
def helpers():
    """The C helpers of tests/helpers.c as a `ctypes.CDLL`, or None (the caller skips) when
    neither $UFORM_TEST_HELPERS nor a C compiler is available."""
    global _compiled_directory
    path = os.environ.get("UFORM_TEST_HELPERS")
    if not path:
        compiler = shutil.which(os.environ.get("CC", "cc"))
        if compiler is None:
            return None
        _compiled_directory = tempfile.mkdtemp(prefix="uform-python-helpers-")
        path = os.path.join(_compiled_directory, "helpers.so")
        command = [
            compiler, "-std=gnu17", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
            "-I", os.path.join(REPOSITORY, "include"), "-I", os.path.join(REPOSITORY, "src"),  # as test/CMakeLists.txt
            os.path.join(HERE, "helpers.c"), "-o", path,
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling the test helpers failed: {' '.join(command)}\n{result.stderr}")
    dll = ctypes.CDLL(path)
    dll.uform_python_test_layouts.restype = ctypes.c_size_t
    dll.uform_python_test_layouts.argtypes = [ctypes.POINTER(ctypes.POINTER(Layout))]
    dll.uform_python_test_constants.restype = ctypes.c_size_t
    dll.uform_python_test_constants.argtypes = [ctypes.POINTER(ctypes.POINTER(Constant))]
    return dll


def require_helpers(test: unittest.TestCase):
    dll = helpers()
    if dll is None:
        test.skipTest("no C compiler and no $UFORM_TEST_HELPERS: the raw C callback helpers are unavailable")
    return dll


def layouts() -> list:
    dll = helpers()
    pointer = ctypes.POINTER(Layout)()
    count = dll.uform_python_test_layouts(ctypes.byref(pointer))
    return [(pointer[i].type.decode(), pointer[i].field.decode() if pointer[i].field else None,
             pointer[i].size, pointer[i].offset_or_alignment) for i in range(count)]


def constants() -> dict:
    dll = helpers()
    pointer = ctypes.POINTER(Constant)()
    count = dll.uform_python_test_constants(ctypes.byref(pointer))
    return {pointer[i].name.decode(): pointer[i].value for i in range(count)}


def allowed_cores() -> int:
    """Cores of every memory domain the process may run on."""
    return sum(domain.cores_count for domain in library().memory_domains)


def gpu_devices() -> list:
    """The engine's GPUs, or [] when the library was built without the GPU part."""
    try:
        return list(library().gpu_devices)
    except uform.Error:
        return []


def skip_without_gpu(test: unittest.TestCase) -> list:
    """The GPUs, or a skip naming why there are none; a failure instead when $UFORM_TEST_REQUIRE_GPU
    is 1 (ctest sets it where it provides the fake driver, so the GPU tests cannot pass vacuously)."""
    devices = gpu_devices()
    if not devices:
        reason = "no GPU"
        try:
            library().gpu_status()
        except uform.Error as error:
            reason = error.message if error.message.lower().startswith("no ") else f"no GPU: {error.message}"
        if os.environ.get("UFORM_TEST_REQUIRE_GPU") == "1":
            test.fail(f"$UFORM_TEST_REQUIRE_GPU is set, yet {reason}")
        test.skipTest(reason)
    return devices


def fork_union_in_process() -> bool:
    """Whether ForkUnion's C ABI is visible in the process, in which case a fake pool address
    would be dereferenced: the tests then do not pass one."""
    process = ctypes.CDLL(None)
    return any(hasattr(process, name) for name in ("fu_pool_count_threads", "fu_pool_for_threads"))


def thread_count() -> int:
    """OS threads of this process right now."""
    return len(os.listdir("/proc/self/task"))


def thread_count_settled(expected: int, seconds: float = 30.0) -> int:
    """OS threads of this process once they number `expected`, or after `seconds` (a hang detector,
    not a timing): a joined thread can still be listed in /proc/self/task for a moment, since the
    kernel wakes its joiner before it removes the thread (a loaded machine can stretch that)."""
    deadline = time.monotonic() + seconds
    count = thread_count()
    while count != expected and time.monotonic() < deadline:
        time.sleep(0.001)
        count = thread_count()
    return count


class Collector:
    """Collects (task, thread, domain, ident) tuples from callbacks running on engine threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def __call__(self, task, thread, domain):
        with self.lock:
            self.items.append((task, thread, domain, threading.get_ident()))

    @property
    def tasks(self) -> list:
        return sorted(item[0] for item in self.items)

    @property
    def threads(self) -> set:
        return {item[1] for item in self.items}


@contextlib.contextmanager
def held_inside(model: uform.Model, function: str):
    """Until the block ends, a call of ``model``'s C function ``function`` (a key of its function
    table, shared by the library's models) from any thread waits just before it runs; yields an
    event set once a call waits there."""
    functions = model._functions
    real = functions[function]
    entered, release = threading.Event(), threading.Event()

    def held(*arguments):
        entered.set()
        release.wait(60)
        return real(*arguments)

    functions[function] = held
    try:
        yield entered
    finally:
        release.set()
        functions[function] = real


def close_during(model: uform.Model, function: str, verb) -> tuple:
    """Runs ``verb()`` on another thread, held inside ``model``'s C ``function`` while this thread
    calls ``model.close()``; returns (what ``close`` raised, or None; what ``verb`` returned or
    raised)."""
    outcome = []

    def run():
        try:
            outcome.append(verb())
        except BaseException as error:  # noqa: B036 - handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run)
    with held_inside(model, function) as entered:
        thread.start()
        if not entered.wait(60):
            raise AssertionError(f"{function} was never called")
        try:
            model.close()
            refusal = None
        except uform.Error as error:
            refusal = error
    thread.join(60)
    return refusal, outcome[0] if outcome else None


def side_config_directory(source: str, edits: dict, target: str) -> str:
    """A copy of the model directory ``source`` at ``target`` (symlinks) with JSON files edited:
    ``edits`` maps a file name (``"1_Pooling/config.json"`` reaches into a folder; a name ``source``
    lacks starts from ``{}``) to None (left out) or to keys to set (a value of None removes the key;
    "a.b" reaches into the object "a", "0.type" into a list's first item). The special key
    ``"transformer_folder"`` moves the Transformer module's files (all but modules.json, the Pooling
    folder and config_sentence_transformers.json) into that folder, as sentence-transformers before 1.0
    saved them. For test/encode/make_side_configs.py and its test."""
    import json

    source = os.path.abspath(source)
    edits = dict(edits)
    folder = edits.pop("transformer_folder", None)
    at_root = {"modules.json", "1_Pooling", "config_sentence_transformers.json"}

    def place_of(name: str) -> str:
        top = name.split("/")[0]
        return target if folder is None or top in at_root else os.path.join(target, folder)

    os.makedirs(target)
    edited_folders = {name.split("/")[0] for name in edits if "/" in name}
    for name in os.listdir(source):
        where = place_of(name)
        os.makedirs(where, exist_ok=True)
        if name in edited_folders:  # a real folder of links, so an edit never writes through to source
            os.makedirs(os.path.join(where, name))
            for inner in os.listdir(os.path.join(source, name)):
                if f"{name}/{inner}" not in edits:
                    os.symlink(os.path.join(source, name, inner), os.path.join(where, name, inner))
        elif name not in edits:
            os.symlink(os.path.join(source, name), os.path.join(where, name))
    for name, keys in edits.items():
        if keys is None:
            continue
        document = {}
        if os.path.exists(os.path.join(source, name)):
            with open(os.path.join(source, name), encoding="utf-8") as file:
                document = json.load(file)
        for key, value in keys.items():
            *parents, leaf = key.split(".")
            place = document
            for parent in parents:
                place = place[int(parent)] if isinstance(place, list) else place[parent]
            leaf = int(leaf) if isinstance(place, list) else leaf
            if value is None:
                place.pop(leaf, None)
            else:
                place[leaf] = value
        path = os.path.join(place_of(name), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(document, file, ensure_ascii=False)
    return target
