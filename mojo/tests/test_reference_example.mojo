"""The snippet at the top of the reference (seed/executors.md), compiled unchanged.

`snippet` holds its four lines exactly as the reference writes them; the names it leaves to the
reader (`library`, `domains`, `devices`, `fork_union_pool`) are its arguments. Where this machine has
8 allowed cores, a ForkUnion pool and a GPU, it runs through; elsewhere it must fail exactly as
documented at the first line the machine cannot serve. Then each line runs on its own (the same
words), so every line is exercised wherever it can be: the RAM line with `threads=8` (or, with fewer
cores, its documented error, then `threads=0`), the pool line on test/standin's ForkUnion stand-in,
and the VRAM line on a GPU (or the fake driver), else its documented UNSUPPORTED.
"""

from std.ffi import OwnedDLHandle, RTLD, c_int, c_size_t, external_call
from std.os import getenv
from std.testing import assert_equal, assert_true, TestSuite
from uform import Library, Executor, RamOptions, VramOptions, Mood, Status, Error, ExecutorKind


def snippet(library: Library, domains: List[Int32], devices: List[Int32], fork_union_pool: Int) raises:
    var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)  # zero takes 7/8 of the cores
    var shared = Executor.on_pool(library, fork_union_pool)                       # borrows a fu_pool_t
    var streams = Executor.for_vram(library, VramOptions.on(devices))             # one host thread, a stream per device
    threads.drain(Mood.SPINNING)                                                # waits until no call holds it, then keeps spinning
    assert_true(threads.describe().mood == Mood.SPINNING)
    assert_true(shared.describe().kind == ExecutorKind.POOL)
    assert_equal(streams.describe().devices_count, len(devices))


def allowed_cores() raises -> Int:
    """Cores this process may run on (taskset and cpusets included), as the engine counts them."""
    return Library().cores_count()


def test_reference_snippet() raises:
    var library = Library()
    var domains = library.memory_domains()
    var devices = List[Int32]()
    for ordinal in range(len(library.gpu_devices())):
        devices.append(Int32(ordinal))
    var path = getenv("UFORM_TEST_FU_STANDIN")
    if not path:
        print("SKIPPED: no $UFORM_TEST_FU_STANDIN (ctest sets it to build/test/libfu_standin.so)")
        return
    var standin = OwnedDLHandle(path, RTLD.NOW | RTLD.GLOBAL)  # ForkUnion in the process
    var name = List[UInt8](String("reference").as_bytes())
    name.append(0)
    var fork_union_pool = standin.call["fu_pool_new", Int](name.unsafe_ptr())
    assert_true(standin.call["fu_pool_spawn", Bool](fork_union_pool, c_size_t(1), c_int(0)))

    # The four lines at once.
    var enough_cores = allowed_cores() >= 8
    try:
        snippet(library, domains, devices, fork_union_pool)
        assert_true(enough_cores and len(devices) > 0, "the snippet ran where the machine cannot serve it")
        print("the reference snippet ran through")
    except e:
        if not enough_cores:
            assert_true(String(e).find("INVALID_ARGUMENT") >= 0, String(e))
            print("the snippet stopped where documented, on", allowed_cores(), "cores:", e)
        else:
            assert_equal(len(devices), 0, String(e))
            assert_true(String(e).find("UNSUPPORTED") >= 0, String(e))
            print("the snippet stopped where documented, without a GPU:", e)

    # var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)
    if enough_cores:
        var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)
        assert_equal(threads.describe().threads_count, 8)
        threads.drain(Mood.SPINNING)
    else:
        try:
            var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)
            raise Error(Status.OK, "threads=8 on fewer than 8 allowed cores succeeded")
        except e:
            assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
            assert_true(e.message.find("8") >= 0, e.message)
        # "zero takes 7/8 of the cores", at least one.
        var threads = Executor.for_ram(library, RamOptions.on(domains), threads=0)
        assert_equal(threads.describe().threads_count, max(1, allowed_cores() * 7 // 8))
        # threads.drain(Mood.SPINNING)
        threads.drain(Mood.SPINNING)
        assert_true(threads.describe().mood == Mood.SPINNING)

    # var shared = Executor.on_pool(library, fork_union_pool)
    var shared = Executor.on_pool(library, fork_union_pool)
    assert_true(shared.describe().kind == ExecutorKind.POOL)
    _ = shared^  # before the pool it borrows

    # var streams = Executor.for_vram(library, VramOptions.on(devices))
    if len(devices) > 0:
        var streams = Executor.for_vram(library, VramOptions.on(devices))
        assert_equal(streams.describe().devices_count, len(devices))
    else:
        try:
            var streams = Executor.for_vram(library, VramOptions.on(devices))
            raise Error(Status.OK, "for_vram succeeded without a GPU")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))
    standin.call["fu_pool_delete", NoneType](fork_union_pool)
    _ = standin^


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
