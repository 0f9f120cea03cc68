"""The binding's own cost per call, for comparing two copies of the package in one process and one
run (e.g. before and after a change to the binding), rounds interleaved so that the load of a
shared machine falls on both alike: blocking and deferred calls of one Python task on a one-thread
RAM executor, and an executor's creation and release (closed, or dropped to its finalizer).

    PYTHONPATH=python python3 bench/bench_python_calls.py [OTHER_PYTHON_DIR]

OTHER_PYTHON_DIR holds another copy of the package (``OTHER/uform/__init__.py``), loaded as
``uform_other``, e.g. ``git archive BASE python | tar x -C /tmp/base`` then ``/tmp/base/python``.
Each case prints the median over 9 interleaved rounds of the microseconds per operation, and with a
second copy the median of the per-round ratios (this copy over the other).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import statistics
import sys
import time

import uform


def load_other(directory: str):
    path = os.path.join(directory, "uform", "__init__.py")
    spec = importlib.util.spec_from_file_location("uform_other", path, submodule_search_locations=[os.path.dirname(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["uform_other"] = module
    spec.loader.exec_module(module)
    return module


def cases(package):
    library = package.Library()
    node = library.memory_domains[0].node
    executor = package.Executor.for_ram(library, package.RamOptions.on([node]), threads=1)

    def task(index, thread, domain):
        pass

    def deferred():
        executor.for_n(1, task, defer=True).wait()

    def closed():
        package.Executor.for_ram(library, package.RamOptions.on([node]), threads=1).close()

    def dropped():
        package.Executor.for_ram(library, package.RamOptions.on([node]), threads=1)  # freed when dropped

    return executor, {
        "blocking call, 1 Python task": (lambda: executor.for_n(1, task), 5000),
        "deferred call + wait, 1 Python task": (deferred, 2000),
        "executor for_ram(threads=1) + close": (closed, 200),
        "executor for_ram(threads=1), dropped": (dropped, 200),
    }


def per_operation(operation, count: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(count):
        operation()
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    packages = [uform] + ([load_other(sys.argv[1])] if len(sys.argv) > 1 else [])
    prepared = [cases(package) for package in packages]
    for name in prepared[0][1]:
        rounds = [[] for _ in packages]
        for _ in range(9):
            for position, (_, table) in enumerate(prepared):
                operation, count = table[name]
                rounds[position].append(per_operation(operation, count))
        line = f"{name:38s} this {statistics.median(rounds[0]):8.2f} us"
        if len(packages) > 1:
            ratio = statistics.median(a / b for a, b in zip(rounds[0], rounds[1]))
            line += f"   other {statistics.median(rounds[1]):8.2f} us   this/other {ratio:5.2f}"
        print(line, flush=True)
    for executor, _ in prepared:
        executor.close()


if __name__ == "__main__":
    main()
