"""Meshes: one process's place among the processes of a run (`Mesh`, `MeshOptions`,
`MeshDescription`)."""

from std.ffi import c_int, c_size_t
from std.memory import ArcPointer

from .classes import GPUClass, MultimemTier
from .errors import Error, Status
from .executor import Executor, _ExecutorHandle, _size
from .library import Address, Library, NULL_ADDRESS


struct MeshDescription(Copyable, Defaultable, ImplicitlyCopyable, Movable):
    """What a mesh reports about itself, `uform_mesh_description_t`."""

    var gpus_per_host_domain: c_size_t
    """GPUs one process drives."""
    var gpus_per_multimem_domain: c_size_t
    """GPUs one NVLink domain spans."""
    var gpus_per_colocated_domain: c_size_t
    """GPUs in the whole run."""
    var host_domain_index: c_size_t
    """This process's index among the run's processes."""
    var first_gpu_index: c_size_t
    """The run-wide index of this process's first GPU, where its share of a sharded dataset begins."""
    var multimem_tier: MultimemTier
    """How its NVLink domains reduce."""
    var gpu_class: GPUClass
    """The class every GPU of the run dispatches as."""

    def __init__(out self):
        """Zeroes every field, which is what a failed report leaves."""
        self.gpus_per_host_domain = 0
        self.gpus_per_multimem_domain = 0
        self.gpus_per_colocated_domain = 0
        self.host_domain_index = 0
        self.first_gpu_index = 0
        self.multimem_tier = MultimemTier.SWITCH_REDUCED
        self.gpu_class = GPUClass.UNKNOWN


struct MeshOptions(Copyable, Defaultable, Movable):
    """Where this process sits among the processes training one model, and how they meet,
    `uform_mesh_options_t`."""

    var host_domain_index: Int
    """This process's index among `host_domain_count`."""
    var host_domain_count: Int
    """Processes in the run, one per host; zero derives one, a run with no peers."""
    var gpus_per_multimem_domain: Int
    """GPUs one NVLink multicast domain spans; zero derives the host."""
    var directory: String
    """The directory every host sees, where processes exchange their facts; required with peers."""
    var job: String
    """The run's unique name inside `directory`; required with peers."""
    var timeout_seconds: Float64
    """Seconds any wait for a peer lasts before the call fails; zero derives 120."""

    def __init__(out self):
        """A run with no peers."""
        self.host_domain_index = 0
        self.host_domain_count = 0
        self.gpus_per_multimem_domain = 0
        self.directory = String()
        self.job = String()
        self.timeout_seconds = 0.0


struct _MeshOptionsArguments(Copyable):
    """`uform_mesh_options_t`, field for field."""

    var host_domain_index: c_size_t
    var host_domain_count: c_size_t
    var gpus_per_multimem_domain: c_size_t
    var directory: Int
    var job: Int
    var timeout_seconds: Float64

    def __init__(out self):
        self.host_domain_index = 0
        self.host_domain_count = 0
        self.gpus_per_multimem_domain = 0
        self.directory = 0
        self.job = 0
        self.timeout_seconds = 0.0


struct _MeshDescriptionArguments(Copyable):
    """`uform_mesh_description_t`, field for field."""

    var gpus_per_host_domain: c_size_t
    var gpus_per_multimem_domain: c_size_t
    var gpus_per_colocated_domain: c_size_t
    var host_domain_index: c_size_t
    var first_gpu_index: c_size_t
    var multimem_tier: c_int
    var gpu_class: c_int

    def __init__(out self):
        self.gpus_per_host_domain = 0
        self.gpus_per_multimem_domain = 0
        self.gpus_per_colocated_domain = 0
        self.host_domain_index = 0
        self.first_gpu_index = 0
        self.multimem_tier = 0
        self.gpu_class = 0


def _c_string(text: String, name: StaticString) raises Error -> List[UInt8]:
    """`text` as NUL-terminated bytes; `Error(INVALID_ARGUMENT)` when it holds a NUL itself."""
    var bytes = List[UInt8](text.as_bytes())
    for byte in bytes:
        if byte == 0:
            raise Error(Status.INVALID_ARGUMENT, String(name, " holds a NUL byte"))
    bytes.append(0)
    return bytes^


struct Mesh(Movable):
    """One process's place among the processes of a run, borrowed by every trainer over the same
    executor; released when it goes out of scope, after every trainer borrowing it.

    A mesh bootstrapped over an executor also holds that executor's handle, so the executor is
    freed only after the mesh, whichever of the two goes out of scope first.
    """

    var library: Library
    """The loaded engine, held so the release can still reach `uform_mesh_free`."""
    var address: Address
    """The opaque `uform_mesh_t`."""
    var _executor: Optional[ArcPointer[_ExecutorHandle]]

    def __init__(out self, *, library: Library, address: Int):
        """Adopts a handle the engine just created.

        Args:
            library: The loaded engine.
            address: The `uform_mesh_t` to own and free.
        """
        self.library = library.copy()
        self.address = address
        self._executor = None

    def __deinit__(deinit self):
        """Leaves the mesh. Calls `uform_mesh_free`."""
        if self.address != NULL_ADDRESS:
            self.library._handle[].call["uform_mesh_free", NoneType](self.address)
        # Only now may the executor go: Mojo destroys a field after its last use, and without this
        # use it would release the executor before the body runs (found by ASan).
        _ = self._executor^

    @staticmethod
    def bootstrap(executor: Executor, options: MeshOptions = MeshOptions()) raises Error -> Self:
        """Joins this process to the run's mesh, waiting for every peer. Calls
        `uform_mesh_bootstrap`.

        Args:
            executor: A device executor whose devices are this process's members of the mesh.
            options: Where this process sits and how the processes meet.

        Returns:
            The mesh, released when it goes out of scope.

        Raises:
            Error: With `CONFIG_MISMATCH` when peers disagree, or `UNSUPPORTED` in a build without
                the trainer (or without NCCL); `INVALID_ARGUMENT` for an executor that is not a VRAM
                one or options out of range (a job name with `/` or `..`, an infinite or negative
                timeout); `TIMEOUT` naming the peers that never came (a missing directory too);
                `PEER_LOST` for a peer that died; `CORRUPT_FILE` for a hostile file in the job's
                directory; `SYSTEM_ERROR` where the directory cannot be used (a file, say).
        """
        var arguments = _MeshOptionsArguments()
        arguments.host_domain_index = _size(options.host_domain_index, "host_domain_index")
        arguments.host_domain_count = _size(options.host_domain_count, "host_domain_count")
        arguments.gpus_per_multimem_domain = _size(options.gpus_per_multimem_domain, "gpus_per_multimem_domain")
        arguments.timeout_seconds = options.timeout_seconds
        var directory = _c_string(options.directory, "directory")
        var job = _c_string(options.job, "job")
        if options.directory:
            arguments.directory = Int(directory.unsafe_ptr())
        if options.job:
            arguments.job = Int(job.unsafe_ptr())
        var handle = 0
        var library = executor.library.copy()
        var status = library._handle[].call["uform_mesh_bootstrap", c_int](
            executor.address, Pointer(to=arguments), Pointer(to=handle)
        )
        _ = directory^
        _ = job^
        library.check(status)
        var mesh = Self(library=library, address=handle)
        mesh._executor = executor._owner.copy()
        return mesh^

    def describe(self) -> MeshDescription:
        """Reports the mesh's shape and this process's place in it. Calls `uform_mesh_describe`.

        Returns:
            The description; all zero when the engine cannot report it.
        """
        var raw = _MeshDescriptionArguments()
        var status = self.library._handle[].call["uform_mesh_describe", c_int](self.address, Pointer(to=raw))
        var description = MeshDescription()
        if status != 0:
            return description
        description.gpus_per_host_domain = raw.gpus_per_host_domain
        description.gpus_per_multimem_domain = raw.gpus_per_multimem_domain
        description.gpus_per_colocated_domain = raw.gpus_per_colocated_domain
        description.host_domain_index = raw.host_domain_index
        description.first_gpu_index = raw.first_gpu_index
        description.multimem_tier = MultimemTier(raw.multimem_tier)
        description.gpu_class = GPUClass(raw.gpu_class)
        return description
