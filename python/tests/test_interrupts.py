"""A KeyboardInterrupt (what Ctrl-C raises), or any exception a Python signal handler raises, that
lands in the binding's count of threads inside a call on a handle (``_Handle.run`` in
uform/_lifetime.py) must never leave the handle counted as in use: else ``close()`` refuses with
CONTENDED forever, and interpreter exit waits forever in ``_Handle.take`` for a call that is not
running.

CPython (3.11) runs a pending signal handler only at certain points: at a Python function's entry,
when a call to a C function returns (before its result is stored), at a backward jump, and inside
a blocked lock acquire (which then gives up without the lock). Rather than hoping a timer lands on
the unlucky one, these tests raise the interrupt at each such point of a verb in turn, one per run,
from a profile function (``sys.setprofile``): its "call" event is a function's entry, its
"c_return" event the return of a builtin, and a wrapped lock (`InterruptibleLock`) offers its
acquire and the return of its release. Only points in the binding's own code (uform/) and in
``threading`` (the condition the count notifies) are used. Backward jumps and the returns of the
raw C calls (ctypes functions, which raise no "c_return") are left out: they lie inside the
function the count is around, where an interrupt is an exception like any other the C call's
wrapper may raise."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import unittest

import uform
from uform import Executor, RamOptions

import _support

WAIT = 30.0
TINY_UFORM3 = os.path.join(_support.REPOSITORY, "test", "models", "tiny-uform3")
BINDING = os.path.dirname(uform.__file__) + os.sep
THREADING = threading.__file__
MOST_POINTS = 5000  # a verb with more is a runaway loop, not a verb


def _watched(code) -> bool:
    return code.co_filename.startswith(BINDING) or code.co_filename == THREADING


class Interrupter:
    """Raises KeyboardInterrupt at the ``target``-th point where a signal handler could run, counted
    from 0 as the verb runs (-1: never, only counts). Engine callbacks into Python are skipped
    whole: how an interrupt there is handled is the callback's business, not the count's."""

    current = None  # the Interrupter whose profile function is installed now

    def __init__(self, target: int):
        self.target = target
        self.points = 0
        self.where = None
        self.callbacks = 0  # depth of engine callbacks (`_calls` trampolines) on this thread

    def point(self, where: str) -> None:
        if self.callbacks or self.where is not None:
            return
        index = self.points
        self.points += 1
        if index == self.target:
            self.where = where
            sys.setprofile(None)
            raise KeyboardInterrupt(where)

    def profile(self, frame, event, arg):
        code = frame.f_code
        name = getattr(code, "co_qualname", code.co_name)
        if event == "call":
            if code.co_name == "trampoline" and code.co_filename.startswith(BINDING):
                self.callbacks += 1
            elif _watched(code):
                self.point(f"entry of {name}")
        elif event == "return":
            if code.co_name == "trampoline" and code.co_filename.startswith(BINDING):
                self.callbacks -= 1
        elif event == "c_return" and _watched(code):
            self.point(f"return of {getattr(arg, '__qualname__', arg)} in {name}")

    def run(self, verb):
        """Runs ``verb()`` under the profile function; returns what it raised, or None."""
        Interrupter.current = self
        sys.setprofile(self.profile)
        try:
            verb()
        except KeyboardInterrupt as interrupt:
            return interrupt
        finally:
            sys.setprofile(None)
            Interrupter.current = None
        return None


class InterruptibleLock:
    """Stands in for a handle's lock: the same lock underneath (``idle``'s condition keeps using it),
    but its ``with`` offers an interrupt point before it acquires (a blocked acquire runs signal
    handlers, and gives up without the lock when one raises) and after it released (``__exit__``
    is a C call, after whose return a handler may run)."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        if Interrupter.current is not None:
            Interrupter.current.point("blocked acquire of the handle's lock")
        return self.lock.__enter__()

    def __exit__(self, *exc):
        result = self.lock.__exit__(*exc)
        if Interrupter.current is not None:
            Interrupter.current.point("return from releasing the handle's lock")
        return result

    def __getattr__(self, name):
        return getattr(self.lock, name)


def sweep(test: unittest.TestCase, verb, owners) -> int:
    """Interrupts ``verb()`` at each point in turn, one per run, checking after every run that no
    state of ``owners`` is counted in use or has its lock held; returns how many runs were
    interrupted."""
    states = [owner._state for owner in owners]
    for target in range(MOST_POINTS):
        interrupter = Interrupter(target)
        raised = interrupter.run(verb)
        if interrupter.where is None:
            test.assertIsNone(raised)
            test.assertGreater(target, 0, "the verb offered no interrupt point")
            return target
        test.assertIsNotNone(raised, f"the interrupt at point {target} ({interrupter.where}) was swallowed")
        for state in states:
            test.assertEqual(
                state.active, 0,
                f"interrupted at point {target} ({interrupter.where}): the {state.noun} is still counted in use")
            test.assertFalse(
                state.lock.locked(),
                f"interrupted at point {target} ({interrupter.where}): the {state.noun}'s lock is held")
    test.fail(f"the verb still offered interrupt points after {MOST_POINTS} runs")


class InterruptedCalls(unittest.TestCase):
    """Every verb kind the count wraps: a model's (tokenize, describe), an encode (a model's count
    around its executor's), an executor's (describe, drain, a blocking call) and an outcome's wait,
    which with drain's pruning takes the count only when the executor is open."""

    def setUp(self):
        library = _support.library()
        self.model = uform.Model.open(library, TINY_UFORM3, "text")
        node = library.memory_domains[0].node
        self.executor = Executor.for_ram(library, RamOptions.on([node]), threads=1)
        self.owners = [self.model, self.executor]
        self.locks = {}
        for owner in self.owners:
            self.locks[owner] = owner._state.lock
            owner._state.lock = InterruptibleLock(owner._state.lock)
        self.addCleanup(self.release)

    def release(self):
        """Closes both owners; one a failing run left counted in use is uncounted first, so the failure
        does not turn into CONTENDED here or into a hang at interpreter exit."""
        for owner in reversed(self.owners):
            state = owner._state
            state.lock = self.locks[owner]
            if state.active:
                state.active = 0
            owner.close()

    def check(self, verb, owners=None) -> None:
        interrupted = sweep(self, verb, self.owners if owners is None else owners)
        self.assertGreater(interrupted, 2)
        for owner in self.owners:
            self.assertEqual(owner._state.active, 0)
        verb()  # still works after every interruption

    def test_model_verbs(self):
        self.check(lambda: self.model.tokenize("hello there"))
        self.check(self.model.describe)

    def test_encode_on_an_executor_and_inline(self):
        self.check(lambda: self.model.encode_texts(self.executor, ["hi", "there"]))
        self.check(lambda: self.model.encode_texts(None, "hi"))

    def test_executor_verbs(self):
        self.check(self.executor.describe)
        self.check(self.executor.drain)
        self.check(lambda: self.executor.for_n(2, lambda *_: None))

    def test_outcome_wait(self):
        def wait():
            self.executor.drain()
            outcome = self.executor.for_n(2, lambda *_: None, defer=True)  # submitted uninterrupted
            Interrupter.current = interrupter
            sys.setprofile(interrupter.profile)
            try:
                self.assertTrue(outcome.wait(WAIT))
            finally:
                sys.setprofile(None)

        for target in range(MOST_POINTS):
            interrupter = Interrupter(target)
            raised = None
            try:
                wait()
            except KeyboardInterrupt as interrupt:
                raised = interrupt
            if interrupter.where is None:
                self.assertIsNone(raised)
                break
            self.assertIsNotNone(raised)
            self.assertEqual(self.executor._state.active, 0, f"interrupted at point {target} ({interrupter.where})")
        self.assertGreater(target, 2)

    def test_deferred_submission_keeps_its_record(self):
        """A deferred call the engine accepted keeps its record (its outcome struct and callbacks)
        held by the executor whatever point an interrupt lands on: a record dropped there left the
        engine writing into a freed outcome and calling a freed callback. Records are kept alive
        here by a subclass that lists them, so a dropped one fails the check instead of crashing."""
        import uform._executor as executor_module

        made = []

        class Listed(executor_module._Record):
            __slots__ = ()

            def __init__(self):
                super().__init__()
                made.append(self)

        original = executor_module._Record
        executor_module._Record = Listed
        self.addCleanup(setattr, executor_module, "_Record", original)
        state = self.executor._state
        for target in range(MOST_POINTS):
            first = len(made)
            interrupter = Interrupter(target)
            outcomes = []
            raised = interrupter.run(lambda: outcomes.append(self.executor.for_n(2, lambda *_: None, defer=True)))
            with self.locks[self.executor]:
                held = list(state.pending)
            for record in made[first:]:
                # The engine took it: it wrote the outcome (its executor into the bookkeeping, or a refusal).
                seen = record.outcome is not None and (record.outcome.finished or record.outcome.reserved[0] != 0)
                if seen and not outcomes and not record.settled:
                    self.assertTrue(
                        any(record is kept for kept in held),
                        f"interrupted at point {target} ({interrupter.where}): the engine took the call, the "
                        f"executor no longer holds its record (status {record.outcome.status}, finished "
                        f"{record.outcome.finished})")
            self.assertEqual(state.active, 0, f"interrupted at point {target} ({interrupter.where})")
            self.executor.drain()
            if interrupter.where is None:
                self.assertIsNone(raised)
                break
        self.assertGreater(target, 2)

    def test_close_after_interruptions(self):
        """After a run interrupted at each point, ``close`` works (it refuses with CONTENDED while a
        thread is counted inside a call)."""
        sweep(self, lambda: self.model.tokenize("hello"), self.owners)
        self.model.close()
        self.executor.close()
        self.assertTrue(self.model.closed)
        self.assertTrue(self.executor.closed)

    def test_exit_after_interruptions_does_not_hang(self):
        """A child interrupts an inline encode at each point in turn and exits with the model open:
        the release at exit waits for any thread counted inside a call, so a count left behind
        hangs it (bounded here by a timeout)."""
        script = textwrap.dedent(
            f"""
            import sys, uform
            sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
            import test_interrupts
            model = uform.Model.open(uform.Library(), {TINY_UFORM3!r}, "text")
            model._state.lock = test_interrupts.InterruptibleLock(model._state.lock)
            for target in range(test_interrupts.MOST_POINTS):
                interrupter = test_interrupts.Interrupter(target)
                interrupter.run(lambda: model.encode_texts(None, "hi"))
                if interrupter.where is None:
                    break
            print("exiting after", target, "interruptions, counted in use:", model._state.active, flush=True)
            """
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(uform.__file__))] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
        except subprocess.TimeoutExpired as expired:
            self.fail(f"the interpreter's exit hung waiting for a call that is not running; printed {expired.stdout!r}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        self.assertRegex(result.stdout, r"^exiting after [1-9][0-9]* interruptions, counted in use: 0\n$")

if __name__ == "__main__":
    unittest.main()
