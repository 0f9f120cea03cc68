"""`Executor.on_pool` over a live pool: the ForkUnion stand-in of test/standin, loaded into a child
process (so the rest of the suite keeps a process without ForkUnion, where fake pool addresses
are safe to pass)."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import _support

STANDIN_SOURCE = os.path.join(_support.REPOSITORY, "test", "standin", "fork_union_standin.c")

CHILD = textwrap.dedent(
    r"""
    import ctypes, os, sys, threading
    standin = ctypes.CDLL(os.environ["STANDIN"], mode=ctypes.RTLD_GLOBAL)  # visible to dlsym(RTLD_DEFAULT)
    standin.fu_pool_new.restype = ctypes.c_void_p
    standin.fu_pool_new.argtypes = [ctypes.c_char_p]
    standin.fu_pool_spawn.restype = ctypes.c_bool
    standin.fu_pool_spawn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    standin.fu_pool_dispatches.restype = ctypes.c_size_t
    standin.fu_pool_dispatches.argtypes = [ctypes.c_void_p]
    standin.fu_pool_delete.argtypes = [ctypes.c_void_p]

    from uform import Executor, ExecutorKind, Library, Mood, RamOptions, Schedule

    library = Library()
    fork_union_pool = standin.fu_pool_new(b"uform-python")
    assert standin.fu_pool_spawn(fork_union_pool, 2, 0)

    # The seed's line, as written.
    shared = Executor.on_pool(library, fork_union_pool)
    description = shared.describe()
    assert description.kind is ExecutorKind.POOL, description
    assert description.threads_count == 2, description

    lock = threading.Lock()
    seen = []
    def task(index, thread, domain):
        with lock:
            seen.append((index, thread))
    before = standin.fu_pool_dispatches(fork_union_pool)
    shared.for_n(100, task)
    assert sorted(i for i, _ in seen) == list(range(100)), seen
    shared.for_n(100, task, schedule=Schedule.DYNAMIC)
    assert len(seen) == 200
    seen.clear()
    shared.for_threads(task)
    assert sorted(seen) == [(0, 0), (1, 1)], seen
    seen.clear()
    outcome = shared.for_n(10, task, defer=True)
    assert outcome.wait(30)
    assert sorted(i for i, _ in seen) == list(range(10)), seen
    assert standin.fu_pool_dispatches(fork_union_pool) > before, "the pool was not used"
    # Waiting, inside a pool task, for a call on another executor over the same pool would wait on
    # itself: ContendedError at once, the outcome still pending; it runs once the pool is free.
    from uform import ContendedError
    other = Executor.on_pool(library, fork_union_pool)
    inner_ran, inner_outcomes, caught = [], [], []
    def inner(index, thread, domain):
        inner_ran.append(index)
    def waits_inside(index, thread, domain):
        if thread != 0:
            return
        pending = other.for_n(1, inner, defer=True)
        inner_outcomes.append(pending)
        try:
            pending.wait()
        except ContendedError as error:
            caught.append(str(error))
        caught.append(pending.done())
    shared.for_threads(waits_inside)
    assert len(caught) == 2 and "ForkUnion pool" in caught[0] and caught[1] is False, caught
    assert inner_outcomes[0].wait(30) and inner_ran == [0], inner_ran
    other.close()
    shared.drain(Mood.SPINNING)
    shared.close()
    standin.fu_pool_delete(fork_union_pool)
    print("POOL OK")
    """
)


class TestPoolExecutor(unittest.TestCase):
    def standin(self) -> str:
        path = os.environ.get("UFORM_TEST_FU_STANDIN")
        if path:
            return path
        compiler = shutil.which(os.environ.get("CC", "cc"))
        if compiler is None or not os.path.exists(STANDIN_SOURCE):
            self.skipTest("no $UFORM_TEST_FU_STANDIN, and no compiler or stand-in source to build one")
        directory = tempfile.mkdtemp(prefix="uform-python-standin-")
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "libfu_standin.so")
        result = subprocess.run(
            [compiler, "-std=gnu17", "-shared", "-fPIC", "-O1", STANDIN_SOURCE, "-o", path, "-lpthread"],
            capture_output=True, text=True,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        return path

    def test_on_pool_runs_calls_on_the_pool(self):
        environment = dict(os.environ, STANDIN=self.standin())
        environment["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(_support.uform.__file__)))]
            + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])
        )
        result = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, env=environment, timeout=120
        )
        self.assertEqual(result.returncode, 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertIn("POOL OK", result.stdout)


if __name__ == "__main__":
    unittest.main()
