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


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
