"""The reference's example (seed/executors.md), whole and runnable on any machine: a RAM executor
over every memory domain, a Mojo function run over a million tasks on it (blocking, then deferred),
a VRAM executor over every GPU where there are GPUs, and the drain into SPINNING.

    ./build.sh test    # installs the toolchain into build/mojo-venv, precompiles build/mojo/uform.mojoc
    UFORM_LIBRARY=build/libuform.so build/mojo-venv/bin/mojo run -I build/mojo mojo/examples/executors.mojo
"""

from std.atomic import Atomic
from uform import Library, Executor, RamOptions, VramOptions, Mood, Schedule


def add(context: Int, task: Int, thread: Int, domain: Int):
    """One task: adds its index to the counter at `context`. Runs on the executor's threads."""
    var total = Pointer[Atomic[Int64], MutAnyOrigin](unsafe_from_address=context)
    _ = total[].fetch_add(Int64(task))


def main() raises:
    var library = Library()                        # $UFORM_LIBRARY, next to the package, or the linker's path
    var domains = library.memory_domains()         # NUMA node IDs this process may allocate on
    var devices = List[Int32]()                    # UForm ordinals: positions in library.gpu_devices()
    for ordinal in range(len(library.gpu_devices())):
        devices.append(Int32(ordinal))

    var threads = Executor.for_ram(library, RamOptions.on(domains), threads=0)  # zero takes 7/8 of the cores
    var total = Atomic[Int64](0)
    threads.call[add](1_000_000, Int(Pointer(to=total)), Schedule.DYNAMIC)    # blocking
    var outcome = threads.call_deferred[add](1000, Int(Pointer(to=total)))     # returns at once
    outcome.result()                                                           # raises the call's failure
    print("sum:", total.load(), "on", threads.describe().threads_count, "threads")

    if len(devices) > 0:
        var streams = Executor.for_vram(library, VramOptions.on(devices))      # one host thread, a stream per device
        print("streams on", streams.describe().devices_count, "GPUs")
    threads.drain(Mood.SPINNING)                   # waits until no call holds it, then keeps spinning
    print("mood:", threads.describe().mood)
