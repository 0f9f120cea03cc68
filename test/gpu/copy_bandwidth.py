"""The host's ceilings for a VRAM tower's features (bench/RESULTS.md): device-to-host copies into
pinned and pageable memory, and host copies and zero fills at 1 and N threads, on PyTorch.

    python3 test/gpu/copy_bandwidth.py [--megabytes 242] [--threads 14]

Prints GB/s, best of 5, for each; the bytes counted once (what lands in the destination)."""
import argparse
import time

import torch


def best_of(function, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        function()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=242.0)
    parser.add_argument("--threads", type=int, default=14)
    arguments = parser.parse_args()
    count = int(arguments.megabytes * 1e6) // 4
    device = torch.randn(count, device="cuda")
    pinned = torch.empty(count, pin_memory=True)
    pageable = torch.empty(count)
    other = torch.empty(count)
    pageable.fill_(1.0), other.fill_(1.0)  # first touches outside the timings
    gigabytes = count * 4 / 1e9
    cases = [
        ("device to pinned host", lambda: pinned.copy_(device, non_blocking=True)),
        ("device to pageable host", lambda: pageable.copy_(device)),
    ]
    for threads in sorted({1, arguments.threads}):
        cases.append((f"pinned to pageable, {threads} thread(s)", (threads, lambda: other.copy_(pinned))))
        cases.append((f"zero fill, {threads} thread(s)", (threads, lambda: other.zero_())))
    for name, case in cases:
        if isinstance(case, tuple):
            torch.set_num_threads(case[0])
            case = case[1]
        seconds = best_of(case)
        print(f"{name}: {gigabytes / seconds:.1f} GB/s ({gigabytes * 1e3:.0f} MB in {seconds * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
