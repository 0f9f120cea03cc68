"""Executors (`Executor`), the calls they run (`Executor.for_n`, `Executor.call`) and the outcomes
of deferred calls (`Outcome`)."""

from std.ffi import c_char, c_int, c_size_t, external_call
from std.memory import ArcPointer
from std.sys import size_of

from .classes import CPUClass, ExecutorKind, GPUClass, Mood, Schedule
from .errors import Error, Status
from .library import Address, Library, NULL_ADDRESS
from .options import RamOptions, RamOptionsArguments, VramOptions, VramOptionsArguments, _checked_ram, _checked_vram

comptime DEFERRED_LIMIT_DEFAULT = 1024
"""What `deferred_limit=0` takes, `UFORM_DEFERRED_LIMIT_DEFAULT`."""

comptime TaskFunction = def(task: Int, thread: Int, domain: Int) thin -> None
"""A Mojo task: `task` in [0, tasks), `thread` in [0, threads), `domain` the index of the thread's
memory domain among the executor's. It runs on the executor's threads, so it must not raise."""

comptime ContextTaskFunction = def(context: Int, task: Int, thread: Int, domain: Int) thin -> None
"""A Mojo task that also receives the call's `context`, an address the caller chose."""

comptime _CTask = def(Int, c_size_t, c_size_t, c_size_t) abi("C") thin -> None
comptime _OUTCOME_BYTES = 296  # sizeof(uform_outcome_t)
comptime _OUTCOME_KEEP_BYTES = 16  # after the uform_outcome_t: room for the executor an abandoned outcome keeps
comptime _OUTCOME_MESSAGE_OFFSET = 40  # offsetof(uform_outcome_t, message)


def _task_trampoline[task: TaskFunction](context: Int, index: c_size_t, thread: c_size_t, domain: c_size_t) abi("C"):
    task(Int(index), Int(thread), Int(domain))


def _context_trampoline[
    task: ContextTaskFunction
](context: Int, index: c_size_t, thread: c_size_t, domain: c_size_t) abi("C"):
    task(context, Int(index), Int(thread), Int(domain))


struct _CallArguments(Copyable):
    """`uform_call_t`, field for field."""

    var residency: c_int
    var schedule: c_int
    var tasks: c_size_t
    var task: _CTask
    var device: Int
    var scratch_bytes: c_size_t
    var context: Int

    def __init__(out self, task: _CTask, tasks: c_size_t, schedule: Schedule, context: Int):
        self.residency = 0
        self.schedule = schedule.code
        self.tasks = tasks
        self.task = task
        self.device = 0
        self.scratch_bytes = 0
        self.context = context


struct _ExecutorDescriptionArguments(Copyable, Defaultable):
    """`uform_executor_description_t`, field for field."""

    var kind: c_int
    var threads_count: c_size_t
    var domains_count: c_size_t
    var devices_count: c_size_t
    var cpu_class: c_int
    var gpu_class: c_int
    var mood: c_int
    var deferred_limit: c_size_t
    var scratch_limit: c_size_t

    def __init__(out self):
        self.kind = 0
        self.threads_count = 0
        self.domains_count = 0
        self.devices_count = 0
        self.cpu_class = 0
        self.gpu_class = 0
        self.mood = 0
        self.deferred_limit = 0
        self.scratch_limit = 0


def _size(value: Int, name: StaticString) raises Error -> c_size_t:
    """A `size_t` argument, or `Error(INVALID_ARGUMENT)` naming a negative one."""
    if value < 0:
        raise Error(Status.INVALID_ARGUMENT, String(name, " must be zero or more, got ", value))
    return c_size_t(value)


@fieldwise_init
struct ExecutorDescription(Copyable, ImplicitlyCopyable, Movable):
    """What an executor is and where it runs, `uform_executor_description_t`."""

    var kind: ExecutorKind
    """How it was constructed."""
    var threads_count: Int
    """Threads a host call runs on (host decoders on VRAM executors)."""
    var domains_count: Int
    """NUMA nodes its threads and memory live on."""
    var devices_count: Int
    """GPUs it drives; zero unless VRAM."""
    var cpu_class: CPUClass
    """The class host work dispatches as."""
    var gpu_class: GPUClass
    """The class device work dispatches as; `UNKNOWN` unless VRAM."""
    var mood: Mood
    """The mood idle workers are in."""
    var deferred_limit: Int
    """Deferred calls it tracks at once."""
    var scratch_limit: Int
    """Bytes per device it may hold; zero for unlimited."""


struct _ExecutorHandle(Movable):
    """Owns one `uform_executor_t`; frees it when the last `Executor` or `Mesh` holding it goes."""

    var library: Library
    var address: Int

    def __init__(out self, library: Library, address: Int):
        self.library = library.copy()
        self.address = address

    def __deinit__(deinit self):
        if self.address != NULL_ADDRESS:
            self.library._handle[].call["uform_executor_free", NoneType](self.address)


struct Outcome(Movable):
    """Where a deferred call reports, `uform_outcome_t`, in memory that never moves. It holds its
    executor, which is freed only after its outcomes; dropping an outcome whose call is still
    running first waits for the call, so the engine never writes into freed memory.

    The one exception is dropping it where that wait could never end: inside the ForkUnion pool its
    call needs (in a task of that pool, or while holding it), or inside a task of its own RAM or pool
    executor (which runs the call only after that task). The call is abandoned, still to run once
    the pool or the task lets go, and its memory and executor are kept, never freed.
    """

    var library: Library
    """The loaded engine, held so the outcome can still be polled."""
    var address: Address
    """The `uform_outcome_t` the engine writes, allocated by this outcome."""
    var _submitted: Bool
    var _executor: Optional[ArcPointer[_ExecutorHandle]]

    def __init__(out self, library: Library) raises Error:
        """A fresh, unfinished outcome.

        Args:
            library: The loaded engine.

        Raises:
            Error: OUT_OF_MEMORY when the host cannot spare its few hundred bytes.
        """
        self.library = library.copy()
        self._submitted = False
        self._executor = None
        self.address = external_call["calloc", Int](c_size_t(1), c_size_t(_OUTCOME_BYTES + _OUTCOME_KEEP_BYTES))
        if self.address == 0:
            raise Error(Status.OUT_OF_MEMORY, "cannot allocate a uform_outcome_t")

    def __deinit__(deinit self):
        if self.address != 0:
            if self._submitted:  # the engine may still write it: wait until it no longer does
                var status = self.library._handle[].call["uform_outcome_wait", c_int](self.address, Float64(-1))
                # CONTENDED with the call still pending: this thread runs a task of (or holds) the
                # ForkUnion pool the call needs, or a task of the call's own host executor, so no
                # wait here can end (uform.h). The engine writes
                # this memory once the call runs, and freeing the executor would wait for the call
                # the same way: abandon both. The executor's reference moves into the outcome's own
                # memory, past the uform_outcome_t, where no destructor ever reaches it.
                if (
                    Status(status) == Status.CONTENDED
                    and Status(self.library._handle[].call["uform_outcome_poll", c_int](self.address))
                    == Status.PENDING
                ):
                    comptime Kept = Optional[ArcPointer[_ExecutorHandle]]
                    comptime assert size_of[Kept]() <= _OUTCOME_KEEP_BYTES, "the kept executor must fit"
                    var kept = Pointer[Kept, MutUntrackedOrigin](unsafe_from_address=self.address + _OUTCOME_BYTES)
                    kept.unsafe_write(self._executor^)
                    return
            external_call["free", NoneType](self.address)
        _ = self._executor^  # the executor outlives the wait above (see Mesh.__deinit__)

    def poll(self) -> Status:
        """The call's status if it finished, else `Status.PENDING` (also before any call was handed
        this outcome); never blocks. Calls
        `uform_outcome_poll`.

        Returns:
            The status.
        """
        return Status(self.library._handle[].call["uform_outcome_poll", c_int](self.address))

    def wait(self, timeout_seconds: Float64 = -1.0) -> Status:
        """Waits up to `timeout_seconds` (negative: until it finishes). Calls `uform_outcome_wait`.

        Inside the ForkUnion pool a pool executor's call needs (in one of the pool's tasks, or
        holding it), or inside a task of the call's own RAM or pool executor, any wait but a zero
        one returns `Status.CONTENDED` at once while the call is pending, since it cannot run until
        this thread lets the pool or the task go; `poll()` still says `Status.PENDING` then. Wait
        for it after leaving the pool or the task.

        Args:
            timeout_seconds: The longest wait; negative waits forever.

        Returns:
            The call's status, or `Status.PENDING` when it is still running (or was never
            submitted, which no wait would change), or `Status.CONTENDED` at once, the call still
            pending, when waited for inside the pool it needs or a task of its own executor.
        """
        if not self._submitted:
            return Status.PENDING
        return Status(
            self.library._handle[].call["uform_outcome_wait", c_int](self.address, timeout_seconds)
        )

    def message(self) -> String:
        """The engine's failure message once finished; "" on success or while pending.

        Returns:
            The message.
        """
        if self.address == 0 or self.poll() == Status.PENDING:
            return String()
        var text = Pointer[c_char, ImmUntrackedOrigin](unsafe_from_address=self.address + _OUTCOME_MESSAGE_OFFSET)
        return String(unsafe_from_utf8_ptr=text)

    def result(self) raises Error:
        """Waits for the call, then raises its failure.

        Raises:
            Error: With the call's status and message, unless it succeeded; PENDING, saying so,
                for an outcome no call was handed; CONTENDED, the call still pending, when waited
                for inside the ForkUnion pool it needs (see `wait`).
        """
        if not self._submitted:
            raise Error(Status.PENDING, "no call was handed this outcome, so it has no result to wait for")
        var status = self.wait()
        if status == Status.CONTENDED:
            var why = self.library.error_message()  # read before the poll, which may replace it
            if self.poll() == Status.PENDING:
                raise Error(status, why)
        if status != Status.OK:
            raise Error(status, self.message())


struct Executor(Movable):
    """The threads or streams a verb runs on, freed once it and every device arena it made go out
    of scope.

    `Executor(library)` owns nothing: every verb handed it runs on the calling thread. The spawning
    constructors fix a kind that must match the residency of every model they drive. Calls on one
    executor start in submission order, so threads that genuinely overlap take one apiece; a call
    finding another one holding its executor finishes at once with `Status.CONTENDED`.
    """

    var library: Library
    """The loaded engine, held so its symbol table outlives every call made through the handle."""
    var address: Address
    """The opaque `uform_executor_t` every verb hands back to the engine; `NULL_ADDRESS` runs inline."""
    var _owner: ArcPointer[_ExecutorHandle]

    def __init__(out self, library: Library):
        """The caller-thread executor, which every verb accepts whatever the model's residency.

        Args:
            library: The loaded engine, kept so the shared object stays mapped.
        """
        self.library = library.copy()
        self.address = NULL_ADDRESS
        self._owner = ArcPointer(_ExecutorHandle(library, NULL_ADDRESS))

    def __init__(out self, *, library: Library, address: Int):
        """Adopts a handle that is already spawned, which is how the factories hand one back.

        Args:
            library: The loaded engine, kept so the shared object stays mapped.
            address: The `uform_executor_t` to own and free.
        """
        self.library = library.copy()
        self.address = address
        self._owner = ArcPointer(_ExecutorHandle(library, address))

    @staticmethod
    def for_ram[ram_origin: ImmOrigin, //](
        library: Library,
        ram: RamOptions[ram_origin] = RamOptions(cpu_class=CPUClass.UNKNOWN),
        threads: Int = Int(0),
        deferred_limit: Int = Int(0),
    ) raises Error -> Self:
        """Spawns host threads for RAM-resident models. Calls `uform_executor_for_ram`.

        Parameters:
            ram_origin: The origin of the node IDs `ram` borrows.

        Args:
            library: The loaded engine, kept so the shared object stays mapped.
            ram: The memory domains of the models it will drive; copied, not borrowed.
            threads: Threads to spawn; zero takes 7/8 of the cores those domains carry.
            deferred_limit: Deferred calls it tracks at once; zero takes a default.

        Returns:
            The executor, freed when it goes out of scope.

        Raises:
            Error: If the domains cannot be resolved or the OS refuses the threads.
        """
        var arguments = _checked_ram(ram)
        var threads_count = _size(threads, "threads")
        var limit = _size(deferred_limit, "deferred_limit")
        var handle = 0
        library.check(
            library._handle[].call["uform_executor_for_ram", c_int](
                Pointer(to=arguments), threads_count, limit, Pointer(to=handle)
            )
        )
        return Self(library=library, address=handle)

    @staticmethod
    def on_pool[ram_origin: ImmOrigin, //](
        library: Library,
        pool: Int,
        ram: RamOptions[ram_origin] = RamOptions(cpu_class=CPUClass.UNKNOWN),
        deferred_limit: Int = Int(0),
    ) raises Error -> Self:
        """Schedules onto a borrowed ForkUnion pool, so UForm, USearch and UStore in one process
        share one set of threads. Calls `uform_executor_on_pool`.

        Parameters:
            ram_origin: The origin of the node IDs `ram` borrows.

        Args:
            library: The loaded engine, kept so the shared object stays mapped.
            pool: A live ForkUnion `fu_pool_t`, which must outlive the executor.
            ram: The memory domains of the models it will drive; copied, not borrowed.
            deferred_limit: Deferred calls it tracks at once; zero takes a default.

        Returns:
            The executor, freed when it goes out of scope.

        Raises:
            Error: If the pool or the domains are refused.
        """
        var arguments = _checked_ram(ram)
        var limit = _size(deferred_limit, "deferred_limit")
        var handle = 0
        library.check(
            library._handle[].call["uform_executor_on_pool", c_int](
                pool, Pointer(to=arguments), limit, Pointer(to=handle)
            )
        )
        return Self(library=library, address=handle)

    @staticmethod
    def for_vram[vram_origin: ImmOrigin, ram_origin: ImmOrigin, //](
        library: Library,
        vram: VramOptions[vram_origin] = VramOptions(gpu_class=GPUClass.UNKNOWN),
        ram: RamOptions[ram_origin] = RamOptions(cpu_class=CPUClass.UNKNOWN),
        streams: Int = Int(0),
        scratch_limit: Int = Int(0),
        deferred_limit: Int = Int(0),
    ) raises Error -> Self:
        """Opens one submission stream on every named device, all driven by the calling thread, and
        host threads for the decoding the devices cannot do. Calls `uform_executor_for_vram`.

        Parameters:
            vram_origin: The origin of the ordinals `vram` borrows.
            ram_origin: The origin of the node IDs `ram` borrows.

        Args:
            library: The loaded engine, kept so the shared object stays mapped.
            vram: The devices of the models it will drive; copied, not borrowed.
            ram: The memory domains and CPU class of its host decoders; copied, not borrowed.
            streams: Borrowed CUDA streams, one per device; any but `NULL_ADDRESS` reports
                `UNSUPPORTED` until borrowing is wired.
            scratch_limit: Ceiling on scratch bytes per device; zero lets scratch grow as batches ask.
            deferred_limit: Deferred calls it tracks at once; zero takes a default.

        Returns:
            The executor, freed when it goes out of scope.

        Raises:
            Error: If a device cannot be selected, or with `UNSUPPORTED` in a build without one.
        """
        var vram_arguments = _checked_vram(vram)
        var ram_arguments = _checked_ram(ram)
        var scratch = _size(scratch_limit, "scratch_limit")
        var limit = _size(deferred_limit, "deferred_limit")
        var handle = 0
        var status: c_int
        # All-zero RAM options derive the nodes nearest each device, as a NULL pointer does.
        if ram_arguments.is_derived():
            status = library._handle[].call["uform_executor_for_vram", c_int](
                Pointer(to=vram_arguments), Int(0), streams, scratch, limit, Pointer(to=handle)
            )
        else:
            status = library._handle[].call["uform_executor_for_vram", c_int](
                Pointer(to=vram_arguments), Pointer(to=ram_arguments), streams, scratch, limit, Pointer(to=handle)
            )
        library.check(status)
        return Self(library=library, address=handle)

    def drain(self, mood: Mood = Mood.PARKED) raises Error:
        """Waits for every call submitted before the drain, then adopts `mood` whenever it next
        idles. Calls `uform_executor_drain`.

        Args:
            mood: How idle workers wait for the next call.

        Raises:
            Error: For a failure of the executor itself, such as a device fault, never one of a
                drained call, which reports through its own outcome.
        """
        self.library.check(self.library._handle[].call["uform_executor_drain", c_int](self.address, mood.code))

    def describe(self) raises Error -> ExecutorDescription:
        """What the executor is and where it runs. Calls `uform_executor_describe`.

        Returns:
            The description; the caller-thread executor describes as `INLINE` with one thread.

        Raises:
            Error: If the engine refuses the handle.
        """
        var raw = _ExecutorDescriptionArguments()
        self.library.check(
            self.library._handle[].call["uform_executor_describe", c_int](self.address, Pointer(to=raw))
        )
        return ExecutorDescription(
            kind=ExecutorKind(raw.kind),
            threads_count=Int(raw.threads_count),
            domains_count=Int(raw.domains_count),
            devices_count=Int(raw.devices_count),
            cpu_class=CPUClass(raw.cpu_class),
            gpu_class=GPUClass(raw.gpu_class),
            mood=Mood(raw.mood),
            deferred_limit=Int(raw.deferred_limit),
            scratch_limit=Int(raw.scratch_limit),
        )

    def _submit(self, var arguments: _CallArguments, mut outcome: Outcome) raises Error:
        outcome._submitted = True  # finished by the engine even when the submission is refused
        outcome._executor = self._owner.copy()  # the executor is freed only after its outcomes
        self.library.check(
            self.library._handle[].call["uform_executor_call", c_int](
                self.address, Pointer(to=arguments), outcome.address
            )
        )

    def _submit(self, var arguments: _CallArguments) raises Error:
        self.library.check(
            self.library._handle[].call["uform_executor_call", c_int](self.address, Pointer(to=arguments), Int(0))
        )

    def call[task: ContextTaskFunction](
        self, tasks: Int, context: Int = 0, schedule: Schedule = Schedule.STATIC
    ) raises Error:
        """Runs `task(context, task_index, thread, domain)` for every task in [0, tasks) and
        returns when all finished. Calls `uform_executor_call` without an outcome.

        Parameters:
            task: The Mojo function every task runs; it must not raise.

        Args:
            tasks: Tasks to run; zero runs nothing.
            context: An address handed to every task, such as `Int(Pointer(to=state))`.
            schedule: How tasks map onto threads.

        Raises:
            Error: CONTENDED when another call holds the executor (nothing ran), or the engine's
                status for a refused call.
        """
        self._submit(
            _CallArguments(_context_trampoline[task], _size(tasks, "tasks"), schedule, context)
        )

    def call_deferred[task: ContextTaskFunction](
        self, tasks: Int, context: Int = 0, schedule: Schedule = Schedule.STATIC
    ) raises Error -> Outcome:
        """Queues `task(context, task_index, thread, domain)` for every task in [0, tasks) and
        returns at once. Calls `uform_executor_call` with an outcome.

        Parameters:
            task: The Mojo function every task runs; it must not raise.

        Args:
            tasks: Tasks to run; zero runs nothing.
            context: An address handed to every task; what it points to must outlive the call.
            schedule: How tasks map onto threads.

        Returns:
            The outcome, which reports the call's status once it finished.

        Raises:
            Error: CONTENDED, DEFERRED_FULL or the engine's status when the call was refused;
                nothing was queued then.
        """
        var outcome = Outcome(self.library)
        self._submit(
            _CallArguments(_context_trampoline[task], _size(tasks, "tasks"), schedule, context), outcome
        )
        return outcome^

    def for_n[task: TaskFunction](self, n: Int, schedule: Schedule = Schedule.STATIC) raises Error:
        """Runs `task(task_index, thread, domain)` for every task in [0, n), blocking. Calls
        `uform_executor_call`.

        Parameters:
            task: The Mojo function every task runs; it must not raise.

        Args:
            n: Tasks to run; zero runs nothing.
            schedule: `STATIC` splits [0, n) into one share per thread, `DYNAMIC` hands tasks out
                one at a time.

        Raises:
            Error: CONTENDED when another call holds the executor, or the engine's status.
        """
        self._submit(_CallArguments(_task_trampoline[task], _size(n, "n"), schedule, 0))

    def for_n_deferred[task: TaskFunction](
        self, n: Int, schedule: Schedule = Schedule.STATIC
    ) raises Error -> Outcome:
        """Queues `task(task_index, thread, domain)` for every task in [0, n) and returns at once.
        Calls `uform_executor_call` with an outcome.

        Parameters:
            task: The Mojo function every task runs; it must not raise.

        Args:
            n: Tasks to run; zero runs nothing.
            schedule: How tasks map onto threads.

        Returns:
            The outcome of the call.

        Raises:
            Error: CONTENDED, DEFERRED_FULL or the engine's status when the call was refused.
        """
        var outcome = Outcome(self.library)
        self._submit(_CallArguments(_task_trampoline[task], _size(n, "n"), schedule, 0), outcome)
        return outcome^

    def for_threads[task: TaskFunction](self) raises Error:
        """Runs `task(thread, thread, domain)` once on every thread of the executor, blocking.
        Calls `uform_executor_call` with the `THREADS` schedule.

        Parameters:
            task: The Mojo function every thread runs; it must not raise.

        Raises:
            Error: CONTENDED when another call holds the executor, or the engine's status.
        """
        self._submit(_CallArguments(_task_trampoline[task], 0, Schedule.THREADS, 0))
