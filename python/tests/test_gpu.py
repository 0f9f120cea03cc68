"""VRAM executors, device callbacks and meshes from Python; skipped without a GPU.

Device memory the tests read back is reached through the CUDA driver (`libcuda.so.1`) with ctypes,
the same library the engine loads. No test opts into NVLink multicast, none traps a device.
"""

import ctypes
import threading
import unittest

import _support
from uform import (
    DeviceSlot,
    DType,
    Error,
    Executor,
    ExecutorKind,
    GPUClass,
    Kernel,
    Mesh,
    MeshOptions,
    MultimemTier,
    Residency,
    Status,
    VramOptions,
)

WAIT = 60.0

# GPUClass the device descends from, per uform.h: AMPERE < ADA < HOPPER < BLACKWELL < RUBIN and
# AMPERE < ADA < BLACKWELLRTX.
NVIDIA_ABOVE = {
    GPUClass.NVIDIA_AMPERE: GPUClass.NVIDIA_ADA,
    GPUClass.NVIDIA_ADA: GPUClass.NVIDIA_HOPPER,
    GPUClass.NVIDIA_HOPPER: GPUClass.NVIDIA_BLACKWELL,
    GPUClass.NVIDIA_BLACKWELL: GPUClass.NVIDIA_RUBIN,
    GPUClass.NVIDIA_BLACKWELLRTX: GPUClass.NVIDIA_RUBIN,
}


class Driver:
    """The few CUDA driver calls the tests need to fill and read device memory, resolved as the
    engine resolves them: `cuGetProcAddress_v2` at ABI 12.0, else the `_v2` symbols themselves."""

    _P = ctypes.POINTER
    FUNCTIONS = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [_P(ctypes.c_int), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [_P(ctypes.c_void_p), ctypes.c_int],
        "cuDevicePrimaryCtxRelease": [ctypes.c_int],
        "cuCtxPushCurrent": [ctypes.c_void_p],
        "cuCtxPopCurrent": [_P(ctypes.c_void_p)],
        "cuMemAlloc": [_P(ctypes.c_uint64), ctypes.c_size_t],
        "cuMemFree": [ctypes.c_uint64],
        "cuMemcpyHtoD": [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t],
        "cuMemcpyDtoH": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t],
        "cuStreamSynchronize": [ctypes.c_void_p],
    }

    def __init__(self):
        library = ctypes.CDLL("libcuda.so.1")
        get_proc_address = getattr(library, "cuGetProcAddress_v2", None)
        if get_proc_address is not None:
            get_proc_address.restype = ctypes.c_int
            get_proc_address.argtypes = [ctypes.c_char_p, self._P(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                                         self._P(ctypes.c_int)]
        for name, argtypes in self.FUNCTIONS.items():
            address = ctypes.c_void_p()
            found = ctypes.c_int(-1)
            if get_proc_address is None or get_proc_address(
                name.encode(), ctypes.byref(address), 12000, 0, ctypes.byref(found)
            ) != 0 or found.value != 0 or not address.value:
                symbol = getattr(library, name + "_v2", None) or getattr(library, name, None)
                if symbol is None:
                    raise OSError(f"libcuda.so.1 lacks {name}")
                address = ctypes.cast(symbol, ctypes.c_void_p)
            setattr(self, name, ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(address.value))

    def check(self, result, what):
        if result != 0:
            raise AssertionError(f"{what} failed with CUresult {result}")

    def primary_context(self, vendor_ordinal: int):
        """(CUdevice, retained primary CUcontext); release with `cuDevicePrimaryCtxRelease`."""
        self.check(self.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self.check(self.cuDeviceGet(ctypes.byref(device), vendor_ordinal), "cuDeviceGet")
        context = ctypes.c_void_p()
        self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        return device.value, context.value


def fill_and_read(driver, slot: DeviceSlot, value: float, floats: int):
    """Inside a device callback: fill the scratch with the engine's kernel, wait, read it back."""
    slot.launch(Kernel.FILL_F32, slot.scratch, floats, value)
    driver.check(driver.cuStreamSynchronize(slot.stream), "cuStreamSynchronize")
    host = (ctypes.c_float * floats)()
    driver.check(driver.cuMemcpyDtoH(host, slot.scratch, floats * 4), "cuMemcpyDtoH")
    return list(host)


class TestVramExecutor(unittest.TestCase):
    def setUp(self):
        self.devices = _support.skip_without_gpu(self)
        self.library = _support.library()

    def test_describes_itself(self):
        device = self.devices[0]
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            description = executor.describe()
            self.assertIs(description.kind, ExecutorKind.VRAM)
            self.assertEqual(description.devices_count, 1)
            self.assertIs(description.gpu_class, device.gpu_class)
            self.assertGreaterEqual(description.threads_count, 1)

    def test_derives_one_free_device(self):
        with Executor.for_vram(self.library) as executor:
            self.assertEqual(executor.describe().devices_count, 1)

    def test_refusals(self):
        library = self.library
        with self.assertRaises(Error) as caught:
            Executor.for_vram(library, VramOptions.on([len(self.devices)]))
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn(str(len(self.devices)), caught.exception.message)
        with self.assertRaises(Error) as caught:
            Executor.for_vram(library, VramOptions.on([0, 0]))
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        with self.assertRaises(Error) as caught:
            Executor.for_vram(library, VramOptions.on([0]), streams=[0x1234])
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
        above = NVIDIA_ABOVE.get(self.devices[0].gpu_class)
        if above is not None:
            with self.assertRaises(Error) as caught:
                Executor.for_vram(library, VramOptions.on([0], gpu_class=above))
            self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
        with Executor.for_vram(library, VramOptions.on([0], gpu_class=GPUClass.NVIDIA_AMPERE)) as executor:
            self.assertIs(executor.describe().gpu_class, GPUClass.NVIDIA_AMPERE)  # a lower class pins

    def test_device_callback_fills_scratch(self):
        try:
            driver = Driver()
        except OSError as error:
            self.skipTest(f"libcuda.so.1 is not loadable from Python: {error}")
        floats = 1024
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            slots, values = [], []
            host_tasks = _support.Collector()

            def device(slot):
                slots.append(slot)
                values.append(fill_and_read(driver, slot, 2.5, floats))

            executor.call(tasks=4, task=host_tasks, device=device, scratch_bytes=floats * 4)
            self.assertEqual(host_tasks.tasks, [0, 1, 2, 3])  # the host part ran first
            self.assertEqual(len(slots), 1)
            slot = slots[0]
            self.assertEqual((slot.device_index, slot.ordinal), (0, 0))
            self.assertIs(slot.gpu_class, self.devices[0].gpu_class)
            self.assertNotEqual(slot.stream, 0)
            self.assertNotEqual(slot.scratch, 0)
            self.assertEqual(slot.scratch_bytes, floats * 4)
            self.assertEqual(values[0], [2.5] * floats)
            with self.assertRaises(Error) as caught:
                slot.launch(Kernel.EMPTY)  # the slot outlived its callback
            self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
            self.assertGreaterEqual(executor.scratch_bytes(0), floats * 4)
            executor.scratch_release()

            outcome = executor.call(device=lambda slot: slot.launch(Kernel.EMPTY), defer=True, residency=Residency.VRAM)
            self.assertTrue(outcome.wait(WAIT))

    def test_device_callback_exceptions(self):
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            def device(slot):
                raise ValueError("device part failed")

            with self.assertRaises(ValueError):
                executor.call(device=device)
            with self.assertRaises(Error) as caught:
                executor.call(device=lambda slot: slot.launch(99))  # unknown kernel, from the engine
            self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
            executor.call(device=lambda slot: slot.launch(Kernel.EMPTY))  # still usable

    def test_contention_on_a_vram_executor(self):
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            entered, release = threading.Event(), threading.Event()
            result = {}

            def holding(slot):
                entered.set()
                release.wait(WAIT)

            def first():
                try:
                    executor.call(device=holding)
                    result["ok"] = True
                except BaseException as error:  # noqa: B902
                    result["error"] = error

            holder = threading.Thread(target=first)
            holder.start()
            try:
                self.assertTrue(entered.wait(WAIT))
                with self.assertRaises(Error) as caught:
                    executor.call(device=lambda slot: None)
                self.assertIs(caught.exception.kind, Status.CONTENDED)
            finally:
                release.set()
                holder.join(WAIT)
            self.assertEqual(result, {"ok": True})


class TestMesh(unittest.TestCase):
    def setUp(self):
        self.devices = _support.skip_without_gpu(self)
        self.library = _support.library()

    def bootstrap(self, executor, options=None):
        try:
            return Mesh.bootstrap(executor, options or MeshOptions())
        except Error as error:
            if error.kind is Status.UNSUPPORTED:
                self.skipTest(f"no mesh here: {error.message}")
            raise

    def test_a_run_with_no_peers(self):
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            mesh = self.bootstrap(executor)
            self.assertIs(mesh.executor, executor)
            description = mesh.describe()
            self.assertEqual(description.gpus_per_host_domain, 1)
            self.assertEqual(description.gpus_per_colocated_domain, 1)
            self.assertEqual(description.host_domain_index, 0)
            self.assertEqual(description.first_gpu_index, 0)
            self.assertGreaterEqual(description.gpus_per_multimem_domain, 1)
            self.assertIs(description.multimem_tier, MultimemTier.PEER_READ)  # nobody opted into multicast
            self.assertIs(description.gpu_class, self.devices[0].gpu_class)
            del mesh  # freed before its executor, which it kept alive

    def test_executor_close_closes_its_meshes(self):
        executor = Executor.for_vram(self.library, VramOptions.on([0]))
        mesh = self.bootstrap(executor)
        executor.close()
        self.assertTrue(mesh.closed)
        with self.assertRaises(Error) as caught:
            mesh.describe()
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_all_reduce_of_one_gpu_is_the_identity(self):
        try:
            driver = Driver()
        except OSError as error:
            self.skipTest(f"libcuda.so.1 is not loadable from Python: {error}")
        count = 4096
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            mesh = self.bootstrap(executor)
            device, context = driver.primary_context(self.devices[0].vendor_ordinal)
            driver.check(driver.cuCtxPushCurrent(context), "cuCtxPushCurrent")
            try:
                pointer = ctypes.c_uint64()
                driver.check(driver.cuMemAlloc(ctypes.byref(pointer), count * 4), "cuMemAlloc")
                try:
                    source = (ctypes.c_float * count)(*[float(i % 97) for i in range(count)])
                    driver.check(driver.cuMemcpyHtoD(pointer.value, source, count * 4), "cuMemcpyHtoD")
                    self.assertIsNone(mesh.all_reduce([pointer.value], count, DType.F32))
                    outcome = mesh.all_reduce([pointer.value], count, dtype=DType.F32, defer=True)
                    self.assertTrue(outcome.wait(WAIT))
                    result = (ctypes.c_float * count)()
                    driver.check(driver.cuMemcpyDtoH(result, pointer.value, count * 4), "cuMemcpyDtoH")
                    self.assertEqual(list(result), list(source))
                finally:
                    driver.check(driver.cuMemFree(pointer.value), "cuMemFree")
            finally:
                popped = ctypes.c_void_p()
                driver.cuCtxPopCurrent(ctypes.byref(popped))
                driver.cuDevicePrimaryCtxRelease(device)
            mesh.close()

    def test_all_reduce_of_host_memory_over_one_gpu_is_the_identity(self):
        import array

        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            mesh = self.bootstrap(executor)
            values = array.array("f", [float(i % 97) for i in range(4096)])
            expected = list(values)
            self.assertIsNone(mesh.all_reduce([values]))  # count taken from the array
            outcome = mesh.all_reduce([values], dtype=DType.F32, defer=True)
            self.assertTrue(outcome.wait(WAIT))
            self.assertEqual(list(values), expected)
            mesh.close()

    def test_all_reduce_of_a_torch_tensor(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        if not torch.cuda.is_available():
            self.skipTest("torch sees no CUDA device")
        with Executor.for_vram(self.library, VramOptions.on([0])) as executor:
            mesh = self.bootstrap(executor)
            device = torch.device("cuda", self.devices[0].vendor_ordinal)
            tensor = torch.arange(1024, dtype=torch.float32, device=device)
            torch.cuda.synchronize(device)
            mesh.all_reduce([tensor])  # count taken from the tensor
            self.assertTrue(torch.equal(tensor.cpu(), torch.arange(1024, dtype=torch.float32)))
            mesh.close()


if __name__ == "__main__":
    unittest.main()
