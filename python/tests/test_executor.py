"""Executors from Python: construction, errors, calls, outcomes, contention and lifetimes."""

import contextlib
import ctypes
import gc
import io
import threading
import time
import traceback
import unittest
import weakref

import _support
import uform
from _support import Collector
from uform import (
    CPUClass,
    Error,
    Executor,
    ExecutorKind,
    GPUClass,
    Mood,
    Outcome,
    RamOptions,
    Residency,
    Schedule,
    Status,
    VramOptions,
)

WAIT = 30.0  # seconds any Event in these tests may take before the test fails instead of hanging


def first_domain():
    return _support.library().memory_domains[0]


def two_threads(test):
    """A RAM executor with two threads on the first domain, or a skip on a one-core machine."""
    domain = first_domain()
    if domain.cores_count < 2:
        test.skipTest("the first memory domain has one core")
    return Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=2)


def some_threads():
    """A RAM executor with two threads on the first domain, or one where it has a single core."""
    domain = first_domain()
    return Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=min(2, domain.cores_count))


class TestNullExecutor(unittest.TestCase):
    def test_runs_inline_on_the_calling_thread(self):
        executor = Executor(_support.library())
        collector = Collector()
        self.assertIsNone(executor.for_n(5, collector))
        self.assertEqual(collector.tasks, [0, 1, 2, 3, 4])
        self.assertEqual({item[3] for item in collector.items}, {threading.get_ident()})
        self.assertEqual(collector.threads, {0})
        self.assertEqual({item[2] for item in collector.items}, {0})

    def test_describes_as_inline(self):
        executor = Executor(_support.library())
        self.assertEqual(executor.address, uform.NULL_ADDRESS)
        description = executor.describe()
        self.assertIs(description.kind, ExecutorKind.INLINE)
        self.assertEqual(description.threads_count, 1)
        self.assertEqual(description.devices_count, 0)
        self.assertIs(description.gpu_class, GPUClass.UNKNOWN)
        executor.drain(Mood.SPINNING)  # draining the NULL executor is OK

    def test_accepts_every_residency(self):
        executor = Executor(_support.library())
        for residency in Residency:
            collector = Collector()
            executor.call(tasks=2, task=collector, residency=residency)
            self.assertEqual(collector.tasks, [0, 1])

    def test_a_device_part_is_unsupported(self):
        executor = Executor(_support.library())
        with self.assertRaises(Error) as caught:
            executor.call(device=lambda slot: None)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)

    def test_threads_placement_is_unsupported(self):
        with self.assertRaises(Error) as caught:
            Executor(_support.library()).thread_placement(0)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)

    def test_context_manager_and_close(self):
        with Executor(_support.library()) as executor:
            executor.for_n(1, lambda *_: None)
        self.assertTrue(executor.closed)
        executor.close()  # idempotent
        with self.assertRaises(Error) as caught:
            executor.for_n(1, lambda *_: None)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn("closed", caught.exception.message)


class TestConstructionErrors(unittest.TestCase):
    def test_unknown_domain_is_invalid_argument_naming_it(self):
        library = _support.library()
        node = max(d.node for d in library.memory_domains) + 1000
        with self.assertRaises(Error) as caught:
            Executor.for_ram(library, RamOptions.on([node]), threads=1)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn(str(node), caught.exception.message)

    def test_duplicate_domain_is_invalid_argument(self):
        node = first_domain().node
        with self.assertRaises(Error) as caught:
            Executor.for_ram(_support.library(), RamOptions.on([node, node]), threads=1)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertTrue(caught.exception.message)

    def test_more_threads_than_cores_is_invalid_argument(self):
        too_many = _support.allowed_cores() + 1
        with self.assertRaises(Error) as caught:
            Executor.for_ram(_support.library(), threads=too_many)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn(str(too_many), caught.exception.message)

    def test_negative_counts_never_reach_the_engine(self):
        with self.assertRaises(Error) as caught:
            Executor.for_ram(_support.library(), threads=-1)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn("threads", caught.exception.message)

    def test_class_above_the_cpu_is_unsupported(self):
        library = _support.library()
        detected, features = library.cpu_detect()
        above = [
            cpu_class
            for cpu_class in CPUClass
            if CPUClass.SERIAL < cpu_class <= CPUClass.ALIBABA_C930
            and library.cpu_class_features(cpu_class) & ~features
        ]
        # A tier of this architecture the CPU lacks, else one of another architecture; the WASM
        # classes are never runnable in a native build, so there is always one.
        pinned = above[0] if above else CPUClass.WASM32_V128
        with self.assertRaises(Error) as caught:
            Executor.for_ram(library, RamOptions(cpu_class=pinned), threads=1)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED, caught.exception)
        self.assertTrue(caught.exception.message)
        with self.assertRaises(Error) as caught:
            Executor.for_ram(library, RamOptions(cpu_class=CPUClass.WASM64_EXTENDED), threads=1)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)

    def test_class_out_of_range_is_invalid_argument(self):
        with self.assertRaises(Error) as caught:
            Executor.for_ram(_support.library(), RamOptions(cpu_class=99), threads=1)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_memory_domain_objects_stand_for_their_nodes(self):
        library = _support.library()
        with Executor.for_ram(library, RamOptions.on(library.memory_domains[:1]), threads=1) as executor:
            self.assertEqual(executor.describe().domains_count, 1)
            self.assertEqual(executor.thread_placement(0)[1], library.memory_domains[0].node)

    def test_a_lower_class_is_pinned(self):
        with Executor.for_ram(_support.library(), RamOptions(cpu_class=CPUClass.SERIAL), threads=1) as executor:
            self.assertIs(executor.describe().cpu_class, CPUClass.SERIAL)

    def test_for_vram_without_a_gpu_is_unsupported(self):
        if _support.gpu_devices():
            self.skipTest("this machine has a GPU; test_gpu covers for_vram")
        library = _support.library()
        with self.assertRaises(Error) as caught:
            library.gpu_status()
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
        reason = caught.exception.message  # no kernels, no driver, or no device
        self.assertTrue(reason)
        for vram in (VramOptions(), VramOptions.on([0])):
            with self.assertRaises(Error) as caught:
                Executor.for_vram(library, vram)
            self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
            self.assertIn(reason, caught.exception.message)  # "the message says which"

    def test_on_pool_with_a_null_pool_is_invalid_argument(self):
        with self.assertRaises(Error) as caught:
            Executor.on_pool(_support.library(), 0)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertTrue(caught.exception.message)

    def test_on_pool_without_fork_union_is_unsupported(self):
        if _support.fork_union_in_process():
            self.skipTest("ForkUnion is loaded here; a fake pool address would be dereferenced")
        fake_pool = ctypes.create_string_buffer(4096)  # valid memory, though never read without ForkUnion
        with self.assertRaises(Error) as caught:
            Executor.on_pool(_support.library(), ctypes.addressof(fake_pool))
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
        self.assertIn("forkunion", caught.exception.message.lower().replace(" ", "").replace("_", ""))

    def test_wrong_types_are_type_errors(self):
        library = _support.library()
        with self.assertRaises(TypeError):
            Executor.for_ram(library, VramOptions())
        with self.assertRaises(TypeError):
            Executor.for_ram("libuform.so")
        with self.assertRaises(TypeError):
            Executor(library).for_n(1, "not callable")


class TestRamExecutor(unittest.TestCase):
    def setUp(self):
        self.executor = two_threads(self)
        self.addCleanup(self.executor.close)

    def test_describes_itself(self):
        description = self.executor.describe()
        self.assertIs(description.kind, ExecutorKind.RAM)
        self.assertEqual(description.threads_count, 2)
        self.assertEqual(description.domains_count, 1)
        self.assertEqual(description.devices_count, 0)
        self.assertIs(description.cpu_class, _support.library().cpu_class)
        self.assertIs(description.gpu_class, GPUClass.UNKNOWN)
        self.assertIs(description.mood, Mood.PARKED)
        self.assertEqual(description.deferred_limit, uform.DEFERRED_LIMIT_DEFAULT)
        self.assertEqual(description.scratch_limit, 0)

    def test_thread_placement(self):
        domain = first_domain()
        cores = _support.library().memory_domain_cores(domain.node)
        placements = [self.executor.thread_placement(thread) for thread in range(2)]
        for core, node in placements:
            self.assertIn(core, cores)
            self.assertEqual(node, domain.node)
        self.assertEqual(len({core for core, _ in placements}), 2)
        with self.assertRaises(Error) as caught:
            self.executor.thread_placement(2)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_every_task_runs_once(self):
        for schedule in (Schedule.STATIC, Schedule.DYNAMIC):
            collector = Collector()
            self.assertIsNone(self.executor.for_n(1000, collector, schedule=schedule))
            self.assertEqual(collector.tasks, list(range(1000)), schedule)
            self.assertLessEqual(collector.threads, {0, 1})
            self.assertEqual({item[2] for item in collector.items}, {0})

    def test_static_splits_into_contiguous_shares(self):
        collector = Collector()
        self.executor.for_n(10, collector, schedule=Schedule.STATIC)
        by_thread = {}
        for task, thread, _, _ in collector.items:
            by_thread.setdefault(thread, []).append(task)
        self.assertEqual(sorted(by_thread), [0, 1])
        self.assertEqual(sorted(by_thread[0]), [0, 1, 2, 3, 4])
        self.assertEqual(sorted(by_thread[1]), [5, 6, 7, 8, 9])

    def test_for_threads_broadcasts(self):
        collector = Collector()
        self.executor.for_threads(collector)
        self.assertEqual(sorted((task, thread) for task, thread, _, _ in collector.items), [(0, 0), (1, 1)])
        # Thread 0 of a blocking call is the caller; thread 1 is a worker.
        by_thread = {thread: ident for _, thread, _, ident in collector.items}
        self.assertEqual(by_thread[0], threading.get_ident())
        self.assertNotEqual(by_thread[1], threading.get_ident())

    def test_zero_tasks_run_nothing(self):
        collector = Collector()
        self.executor.for_n(0, collector)
        self.assertEqual(collector.items, [])

    def test_residency_mismatch(self):
        with self.assertRaises(Error) as caught:
            self.executor.call(tasks=1, task=lambda *_: None, residency=Residency.VRAM)
        self.assertIs(caught.exception.kind, Status.RESIDENCY_MISMATCH)
        collector = Collector()
        self.executor.call(tasks=3, task=collector, residency=Residency.RAM)
        self.assertEqual(collector.tasks, [0, 1, 2])

    def test_a_device_part_is_refused_on_ram(self):
        with self.assertRaises(Error) as caught:
            self.executor.call(tasks=1, task=lambda *_: None, device=lambda slot: None)
        self.assertIs(caught.exception.kind, Status.RESIDENCY_MISMATCH)
        self.assertIn("VRAM", caught.exception.message)

    def test_schedule_out_of_range_is_invalid_argument(self):
        with self.assertRaises(Error) as caught:
            self.executor.for_n(1, lambda *_: None, schedule=7)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_drain_sets_the_mood(self):
        self.executor.drain(Mood.SPINNING)
        self.assertIs(self.executor.describe().mood, Mood.SPINNING)
        collector = Collector()
        self.executor.for_n(4, collector)
        self.assertEqual(collector.tasks, [0, 1, 2, 3])
        self.executor.drain()  # PARKED by default, as the seed
        self.assertIs(self.executor.describe().mood, Mood.PARKED)


class TestExceptions(unittest.TestCase):
    def test_blocking_call_reraises_the_first_exception(self):
        with some_threads() as executor:
            ran = Collector()

            def task(index, thread, domain):
                ran(index, thread, domain)
                if index == 3:
                    raise ValueError(f"task {index} failed")

            try:
                executor.for_n(1000, task, schedule=Schedule.DYNAMIC)
                self.fail("the callback's exception was lost")
            except ValueError as error:
                self.assertEqual(str(error), "task 3 failed")
                # The traceback still reaches into the callback that raised.
                frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
                self.assertIn("task", frames)
            # How many tasks the other thread ran before the error was recorded is the scheduler's
            # business (a loaded machine can run them all meanwhile): that the rest are skipped is
            # checked on one thread below, where it is exact.
            self.assertIn(3, ran.tasks)
            # The executor stays usable.
            collector = Collector()
            executor.for_n(8, collector)
            self.assertEqual(collector.tasks, list(range(8)))

    def test_tasks_after_the_exception_are_skipped(self):
        domain = first_domain()
        with Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=1) as executor:
            ran = Collector()

            def task(index, thread, domain):
                ran(index, thread, domain)
                if index == 3:
                    raise ValueError(f"task {index} failed")

            with self.assertRaises(ValueError):
                executor.for_n(1000, task, schedule=Schedule.DYNAMIC)
            self.assertEqual(ran.tasks, [0, 1, 2, 3])  # one thread, in order: the rest were skipped

    def test_inline_call_reraises(self):
        def task(index, thread, domain):
            raise KeyError(index)

        with self.assertRaises(KeyError):
            Executor(_support.library()).for_n(2, task)

    def test_deferred_call_reraises_from_wait(self):
        with some_threads() as executor:
            def task(index, thread, domain):
                raise RuntimeError("deferred failure")

            outcome = executor.for_n(4, task, defer=True)
            with self.assertRaises(RuntimeError) as caught:
                outcome.wait(WAIT)
            self.assertEqual(str(caught.exception), "deferred failure")
            self.assertTrue(outcome.done())
            self.assertIs(outcome.status, Status.OK)  # the engine's call itself succeeded


class TestDeferred(unittest.TestCase):
    def test_outcome_reports_and_waits(self):
        with some_threads() as executor:
            collector = Collector()
            outcome = executor.for_n(100, collector, defer=True)
            self.assertIsInstance(outcome, Outcome)
            self.assertTrue(outcome.wait(WAIT))
            self.assertTrue(outcome.done())
            self.assertIs(outcome.status, Status.OK)
            self.assertEqual(outcome.message, "")
            self.assertEqual(collector.tasks, list(range(100)))
            # A deferred call's thread 0 is the executor's leader, not the submitting thread.
            self.assertNotIn(threading.get_ident(), {item[3] for item in collector.items})

    def test_wait_with_a_timeout_while_running(self):
        with some_threads() as executor:
            release = threading.Event()
            outcome = executor.for_n(2, lambda *_: release.wait(WAIT), defer=True)
            self.assertFalse(outcome.wait(0.05))
            self.assertFalse(outcome.done())
            self.assertIs(outcome.status, Status.PENDING)
            release.set()
            self.assertTrue(outcome.wait(WAIT))
            self.assertIs(outcome.status, Status.OK)

    def test_waiting_inside_a_task_on_a_later_call_of_its_executor_is_contended(self):
        # The later call runs only after this task: ContendedError at once (it waited forever), the
        # call still pending; it runs once the task returns.
        executor = two_threads(self)
        self.addCleanup(executor.close)
        queued, seen, ran = threading.Event(), {}, []
        def waiter(index, thread, domain):
            queued.wait(30)
            try:
                seen["later"].wait()
            except uform.ContendedError as error:
                seen["error"] = str(error)
            seen["done"] = seen["later"].done()
        first = executor.for_n(1, waiter, defer=True)
        seen["later"] = executor.for_n(1, lambda index, thread, domain: ran.append(index), defer=True)
        queued.set()
        self.assertTrue(first.wait(30))
        self.assertEqual(seen["error"], "CONTENDED: uform_outcome_wait: called from inside a callback of the executor "
                                        "that runs this call, which cannot finish before that callback returns; wait "
                                        "for it after the callback")
        self.assertFalse(seen["done"])
        self.assertTrue(seen["later"].wait(30))
        self.assertEqual(ran, [0])

    def test_calls_run_in_submission_order(self):
        with some_threads() as executor:
            order = []
            lock = threading.Lock()

            def make(label):
                def task(index, thread, domain):
                    if index == 0:
                        with lock:
                            order.append(label)
                return task

            outcomes = [executor.for_n(2, make(label), defer=True) for label in range(5)]
            executor.for_n(1, make("blocking"))  # waits for the deferred calls before it
            self.assertEqual(order, [0, 1, 2, 3, 4, "blocking"])
            self.assertTrue(all(outcome.done() for outcome in outcomes))

    def test_dropped_outcomes_keep_their_callbacks_alive(self):
        with some_threads() as executor:
            collector = Collector()
            for _ in range(10):
                executor.for_n(10, lambda t, th, d: collector(t, th, d), defer=True)  # outcome dropped
            gc.collect()
            executor.drain()
            self.assertEqual(len(collector.items), 100)
            self.assertEqual(executor._pending, [])

    def test_outcome_keeps_its_executor_alive(self):
        domain = first_domain()
        collector = Collector()
        outcome = Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=1).for_n(
            5, collector, defer=True
        )
        gc.collect()
        self.assertTrue(outcome.wait(WAIT))
        self.assertEqual(collector.tasks, [0, 1, 2, 3, 4])

    def test_deferred_limit(self):
        domain = first_domain()
        release = threading.Event()
        with Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=1, deferred_limit=1) as executor:
            self.assertEqual(executor.describe().deferred_limit, 1)
            first = executor.for_n(1, lambda *_: release.wait(WAIT), defer=True)
            try:
                with self.assertRaises(Error) as caught:
                    executor.for_n(1, lambda *_: None, defer=True)
                self.assertIs(caught.exception.kind, Status.DEFERRED_FULL)
                self.assertTrue(caught.exception.message)
            finally:
                release.set()
            self.assertTrue(first.wait(WAIT))
            second = executor.for_n(1, lambda *_: None, defer=True)
            self.assertTrue(second.wait(WAIT))

    def test_an_exception_nobody_waited_for_is_printed(self):
        with some_threads() as executor:
            def task(index, thread, domain):
                raise LookupError("nobody waits for this")

            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                executor.for_n(1, task, defer=True)  # the outcome is dropped at once
                gc.collect()
                executor.drain()
                gc.collect()
            self.assertIn("never waited for", stderr.getvalue())
            self.assertIn("LookupError: nobody waits for this", stderr.getvalue())

    def test_close_finishes_pending_outcomes(self):
        executor = some_threads()
        collector = Collector()
        outcome = executor.for_n(50, collector, defer=True)
        executor.close()  # drains
        self.assertTrue(outcome.done())
        self.assertTrue(outcome.wait())
        self.assertEqual(collector.tasks, list(range(50)))


class TestContention(unittest.TestCase):
    def test_a_second_thread_finds_the_executor_held(self):
        """One thread's blocking call holds the executor inside a callback; another thread's call
        raises CONTENDED at once, having run nothing; the first call then completes."""
        with some_threads() as executor:
            entered = threading.Event()
            release = threading.Event()
            first_result = {}

            def holding(index, thread, domain):
                entered.set()
                release.wait(WAIT)

            def first_thread():
                try:
                    executor.for_n(2, holding)
                    first_result["ok"] = True
                except BaseException as error:  # noqa: B902
                    first_result["error"] = error

            holder = threading.Thread(target=first_thread)
            holder.start()
            try:
                self.assertTrue(entered.wait(WAIT))
                ran = Collector()
                started = time.monotonic()
                with self.assertRaises(Error) as caught:
                    executor.for_n(4, ran)
                self.assertLess(time.monotonic() - started, WAIT / 2)  # at once, not after the holder (WAIT)
                self.assertIs(caught.exception.kind, Status.CONTENDED)
                self.assertEqual(ran.items, [])
                with self.assertRaises(Error) as caught:
                    executor.for_n(1, ran, defer=True)
                self.assertIs(caught.exception.kind, Status.CONTENDED)
                # Closing under the holder is refused rather than freeing its executor.
                with self.assertRaises(Error) as caught:
                    executor.close()
                self.assertIs(caught.exception.kind, Status.CONTENDED)
            finally:
                release.set()
                holder.join(WAIT)
            self.assertEqual(first_result, {"ok": True})
            collector = Collector()
            executor.for_n(3, collector)  # free again
            self.assertEqual(collector.tasks, [0, 1, 2])

    def test_a_callback_calling_into_its_own_executor(self):
        with some_threads() as executor:
            seen = []

            def task(index, thread, domain):
                for verb in (lambda: executor.for_n(1, lambda *_: None), lambda: executor.drain()):
                    try:
                        verb()
                        seen.append("ran")
                    except Error as error:
                        seen.append(error.kind)
                try:
                    executor.close()
                except Error as error:
                    seen.append(error.kind)

            executor.for_n(1, task)
            self.assertEqual(seen, [Status.CONTENDED] * 3)
            self.assertFalse(executor.closed)


class TestRawCallbacks(unittest.TestCase):
    """C function pointers: the engine calls them with no GIL taken."""

    def test_ctypes_function_and_integer_address(self):
        helpers = _support.require_helpers(self)
        with two_threads(self) as executor:
            marks = (ctypes.c_uint32 * 1000)()
            executor.for_n(1000, helpers.uform_python_test_mark, context=marks)
            self.assertEqual(set(marks), {1})
            address = ctypes.cast(helpers.uform_python_test_mark, ctypes.c_void_p).value
            executor.for_n(1000, address, schedule=Schedule.DYNAMIC, context=ctypes.addressof(marks))
            self.assertEqual(set(marks), {2})
            outcome = executor.for_n(1000, address, context=marks, defer=True)
            self.assertTrue(outcome.wait(WAIT))
            self.assertEqual(set(marks), {3})

    def test_threads_seen_by_a_c_callback(self):
        helpers = _support.require_helpers(self)
        with two_threads(self) as executor:
            threads = (ctypes.c_uint32 * 2)()
            executor.for_threads(helpers.uform_python_test_thread, context=threads)
            self.assertEqual(list(threads), [1, 2])


class TestLifetimes(unittest.TestCase):
    def test_threads_end_when_the_executor_goes_out_of_scope(self):
        baseline = _support.thread_count()
        executor = two_threads(self)
        self.assertGreater(_support.thread_count(), baseline)
        reference = weakref.ref(executor)
        del executor
        self.assertIsNone(reference())
        self.assertEqual(_support.thread_count_settled(baseline), baseline)

    def test_context_manager_frees_and_close_is_idempotent(self):
        baseline = _support.thread_count()
        with two_threads(self) as executor:
            address = executor.address
            self.assertNotEqual(address, 0)
            self.assertGreater(_support.thread_count(), baseline)
        self.assertTrue(executor.closed)
        self.assertEqual(_support.thread_count_settled(baseline), baseline)
        executor.close()
        executor.close()
        with self.assertRaises(Error) as caught:
            executor.address
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        with self.assertRaises(Error) as caught:
            executor.drain()
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_executor_keeps_its_library(self):
        executor = Executor(_support.library())
        self.assertIs(executor.library, _support.library())


if __name__ == "__main__":
    unittest.main()
