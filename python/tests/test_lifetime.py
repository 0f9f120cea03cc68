"""Lifetimes of the handles the binding owns (executors, meshes, models, outcomes): freed exactly once,
by `close()`, by a ``with`` block, when garbage-collected, or at interpreter exit, through
``weakref.finalize`` (uform/_lifetime.py). Each test counts the native frees by wrapping the
library's ``uform_*_free`` functions, and checks the engine's own behaviour where it shows (a free
drains, so a dropped executor's pending calls have run)."""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import textwrap
import threading
import unittest

import uform
from uform import Error, Executor, Mesh, MeshOptions, RamOptions, Status, VramOptions

import _support
from _support import Collector

WAIT = 30.0


@contextlib.contextmanager
def counting_frees(native, *names):
    """Replaces each ``native.<name>`` (a `Native` attribute, or a key of the models' function
    dict) by a wrapper that logs ``(name, handle)`` before freeing; yields the log."""
    log = []
    lock = threading.Lock()
    saved = {}

    def wrap(name, function):
        def free(handle):
            with lock:
                log.append((name, handle))
            return function(handle)

        return free

    for name in names:
        if isinstance(native, dict):
            saved[name] = native[name]
            native[name] = wrap(name, saved[name])
        else:
            saved[name] = getattr(native, name)
            setattr(native, name, wrap(name, saved[name]))
    try:
        yield log
    finally:
        for name, function in saved.items():
            if isinstance(native, dict):
                native[name] = function
            else:
                setattr(native, name, function)


def some_threads() -> Executor:
    """A RAM executor of two threads, or one where the process may run on one core only."""
    domain = _support.library().memory_domains[0]
    threads = min(2, _support.allowed_cores())
    return Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=threads)


class ExecutorLifetime(unittest.TestCase):
    def test_a_dropped_executor_is_freed_once_after_its_calls_ran(self):
        native = _support.library()._native
        collector = Collector()
        release = threading.Event()
        with counting_frees(native, "uform_executor_free") as log:
            executor = some_threads()
            handle = executor.address
            executor.for_n(1, lambda *_: release.wait(WAIT), defer=True)  # still running when dropped
            executor.for_n(20, collector, defer=True)  # queued behind it; the outcome is dropped
            release.set()
            del executor  # no close(): the finalizer frees it, and the free drains both calls
            self.assertEqual(log, [("uform_executor_free", handle)])
        self.assertEqual(collector.tasks, list(range(20)))

    def test_close_then_collection_frees_once(self):
        native = _support.library()._native
        with counting_frees(native, "uform_executor_free") as log:
            executor = some_threads()
            handle = executor.address
            executor.close()
            self.assertEqual(log, [("uform_executor_free", handle)])
            executor.close()  # idempotent
            del executor
            gc.collect()
            self.assertEqual(log, [("uform_executor_free", handle)])

    def test_a_with_block_frees_once(self):
        native = _support.library()._native
        with counting_frees(native, "uform_executor_free") as log:
            with some_threads() as executor:
                handle = executor.address
                executor.for_n(3, lambda *_: None)
            self.assertTrue(executor.closed)
            self.assertEqual(log, [("uform_executor_free", handle)])
            del executor
            gc.collect()
            self.assertEqual(log, [("uform_executor_free", handle)])

    def test_an_executor_in_a_garbage_cycle_is_freed(self):
        native = _support.library()._native
        with counting_frees(native, "uform_executor_free") as log:
            executor = some_threads()
            handle = executor.address
            executor.itself = [executor]  # only the cycle collector can reach this one
            del executor
            gc.collect()
            self.assertEqual(log, [("uform_executor_free", handle)])

    def test_the_inline_executor_frees_nothing(self):
        native = _support.library()._native
        with counting_frees(native, "uform_executor_free") as log:
            executor = Executor(_support.library())
            executor.for_n(2, lambda *_: None)
            executor.close()
            self.assertTrue(executor.closed)
            del executor
            gc.collect()
        self.assertEqual(log, [])

    def test_an_outcome_keeps_its_executor_until_dropped(self):
        native = _support.library()._native
        collector = Collector()
        with counting_frees(native, "uform_executor_free") as log:
            outcome = some_threads().for_n(4, collector, defer=True)
            gc.collect()
            self.assertEqual(log, [])  # the executor lives while its outcome does
            self.assertTrue(outcome.wait(WAIT))
            del outcome
            gc.collect()
            self.assertEqual(len(log), 1)
        self.assertEqual(collector.tasks, [0, 1, 2, 3])

    def test_closed_executor_refuses_verbs(self):
        executor = some_threads()
        executor.close()
        with self.assertRaises(Error) as caught:
            executor.for_n(1, lambda *_: None)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertEqual(caught.exception.message, "the executor is closed")


class MeshLifetime(unittest.TestCase):
    def setUp(self):
        _support.skip_without_gpu(self)
        self.library = _support.library()

    def bootstrap(self, executor):
        try:
            return Mesh.bootstrap(executor, MeshOptions())
        except Error as error:
            if error.kind is Status.UNSUPPORTED:
                self.skipTest(f"no mesh here: {error.message}")
            raise

    def test_a_dropped_mesh_is_freed_once_before_its_executor(self):
        native = self.library._native
        with counting_frees(native, "uform_mesh_free", "uform_executor_free") as log:
            executor = Executor.for_vram(self.library, VramOptions.on([0]))
            mesh = self.bootstrap(executor)
            handles = [("uform_mesh_free", mesh.address), ("uform_executor_free", executor.address)]
            del executor  # the mesh holds it
            self.assertEqual(log, [])
            del mesh
            gc.collect()
            self.assertEqual(log, handles)

    def test_a_cycle_frees_the_mesh_before_its_executor(self):
        native = self.library._native
        with counting_frees(native, "uform_mesh_free", "uform_executor_free") as log:
            executor = Executor.for_vram(self.library, VramOptions.on([0]))
            mesh = self.bootstrap(executor)
            handles = [("uform_mesh_free", mesh.address), ("uform_executor_free", executor.address)]
            executor.cycle = mesh  # executor -> mesh -> executor: collected together
            del executor, mesh
            gc.collect()
            self.assertEqual(log, handles)

    def test_close_then_collection_frees_once(self):
        native = self.library._native
        with counting_frees(native, "uform_mesh_free") as log:
            with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
                mesh = self.bootstrap(executor)
                handle = mesh.address
                mesh.close()
                mesh.close()
                self.assertEqual(len(executor._meshes), 0)
                del mesh
                gc.collect()
            self.assertEqual(log, [("uform_mesh_free", handle)])


class ModelLifetime(unittest.TestCase):
    def open_minilm(self, tokenizer: bool = False) -> uform.Model:
        """all-MiniLM-L6-v2 from $UFORM_TEST_MINILM, or a skip (also without a real tokenizer
        when ``tokenizer``)."""
        path = os.environ.get("UFORM_TEST_MINILM", "")
        if not path or not os.path.isdir(path):
            self.skipTest("$UFORM_TEST_MINILM names no model directory")
        try:
            model = uform.Model.open(_support.library(), path)
            if tokenizer:
                model.tokenize("probe")
        except Error as error:
            if error.kind is Status.UNSUPPORTED:
                self.skipTest(error.message)
            raise
        return model

    def test_close_while_another_thread_is_inside_a_verb_is_contended(self):
        model = self.open_minilm(tokenizer=True)
        verbs = [
            ("uform_model_describe", lambda: model.describe().dimensions, 384),
            ("uform_model_tokenize", lambda: model.tokenize("hi")[0], 101),  # [CLS]
            ("uform_encode_texts", lambda: len(model.encode_texts(None, ["hi", "there"])), 2),
        ]
        with some_threads() as executor:
            verbs.append(("uform_encode_texts", lambda: len(model.encode_texts(executor, "hi")), 1))
            for function, verb, expected in verbs:
                with self.subTest(function):
                    refusal, result = _support.close_during(model, function, verb)
                    self.assertIsInstance(refusal, uform.ContendedError)
                    self.assertIs(refusal.kind, Status.CONTENDED)
                    self.assertEqual(refusal.message, "another thread is inside a call on this model; close it after")
                    self.assertEqual(result, expected)  # the call ran to its end on the live model
                    self.assertFalse(model.closed)
        with counting_frees(model._functions, "uform_model_free") as log:
            handle = model._handle
            model.close()  # no call now: freed
            self.assertEqual(log, [("uform_model_free", handle)])
        self.assertTrue(model.closed)
        with self.assertRaises(Error) as caught:
            model.tokenize("hi")
        self.assertEqual(caught.exception.message, "the model is closed")

    def test_a_dropped_model_is_freed_once(self):
        model = self.open_minilm()
        functions = model._functions
        with counting_frees(functions, "uform_model_free") as log:
            handle = model._handle
            del model
            self.assertEqual(log, [("uform_model_free", handle)])
            closed = uform.Model.open(_support.library(), os.environ["UFORM_TEST_MINILM"])
            second = closed._handle
            closed.close()
            closed.close()
            self.assertTrue(closed.closed)
            del closed
            gc.collect()
            self.assertEqual(log, [("uform_model_free", handle), ("uform_model_free", second)])


def run_script(script: str) -> subprocess.CompletedProcess:
    """Runs ``script`` in a fresh interpreter with this suite's environment and binding."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(uform.__file__)), os.path.dirname(__file__)])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=120
    )


# Shared by the scripts below: every native free is printed as it happens.
COUNTING = """
import gc, os, sys, uform
from uform import Executor, RamOptions
library = uform.Library()
native = library._native
seen = []  # what the scripts' tasks append to
def counted(name):
    function = getattr(native, name)
    def free(handle):
        function(handle)
        print(f"{name} {os.getpid()} {sorted(seen)}", flush=True)
    setattr(native, name, free)
counted("uform_executor_free")
node = library.memory_domains[0].node
"""


# The main thread ends while a daemon thread encodes on EXECUTOR (a RAM one is older than the model,
# so freed after it); every free says how many encodes had returned from C by then.
EXIT_DURING_ENCODE = """
import threading, uform
from uform import Executor, RamOptions
library = uform.Library()
native = library._native
node = library.memory_domains[0].node
executor = EXECUTOR
model = uform.Model.open(library, PATH)
idle = Executor.for_ram(library, RamOptions.on([node]), threads=1)
functions = model._functions
encode, free_model = functions["uform_encode_texts"], functions["uform_model_free"]
free_executor = native.uform_executor_free
entered, returned = threading.Event(), []
def encoding(*arguments):
    entered.set()
    status = encode(*arguments)
    returned.append(status)
    return status
def model_freed(handle):
    free_model(handle)
    print(f"model freed after {len(returned)} returned", flush=True)
def executor_freed(handle):
    free_executor(handle)
    freed = "idle executor freed" if handle == idle_handle else f"executor freed after {len(returned)} returned"
    print(freed, flush=True)
idle_handle = idle.address
functions["uform_encode_texts"], functions["uform_model_free"] = encoding, model_freed
native.uform_executor_free = executor_freed
texts = ["the quick brown fox jumps " * 20] * 16  # some 0.4 s on one core
threading.Thread(target=model.encode_texts, args=(executor, texts), daemon=True).start()
entered.wait(60)
print("exiting", flush=True)
"""


class ExitAndFork(unittest.TestCase):
    def test_interpreter_exit_with_live_handles_is_clean(self):
        result = run_script(
            COUNTING
            + """
            kept = Executor.for_ram(library, RamOptions.on([node]), threads=1)
            outcome = kept.for_n(8, lambda task, thread, domain: seen.append(task), defer=True)
            dropped_outcome = Executor.for_ram(library, RamOptions.on([node]), threads=1).for_n(
                3, lambda task, thread, domain: seen.append(100 + task), defer=True)
            print("exiting", flush=True)
            """.replace("\n            ", "\n")
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "exiting")
        self.assertEqual(len(lines), 3, result.stdout)  # each executor freed once, at exit, newest first
        self.assertTrue(lines[1].startswith("uform_executor_free"), lines[1])
        self.assertTrue(lines[2].startswith("uform_executor_free"), lines[2])
        self.assertTrue(lines[2].endswith("[0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102]"), lines[2])  # both drained

    def test_exit_waits_for_a_daemon_threads_encode_before_freeing(self):
        path = os.environ.get("UFORM_TEST_MINILM", "")
        if not path or not os.path.isdir(path):
            self.skipTest("$UFORM_TEST_MINILM names no model directory")
        for executor in ("None", "Executor.for_ram(library, RamOptions.on([node]), threads=1)"):
            with self.subTest(executor=executor):
                result = run_script(EXIT_DURING_ENCODE.replace("EXECUTOR", executor).replace("PATH", repr(path)))
                self.assertEqual(result.returncode, 0, result.stderr)  # -11: freed under the running call
                self.assertEqual(result.stderr, "")
                expected = ["exiting", "idle executor freed", "model freed after 1 returned"]  # newest first
                if executor != "None":
                    expected.append("executor freed after 1 returned")
                self.assertEqual(result.stdout.splitlines(), expected, result.stdout)

    def test_a_forked_child_frees_what_it_inherited_and_the_parent_keeps_working(self):
        if "tsan" in os.environ.get("LD_PRELOAD", ""):
            self.skipTest("fork() of a multi-threaded interpreter under a preloaded ThreadSanitizer")
        result = run_script(
            COUNTING
            + """
            executor = Executor.for_ram(library, RamOptions.on([node]), threads=1)
            executor.for_n(4, lambda *_: None)
            # Python 3.12+ warns on any fork of a threaded process; the engine's fork handling is under test.
            import warnings; warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            pid = os.fork()
            if pid == 0:
                try:
                    executor.for_n(1, lambda *_: None)
                    print("child: ran", flush=True)
                except uform.Error as error:
                    print(f"child: {error.kind.name}", flush=True)
                del executor
                gc.collect()
                print("child: done", flush=True)
                sys.exit(0)
            _, status = os.waitpid(pid, 0)
            print(f"parent: child exit {os.waitstatus_to_exitcode(status)}", flush=True)
            seen.clear()
            executor.for_n(3, lambda task, thread, domain: seen.append(task))
            print(f"parent: {sorted(seen)}", flush=True)
            executor.close()
            print("parent: closed", flush=True)
            """.replace("\n            ", "\n")
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        lines = result.stdout.splitlines()
        child_lines = [line for line in lines if line.startswith("child")]
        self.assertEqual(child_lines, ["child: FORKED", "child: done"])
        frees = [line.split()[1] for line in lines if line.startswith("uform_executor_free")]
        self.assertEqual(len(frees), 2)  # once in the child (at its drop), once in the parent
        self.assertNotEqual(frees[0], frees[1])
        self.assertIn("parent: child exit 0", lines)
        self.assertIn("parent: [0, 1, 2]", lines)
        self.assertEqual(lines[-1], "parent: closed")


if __name__ == "__main__":
    unittest.main()
