"""What the verbs are told and what they report: `RamOptions`, `VramOptions` and `MeshOptions`
(copied into the C layouts by ``arguments()``), and the plain reports `ExecutorDescription` and
`MeshDescription`. Mirrors the options and descriptions region of ``include/uform.h``."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Iterable, Optional

from ._arguments import _int32_array, _size
from ._codes import CPUClass, ExecutorKind, GPUClass, Mood, MultimemTier, Status, _enum
from ._errors import Error
from ._hardware import GPUDevice, MemoryDomain
from ._native import MeshOptionsStruct, RamOptionsStruct, VramOptionsStruct


class RamOptions:
    """The host memory domains a RAM-resident model and executor place their bytes in, one NUMA
    node each (`uform_ram_options_t`). ``RamOptions()`` derives every node the process may
    allocate on; `RamOptions.on` names them. Copied by every verb, never borrowed past it."""

    __slots__ = ("memory_domains", "cpu_class")

    def __init__(self, *, cpu_class=CPUClass.UNKNOWN):
        """Derives every memory domain the process may allocate on."""
        self.memory_domains: Optional[tuple] = None
        self.cpu_class = _enum(CPUClass, cpu_class, "cpu_class")

    @staticmethod
    def on(memory_domains: Iterable[int], cpu_class=CPUClass.UNKNOWN) -> "RamOptions":
        """Names the NUMA node IDs explicitly; `MemoryDomain` objects stand for their nodes. An
        empty sequence derives, as zero entries do in C."""
        options = RamOptions(cpu_class=cpu_class)
        if isinstance(memory_domains, Iterable) and not isinstance(memory_domains, (str, bytes)):
            memory_domains = [domain.node if isinstance(domain, MemoryDomain) else domain for domain in memory_domains]
        options.memory_domains = _int32_array(memory_domains, "memory_domains")
        return options

    @property
    def memory_domains_count(self) -> int:
        """Entries in `memory_domains`; zero derives."""
        return len(self.memory_domains) if self.memory_domains else 0

    def arguments(self) -> RamOptionsStruct:
        """The C layout. The struct holds a reference to its node array (ctypes keeps it in the
        struct's `_objects`), so the array lives exactly as long as the struct the verb passes."""
        struct = RamOptionsStruct()
        if self.memory_domains:
            struct.memory_domains = (ctypes.c_int32 * len(self.memory_domains))(*self.memory_domains)
            struct.memory_domains_count = len(self.memory_domains)
        struct.cpu_class = self.cpu_class
        return struct

    def __eq__(self, other):
        return isinstance(other, RamOptions) and (self.memory_domains, self.cpu_class) == (
            other.memory_domains,
            other.cpu_class,
        )

    def __repr__(self) -> str:
        if self.memory_domains is None:
            return f"RamOptions(cpu_class={self.cpu_class!s})"
        return f"RamOptions.on({list(self.memory_domains)}, cpu_class={self.cpu_class!s})"


class VramOptions:
    """The devices a VRAM-resident model, trainer and executor place their bytes in
    (`uform_vram_options_t`). ``VramOptions()`` derives one free device; `VramOptions.on` names
    UForm ordinals (positions in `Library.gpu_devices`)."""

    __slots__ = ("devices", "gpu_class")

    def __init__(self, *, gpu_class=GPUClass.UNKNOWN):
        """Derives one free device."""
        self.devices: Optional[tuple] = None
        self.gpu_class = _enum(GPUClass, gpu_class, "gpu_class")

    @staticmethod
    def on(devices: Iterable[int], gpu_class=GPUClass.UNKNOWN) -> "VramOptions":
        """Names the device ordinals explicitly; `GPUDevice` objects stand for their ordinals."""
        options = VramOptions(gpu_class=gpu_class)
        ordinals = []
        for device in devices:
            if isinstance(device, GPUDevice):
                if device.ordinal is None:
                    raise Error(Status.INVALID_ARGUMENT, "a GPUDevice not listed by Library.gpu_devices has no ordinal")
                device = device.ordinal
            ordinals.append(device)
        options.devices = _int32_array(ordinals, "devices")
        return options

    @property
    def devices_count(self) -> int:
        """Entries in `devices`; zero derives."""
        return len(self.devices) if self.devices else 0

    def arguments(self) -> VramOptionsStruct:
        """The C layout, holding its ordinal array (see `RamOptions.arguments`)."""
        struct = VramOptionsStruct()
        if self.devices:
            struct.devices = (ctypes.c_int32 * len(self.devices))(*self.devices)
            struct.devices_count = len(self.devices)
        struct.gpu_class = self.gpu_class
        return struct

    def __eq__(self, other):
        return isinstance(other, VramOptions) and (self.devices, self.gpu_class) == (other.devices, other.gpu_class)

    def __repr__(self) -> str:
        if self.devices is None:
            return f"VramOptions(gpu_class={self.gpu_class!s})"
        return f"VramOptions.on({list(self.devices)}, gpu_class={self.gpu_class!s})"


@dataclass
class MeshOptions:
    """Where this process sits among the processes training one model, and how they meet
    (`uform_mesh_options_t`). The default is a run with no peers."""

    host_domain_index: int = 0
    host_domain_count: int = 0
    gpus_per_multimem_domain: int = 0
    directory: str = ""
    job: str = ""
    timeout_seconds: float = 0.0

    def arguments(self) -> MeshOptionsStruct:
        """The C layout; ctypes keeps the encoded strings alive as long as the struct."""
        struct = MeshOptionsStruct()
        struct.host_domain_index = _size(self.host_domain_index, "host_domain_index")
        struct.host_domain_count = _size(self.host_domain_count, "host_domain_count")
        struct.gpus_per_multimem_domain = _size(self.gpus_per_multimem_domain, "gpus_per_multimem_domain")
        struct.directory = self.directory.encode() if self.directory else None
        struct.job = self.job.encode() if self.job else None
        struct.timeout_seconds = float(self.timeout_seconds)
        return struct


@dataclass
class MeshDescription:
    """What a mesh reports about itself (`uform_mesh_description_t`); all zero by default, which is
    what a failed report leaves."""

    gpus_per_host_domain: int = 0
    gpus_per_multimem_domain: int = 0
    gpus_per_colocated_domain: int = 0
    host_domain_index: int = 0
    first_gpu_index: int = 0
    multimem_tier: MultimemTier = MultimemTier.SWITCH_REDUCED
    gpu_class: GPUClass = GPUClass.UNKNOWN


@dataclass
class ExecutorDescription:
    """What an executor is and where it runs (`uform_executor_description_t`)."""

    kind: ExecutorKind
    threads_count: int
    domains_count: int
    devices_count: int
    cpu_class: CPUClass
    gpu_class: GPUClass
    mood: Mood
    deferred_limit: int
    scratch_limit: int
