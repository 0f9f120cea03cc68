"""Statuses and errors, options and their C layouts, and the library's loading, from Mojo."""

from std.ffi import c_int, c_size_t
from std.os import getenv, setenv, unsetenv
from std.sys import size_of
from std.testing import assert_equal, assert_false, assert_true, TestSuite
from uform import *
from uform.executor import _CallArguments, _ExecutorDescriptionArguments
from uform.library import _GPUDeviceC
from uform.mesh import _MeshDescriptionArguments, _MeshOptionsArguments


def test_statuses_by_name_and_number() raises:
    var library = Library()
    var statuses: List[Status] = [
        Status.OK, Status.CONTENDED, Status.UNSUPPORTED, Status.CONFIG_MISMATCH, Status.INVALID_ARGUMENT,
        Status.OUT_OF_MEMORY, Status.SYSTEM_ERROR, Status.TIMEOUT, Status.DEVICE_FAULT, Status.DEFERRED_FULL,
        Status.FORKED, Status.RESIDENCY_MISMATCH, Status.LIMIT_EXCEEDED, Status.PEER_LOST, Status.CORRUPT_FILE,
        Status.PENDING,
    ]
    for code in range(len(statuses)):
        assert_equal(Int(statuses[code].code), code)
        # The engine's names are the lower-case spelling of ours.
        assert_equal(library.status_name(statuses[code]), statuses[code].name().lower())
    assert_equal(library.status_name(Status(Int32(16))), "invalid")
    assert_equal(Status(Int32(16)).name(), "INVALID_16")
    assert_equal(String(Status.CONTENDED), "Status.CONTENDED")


def test_error() raises:
    var error = Error(Status.CONFIG_MISMATCH, "peers disagree on gpu_class")
    assert_true(error.kind == Status.CONFIG_MISMATCH)
    assert_equal(error.message, "peers disagree on gpu_class")
    assert_equal(String(error), "CONFIG_MISMATCH: peers disagree on gpu_class")
    var library = Library()
    try:
        library.check(c_int(2))
        raise Error(Status.OK, "check(UNSUPPORTED) returned")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED)


def test_moods_and_schedules() raises:
    assert_equal(Int(Mood.PARKED.code), 0)
    assert_equal(Int(Mood.SPINNING.code), 1)
    assert_equal(Int(Schedule.STATIC.code), 0)
    assert_equal(Int(Schedule.DYNAMIC.code), 1)
    assert_equal(Int(Schedule.THREADS.code), 2)
    assert_equal(Int(ExecutorKind.INLINE.code), 0)
    assert_equal(Int(ExecutorKind.VRAM.code), 3)
    assert_equal(String(Mood.SPINNING), "Mood.SPINNING")


def test_reference_enums_write_explicitly() raises:
    # The reference's own enumerations are not Writable (print(CPUClass.AMD_GENOA) does not
    # compile): their docstrings point at write_to with a Writer, or at name().
    var text = String()
    CPUClass.AMD_GENOA.write_to(text)
    text += " "
    GPUClass.NVIDIA_HOPPER.write_to(text)
    text += " "
    GPUVendor.AMD.write_to(text)
    text += " "
    MultimemTier.PEER_READ.write_to(text)
    assert_equal(text, "CPUClass.AMD_GENOA GPUClass.NVIDIA_HOPPER GPUVendor.AMD MultimemTier.PEER_READ")
    assert_equal(CPUClass.AMD_GENOA.name(), "AMD_GENOA")
    assert_equal(GPUVendor(Int32(9)).name(), "INVALID_9")


def test_ram_options() raises:
    var derived = RamOptions()
    assert_false(derived.memory_domains)
    assert_equal(derived.memory_domains_count, 0)
    assert_true(derived.cpu_class == CPUClass.UNKNOWN)
    var arguments = derived.arguments()
    assert_equal(arguments.memory_domains, 0)
    assert_equal(Int(arguments.memory_domains_count), 0)
    assert_equal(Int(arguments.cpu_class), 0)
    var nodes: List[Int32] = [0, 1, 3]
    var named = RamOptions.on(nodes, cpu_class=CPUClass.INTEL_HASWELL)
    assert_equal(named.memory_domains_count, 3)
    assert_true(named.cpu_class == CPUClass.INTEL_HASWELL)
    var layout = named.arguments()
    assert_equal(layout.memory_domains, Int(nodes.unsafe_ptr()))  # borrowed, not copied
    assert_equal(Int(layout.memory_domains_count), 3)
    assert_equal(Int(layout.cpu_class), 2)
    var empty = List[Int32]()
    assert_false(RamOptions.on(empty).memory_domains)  # empty derives, as zero entries do in C
    var pinned = RamOptions(cpu_class=CPUClass.SERIAL)
    assert_true(pinned.cpu_class == CPUClass.SERIAL)
    var copy = named  # ImplicitlyCopyable
    assert_equal(copy.memory_domains_count, 3)


def test_vram_options() raises:
    var derived = VramOptions()
    assert_false(derived.devices)
    assert_equal(derived.devices_count, 0)
    assert_true(derived.gpu_class == GPUClass.UNKNOWN)
    var ordinals: List[Int32] = [1, 0]
    var named = VramOptions.on(ordinals, gpu_class=GPUClass.NVIDIA_HOPPER)
    assert_equal(named.devices_count, 2)
    var layout = named.arguments()
    assert_equal(layout.devices, Int(ordinals.unsafe_ptr()))
    assert_equal(Int(layout.gpu_class), 3)
    assert_true(VramOptions(gpu_class=GPUClass.NVIDIA_ADA).gpu_class == GPUClass.NVIDIA_ADA)


def test_c_layouts() raises:
    # The sizes the C compiler gives these structs on LP64 (see include/uform.h).
    assert_equal(size_of[RamOptionsArguments](), 24)
    assert_equal(size_of[VramOptionsArguments](), 24)
    assert_equal(size_of[_GPUDeviceC](), 24)
    assert_equal(size_of[_CallArguments](), 48)
    assert_equal(size_of[_ExecutorDescriptionArguments](), 64)
    assert_equal(size_of[_MeshOptionsArguments](), 48)
    assert_equal(size_of[_MeshDescriptionArguments](), 48)
    assert_equal(size_of[c_size_t](), 8)


def test_library_loading() raises:
    var library = Library()
    assert_equal(library.version(), "0.1.0")
    assert_equal(library.path, getenv("UFORM_LIBRARY"))
    var copy = library.copy()
    assert_equal(copy.version(), library.version())
    assert_true(library.cpu_class() != CPUClass.UNKNOWN)
    assert_equal(len(library.memory_domains()) >= 1, True)
    try:
        _ = Library("/nonexistent/libuform.so")
        raise Error(Status.OK, "a missing file loaded")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED)
        assert_true(e.message.find("/nonexistent/libuform.so") >= 0, e.message)
    # A file that loads but is not libuform, and an empty path (dlopen's program itself): refused,
    # never a call of a missing symbol (which aborts the process).
    try:
        _ = Library("libm.so.6")
        raise Error(Status.OK, "libm loaded as libuform")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED, String(e))
        assert_true(e.message.find("libm.so.6 loads but is not libuform") >= 0, e.message)
    # A library of this ABI that lacks a function the package calls: refused as it loads, naming
    # the function (calling it would abort the process).
    var partial = getenv("UFORM_TEST_PARTIAL_LIBRARY")
    if partial:
        try:
            _ = Library(partial)
            raise Error(Status.OK, "a partial libuform loaded")
        except e:
            assert_true(e.kind == Status.UNSUPPORTED, String(e))
            assert_true(e.message.find(String(partial, " is libuform 0.")) >= 0, e.message)
            assert_true(e.message.find(" but lacks uform_cpu_class_name, which this package calls") >= 0, e.message)
    else:
        print("SKIPPED (one case): no $UFORM_TEST_PARTIAL_LIBRARY (ctest sets it to build/test/libuform_partial.so)")
    try:
        _ = Library("")
        raise Error(Status.OK, "an empty path loaded")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED, String(e))
        assert_true(e.message.find("empty") >= 0, e.message)
    # $UFORM_LIBRARY alone, when set: a wrong one names itself and is not passed over.
    var saved = getenv("UFORM_LIBRARY")
    _ = setenv("UFORM_LIBRARY", "/nonexistent/elsewhere.so")
    try:
        _ = Library()
        raise Error(Status.OK, "a wrong $UFORM_LIBRARY loaded")
    except e:
        assert_true(e.kind == Status.UNSUPPORTED)
        assert_true(e.message.find("$UFORM_LIBRARY") >= 0, e.message)
        assert_true(e.message.find("/nonexistent/elsewhere.so") >= 0, e.message)
    # Unset: next to the package, then the linker's path, every place named.
    _ = unsetenv("UFORM_LIBRARY")
    try:
        var found = Library()
        print("found without $UFORM_LIBRARY:", found.path)
    except e:
        assert_true(e.kind == Status.UNSUPPORTED)
        assert_true(e.message.find("libuform.so.0") >= 0, e.message)
        assert_true(e.message.find("next to the package") >= 0, e.message)
    _ = setenv("UFORM_LIBRARY", saved)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
