"""Loading the engine, and what `Library` reports about the machine."""

import os
import subprocess
import sys
import unittest

import _support
import uform
from uform import CPUClass, Error, GPUClass, GPUDevice, GPUVendor, Status


class TestLoading(unittest.TestCase):
    def test_loads_and_reports_its_version(self):
        library = _support.library()
        self.assertEqual(library.version, uform.__version__)
        self.assertTrue(os.path.exists(library.path), library.path)
        self.assertIn("libuform", os.path.basename(library.path))

    def test_an_explicit_path_that_does_not_exist(self):
        path = "/nonexistent/uform-test/libuform.so"
        with self.assertRaises(Error) as caught:
            uform.Library(path)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
        self.assertIn(path, caught.exception.message)
        self.assertIn("tried", caught.exception.message)

    def test_an_empty_path_is_refused_not_searched(self):
        # $UFORM_LIBRARY names a loadable library here: an empty path must not fall back to it.
        for path in ("", b""):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                uform.Library(path)
            self.assertEqual(caught.exception.message,
                             "path is empty; name the libuform file to load, or pass None to search")
        with self.assertRaises(TypeError):
            uform.Library(0)

    def run_python(self, code: str, **environment) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.update(environment)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(uform.__file__))
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)

    def test_the_environment_variable_names_where_it_looked(self):
        code = (
            "import uform\n"
            "try:\n    uform.Library()\n"
            "except uform.Error as e:\n    print(e.kind.name); print(e.message)\n"
        )
        result = self.run_python(code, UFORM_LIBRARY="/nonexistent/uform-env/libuform.so")
        self.assertEqual(result.returncode, 0, result.stderr)
        kind, message = result.stdout.split("\n", 1)
        self.assertEqual(kind, "UNSUPPORTED")
        self.assertIn("$UFORM_LIBRARY", message)
        self.assertIn("/nonexistent/uform-env/libuform.so", message)

    def test_without_the_variable_it_names_every_place(self):
        code = (
            "import os, uform, uform._native as n\n"
            "os.environ.pop('UFORM_LIBRARY', None)\n"
            "n._package_candidates = lambda: []\n"
            "n.ctypes.util.find_library = lambda name: None\n"
            "try:\n    uform.Library(); print('LOADED')\n"
            "except uform.Error as e:\n    print(e.message)\n"
        )
        result = self.run_python(code, LD_LIBRARY_PATH="/nonexistent")
        self.assertEqual(result.returncode, 0, result.stderr)
        if result.stdout.startswith("LOADED"):
            self.skipTest("libuform is installed on the dynamic linker's default path")
        message = result.stdout
        self.assertIn("$UFORM_LIBRARY (unset)", message)
        self.assertIn("package directory", message)
        self.assertIn("libuform.so.0", message)
        self.assertIn("find_library", message)
        # Set but empty: said so, not "unset".
        result = self.run_python(code.replace("os.environ.pop('UFORM_LIBRARY', None)", "os.environ['UFORM_LIBRARY'] = ''"),
                                 LD_LIBRARY_PATH="/nonexistent")
        self.assertIn("$UFORM_LIBRARY (empty)", result.stdout)

    def test_loading_twice_maps_one_copy(self):
        first = _support.library()
        second = uform.Library()
        self.assertIs(first._native, second._native)

    def test_status_names_match_the_engine(self):
        library = _support.library()
        for status in Status:
            self.assertEqual(library.status_name(status), status.name.lower())
        self.assertEqual(library.status_name(999), "invalid")


class TestMachine(unittest.TestCase):
    def test_cpu_detect(self):
        library = _support.library()
        cpu_class, features = library.cpu_detect()
        self.assertIsInstance(cpu_class, CPUClass)
        self.assertNotEqual(cpu_class, CPUClass.UNKNOWN)
        self.assertIs(library.cpu_class, cpu_class)
        required = library.cpu_class_features(cpu_class)
        self.assertEqual(required & ~features, 0, "the detected class requires features the CPU lacks")
        names = library.cpu_feature_names(features)
        self.assertEqual(len(names), bin(features).count("1"))
        self.assertNotIn("invalid", names)
        self.assertEqual(library.cpu_class_features(CPUClass.SERIAL), 0)

    def test_memory_domains(self):
        library = _support.library()
        domains = library.memory_domains
        self.assertGreaterEqual(len(domains), 1)
        self.assertEqual([d.node for d in domains], sorted({d.node for d in domains}))
        for domain in domains:
            self.assertGreater(domain.cores_count, 0)
            self.assertGreater(domain.memory_bytes, 0)
            cores = library.memory_domain_cores(domain.node)
            self.assertEqual(len(cores), domain.cores_count)
            self.assertEqual(cores, sorted(cores))
        with self.assertRaises(Error) as caught:
            library.memory_domain_cores(max(d.node for d in domains) + 1000)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertTrue(caught.exception.message)

    def test_gpu_devices(self):
        library = _support.library()
        devices = library.gpu_devices
        self.assertIsInstance(devices, list)
        self.assertEqual(devices, library.gpu_devices())  # the Mojo spelling, a method, works too
        if not devices:
            with self.assertRaises(Error) as caught:
                library.gpu_status()
            self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
            self.assertTrue(caught.exception.message)
            return
        library.gpu_status()
        for ordinal, device in enumerate(devices):
            self.assertIsInstance(device, GPUDevice)
            self.assertEqual(device.ordinal, ordinal)
            self.assertIs(device.vendor, GPUVendor.NVIDIA)
            self.assertIsInstance(device.gpu_class, GPUClass)
            self.assertNotEqual(device.gpu_class, GPUClass.UNKNOWN)
            self.assertGreater(device.compute_units, 0)
            self.assertGreater(device.memory_bytes, 0)
            name = device.name()
            self.assertIsInstance(name, str)
            self.assertTrue(name)


if __name__ == "__main__":
    unittest.main()
