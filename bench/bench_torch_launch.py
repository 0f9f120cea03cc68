"""PyTorch's per-op costs on GPU 0, for comparison with bench_gpu.

round trip: a tiny in-place op on a one-element CUDA tensor, then torch.cuda.synchronize(),
            repeated; per iteration.
submit:     the same op enqueued back to back, one synchronize at the end; per op.

Each figure is the median of REPEATS runs after a warm-up. Prints
    torch_round_trip_us: X
    torch_submit_us: Y
or a line saying why it measured nothing (no torch, no GPU), and exits 0 either way.

Usage: python3 bench/bench_torch_launch.py [--round-trips N] [--launches N] [--repeats R]
"""

import argparse
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20000)
    parser.add_argument("--launches", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch: not installed, nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("torch: no CUDA device, nothing measured")
        return 0

    x = torch.zeros(1, device="cuda:0")
    for _ in range(2000):  # warm-up: kernels, caching allocator, clocks
        x.add_(1)
        torch.cuda.synchronize()

    round_trips, submits = [], []
    for _ in range(arguments.repeats):
        start = time.perf_counter()
        for _ in range(arguments.round_trips):
            x.add_(1)
            torch.cuda.synchronize()
        round_trips.append((time.perf_counter() - start) / arguments.round_trips)

        start = time.perf_counter()
        for _ in range(arguments.launches):
            x.add_(1)
        torch.cuda.synchronize()
        submits.append((time.perf_counter() - start) / arguments.launches)

    expected = 2000 + arguments.repeats * (arguments.round_trips + arguments.launches)
    if int(x.item()) != expected:
        print(f"torch: wrong sum {x.item()} != {expected}", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print(f"torch_round_trip_us: {statistics.median(round_trips) * 1e6:.3f}")
    print(f"torch_submit_us: {statistics.median(submits) * 1e6:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
