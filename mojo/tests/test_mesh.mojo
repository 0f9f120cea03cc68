"""Meshes from Mojo: a run with no peers (one process, host_domain_count 1), its description and
lifetime, and the errors of bootstrap. Without a GPU no VRAM executor exists, so bootstrap answers
what the engine answers for other executors (INVALID_ARGUMENT naming the kind); with GPUs (or the
fake driver under ctest's mojo_test_mesh_fake_gpu) a mesh of one GPU bootstraps for real."""

from std.os import getenv
from std.testing import assert_equal, assert_false, assert_true, TestSuite
from uform import *


def expect_error(kind: Status, contains: String, error: Error) raises:
    assert_equal(error.kind.name(), kind.name(), String(error))
    assert_true(error.message.find(contains) >= 0, String("message lacks '", contains, "': ", error.message))


def alone() -> MeshOptions:
    var options = MeshOptions()
    options.host_domain_count = 1
    return options^


def test_defaults() raises:
    var options = MeshOptions()
    assert_equal(options.host_domain_index, 0)
    assert_equal(options.host_domain_count, 0)
    assert_equal(options.gpus_per_multimem_domain, 0)
    assert_equal(options.directory, "")
    assert_equal(options.job, "")
    assert_equal(options.timeout_seconds, 0.0)
    var description = MeshDescription()
    assert_equal(Int(description.gpus_per_host_domain), 0)
    assert_equal(Int(description.gpus_per_multimem_domain), 0)
    assert_equal(Int(description.gpus_per_colocated_domain), 0)
    assert_equal(Int(description.host_domain_index), 0)
    assert_equal(Int(description.first_gpu_index), 0)
    assert_true(description.multimem_tier == MultimemTier.SWITCH_REDUCED)
    assert_true(description.gpu_class == GPUClass.UNKNOWN)


def test_no_peers_without_a_device_executor() raises:
    var library = Library()
    var inline = Executor(library)
    try:
        _ = Mesh.bootstrap(inline)
        raise Error(Status.OK, "bootstrap over the inline executor succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "must be a VRAM executor", e)
        expect_error(Status.INVALID_ARGUMENT, "NULL (inline)", e)
    var threads = Executor.for_ram(library, threads=1)
    try:
        _ = Mesh.bootstrap(threads, alone())
        raise Error(Status.OK, "bootstrap over a RAM executor succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "RAM", e)


def test_options_errors() raises:
    var library = Library()
    var inline = Executor(library)
    var peers = MeshOptions()
    peers.host_domain_count = 2
    try:
        _ = Mesh.bootstrap(inline, peers)
        raise Error(Status.OK, "bootstrap with peers and no directory succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "directory", e)
    var negative = MeshOptions()
    negative.host_domain_index = -1
    try:
        _ = Mesh.bootstrap(inline, negative)
        raise Error(Status.OK, "bootstrap with index -1 succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "host_domain_index", e)
    var nul = alone()
    nul.job = String("a\\0b").replace("\\0", String(chr(0)))
    try:
        _ = Mesh.bootstrap(inline, nul)
        raise Error(Status.OK, "bootstrap with a NUL in the job succeeded")
    except e:
        expect_error(Status.INVALID_ARGUMENT, "job", e)


def test_unbootstrapped_mesh_describes_as_zero() raises:
    var library = Library()
    var mesh = Mesh(library=library, address=NULL_ADDRESS)
    var description = mesh.describe()  # the engine refuses a NULL mesh; a failed report is zero
    assert_equal(Int(description.gpus_per_host_domain), 0)
    assert_true(description.gpu_class == GPUClass.UNKNOWN)


def bootstrap_alone(library: Library) raises -> Mesh:
    """A mesh whose executor variable goes out of scope first: the mesh holds the executor."""
    var streams = Executor.for_vram(library)
    return Mesh.bootstrap(streams, alone())


def test_no_peers_on_a_gpu() raises:
    var library = Library()
    var devices = library.gpu_devices()
    if len(devices) == 0:
        assert_true(getenv("UFORM_TEST_REQUIRE_GPU") != "1", "UFORM_TEST_REQUIRE_GPU=1, yet no GPU is listed")
        print("SKIPPED the device half: no GPU listed")
        return
    var mesh = bootstrap_alone(library)
    var description = mesh.describe()
    assert_equal(Int(description.gpus_per_host_domain), 1)
    assert_equal(Int(description.gpus_per_colocated_domain), 1)
    assert_equal(Int(description.host_domain_index), 0)
    assert_equal(Int(description.first_gpu_index), 0)
    assert_true(description.gpus_per_multimem_domain >= 1)
    assert_true(description.multimem_tier == MultimemTier.PEER_READ)
    assert_true(description.gpu_class != GPUClass.UNKNOWN)
    # One mesh per executor.
    var streams = Executor.for_vram(library)
    var first = Mesh.bootstrap(streams)
    try:
        _ = Mesh.bootstrap(streams)
        raise Error(Status.OK, "a second mesh on one executor succeeded")
    except e:
        assert_true(e.kind == Status.INVALID_ARGUMENT, String(e))
    assert_equal(Int(first.describe().gpus_per_host_domain), 1)


def main() raises:
    TestSuite.discover_tests[__functions_in_module()]().run()
