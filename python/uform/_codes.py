"""The ABI's enumerations as `int`-valued Python enums (`Status`, `CPUClass`, `DType`, ...) and the
argument coercion that keeps one enumeration from slipping in where another belongs. Re-exported by
`uform`; import them from there."""

from __future__ import annotations

import enum
import operator


class _Code(enum.IntEnum):
    """An `int`-valued ABI enumeration: members compare equal to their numeric code and to members
    of the same class, never to a member of another enumeration that happens to share the number.
    Values the binding does not know (a newer engine, or a test probing range checks) become
    pseudo-members named ``INVALID_<code>`` instead of failing to convert."""

    @property
    def code(self) -> int:
        """The raw value the ABI exchanges, as the seed's ``code`` field."""
        return int(self)

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            member = int.__new__(cls, value)
            member._name_ = f"INVALID_{value}"
            member._value_ = value
            return member
        return None

    def __eq__(self, other):
        if isinstance(other, _Code) and type(other) is not type(self):
            return False
        return int.__eq__(self, other)

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = int.__hash__

    def __reduce_ex__(self, protocol):
        # By value, so that a pseudo-member (``INVALID_99``) pickles too: Python 3.11.2's IntEnum
        # pickles members by name, which ``getattr`` cannot find for a pseudo-member.
        return type(self), (int(self),)

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class Status(_Code):
    """What a call ended with, `uform_status_t`. `Error.kind` is one of these (never OK)."""

    OK = 0
    CONTENDED = 1
    UNSUPPORTED = 2
    CONFIG_MISMATCH = 3
    INVALID_ARGUMENT = 4
    OUT_OF_MEMORY = 5
    SYSTEM_ERROR = 6
    TIMEOUT = 7
    DEVICE_FAULT = 8
    DEFERRED_FULL = 9
    FORKED = 10
    RESIDENCY_MISMATCH = 11
    LIMIT_EXCEEDED = 12
    PEER_LOST = 13
    CORRUPT_FILE = 14
    PENDING = 15


class CPUClass(_Code):
    """The CPU family dispatch picks, or a placement pins, `uform_cpu_class_t`."""

    UNKNOWN = 0
    SERIAL = 1
    INTEL_HASWELL = 2
    INTEL_SIERRA = 3
    INTEL_SKYLAKE = 4
    INTEL_ICELAKE = 5
    AMD_GENOA = 6
    INTEL_SAPPHIRE = 7
    INTEL_GRANITE = 8
    INTEL_DIAMOND = 9
    AWS_G2 = 10
    APPLE_M2 = 11
    APPLE_M4 = 12
    AWS_G5 = 13
    NVIDIA_VERA = 14
    ALIBABA_C930 = 15
    WASM32_V128 = 16
    WASM64_EXTENDED = 17
    MONOVERSIONED = 18


class GPUClass(_Code):
    """The GPU family dispatch picks, or a placement pins, `uform_gpu_class_t`."""

    UNKNOWN = 0
    NVIDIA_AMPERE = 1
    NVIDIA_ADA = 2
    NVIDIA_HOPPER = 3
    NVIDIA_BLACKWELL = 4
    NVIDIA_BLACKWELLRTX = 5
    NVIDIA_RUBIN = 6
    AMD_CDNA3 = 7
    AMD_CDNA4 = 8
    AMD_CDNA5 = 9
    APPLE_METAL7 = 10
    APPLE_METAL9 = 11
    APPLE_METAL10 = 12


class GPUVendor(_Code):
    """The GPU vendors one binary drives at once, `uform_gpu_vendor_t`."""

    UNKNOWN = 0
    NVIDIA = 1
    AMD = 2
    APPLE = 3


class MultimemTier(_Code):
    """How a mesh's NVLink domains reduce, `uform_multimem_tier_t`."""

    SWITCH_REDUCED = 0
    PEER_READ = 1


class Mood(_Code):
    """How idle workers wait for the next call, `uform_mood_t`."""

    PARKED = 0
    SPINNING = 1


class ExecutorKind(_Code):
    """How an executor was constructed, `uform_executor_kind_t`."""

    INLINE = 0
    RAM = 1
    POOL = 2
    VRAM = 3


class Schedule(_Code):
    """How a call's tasks map onto threads, `uform_schedule_t`."""

    STATIC = 0
    DYNAMIC = 1
    THREADS = 2


class Residency(_Code):
    """Which executors a call may run on, `uform_residency_t`."""

    ANY = 0
    RAM = 1
    VRAM = 2


class DType(_Code):
    """Element types a collective reduces, `uform_dtype_t`."""

    F32 = 0
    BF16 = 1
    F16 = 2
    F64 = 3
    I32 = 4


class Kernel(_Code):
    """The engine's own device kernels, `uform_kernel_t`, launched with `DeviceSlot.launch`."""

    EMPTY = 0
    FILL_F32 = 1
    SLEEP = 2
    TRAP = 3
    ADD_F32 = 4


def _enum(cls, value, name: str):
    """Coerces an argument to enumeration `cls`: members of `cls` and plain integers pass (an
    integer out of range is left for the engine to refuse), members of another enumeration are a
    `TypeError`, so a `GPUClass` never slips in where a `CPUClass` belongs."""
    if isinstance(value, cls):
        return value
    if isinstance(value, _Code) or isinstance(value, bool):
        raise TypeError(f"{name} must be a {cls.__name__}, not {value!r}")
    try:
        return cls(operator.index(value))
    except TypeError:
        raise TypeError(f"{name} must be a {cls.__name__}, not {value!r}") from None
