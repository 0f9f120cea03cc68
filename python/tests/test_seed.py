"""The snippet at the top of seed/executors.md, in Python.

The Mojo original:

    var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)  # zero takes 7/8 of the cores
    var shared = Executor.on_pool(library, fork_union_pool)                       # borrows a fu_pool_t
    var streams = Executor.for_vram(library, VramOptions.on(devices))             # one host thread, a stream per device
    threads.drain(Mood.SPINNING)                                                # waits until no call holds it, then keeps spinning

Adapted only where Python syntax differs (no `var`) and where this machine lacks the hardware a
line needs: fewer than 8 cores (the engine never oversubscribes), no ForkUnion in the process
(test_pool runs that line against a stand-in pool), no GPU. Each of those must fail exactly as
documented; everything else runs as written.
"""

import ctypes
import unittest

import _support
from uform import Error, Executor, ExecutorKind, Library, Mood, RamOptions, Status, VramOptions


class TestSeedSnippet(unittest.TestCase):
    def test_snippet(self):
        library = Library()
        domains = [domain.node for domain in library.memory_domains]
        devices = [device.ordinal for device in _support.gpu_devices()]

        # var threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)
        if _support.allowed_cores() >= 8:
            threads = Executor.for_ram(library, RamOptions.on(domains), threads=8)
            self.assertEqual(threads.describe().threads_count, 8)
        else:
            with self.assertRaises(Error) as caught:
                Executor.for_ram(library, RamOptions.on(domains), threads=8)
            self.assertIs(caught.exception.kind, Status.INVALID_ARGUMENT)
            self.assertIn("8", caught.exception.message)
            # "zero takes 7/8 of the cores", at least one.
            threads = Executor.for_ram(library, RamOptions.on(domains), threads=0)
            self.assertEqual(threads.describe().threads_count, max(1, _support.allowed_cores() * 7 // 8))
        self.assertIs(threads.describe().kind, ExecutorKind.RAM)
        self.assertEqual(threads.describe().domains_count, len(domains))

        # var shared = Executor.on_pool(library, fork_union_pool)
        # Not a pool: safe only because ForkUnion is absent, so the engine never reads it.
        if not _support.fork_union_in_process():
            not_a_pool = ctypes.create_string_buffer(64)
            fork_union_pool = ctypes.addressof(not_a_pool)
            with self.assertRaises(Error) as caught:
                Executor.on_pool(library, fork_union_pool)
            self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
            self.assertIn("ForkUnion", caught.exception.message)

        # var streams = Executor.for_vram(library, VramOptions.on(devices))
        if devices:
            streams = Executor.for_vram(library, VramOptions.on(devices))
            self.assertIs(streams.describe().kind, ExecutorKind.VRAM)
            self.assertEqual(streams.describe().devices_count, len(devices))
            streams.close()
        else:
            with self.assertRaises(Error) as caught:
                Executor.for_vram(library, VramOptions.on(devices))
            self.assertIs(caught.exception.kind, Status.UNSUPPORTED)
            self.assertTrue(caught.exception.message)

        # threads.drain(Mood.SPINNING)
        threads.drain(Mood.SPINNING)
        self.assertIs(threads.describe().mood, Mood.SPINNING)
        threads.close()


if __name__ == "__main__":
    unittest.main()
