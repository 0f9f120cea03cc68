"""Executors from Mojo: every constructor of the reference and its errors, CONTENDED from a second
thread, drain and moods, and Mojo functions run over N tasks, blocking and deferred."""

from std.atomic import Atomic
from std.ffi import c_int, external_call
from std.testing import assert_equal, assert_false, assert_true, TestSuite
from uform import *


def expect_error(kind: Status, contains: String, error: Error) raises:
    """Asserts `error` has `kind` and a message containing `contains`."""
    assert_equal(error.kind.name(), kind.name(), String(error))
    assert_true(error.message.find(contains) >= 0, String("message lacks '", contains, "': ", error.message))


def allowed_cores() raises -> Int:
    """Cores this process may run on (taskset and cpusets included), as the engine counts them."""
    return Library().cores_count()


# -- tasks --

def add_task(context: Int, task: Int, thread: Int, domain: Int):
    """Adds `task + 1` to the atomic at `context`."""
    var total = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = total[].fetch_add(Int64(task + 1))


def count_thread(context: Int, task: Int, thread: Int, domain: Int):
    """Adds `1 << thread` to the atomic at `context`."""
    var mask = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = mask[].fetch_add(Int64(1) << Int64(thread))


comptime _ANY = MutAnyOrigin


def noop(task: Int, thread: Int, domain: Int):
    pass


def test_inline_executor() raises:
    var library = Library()
    var inline = Executor(library)
    assert_equal(inline.address, NULL_ADDRESS)
    var description = inline.describe()
    assert_true(description.kind == ExecutorKind.INLINE)
    assert_equal(description.threads_count, 1)
    var total = Atomic[Int64](0)
    inline.call[add_task](100, Int(Pointer(to=total)))
    assert_equal(Int(total.load()), 5050)
    var threads = Atomic[Int64](0)
    inline.call[count_thread](10, Int(Pointer(to=threads)))
    assert_equal(Int(threads.load()), 10)  # every task on the calling thread, thread 0
    inline.drain()
    inline.drain(Mood.SPINNING)
    inline.for_n[noop](0)


def test_for_ram_defaults() raises:
    var library = Library()
    var threads = Executor.for_ram(library)
    var description = threads.describe()
    assert_true(description.kind == ExecutorKind.RAM)
    assert_equal(description.threads_count, max(1, allowed_cores() * 7 // 8))
    assert_true(description.cpu_class == library.cpu_class())
    assert_equal(description.deferred_limit, DEFERRED_LIMIT_DEFAULT)
    assert_true(description.mood == Mood.PARKED)
    assert_true(threads.address != NULL_ADDRESS)


def test_for_ram_options() raises:
    var library = Library()
    var domains = library.memory_domains()
    var threads = Executor.for_ram(
        library, RamOptions.on(domains, cpu_class=CPUClass.SERIAL), threads=allowed_cores(), deferred_limit=7
    )
    var description = threads.describe()
    assert_equal(description.threads_count, allowed_cores())
    assert_equal(description.domains_count, len(domains))
    assert_true(description.cpu_class == CPUClass.SERIAL)
    assert_equal(description.deferred_limit, 7)


def test_for_ram_errors() raises:
    var library = Library()
    try:
        _ = Executor.for_ram(library, threads=-1)
        raise Error(Status.OK, "for_ram(threads=-1) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "threads", e)
    var too_many = allowed_cores() + 1
    try:
        _ = Executor.for_ram(library, threads=too_many)
        raise Error(Status.OK, "for_ram oversubscribed")
    except e:
        expect_error(Status.INVALID_ARGUMENT, String(too_many), e)
    try:
        _ = Executor.for_ram(library, deferred_limit=-5)
        raise Error(Status.OK, "for_ram(deferred_limit=-5) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "deferred_limit", e)
    var unknown: List[Int32] = [4095]
    try:
        _ = Executor.for_ram(library, RamOptions.on(unknown))
        raise Error(Status.OK, "for_ram on node 4095 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "4095", e)
    # A negative count would reach C as about 2^64 entries, past the caller's array.
    var node: List[Int32] = [0]
    var negative_count = RamOptions.on(node)
    negative_count.memory_domains_count = -1
    try:
        _ = Executor.for_ram(library, negative_count, threads=1)
        raise Error(Status.OK, "for_ram with memory_domains_count -1 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "memory_domains_count must be zero or more, got -1", e)
    var twice: List[Int32] = [0, 0]
    try:
        _ = Executor.for_ram(library, RamOptions.on(twice))
        raise Error(Status.OK, "for_ram on a repeated node succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
    try:
        _ = Executor.for_ram(library, RamOptions(cpu_class=CPUClass(Int32(99))))
        raise Error(Status.OK, "for_ram with class 99 succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
    # A class the CPU cannot run: WASM classes are never native.
    try:
        _ = Executor.for_ram(library, RamOptions(cpu_class=CPUClass.WASM32_V128))
        raise Error(Status.OK, "for_ram pinned to WASM32_V128 succeeded")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED, String(e))


def test_on_pool_errors() raises:
    var library = Library()
    try:
        _ = Executor.on_pool(library, NULL_ADDRESS)
        raise Error(Status.OK, "on_pool(NULL) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "fu_pool is NULL", e)
    try:
        _ = Executor.on_pool(library, 4096, deferred_limit=-1)
        raise Error(Status.OK, "on_pool(deferred_limit=-1) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "deferred_limit", e)
    # test_pool runs on a live pool; here no ForkUnion is loaded, so the engine never reads it.
    var not_a_pool = List[UInt64](length=8, fill=0)
    try:
        _ = Executor.on_pool(library, Int(not_a_pool.unsafe_ptr()))
        raise Error(Status.OK, "on_pool without ForkUnion succeeded")
    except e:
        expect_error(Status.UNSUPPORTED, "ForkUnion", e)


def test_for_vram_argument_errors() raises:
    var library = Library()
    # Arguments are checked before the driver, so these hold with and without GPUs.
    var stream_array = List[UInt64](length=1, fill=0)
    try:
        _ = Executor.for_vram(library, streams=Int(stream_array.unsafe_ptr()))
        raise Error(Status.OK, "for_vram with borrowed streams succeeded")
    except e:
        expect_error(Status.UNSUPPORTED, "stream", e)
    var negative: List[Int32] = [-1]
    try:
        _ = Executor.for_vram(library, VramOptions.on(negative))
        raise Error(Status.OK, "for_vram on ordinal -1 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "-1", e)
    var repeated: List[Int32] = [0, 0]
    try:
        _ = Executor.for_vram(library, VramOptions.on(repeated))
        raise Error(Status.OK, "for_vram on a repeated ordinal succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
    try:
        _ = Executor.for_vram(library, VramOptions(gpu_class=GPUClass(Int32(77))))
        raise Error(Status.OK, "for_vram with class 77 succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
    try:
        _ = Executor.for_vram(library, scratch_limit=-1)
        raise Error(Status.OK, "for_vram(scratch_limit=-1) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "scratch_limit", e)
    var negative_count = VramOptions()
    negative_count.devices_count = -1
    try:
        _ = Executor.for_vram(library, negative_count)
        raise Error(Status.OK, "for_vram with devices_count -1 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "devices_count must be zero or more, got -1", e)
    # The decoders' RAM options are checked before the driver too.
    try:
        _ = Executor.for_vram(library, ram=RamOptions(cpu_class=CPUClass(Int32(55))))
        raise Error(Status.OK, "for_vram with a RAM class of 55 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "cpu_class 55", e)


def test_drain_and_moods() raises:
    var library = Library()
    var threads = Executor.for_ram(library)
    threads.drain(Mood.SPINNING)
    assert_true(threads.describe().mood == Mood.SPINNING)
    var total = Atomic[Int64](0)
    threads.call[add_task](1000, Int(Pointer(to=total)))
    assert_equal(Int(total.load()), 500500)
    threads.drain()
    assert_true(threads.describe().mood == Mood.PARKED)
    assert_equal(Int(Mood.PARKED.code), 0)
    assert_equal(Int(Mood.SPINNING.code), 1)
    try:
        threads.drain(Mood(Int32(9)))
        raise Error(Status.OK, "drain(Mood 9) succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))


def test_calls_blocking() raises:
    var library = Library()
    var threads = Executor.for_ram(library)
    var count = threads.describe().threads_count
    for schedule in [Schedule.STATIC, Schedule.DYNAMIC]:
        var total = Atomic[Int64](0)
        threads.call[add_task](10000, Int(Pointer(to=total)), schedule)
        assert_equal(Int(total.load()), 50005000)
    var mask = Atomic[Int64](0)
    threads.call[count_thread](0, Int(Pointer(to=mask)), Schedule.THREADS)
    assert_equal(Int(mask.load()), (1 << count) - 1)  # every thread once
    threads.for_threads[noop]()
    threads.for_n[noop](100, Schedule.DYNAMIC)
    try:
        threads.for_n[noop](-1)
        raise Error(Status.OK, "for_n(-1) succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "n must be", e)
    try:
        threads.for_n[noop](4, Schedule(Int32(5)))
        raise Error(Status.OK, "a call with schedule 5 succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))


def test_calls_deferred() raises:
    var library = Library()
    var threads = Executor.for_ram(library)
    var first = Atomic[Int64](0)
    var second = Atomic[Int64](0)
    var a = threads.call_deferred[add_task](100, Int(Pointer(to=first)))
    var b = threads.call_deferred[add_task](200, Int(Pointer(to=second)), Schedule.DYNAMIC)
    assert_true(b.wait() == Status.OK)
    a.result()
    assert_true(a.poll() == Status.OK)
    assert_equal(a.message(), "")
    assert_equal(Int(first.load()), 5050)
    assert_equal(Int(second.load()), 20100)
    var c = threads.for_n_deferred[noop](10)
    threads.drain()  # waits for every call submitted before it
    assert_true(c.poll() == Status.OK)
    # The inline executor runs a deferred call at submission.
    var inline = Executor(library)
    var d = inline.for_n_deferred[noop](3)
    assert_true(d.poll() == Status.OK)


# -- a task that holds its executor until released, for CONTENDED and DEFERRED_FULL --

struct Gate(Movable):
    var entered: Atomic[Int64]
    var release: Atomic[Int64]
    var executor: Int
    var library_path: String
    var second_status: Atomic[Int64]

    def __init__(out self):
        self.entered = Atomic[Int64](0)
        self.release = Atomic[Int64](0)
        self.executor = 0
        self.library_path = String()
        self.second_status = Atomic[Int64](-1)


def hold(context: Int, task: Int, thread: Int, domain: Int):
    """Marks the gate entered, then waits until it is released."""
    var gate = Pointer[Gate, MutAnyOrigin](unsafe_from_address=context)
    _ = gate[].entered.fetch_add(1)
    while gate[].release.load() == 0:
        _ = external_call["sched_yield", c_int]()


def second_thread(context: Int) abi("C") -> Int:
    """Waits for the first call to hold the executor, then calls into it from this thread."""
    var gate = Pointer[Gate, MutAnyOrigin](unsafe_from_address=context)
    while gate[].entered.load() == 0:
        _ = external_call["sched_yield", c_int]()
    try:
        var library = Library()
        var executor = Executor(library=library, address=gate[].executor)
        try:
            executor.for_n[noop](4)
            _ = gate[].second_status.fetch_add(1)  # OK: 0
        except e:
            _ = gate[].second_status.fetch_add(Int64(Int(e.kind.code)) + 1)
        executor.address = NULL_ADDRESS  # the handle is the first thread's, not freed here
        executor._owner[].address = NULL_ADDRESS
    except:
        pass
    gate[].release.store(1)
    return 0


def test_contended_from_a_second_thread() raises:
    var library = Library()
    var threads = Executor.for_ram(library, threads=1)
    var gate = Gate()
    gate.executor = threads.address
    var thread_id = UInt64(0)
    assert_equal(
        Int(external_call["pthread_create", c_int](Pointer(to=thread_id), 0, second_thread, Int(Pointer(to=gate)))), 0
    )
    threads.call[hold](1, Int(Pointer(to=gate)))  # released by the second thread, after its call
    _ = external_call["pthread_join", c_int](thread_id, 0)
    assert_equal(Int(gate.second_status.load()), Int(Status.CONTENDED.code))
    # Free again: the next call runs.
    threads.for_n[noop](4)


def test_deferred_full_and_pending_outcome() raises:
    var library = Library()
    var threads = Executor.for_ram(library, threads=1, deferred_limit=1)
    var gate = Gate()
    var held = threads.call_deferred[hold](1, Int(Pointer(to=gate)))
    assert_true(held.poll() == Status.PENDING)
    assert_true(held.wait(0.01) == Status.PENDING)
    assert_equal(held.message(), "")
    try:
        _ = threads.for_n_deferred[noop](1)
        raise Error(Status.OK, "a deferred call past deferred_limit was queued")
    except e:
        expect_error(Status.DEFERRED_FULL, "deferred_limit", e)
    gate.release.store(1)
    held.result()
    assert_equal(Int(gate.entered.load()), 1)
    # An outcome no call was handed has no result: PENDING, saying why, not an empty message.
    var unused = Outcome(library)
    try:
        unused.result()
        raise Error(Status.OK, "result() of an unused outcome returned")
    except e:
        expect_error(Status.PENDING, "no call was handed this outcome", e)


# -- a task waiting on its own executor's pending calls --

struct SelfWait(Movable):
    var later: Optional[Outcome]
    var queued: Atomic[Int64]
    var forever: Atomic[Int64]
    var timed: Atomic[Int64]
    var polled: Atomic[Int64]
    var dropped: Atomic[Int64]

    def __init__(out self):
        self.later = None
        self.queued = Atomic[Int64](0)
        self.forever = Atomic[Int64](-1)
        self.timed = Atomic[Int64](-1)
        self.polled = Atomic[Int64](-1)
        self.dropped = Atomic[Int64](0)


def wait_on_later(context: Int, task: Int, thread: Int, domain: Int):
    """Waits on a call queued behind this one on the same executor, then drops its outcome here."""
    var box = Pointer[SelfWait, MutAnyOrigin](unsafe_from_address=context)
    while box[].queued.load() == 0:  # until the test stored the later call's outcome
        _ = external_call["sched_yield", c_int]()
    box[].forever.store(Int64(Int(box[].later.value().wait().code)))
    box[].timed.store(Int64(Int(box[].later.value().wait(5.0).code)))
    box[].polled.store(Int64(Int(box[].later.value().poll().code)))
    var taken = box[].later.take()  # dropped inside the task: abandoned, not waited on forever
    _ = taken^
    box[].dropped.store(1)


def test_waiting_inside_a_task_on_its_own_executor() raises:
    """The later call cannot start before this task returns: CONTENDED at once (it waited forever)."""
    var library = Library()
    var threads = Executor.for_ram(library, threads=1)
    var box = SelfWait()
    var first = threads.call_deferred[wait_on_later](1, Int(Pointer(to=box)))
    box.later = threads.for_n_deferred[noop](1)
    box.queued.store(1)
    first.result()
    assert_equal(Int(box.forever.load()), Int(Status.CONTENDED.code))
    assert_equal(Int(box.timed.load()), Int(Status.CONTENDED.code))
    assert_equal(Int(box.polled.load()), Int(Status.PENDING.code))
    assert_equal(Int(box.dropped.load()), 1)
    threads.drain()  # the abandoned call ran once the task returned
    threads.for_n[noop](2)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
