"""Statuses and the one error type every fallible verb of UForm raises."""

from std.ffi import c_int


struct Status(Equatable, TrivialRegisterPassable, Writable):
    """What a call ended with, `uform_status_t`. Zero is success; every other value is the kind of
    an `Error`, whose message the engine wrote on the failing thread."""

    var code: c_int
    """The raw `uform_status_t` value the ABI exchanges."""

    comptime OK = Self(Int32(0))
    """The call did what it was asked."""
    comptime CONTENDED = Self(Int32(1))
    """Another call held the executor; this one finished at once, having done nothing."""
    comptime UNSUPPORTED = Self(Int32(2))
    """The request is valid but cannot be served here: no GPU driver or device, no ForkUnion in
    the process, no NCCL, a class above the hardware, borrowed streams, a build without the part."""
    comptime CONFIG_MISMATCH = Self(Int32(3))
    """Parts that must agree do not: peers of a mesh, or pinned classes of its GPUs."""
    comptime INVALID_ARGUMENT = Self(Int32(4))
    """An argument is malformed: a count out of range, an unknown node or ordinal, a duplicate."""
    comptime OUT_OF_MEMORY = Self(Int32(5))
    """Host or device memory ran out."""
    comptime SYSTEM_ERROR = Self(Int32(6))
    """The operating system refused: a thread, a pin, a file."""
    comptime TIMEOUT = Self(Int32(7))
    """A wait for a peer, a device or NCCL outlasted its timeout."""
    comptime DEVICE_FAULT = Self(Int32(8))
    """A device faulted; the executor that drove it is poisoned."""
    comptime DEFERRED_FULL = Self(Int32(9))
    """A deferred call found `deferred_limit` deferred calls already tracked; nothing was queued."""
    comptime FORKED = Self(Int32(10))
    """The executor or mesh was created by the parent of this process, before a `fork()`."""
    comptime RESIDENCY_MISMATCH = Self(Int32(11))
    """A call naming a residency met an executor of the other kind."""
    comptime LIMIT_EXCEEDED = Self(Int32(12))
    """A call asked for more device scratch than the executor's `scratch_limit` allows."""
    comptime PEER_LOST = Self(Int32(13))
    """A peer of a mesh died or aborted during a collective."""
    comptime CORRUPT_FILE = Self(Int32(14))
    """A file in a mesh directory is garbage, truncated, a symlink, or of another version."""
    comptime PENDING = Self(Int32(15))
    """An outcome that has not finished yet; never a finished call's status."""

    def __init__(out self, code: Int32):
        """Wraps a raw `uform_status_t` value.

        Args:
            code: The raw value.
        """
        self.code = code

    def __eq__(self, other: Self) -> Bool:
        """Whether both name the same status.

        Args:
            other: The status to compare with.

        Returns:
            True when the codes are equal.
        """
        return self.code == other.code

    def name(self) -> String:
        """The constant's name, as `CONTENDED`; `INVALID_<code>` outside the known range.

        Returns:
            The upper-case name.
        """
        var names: List[StaticString] = [
            "OK", "CONTENDED", "UNSUPPORTED", "CONFIG_MISMATCH", "INVALID_ARGUMENT",
            "OUT_OF_MEMORY", "SYSTEM_ERROR", "TIMEOUT", "DEVICE_FAULT", "DEFERRED_FULL",
            "FORKED", "RESIDENCY_MISMATCH", "LIMIT_EXCEEDED", "PEER_LOST", "CORRUPT_FILE",
            "PENDING",
        ]
        var index = Int(self.code)
        if index >= 0 and index < len(names):
            return String(names[index])
        return String("INVALID_", index)

    def write_to(self, mut writer: Some[Writer]):
        """Writes `Status.NAME`.

        Args:
            writer: Where to write.
        """
        writer.write("Status.", self.name())


struct Error(Copyable, Movable, Writable):
    """Every failure UForm reports: `kind` is the `Status` (never `OK`), `message` the engine's
    sentence naming the bad value and what was expected."""

    var kind: Status
    """What went wrong, as the engine's status."""
    var message: String
    """The engine's sentence, read on the failing thread right after the call."""

    def __init__(out self, kind: Status, message: String):
        """An error of `kind` with `message`.

        Args:
            kind: The status.
            message: The sentence explaining it.
        """
        self.kind = kind
        self.message = message

    def write_to(self, mut writer: Some[Writer]):
        """Writes `NAME: message`.

        Args:
            writer: Where to write.
        """
        writer.write(self.kind.name(), ": ", self.message)
