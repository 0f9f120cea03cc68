"""The binding's own cost per call, for comparing two checkouts of python/ in one run (e.g. before and
after a change to the binding): blocking and deferred calls of one Python task on a one-thread RAM
executor, an executor's creation and release, and an Outcome's creation and drop.

    python3 bench/bench_python_calls.py            # the package on PYTHONPATH; prints one line per case

Each case reports the median of 7 rounds of the time per operation, in microseconds.
"""

from __future__ import annotations

import gc
import statistics
import time

import uform


def per_operation(operation, count: int) -> float:
    rounds = []
    for _ in range(7):
        gc.collect()
        start = time.perf_counter()
        for _ in range(count):
            operation()
        rounds.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(rounds)


def main() -> None:
    library = uform.Library()
    node = library.memory_domains[0].node
    executor = uform.Executor.for_ram(library, uform.RamOptions.on([node]), threads=1)

    def task(index, thread, domain):
        pass

    def deferred():
        executor.for_n(1, task, defer=True).wait()

    def lifetime():
        uform.Executor.for_ram(library, uform.RamOptions.on([node]), threads=1).close()

    def dropped():
        uform.Executor.for_ram(library, uform.RamOptions.on([node]), threads=1)  # freed when dropped

    cases = {
        "blocking call, 1 Python task": (lambda: executor.for_n(1, task), 20000),
        "deferred call + wait, 1 Python task": (deferred, 20000),
        "executor for_ram(threads=1) + close": (lifetime, 300),
        "executor for_ram(threads=1), dropped": (dropped, 300),
    }
    for name, (operation, count) in cases.items():
        print(f"{name:40s} {per_operation(operation, count):8.2f} us")
    executor.close()


if __name__ == "__main__":
    main()
