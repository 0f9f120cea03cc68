"""Where models and executors place their bytes: `RamOptions` and `VramOptions`."""

from std.ffi import c_int, c_size_t

from .classes import CPUClass, GPUClass
from .errors import Error, Status


def _checked_ram[origin: ImmOrigin, //](ram: RamOptions[origin]) raises Error -> RamOptionsArguments:
    """`ram.arguments()`, or `Error(INVALID_ARGUMENT)` for a negative `memory_domains_count` (which C
    would read as about 2^64 entries, past the caller's array)."""
    if ram.memory_domains_count < 0:
        raise Error(
            Status.INVALID_ARGUMENT, String("memory_domains_count must be zero or more, got ", ram.memory_domains_count)
        )
    return ram.arguments()


def _checked_vram[origin: ImmOrigin, //](vram: VramOptions[origin]) raises Error -> VramOptionsArguments:
    """`vram.arguments()`, or `Error(INVALID_ARGUMENT)` for a negative `devices_count`."""
    if vram.devices_count < 0:
        raise Error(Status.INVALID_ARGUMENT, String("devices_count must be zero or more, got ", vram.devices_count))
    return vram.arguments()


@fieldwise_init
struct RamOptionsArguments(Copyable, ImplicitlyCopyable, Movable):
    """`uform_ram_options_t`, field for field: the C layout a verb hands the engine."""

    var memory_domains: Int
    """The address of the node ID array; zero derives."""
    var memory_domains_count: c_size_t
    """Entries at `memory_domains`."""
    var cpu_class: c_int
    """The raw `uform_cpu_class_t`."""

    def is_derived(self) -> Bool:
        """Whether every field derives, as a NULL options pointer does.

        Returns:
            True for the all-zero layout.
        """
        return self.memory_domains_count == 0 and self.cpu_class == 0


@fieldwise_init
struct VramOptionsArguments(Copyable, ImplicitlyCopyable, Movable):
    """`uform_vram_options_t`, field for field: the C layout a verb hands the engine."""

    var devices: Int
    """The address of the ordinal array; zero derives."""
    var devices_count: c_size_t
    """Entries at `devices`."""
    var gpu_class: c_int
    """The raw `uform_gpu_class_t`."""


struct RamOptions[origin: ImmOrigin = ImmUntrackedOrigin](Copyable, ImplicitlyCopyable, Movable):
    """The host memory domains a RAM-resident model and executor place their bytes in, one NUMA
    node each.

    Parameters:
        origin: The borrowed node ID array, kept alive for as long as the options are used.
    """

    var memory_domains: Optional[Pointer[Int32, Self.origin]]
    """NUMA node IDs; absent derives every node the process may allocate on."""
    var memory_domains_count: Int
    """Entries in `memory_domains`; zero derives."""
    var cpu_class: CPUClass
    """The class to dispatch as; `UNKNOWN` derives the CPU's own."""

    def __init__(out self, *, cpu_class: CPUClass = CPUClass.UNKNOWN):
        """Derives every memory domain the process may allocate on.

        Args:
            cpu_class: The class to dispatch as; `UNKNOWN` derives the CPU's own.
        """
        self.memory_domains = None
        self.memory_domains_count = 0
        self.cpu_class = cpu_class

    @staticmethod
    def on[domains_origin: ImmOrigin, //](
        memory_domains: Span[Int32, domains_origin],
        cpu_class: CPUClass = CPUClass.UNKNOWN,
    ) -> RamOptions[domains_origin]:
        """Names the NUMA nodes explicitly, borrowing the caller's array for the call.

        Parameters:
            domains_origin: The origin of the borrowed node IDs.

        Args:
            memory_domains: NUMA node IDs; empty derives, as zero entries do in C.
            cpu_class: The class to dispatch as; `UNKNOWN` derives the CPU's own.

        Returns:
            Options borrowing `memory_domains`.
        """
        var options = RamOptions[domains_origin](cpu_class=cpu_class)
        if len(memory_domains) > 0:
            options.memory_domains = memory_domains.unsafe_ptr()
            options.memory_domains_count = len(memory_domains)
        return options

    def arguments(self) -> RamOptionsArguments:
        """The C layout, erased only inside a verb so the borrow lives through the call. The verbs
        check the count first (`_checked_ram`): a negative one would reach C as about 2^64.

        Returns:
            The `uform_ram_options_t` fields.
        """
        var address = 0
        if self.memory_domains:
            address = Int(self.memory_domains.value())
        return RamOptionsArguments(address, c_size_t(self.memory_domains_count), self.cpu_class.code)


struct VramOptions[origin: ImmOrigin = ImmUntrackedOrigin](Copyable, ImplicitlyCopyable, Movable):
    """The devices a VRAM-resident model, trainer and executor place their bytes in.

    Parameters:
        origin: The borrowed ordinal array, kept alive for as long as the options are used.
    """

    var devices: Optional[Pointer[Int32, Self.origin]]
    """UForm device ordinals, positions in `Library.gpu_devices`; absent derives one free device."""
    var devices_count: Int
    """Entries in `devices`; zero derives."""
    var gpu_class: GPUClass
    """The class every named device dispatches as; `UNKNOWN` derives the devices' own."""

    def __init__(out self, *, gpu_class: GPUClass = GPUClass.UNKNOWN):
        """Derives one free device.

        Args:
            gpu_class: The class every device dispatches as; `UNKNOWN` derives the devices' own.
        """
        self.devices = None
        self.devices_count = 0
        self.gpu_class = gpu_class

    @staticmethod
    def on[devices_origin: ImmOrigin, //](
        devices: Span[Int32, devices_origin],
        gpu_class: GPUClass = GPUClass.UNKNOWN,
    ) -> VramOptions[devices_origin]:
        """Names the device ordinals explicitly, borrowing the caller's array for the call.

        Parameters:
            devices_origin: The origin of the borrowed ordinals.

        Args:
            devices: UForm ordinals, positions in `Library.gpu_devices`; empty derives.
            gpu_class: The class every named device dispatches as.

        Returns:
            Options borrowing `devices`.
        """
        var options = VramOptions[devices_origin](gpu_class=gpu_class)
        if len(devices) > 0:
            options.devices = devices.unsafe_ptr()
            options.devices_count = len(devices)
        return options

    def arguments(self) -> VramOptionsArguments:
        """The C layout, erased only inside a verb so the borrow lives through the call. The verbs
        check the count first (`_checked_vram`): a negative one would reach C as about 2^64.

        Returns:
            The `uform_vram_options_t` fields.
        """
        var address = 0
        if self.devices:
            address = Int(self.devices.value())
        return VramOptionsArguments(address, c_size_t(self.devices_count), self.gpu_class.code)
