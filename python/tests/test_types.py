"""The binding's enumerations, options, descriptions and errors against the seed and the header."""

import ctypes
import pickle
import unittest

import _support
import uform
import uform.models
from uform import (
    CPUClass,
    DType,
    Error,
    ExecutorKind,
    GPUClass,
    GPUVendor,
    Kernel,
    MeshDescription,
    MeshOptions,
    Mood,
    MultimemTier,
    RamOptions,
    Residency,
    Schedule,
    Status,
    VramOptions,
    _native,
)

# Copied from seed/executors.md: every name with the code the seed gives it.
SEED_CPU_CLASSES = {
    "UNKNOWN": 0, "SERIAL": 1, "INTEL_HASWELL": 2, "INTEL_SIERRA": 3, "INTEL_SKYLAKE": 4, "INTEL_ICELAKE": 5,
    "AMD_GENOA": 6, "INTEL_SAPPHIRE": 7, "INTEL_GRANITE": 8, "INTEL_DIAMOND": 9, "AWS_G2": 10, "APPLE_M2": 11,
    "APPLE_M4": 12, "AWS_G5": 13, "NVIDIA_VERA": 14, "ALIBABA_C930": 15, "WASM32_V128": 16, "WASM64_EXTENDED": 17,
    "MONOVERSIONED": 18,
}
SEED_GPU_CLASSES = {
    "UNKNOWN": 0, "NVIDIA_AMPERE": 1, "NVIDIA_ADA": 2, "NVIDIA_HOPPER": 3, "NVIDIA_BLACKWELL": 4,
    "NVIDIA_BLACKWELLRTX": 5, "NVIDIA_RUBIN": 6, "AMD_CDNA3": 7, "AMD_CDNA4": 8, "AMD_CDNA5": 9,
    "APPLE_METAL7": 10, "APPLE_METAL9": 11, "APPLE_METAL10": 12,
}
SEED_GPU_VENDORS = {"UNKNOWN": 0, "NVIDIA": 1, "AMD": 2, "APPLE": 3}
SEED_MULTIMEM_TIERS = {"SWITCH_REDUCED": 0, "PEER_READ": 1}

# From uform.h: the C enumerator prefix of each Python enumeration.
C_PREFIXES = {
    Status: "uform_status_",
    CPUClass: "uform_cpu_class_",
    GPUClass: "uform_gpu_class_",
    GPUVendor: "uform_gpu_vendor_",
    MultimemTier: "uform_multimem_tier_",
    Mood: "uform_mood_",
    ExecutorKind: "uform_executor_kind_",
    Schedule: "uform_schedule_",
    Residency: "uform_residency_",
    DType: "uform_dtype_",
    Kernel: "uform_kernel_",
}


class TestSeedCodes(unittest.TestCase):
    def check_codes(self, cls, expected):
        self.assertEqual({member.name: member.code for member in cls}, expected)
        for name, code in expected.items():
            member = getattr(cls, name)
            self.assertEqual(member.code, code)
            self.assertIsInstance(member.code, int)
            self.assertIs(cls(code), member)
            self.assertEqual(member, code)
            self.assertEqual(int(member), code)

    def test_cpu_class(self):
        self.check_codes(CPUClass, SEED_CPU_CLASSES)

    def test_gpu_class(self):
        self.check_codes(GPUClass, SEED_GPU_CLASSES)

    def test_gpu_vendor(self):
        self.check_codes(GPUVendor, SEED_GPU_VENDORS)

    def test_multimem_tier(self):
        self.check_codes(MultimemTier, SEED_MULTIMEM_TIERS)

    def test_status_has_every_header_status(self):
        expected = {
            "OK": 0, "CONTENDED": 1, "UNSUPPORTED": 2, "CONFIG_MISMATCH": 3, "INVALID_ARGUMENT": 4,
            "OUT_OF_MEMORY": 5, "SYSTEM_ERROR": 6, "TIMEOUT": 7, "DEVICE_FAULT": 8, "DEFERRED_FULL": 9,
            "FORKED": 10, "RESIDENCY_MISMATCH": 11, "LIMIT_EXCEEDED": 12, "PEER_LOST": 13, "CORRUPT_FILE": 14,
            "PENDING": 15,
        }
        self.check_codes(Status, expected)
        self.assertEqual(Status.CONTENDED.code, 1)

    def test_small_enumerations(self):
        self.check_codes(Mood, {"PARKED": 0, "SPINNING": 1})
        self.check_codes(ExecutorKind, {"INLINE": 0, "RAM": 1, "POOL": 2, "VRAM": 3})
        self.check_codes(Schedule, {"STATIC": 0, "DYNAMIC": 1, "THREADS": 2})
        self.check_codes(Residency, {"ANY": 0, "RAM": 1, "VRAM": 2})
        self.check_codes(DType, {"F32": 0, "BF16": 1, "F16": 2, "F64": 3, "I32": 4})
        self.check_codes(Kernel, {"EMPTY": 0, "FILL_F32": 1, "SLEEP": 2, "TRAP": 3, "ADD_F32": 4})

    def test_codes_match_the_compiled_header(self):
        """Every enumerator, as the C compiler sees uform.h, equals the Python member."""
        _support.require_helpers(self)
        table = _support.constants()
        checked = 0
        for cls, prefix in C_PREFIXES.items():
            for member in cls:
                name = f"{prefix}{member.name.lower()}_k"
                self.assertIn(name, table, f"{cls.__name__}.{member.name} has no C twin {name}")
                self.assertEqual(table[name], member.code, name)
                checked += 1
            c_members = {name[len(prefix):-2].upper() for name in table if name.startswith(prefix)}
            self.assertEqual(c_members, set(cls.__members__), cls.__name__)
        self.assertEqual(table["UFORM_DEFERRED_LIMIT_DEFAULT"], uform.DEFERRED_LIMIT_DEFAULT)
        self.assertEqual(checked, 76)


class TestEnumerationBehaviour(unittest.TestCase):
    def test_equality_is_per_enumeration(self):
        self.assertEqual(CPUClass.SERIAL, CPUClass(1))
        self.assertEqual(CPUClass.SERIAL, 1)
        self.assertNotEqual(CPUClass.SERIAL, GPUClass.NVIDIA_AMPERE)  # both 1, different kinds
        self.assertNotEqual(CPUClass.SERIAL, CPUClass.INTEL_HASWELL)
        self.assertNotEqual(Status.CONTENDED, Mood.SPINNING)
        self.assertEqual({CPUClass.AMD_GENOA: "genoa"}[6], "genoa")

    def test_unknown_codes_become_invalid_members(self):
        member = CPUClass(99)
        self.assertEqual(member.code, 99)
        self.assertEqual(member.name, "INVALID_99")
        self.assertIsInstance(member, CPUClass)
        self.assertEqual(Status(42).code, 42)

    def test_str_names_the_member(self):
        self.assertEqual(str(GPUClass.NVIDIA_HOPPER), "GPUClass.NVIDIA_HOPPER")

    def test_coercion_refuses_another_enumeration(self):
        with self.assertRaises(TypeError):
            RamOptions(cpu_class=GPUClass.NVIDIA_ADA)
        with self.assertRaises(TypeError):
            VramOptions(gpu_class=CPUClass.AMD_GENOA)
        self.assertIs(RamOptions(cpu_class=6).cpu_class, CPUClass.AMD_GENOA)
        with self.assertRaises(TypeError):
            RamOptions(cpu_class="amd_genoa")


class TestError(unittest.TestCase):
    def test_fields_and_text(self):
        error = Error(Status.CONFIG_MISMATCH, "peers 0 and 1 disagree on gpu_class")
        self.assertIsInstance(error, Exception)
        self.assertIs(error.kind, Status.CONFIG_MISMATCH)
        self.assertEqual(error.message, "peers 0 and 1 disagree on gpu_class")
        self.assertEqual(str(error), "CONFIG_MISMATCH: peers 0 and 1 disagree on gpu_class")
        self.assertIs(Error(2).kind, Status.UNSUPPORTED)
        self.assertEqual(str(Error(Status.UNSUPPORTED)), "UNSUPPORTED")

    def test_pickles(self):
        error = pickle.loads(pickle.dumps(Error(Status.TIMEOUT, "peer 3 never wrote its facts")))
        self.assertIs(error.kind, Status.TIMEOUT)
        self.assertEqual(error.message, "peer 3 never wrote its facts")
        self.assertIs(type(error), uform.TimeoutError)

    # Every failing status with the class `Error(status)` is, and the built-in it also derives from.
    KINDS = {
        Status.CONTENDED: ("ContendedError", None),
        Status.UNSUPPORTED: ("UnsupportedError", None),
        Status.CONFIG_MISMATCH: ("ConfigMismatchError", None),
        Status.INVALID_ARGUMENT: ("InvalidArgumentError", ValueError),
        Status.OUT_OF_MEMORY: ("OutOfMemoryError", None),
        Status.SYSTEM_ERROR: ("SystemCallError", None),
        Status.TIMEOUT: ("TimeoutError", TimeoutError),
        Status.DEVICE_FAULT: ("DeviceFaultError", None),
        Status.DEFERRED_FULL: ("DeferredFullError", None),
        Status.FORKED: ("ForkedError", None),
        Status.RESIDENCY_MISMATCH: ("ResidencyMismatchError", None),
        Status.LIMIT_EXCEEDED: ("LimitExceededError", None),
        Status.PEER_LOST: ("PeerLostError", None),
        Status.CORRUPT_FILE: ("CorruptFileError", None),
        Status.PENDING: ("PendingError", None),
    }

    def test_a_class_per_kind(self):
        self.assertEqual(set(self.KINDS), set(Status) - {Status.OK})  # a new status needs a class
        for status, (name, builtin) in self.KINDS.items():
            cls = getattr(uform, name)
            self.assertIn(name, uform.__all__)
            self.assertIs(cls.status, status)
            self.assertEqual(f"{cls.__module__}.{cls.__qualname__}", f"uform.{name}")
            for error in (Error(status, "why"), Error(int(status), "why"), cls(status, "why")):
                self.assertIs(type(error), cls)
                self.assertIsInstance(error, Error)
                self.assertIs(error.kind, status)
                self.assertEqual(str(error), f"{status.name}: why")
                self.assertEqual(repr(error), f"{name}({status!s}, 'why')")
                if builtin is not None:
                    self.assertIsInstance(error, builtin)
                copy = pickle.loads(pickle.dumps(error))
                self.assertIs(type(copy), cls)
                self.assertEqual((copy.kind, copy.message, copy.args), (status, "why", (status, "why")))
            with self.assertRaises(Error):  # the base still catches every kind
                raise Error(status, "caught by the base")
        self.assertNotIsInstance(Error(Status.UNSUPPORTED), ValueError)
        unknown = Error(99, "a newer engine's status")  # no class for it: the base itself
        self.assertIs(type(unknown), Error)
        self.assertEqual(unknown.kind, 99)
        self.assertIs(type(pickle.loads(pickle.dumps(unknown))), Error)

    def test_the_engine_raises_by_kind(self):
        executor = uform.Executor(_support.library())
        executor.close()
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            executor.for_n(1, lambda *_: None)
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn("closed", caught.exception.message)
        with self.assertRaises(uform.UnsupportedError) as caught:
            uform.Executor(_support.library()).thread_placement(0)
        self.assertIs(caught.exception.kind, Status.UNSUPPORTED)


class TestOptions(unittest.TestCase):
    def test_ram_options(self):
        derived = RamOptions()
        self.assertIsNone(derived.memory_domains)
        self.assertEqual(derived.memory_domains_count, 0)
        self.assertIs(derived.cpu_class, CPUClass.UNKNOWN)
        struct = derived.arguments()
        self.assertFalse(struct.memory_domains)
        self.assertEqual((struct.memory_domains_count, struct.cpu_class), (0, 0))

        named = RamOptions.on([0, 1], cpu_class=CPUClass.INTEL_HASWELL)
        self.assertEqual(named.memory_domains, (0, 1))
        self.assertEqual(named.memory_domains_count, 2)
        struct = named.arguments()
        self.assertEqual([struct.memory_domains[i] for i in range(2)], [0, 1])
        self.assertEqual((struct.memory_domains_count, struct.cpu_class), (2, 2))
        self.assertEqual(named, RamOptions.on((0, 1), cpu_class=2))
        self.assertNotEqual(named, derived)

    def test_ram_options_refuse_nodes_beyond_int32(self):
        with self.assertRaises(Error) as caught:
            RamOptions.on([0, 2**31])
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
        self.assertIn(str(2**31), caught.exception.message)
        with self.assertRaises(TypeError):
            RamOptions.on(["0"])

    def test_vram_options(self):
        derived = VramOptions()
        self.assertIsNone(derived.devices)
        self.assertEqual(derived.devices_count, 0)
        self.assertIs(derived.gpu_class, GPUClass.UNKNOWN)
        named = VramOptions.on([1, 0], gpu_class=GPUClass.NVIDIA_HOPPER)
        struct = named.arguments()
        self.assertEqual([struct.devices[i] for i in range(2)], [1, 0])
        self.assertEqual((struct.devices_count, struct.gpu_class), (2, 3))

    def test_mesh_options(self):
        options = MeshOptions()
        self.assertEqual(
            (options.host_domain_index, options.host_domain_count, options.gpus_per_multimem_domain,
             options.directory, options.job, options.timeout_seconds),
            (0, 0, 0, "", "", 0.0),
        )
        struct = options.arguments()
        self.assertIsNone(struct.directory)
        self.assertIsNone(struct.job)
        options = MeshOptions(host_domain_index=1, host_domain_count=2, gpus_per_multimem_domain=8,
                              directory="/shared/uform", job="run-42", timeout_seconds=5)
        struct = options.arguments()
        self.assertEqual((struct.host_domain_index, struct.host_domain_count, struct.gpus_per_multimem_domain),
                         (1, 2, 8))
        self.assertEqual((struct.directory, struct.job, struct.timeout_seconds), (b"/shared/uform", b"run-42", 5.0))
        with self.assertRaises(Error) as caught:
            MeshOptions(host_domain_index=-1).arguments()
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)

    def test_mesh_description_defaults_to_zero(self):
        description = MeshDescription()
        self.assertEqual(
            [field for field in MeshDescription.__dataclass_fields__],
            ["gpus_per_host_domain", "gpus_per_multimem_domain", "gpus_per_colocated_domain",
             "host_domain_index", "first_gpu_index", "multimem_tier", "gpu_class"],
        )
        self.assertEqual(
            (description.gpus_per_host_domain, description.gpus_per_multimem_domain,
             description.gpus_per_colocated_domain, description.host_domain_index, description.first_gpu_index),
            (0, 0, 0, 0, 0),
        )
        self.assertIs(description.multimem_tier, MultimemTier.SWITCH_REDUCED)
        self.assertIs(description.gpu_class, GPUClass.UNKNOWN)

    def test_gpu_device_fields(self):
        device = uform.GPUDevice()
        self.assertEqual(
            (device.vendor, device.vendor_ordinal, device.gpu_class, device.compute_units, device.memory_bytes),
            (GPUVendor.UNKNOWN, 0, GPUClass.UNKNOWN, 0, 0),
        )
        with self.assertRaises(Error) as caught:
            device.name()  # an entry nobody listed has no ordinal
        self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)


class TestLayouts(unittest.TestCase):
    """The ctypes declarations against the C compiler's layout of uform.h."""

    STRUCTS = {
        "uform_gpu_device_t": _native.GPUDeviceStruct,
        "uform_memory_domain_t": _native.MemoryDomainStruct,
        "uform_ram_options_t": _native.RamOptionsStruct,
        "uform_vram_options_t": _native.VramOptionsStruct,
        "uform_executor_description_t": _native.ExecutorDescriptionStruct,
        "uform_device_slot_t": _native.DeviceSlotStruct,
        "uform_call_t": _native.CallStruct,
        "uform_outcome_t": _native.OutcomeStruct,
        "uform_mesh_options_t": _native.MeshOptionsStruct,
        "uform_mesh_description_t": _native.MeshDescriptionStruct,
        "uform_model_options_t": uform.models.ModelOptionsStruct,
        "uform_model_description_t": uform.models.ModelDescriptionStruct,
        "uform_embeddings_t": uform.models.EmbeddingsStruct,
        "uform_image_t": uform.models.ImageStruct,
    }

    def test_every_struct_and_field(self):
        _support.require_helpers(self)
        seen_fields = {name: set() for name in self.STRUCTS}
        for type_name, field, size, offset_or_alignment in _support.layouts():
            struct = self.STRUCTS[type_name]
            if field is None:
                self.assertEqual(ctypes.sizeof(struct), size, f"sizeof({type_name})")
                self.assertEqual(ctypes.alignment(struct), offset_or_alignment, f"_Alignof({type_name})")
            else:
                descriptor = getattr(struct, field)
                self.assertEqual(descriptor.offset, offset_or_alignment, f"offsetof({type_name}, {field})")
                self.assertEqual(descriptor.size, size, f"sizeof({type_name}.{field})")
                seen_fields[type_name].add(field)
        for type_name, struct in self.STRUCTS.items():
            self.assertEqual(seen_fields[type_name], {name for name, *_ in struct._fields_}, type_name)

    def test_header_and_bindings_cannot_drift(self):
        """Every struct uform.h declares has a ctypes twin with the header's fields in the header's
        order, and the compiled layout table names every one of those fields, so a field added to the
        header without the binding (or without the table that checks offsets) fails here."""
        header = _header_structs()
        self.assertEqual(set(header), set(self.STRUCTS), "structs in uform.h against the ctypes twins")
        for type_name, fields in header.items():
            self.assertEqual([name for name, *_ in self.STRUCTS[type_name]._fields_], fields, type_name)
        _support.require_helpers(self)
        table = {}
        for type_name, field, *_ in _support.layouts():
            if field is not None:
                table.setdefault(type_name, []).append(field)
        self.assertEqual(table, header, "python/tests/helpers.c's layout table against uform.h")


def _header_structs() -> dict:
    """`{name: [field, ...]}` for every `typedef struct name {...} name;` in include/uform.h."""
    import os
    import re

    path = os.path.join(os.path.dirname(__file__), "..", "..", "include", "uform.h")
    with open(path) as file:
        text = file.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    structs = {}
    for match in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, flags=re.S):
        fields = []
        for declaration in match.group(2).split(";"):
            declaration = " ".join(declaration.split())
            if not declaration:
                continue
            first, *more = declaration.split(",")
            for declarator in [first.split()[-1], *more]:
                fields.append(re.match(r"\**\s*(\w+)", declarator.strip()).group(1))
        structs[match.group(1)] = fields
    return structs


if __name__ == "__main__":
    unittest.main()
