"""GPU listing and VRAM executors from Mojo. Without a GPU the listing is empty and every device
verb fails as documented; with GPUs (an H200 host, or test/gpu/fake_cuda.c under ctest's
mojo_test_gpu_fake_gpu) the device half runs for real. UFORM_TEST_REQUIRE_GPU=1 makes an empty
listing a failure."""

from std.atomic import Atomic
from std.os import getenv
from std.testing import assert_equal, assert_false, assert_true, TestSuite
from uform import *


def expect_error(kind: Status, contains: String, error: Error) raises:
    assert_equal(error.kind.name(), kind.name(), String(error))
    assert_true(error.message.find(contains) >= 0, String("message lacks '", contains, "': ", error.message))


def add_task(context: Int, task: Int, thread: Int, domain: Int):
    var total = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = total[].fetch_add(Int64(task + 1))


def test_listing() raises:
    var library = Library()
    var devices = library.gpu_devices()
    if len(devices) == 0:
        assert_true(getenv("UFORM_TEST_REQUIRE_GPU") != "1", "UFORM_TEST_REQUIRE_GPU=1, yet no GPU is listed")
        try:
            library.gpu_status()
            raise Error(Status.OK, "gpu_status succeeded with no GPU listed")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))
            assert_true(e.message.byte_length() > 0)
        print("SKIPPED the device half: no GPU listed")
        return
    library.gpu_status()
    for ordinal in range(len(devices)):
        ref device = devices[ordinal]
        assert_true(device.vendor == GPUVendor.NVIDIA, String("device ", ordinal, " vendor ", device.vendor.code))
        assert_equal(Int(device.vendor_ordinal), ordinal)  # NVIDIA ordinals are the driver's
        assert_true(device.gpu_class != GPUClass.UNKNOWN)
        assert_true(device.compute_units > 0)
        assert_true(device.memory_bytes > 0)
        assert_true(device.name().byte_length() > 0)
        print("GPU", ordinal, device.name(), library.gpu_class_name(device.gpu_class), device.compute_units, "units",
              device.memory_bytes, "bytes")


def test_unlisted_device() raises:
    var empty = GPUDevice()
    assert_true(empty.vendor == GPUVendor.UNKNOWN)
    assert_equal(Int(empty.vendor_ordinal), 0)
    assert_true(empty.gpu_class == GPUClass.UNKNOWN)
    assert_equal(Int(empty.compute_units), 0)
    assert_equal(Int(empty.memory_bytes), 0)
    assert_equal(empty.name(), "")


def test_for_vram() raises:
    var library = Library()
    var devices = library.gpu_devices()
    if len(devices) == 0:
        try:
            _ = Executor.for_vram(library)
            raise Error(Status.OK, "for_vram succeeded with no GPU listed")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))
        var first: List[Int32] = [0]
        try:
            _ = Executor.for_vram(library, VramOptions.on(first))
            raise Error(Status.OK, "for_vram on ordinal 0 succeeded with no GPU listed")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))
        return
    var ordinals = List[Int32]()
    for ordinal in range(len(devices)):
        ordinals.append(Int32(ordinal))
    var streams = Executor.for_vram(library, VramOptions.on(ordinals))
    var description = streams.describe()
    assert_true(description.kind == ExecutorKind.VRAM)
    assert_equal(description.devices_count, len(devices))
    assert_true(description.gpu_class == devices[0].gpu_class)
    # A host task runs on the executor's decoder threads.
    var total = Atomic[Int64](0)
    streams.call[add_task](1000, Int(Pointer(to=total)))
    assert_equal(Int(total.load()), 500500)
    var outcome = streams.call_deferred[add_task](10, Int(Pointer(to=total)))
    outcome.result()
    assert_equal(Int(total.load()), 500555)
    streams.drain(Mood.SPINNING)
    assert_true(streams.describe().mood == Mood.SPINNING)
    streams.drain()
    # One derived device, with a scratch limit.
    var derived = Executor.for_vram(library, scratch_limit=1 << 20)
    assert_equal(derived.describe().devices_count, 1)
    assert_equal(derived.describe().scratch_limit, 1 << 20)
    # An ordinal past the listing.
    var past: List[Int32] = [Int32(len(devices))]
    try:
        _ = Executor.for_vram(library, VramOptions.on(past))
        raise Error(Status.OK, "for_vram past the listing succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT or e.kind == Status.UNSUPPORTED, String(e))
    # A class above the device's: Rubin is above every listed class but Rubin itself.
    if devices[0].gpu_class != GPUClass.NVIDIA_RUBIN:
        var first: List[Int32] = [0]
        try:
            _ = Executor.for_vram(library, VramOptions.on(first, gpu_class=GPUClass.NVIDIA_RUBIN))
            raise Error(Status.OK, "for_vram pinned above the device succeeded")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
