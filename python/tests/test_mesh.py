"""Meshes from Python without GPUs: refusals, and how `all_reduce` reads its buffers. The GPU
parts (bootstrap, describe, reductions) are in test_gpu."""

import unittest

import _support
from uform import DType, Error, Executor, Mesh, MeshOptions, RamOptions, Status


class FakeDeviceArray:
    """Exposes `__cuda_array_interface__` as torch and CuPy do, over a made-up address."""

    def __init__(self, address, shape, typestr="<f4", strides=None, read_only=False):
        self.__cuda_array_interface__ = {
            "data": (address, read_only),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


def require_mesh_symbols(test):
    if "uform_mesh_bootstrap" in _support.library()._native.missing:
        test.skipTest("this libuform was built without the mesh functions")


class TestBootstrapRefusals(unittest.TestCase):
    def test_a_ram_executor_cannot_bootstrap(self):
        require_mesh_symbols(self)
        domain = _support.library().memory_domains[0]
        with Executor.for_ram(_support.library(), RamOptions.on([domain.node]), threads=1) as executor:
            with self.assertRaises(Error) as caught:
                Mesh.bootstrap(executor)
            self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
            self.assertTrue(caught.exception.message)
            with self.assertRaises(Error) as caught:
                Mesh.bootstrap(executor, MeshOptions(host_domain_count=2, directory="/tmp", job="x"))
            self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
            self.assertEqual(len(executor._meshes), 0)

    def test_the_null_executor_cannot_bootstrap(self):
        require_mesh_symbols(self)
        with self.assertRaises(Error) as caught:
            Mesh.bootstrap(Executor(_support.library()))
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_wrong_types(self):
        with self.assertRaises(TypeError):
            Mesh.bootstrap("executor")
        with self.assertRaises(TypeError):
            Mesh.bootstrap(Executor(_support.library()), options={"host_domain_count": 2})


class TestAllReduceBuffers(unittest.TestCase):
    """Buffers are checked before the engine sees them; a closed mesh then refuses the call."""

    def setUp(self):
        self.mesh = Mesh(library=_support.library(), address=0)  # adopts nothing: closed

    def check(self, buffers, kind, needle, **arguments):
        with self.assertRaises(Error) as caught:
            self.mesh.all_reduce(buffers, **arguments)
        self.assertIs(caught.exception.kind, kind, caught.exception)
        self.assertIn(needle, caught.exception.message)

    def test_host_memory_reaches_the_closed_mesh(self):
        import array

        for buffers, arguments in (
            ([bytearray(16)], {"count": 4}),
            ([memoryview(bytearray(16))], {}),
            ([array.array("f", [1.0, 2.0])], {}),
            ([array.array("i", [1, 2])], {"dtype": DType.I32}),
            ([array.array("d", [1.0]), array.array("d", [2.0])], {"dtype": DType.F64}),
        ):
            self.check(buffers, Status.INVALID_ARGUMENT, "closed", **arguments)

    def test_host_memory_checks(self):
        import array

        self.check([bytes(16)], Status.INVALID_ARGUMENT, "read-only", count=4)
        self.check([array.array("d", [1.0])], Status.INVALID_ARGUMENT, "do not match")
        self.check([bytearray(6)], Status.INVALID_ARGUMENT, "not whole")
        self.check([memoryview(bytearray(32)).cast("f")[::2]], Status.INVALID_ARGUMENT, "not contiguous")
        self.check([array.array("f", [1.0]), 0x1000], Status.INVALID_ARGUMENT, "mix host memory and device memory",
                   count=1)
        self.check([array.array("f", [1.0, 2.0]), array.array("f", [1.0])], Status.INVALID_ARGUMENT,
                   "buffers[1] holds 1 elements")

    def test_raw_pointers_need_a_count(self):
        self.check([0x7F0000000000], Status.INVALID_ARGUMENT, "count is required")

    def test_array_checks(self):
        self.check([FakeDeviceArray(0x1000, (8,), read_only=True)], Status.INVALID_ARGUMENT, "read-only")
        self.check([FakeDeviceArray(0x1000, (8,), typestr="<f8")], Status.INVALID_ARGUMENT, "do not match")
        self.check([FakeDeviceArray(0x1000, (8,), typestr="<f2")], Status.INVALID_ARGUMENT, "do not match",
                   dtype=DType.F32)
        self.check([FakeDeviceArray(0x1000, (4, 4), strides=(4, 16))], Status.INVALID_ARGUMENT, "contiguous")
        self.check([FakeDeviceArray(0x1000, (8,)), FakeDeviceArray(0x2000, (4,))], Status.INVALID_ARGUMENT,
                   "buffers[1] holds 4 elements")
        self.check([FakeDeviceArray(0x1000, (8,))], Status.INVALID_ARGUMENT, "fewer than count=9", count=9)

    def test_valid_buffers_reach_the_closed_mesh(self):
        for buffers, arguments in (
            ([FakeDeviceArray(0x1000, (8,))], {}),
            ([FakeDeviceArray(0x1000, (2, 4), strides=(16, 4))], {}),
            ([FakeDeviceArray(0x1000, (8,), typestr="<i4")], {"dtype": DType.I32}),
            ([FakeDeviceArray(0x1000, (8,), typestr="<f2")], {"dtype": DType.BF16}),
            ([0x1000, 0x2000], {"count": 8}),
        ):
            self.check(buffers, Status.INVALID_ARGUMENT, "closed", **arguments)

    def test_type_errors(self):
        with self.assertRaises(TypeError):
            self.mesh.all_reduce("buffers", 4)
        with self.assertRaises(TypeError):
            self.mesh.all_reduce([object()], 4)
        with self.assertRaises(TypeError):
            self.mesh.all_reduce([0x1000], 4, dtype=Status.OK)


class TestMeshObject(unittest.TestCase):
    def test_a_closed_mesh(self):
        mesh = Mesh(library=_support.library(), address=0)
        self.assertTrue(mesh.closed)
        mesh.close()
        with self.assertRaises(Error) as caught:
            mesh.describe()
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        with self.assertRaises(Error) as caught:
            mesh.address
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
