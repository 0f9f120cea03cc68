"""The loaded engine (`Library`) and its GPU listing (`GPUDevice`)."""

from std.ffi import OwnedDLHandle, c_char, c_int, c_size_t
from std.memory import ArcPointer
from std.os import getenv
from std.reflection import source_location

from .classes import CPUClass, GPUClass, GPUVendor
from .errors import Error, Status

comptime Address = Int
"""An opaque engine handle (`uform_executor_t`, `uform_mesh_t`, `fu_pool_t *`) as an integer."""

comptime NULL_ADDRESS: Address = 0
"""The NULL handle: as an executor's address, the caller-thread executor."""

comptime ABI_MAJOR = 0
"""The major version of `libuform` this package speaks (`UFORM_VERSION_MAJOR`)."""

comptime LIBRARY_VARIABLE = "UFORM_LIBRARY"
"""The environment variable naming the `libuform.so` to load before any other place."""

comptime _CString = Pointer[c_char, ImmUntrackedOrigin]

comptime _SYMBOLS = [
    "uform_cpu_class_name",
    "uform_cpu_detect",
    "uform_error_message",
    "uform_executor_call",
    "uform_executor_describe",
    "uform_executor_drain",
    "uform_executor_for_ram",
    "uform_executor_for_vram",
    "uform_executor_free",
    "uform_executor_on_pool",
    "uform_gpu_class_name",
    "uform_gpu_device_name",
    "uform_gpu_devices",
    "uform_gpu_status",
    "uform_gpu_vendor_name",
    "uform_memory_domains",
    "uform_mesh_bootstrap",
    "uform_mesh_describe",
    "uform_mesh_free",
    "uform_outcome_poll",
    "uform_outcome_wait",
    "uform_status_name",
]
"""Every function of `libuform` this package calls besides `uform_version`: `Library` looks for
each as it loads, since calling one the file lacks aborts the process."""


def _package_directory() -> String:
    """The directory of this package's sources, where a bundled `libuform.so` sits."""
    var file = String(source_location().file_name())
    var slash = file.rfind("/")
    if slash < 0:
        return String(".")
    return String(file[byte=:slash])


struct Library(Copyable, Movable):
    """The loaded engine, `libuform.so`. Every `Executor` and `Mesh` keeps a copy, which keeps the
    shared object mapped while their handles live.

    `Library()` looks, in order, at `$UFORM_LIBRARY` (alone, when set), `libuform.so` next to the
    package (in the package's directory, then the one above it; only where the package was
    precompiled from an absolute path, as a relative one would resolve against the working
    directory), then `libuform.so.0` and `libuform.so` through the dynamic linker's search path. When none loads it raises `Error` with
    kind `UNSUPPORTED`, naming every place it tried and why each failed.
    """

    var path: String
    """The file the engine was loaded from, as it was named to the loader."""
    var _handle: ArcPointer[OwnedDLHandle]

    def __init__(out self) raises Error:
        """Loads the engine from the first place that has it.

        Raises:
            Error: UNSUPPORTED naming every place tried, when none loads.
        """
        var places = List[String]()
        var variable = getenv(LIBRARY_VARIABLE)
        var origin: String
        if variable:
            places.append(variable)
            origin = String("$", LIBRARY_VARIABLE)
        else:
            var directory = _package_directory()
            # Only an absolute source directory names a place: a relative one (the package
            # precompiled from a relative path) would resolve against the program's working
            # directory, where any file of that name could be loaded.
            var beside = directory.startswith("/")
            if beside:
                places.append(String(directory, "/libuform.so"))
                var slash = directory.rfind("/")
                if slash > 0:
                    places.append(String(directory[byte=:slash], "/libuform.so"))
            places.append(String("libuform.so.", ABI_MAJOR))
            places.append(String("libuform.so"))
            var state = String("empty") if getenv(LIBRARY_VARIABLE, "unset") == "" else String("unset")
            var next_to = String("next to the package (", directory, " and its parent)") if beside else String(
                "not next to the package (precompiled from the relative path ", directory,
                "; precompile it from an absolute one)",
            )
            origin = String(
                "$", LIBRARY_VARIABLE, " (", state, "), ", next_to, " and the dynamic linker's search path",
            )
        var tried = String()
        for place in places:
            try:
                self = Self(place)
                return
            except e:
                if e.kind != Status.UNSUPPORTED:
                    raise e^
                if tried:
                    tried += "; "
                tried += e.message
        raise Error(
            Status.UNSUPPORTED,
            String(
                "cannot load libuform; looked in ", origin, "; tried: ", tried,
                ". Build it (./build.sh) and set ", LIBRARY_VARIABLE, " to the .so file",
            ),
        )

    def __init__(out self, path: String) raises Error:
        """Loads the engine from `path` exactly.

        Args:
            path: A file path, or a library name the dynamic linker resolves.

        Raises:
            Error: UNSUPPORTED when the file does not load, speaks another ABI, or lacks a function
                this package calls.
        """
        if not path:
            # dlopen("") is the program itself, not a library.
            raise Error(Status.UNSUPPORTED, "the library path is empty")
        try:
            self._handle = ArcPointer(OwnedDLHandle(path))
        except e:
            raise Error(Status.UNSUPPORTED, String(path, " (", e, ")"))
        self.path = path
        # Calling a symbol the file lacks aborts the process: look before the first call.
        if not self._handle[].check_symbol("uform_version"):
            raise Error(Status.UNSUPPORTED, String(path, " loads but is not libuform (no uform_version)"))
        var version = self.version()
        var major = version.split(".")[0]
        if major != String(ABI_MAJOR):
            raise Error(
                Status.UNSUPPORTED,
                String(path, " is libuform ", version, "; this package speaks ABI ", ABI_MAJOR, ".x"),
            )
        var symbols = materialize[_SYMBOLS]()
        for name in symbols:
            if not self._handle[].check_symbol(name):
                raise Error(
                    Status.UNSUPPORTED,
                    String(path, " is libuform ", version, " but lacks ", name, ", which this package calls"),
                )

    def version(self) -> String:
        """The loaded library's version, "MAJOR.MINOR.PATCH". Calls `uform_version`.

        Returns:
            The version string.
        """
        return String(unsafe_from_utf8_ptr=self._handle[].call["uform_version", _CString]())

    def status_name(self, status: Status) -> String:
        """The engine's lower-case name of a status ("contended"). Calls `uform_status_name`.

        Args:
            status: The status to name.

        Returns:
            The name; "invalid" out of range.
        """
        return String(
            unsafe_from_utf8_ptr=self._handle[].call["uform_status_name", _CString](status.code)
        )

    def error_message(self) -> String:
        """The message of the latest failing call on this thread. Calls `uform_error_message`.

        Returns:
            The message, or "" when no call failed.
        """
        return String(unsafe_from_utf8_ptr=self._handle[].call["uform_error_message", _CString]())

    def check(self, code: c_int) raises Error:
        """Raises the engine's failure, reading its message on this thread at once.

        Args:
            code: A `uform_status_t` a function just returned.

        Raises:
            Error: With that status and the engine's message, unless it is OK.
        """
        if code != 0:
            raise Error(Status(code), self.error_message())

    def cpu_class(self) -> CPUClass:
        """The class detection picks for this CPU. Calls `uform_cpu_detect`.

        Returns:
            The detected class.
        """
        var cpu_class = c_int(0)
        _ = self._handle[].call["uform_cpu_detect", c_int](Pointer(to=cpu_class), Int(0))
        return CPUClass(cpu_class)

    def cpu_class_name(self, cpu_class: CPUClass) -> String:
        """The engine's lower-case name of a CPU class. Calls `uform_cpu_class_name`.

        Args:
            cpu_class: The class to name.

        Returns:
            The name, as "amd_genoa"; "invalid" out of range.
        """
        return String(
            unsafe_from_utf8_ptr=self._handle[].call["uform_cpu_class_name", _CString](cpu_class.code)
        )

    def gpu_class_name(self, gpu_class: GPUClass) -> String:
        """The engine's lower-case name of a GPU class. Calls `uform_gpu_class_name`.

        Args:
            gpu_class: The class to name.

        Returns:
            The name, as "nvidia_hopper"; "invalid" out of range.
        """
        return String(
            unsafe_from_utf8_ptr=self._handle[].call["uform_gpu_class_name", _CString](gpu_class.code)
        )

    def gpu_vendor_name(self, vendor: GPUVendor) -> String:
        """The engine's lower-case name of a GPU vendor. Calls `uform_gpu_vendor_name`.

        Args:
            vendor: The vendor to name.

        Returns:
            The name, as "nvidia"; "invalid" out of range.
        """
        return String(
            unsafe_from_utf8_ptr=self._handle[].call["uform_gpu_vendor_name", _CString](vendor.code)
        )

    def memory_domains(self) raises Error -> List[Int32]:
        """The NUMA nodes this process may allocate on, as `RamOptions.on` names them. Calls
        `uform_memory_domains`.

        Returns:
            The node IDs, ascending.

        Raises:
            Error: If the engine cannot read the topology.
        """
        var count = c_size_t(0)
        self.check(self._handle[].call["uform_memory_domains", c_int](Int(0), c_size_t(0), Pointer(to=count)))
        # uform_memory_domain_t: int32 node, uint32 cores_count, uint64 memory_bytes.
        var raw = List[UInt64](length=2 * Int(count) + 2, fill=0)
        var capacity = count
        self.check(
            self._handle[].call["uform_memory_domains", c_int](raw.unsafe_ptr(), capacity, Pointer(to=count))
        )
        var nodes = List[Int32]()
        for i in range(min(Int(count), Int(capacity))):
            nodes.append(Int32(Int(raw[2 * i] & 0xFFFFFFFF)))
        return nodes^

    def cores_count(self) raises Error -> Int:
        """Cores this process may run on (its affinity and cpuset), summed over its memory domains:
        what `Executor.for_ram` may pin threads to. Calls `uform_memory_domains`.

        Returns:
            The number of cores.

        Raises:
            Error: If the engine cannot read the topology.
        """
        var count = c_size_t(0)
        self.check(self._handle[].call["uform_memory_domains", c_int](Int(0), c_size_t(0), Pointer(to=count)))
        var raw = List[UInt64](length=2 * Int(count) + 2, fill=0)
        var capacity = count
        self.check(
            self._handle[].call["uform_memory_domains", c_int](raw.unsafe_ptr(), capacity, Pointer(to=count))
        )
        var cores = 0
        for i in range(min(Int(count), Int(capacity))):
            cores += Int(raw[2 * i] >> 32)  # uint32 cores_count after the int32 node
        return cores

    def gpu_devices(self) raises Error -> List[GPUDevice]:
        """Every GPU the engine can drive, in UForm ordinal order: a device's position here is the
        ordinal every VRAM placement names it by. Empty without a driver or a device. Calls
        `uform_gpu_devices`.

        Returns:
            The devices.

        Raises:
            Error: If the listing itself fails.
        """
        var count = c_size_t(0)
        self.check(self._handle[].call["uform_gpu_devices", c_int](Int(0), c_size_t(0), Pointer(to=count)))
        var raw = List[_GPUDeviceC](length=Int(count) + 1, fill=_GPUDeviceC())
        var capacity = count
        self.check(self._handle[].call["uform_gpu_devices", c_int](raw.unsafe_ptr(), capacity, Pointer(to=count)))
        var devices = List[GPUDevice]()
        for i in range(min(Int(count), Int(capacity))):
            var device = GPUDevice()
            device.vendor = GPUVendor(raw[i].vendor)
            device.vendor_ordinal = raw[i].vendor_ordinal
            device.gpu_class = GPUClass(raw[i].gpu_class)
            device.compute_units = raw[i].compute_units
            device.memory_bytes = raw[i].memory_bytes
            device._ordinal = i
            device._library = self.copy()
            devices.append(device^)
        return devices^

    def gpu_status(self) raises Error:
        """Returns when at least one GPU can be driven. Calls `uform_gpu_status`.

        Raises:
            Error: UNSUPPORTED, saying why no GPU can be driven.
        """
        self.check(self._handle[].call["uform_gpu_status", c_int]())


@fieldwise_init
struct _GPUDeviceC(Copyable, ImplicitlyCopyable, Movable):
    """`uform_gpu_device_t`, field for field."""

    var vendor: c_int
    var vendor_ordinal: UInt32
    var gpu_class: c_int
    var compute_units: UInt32
    var memory_bytes: UInt64

    def __init__(out self):
        self.vendor = 0
        self.vendor_ordinal = 0
        self.gpu_class = 0
        self.compute_units = 0
        self.memory_bytes = 0


struct GPUDevice(Copyable, Defaultable, Movable):
    """One GPU as UForm numbers it, `uform_gpu_device_t`: its position in `Library.gpu_devices` is
    the ordinal every VRAM placement names it by."""

    var vendor: GPUVendor
    """The vendor whose runtime drives the device."""
    var vendor_ordinal: UInt32
    """The device's ordinal in its vendor's runtime."""
    var gpu_class: GPUClass
    """The class whose kernels run on it."""
    var compute_units: UInt32
    """Streaming multiprocessors or compute units."""
    var memory_bytes: UInt64
    """Device memory in bytes."""
    var _ordinal: Int
    var _library: Optional[Library]

    def __init__(out self):
        """An empty entry for the listing to fill."""
        self.vendor = GPUVendor.UNKNOWN
        self.vendor_ordinal = 0
        self.gpu_class = GPUClass.UNKNOWN
        self.compute_units = 0
        self.memory_bytes = 0
        self._ordinal = -1
        self._library = None

    def name(self) -> String:
        """The vendor's own name for the device. Calls `uform_gpu_device_name` with the device's
        position in `Library.gpu_devices`.

        Returns:
            The name; "" for an entry the listing did not fill, or when the engine refuses.
        """
        if not self._library or self._ordinal < 0:
            return String()
        var buffer = List[UInt8](length=256, fill=0)
        var status = self._library.value()._handle[].call["uform_gpu_device_name", c_int](
            c_int(self._ordinal), buffer.unsafe_ptr(), c_size_t(len(buffer))
        )
        if status != 0:
            return String()
        return String(unsafe_from_utf8_ptr=buffer.unsafe_ptr().unsafe_bitcast[c_char]())
