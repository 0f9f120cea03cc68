"""`Executor.on_pool` over a live ForkUnion pool: test/standin's stand-in (our own code exporting
ForkUnion's C functions), loaded into this process with RTLD_GLOBAL so the engine finds it with
dlsym, as a process embedding ForkUnion would. Before loading it, the engine must report that the
process has no ForkUnion."""

from std.atomic import Atomic
from std.ffi import OwnedDLHandle, RTLD, c_int, c_size_t, external_call
from std.os import getenv
from std.testing import assert_equal, assert_true, TestSuite
from uform import *


def add_task(context: Int, task: Int, thread: Int, domain: Int):
    var total = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = total[].fetch_add(Int64(task + 1))


def count_thread(context: Int, task: Int, thread: Int, domain: Int):
    var mask = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = mask[].fetch_add(Int64(1) << Int64(thread))


def test_borrowed_pool() raises:
    var library = Library()
    var path = getenv("UFORM_TEST_FU_STANDIN")
    if not path:
        print("SKIPPED: no $UFORM_TEST_FU_STANDIN (ctest sets it to build/test/libfu_standin.so)")
        return
    # No ForkUnion in the process yet: UNSUPPORTED, naming it. The engine never reads the address.
    var not_a_pool = List[UInt64](length=8, fill=0)
    try:
        _ = Executor.on_pool(library, Int(not_a_pool.unsafe_ptr()))
        raise Error(Status.OK, "on_pool without ForkUnion succeeded")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED, String(e))
        assert_true(e.message.find("ForkUnion") >= 0, e.message)

    var standin = OwnedDLHandle(path, RTLD.NOW | RTLD.GLOBAL)
    var name = List[UInt8](String("mojo").as_bytes())
    name.append(0)
    var pool = standin.call["fu_pool_new", Int](name.unsafe_ptr())
    assert_true(pool != 0)
    assert_true(standin.call["fu_pool_spawn", Bool](pool, c_size_t(2), c_int(0)))
    var before = Int(standin.call["fu_pool_dispatches", c_size_t](pool))
    var domains = library.memory_domains()
    var shared = Executor.on_pool(library, pool, RamOptions.on(domains))
    var description = shared.describe()
    assert_true(description.kind == ExecutorKind.POOL)
    assert_equal(description.threads_count, 2)
    var total = Atomic[Int64](0)
    shared.call[add_task](1000, Int(Pointer(to=total)))
    assert_equal(Int(total.load()), 500500)
    shared.call[add_task](1000, Int(Pointer(to=total)), Schedule.DYNAMIC)
    assert_equal(Int(total.load()), 1001000)
    var mask = Atomic[Int64](0)
    shared.call[count_thread](0, Int(Pointer(to=mask)), Schedule.THREADS)
    assert_equal(Int(mask.load()), 3)
    var outcome = shared.call_deferred[add_task](10, Int(Pointer(to=total)))
    outcome.result()
    assert_equal(Int(total.load()), 1001055)
    shared.drain(Mood.SPINNING)
    shared.drain()
    assert_true(Int(standin.call["fu_pool_dispatches", c_size_t](pool)) > before, "the pool was not used")
    # The executor must go before the pool it borrows.
    _ = outcome^
    _ = shared^
    standin.call["fu_pool_delete", NoneType](pool)
    _ = standin^


struct _DropInside:
    """What `drop_pending_inside` saw, for the test to check after the call."""

    var other: Int  # the second executor over the same pool, an `Executor` address
    var owned: Optional[Executor]  # a third one, which the task takes and drops before its outcome
    var inner_runs: Atomic[Int64]  # incremented by the call the task queues on `other` and abandons
    var owned_runs: Atomic[Int64]  # incremented by the call queued on `owned`
    var queued: Atomic[Int64]  # poll() just after queueing
    var waited: Atomic[Int64]  # wait() without a timeout
    var timed: Atomic[Int64]  # wait(30.0)
    var polled: Atomic[Int64]  # poll() after both waits
    var result_kind: Atomic[Int64]  # the kind result() raised, -1 if it did not
    var result_named_pool: Atomic[Int64]  # 1 when result()'s message names the ForkUnion pool
    var dropped: Atomic[Int64]  # 1 once the drop returned
    var raised: Atomic[Int64]  # 1 if queueing raised

    def __init__(out self, other: Int, var owned: Executor):
        self.other = other
        self.owned = owned^
        self.inner_runs = Atomic[Int64](0)
        self.owned_runs = Atomic[Int64](0)
        self.queued = Atomic[Int64](-1)
        self.waited = Atomic[Int64](-1)
        self.timed = Atomic[Int64](-1)
        self.polled = Atomic[Int64](-1)
        self.result_kind = Atomic[Int64](-1)
        self.result_named_pool = Atomic[Int64](0)
        self.dropped = Atomic[Int64](0)
        self.raised = Atomic[Int64](0)


def count_inner(context: Int, task: Int, thread: Int, domain: Int):
    var runs = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = runs[].fetch_add(1)


def drop_pending_inside(context: Int, task: Int, thread: Int, domain: Int):
    var state = Pointer[_DropInside, MutAnyOrigin](unsafe_from_address=context)
    var other = Pointer[Executor, MutAnyOrigin](unsafe_from_address=state[].other)
    try:
        # Queued on the second executor: it needs the pool this task runs on, so it stays pending.
        var outcome = other[].call_deferred[count_inner](1, Int(Pointer(to=state[].inner_runs)))
        state[].queued.store(Int64(outcome.poll().code))
        state[].waited.store(Int64(outcome.wait().code))  # would wait on itself: CONTENDED at once
        state[].timed.store(Int64(outcome.wait(30.0).code))
        state[].polled.store(Int64(outcome.poll().code))
        try:
            outcome.result()
        except e:
            state[].result_kind.store(Int64(e.kind.code))
            state[].result_named_pool.store(Int64(1) if e.message.find("ForkUnion pool") >= 0 else Int64(0))
        # Dropping it could never wait for its call here: it is abandoned, its memory and its
        # executor's handle kept, and the drop returns.
        _ = outcome^
        state[].dropped.store(1)
        # An abandoned outcome holding the last reference to its executor must not free it either
        # (freeing waits for its calls, which need this pool too).
        var executor = state[].owned.take()
        var last = executor.call_deferred[count_inner](1, Int(Pointer(to=state[].owned_runs)))
        _ = executor^
        _ = last^
        state[].dropped.store(2)
    except:
        state[].raised.store(1)


def test_pending_outcome_dropped_inside_its_pool() raises:
    var library = Library()
    var path = getenv("UFORM_TEST_FU_STANDIN")
    if not path:
        print("SKIPPED: no $UFORM_TEST_FU_STANDIN (ctest sets it to build/test/libfu_standin.so)")
        return
    # The abandoned outcome keeps the second executor's handle for good, and the engine needs a pool
    # to outlive its executors: the stand-in stays loaded (RTLD_NODELETE) and the pool is never
    # deleted. (A broken drop hangs in the task; ctest's timeout ends it.)
    var standin = OwnedDLHandle(path, RTLD.NOW | RTLD.GLOBAL | RTLD.NODELETE)
    var name = List[UInt8](String("mojo-abandon").as_bytes())
    name.append(0)
    var pool = standin.call["fu_pool_new", Int](name.unsafe_ptr())
    assert_true(pool != 0)
    assert_true(standin.call["fu_pool_spawn", Bool](pool, c_size_t(2), c_int(0)))
    var first = Executor.on_pool(library, pool)
    var second = Executor.on_pool(library, pool)
    var state = _DropInside(Int(Pointer(to=second)), Executor.on_pool(library, pool))
    first.call[drop_pending_inside](1, Int(Pointer(to=state)))
    assert_equal(Int(state.raised.load()), 0, "queueing the inner call raised")
    assert_equal(Int(state.dropped.load()), 2, "a drop inside the task did not return")
    assert_equal(Int(state.queued.load()), Int(Status.PENDING.code))
    assert_equal(Int(state.waited.load()), Int(Status.CONTENDED.code))
    assert_equal(Int(state.timed.load()), Int(Status.CONTENDED.code))
    assert_equal(Int(state.polled.load()), Int(Status.PENDING.code))
    assert_equal(Int(state.result_kind.load()), Int(Status.CONTENDED.code))
    assert_equal(Int(state.result_named_pool.load()), 1, "result()'s CONTENDED does not name the pool")
    # The pool is free again: the abandoned call still runs, once.
    second.drain()
    assert_equal(Int(state.inner_runs.load()), 1)
    first.drain()
    assert_equal(Int(state.inner_runs.load()), 1)
    # The third executor is reachable only through its abandoned outcome, so nothing here can
    # drain it: its call runs as soon as its leader gets the pool. Wait for that, up to 60 s.
    for _ in range(6000):
        if state.owned_runs.load() != 0:
            break
        _ = external_call["usleep", c_int](c_int(10000))
    assert_equal(Int(state.owned_runs.load()), 1, "the call of the abandoned last reference never ran")
    # Both executors go (the second's handle stays with the abandoned outcome); the pool stays.
    _ = first^
    _ = second^
    _ = state^
    _ = pool
    _ = standin^


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
