#!/usr/bin/env python3
"""torch.distributed all_reduce bus bandwidth, the third column of bench_allreduce.

    python3 bench/bench_allreduce_torch.py [--processes N] [--quick] [--output FILE]

One process per GPU (N defaults to every GPU), started with torch.multiprocessing and joined
through a file store, NCCL backend, f32, 1 MiB to 1 GiB in powers of 4. Measured as
bench_allreduce.c measures every column: 3 warm-up calls, then the best of 3 trials of N
back-to-back asynchronous all_reduce(async_op=True) calls followed by ONE wait (the last work's
wait(), then torch.cuda.synchronize()), timed on the host from the first call, processes aligned
by a one-element all_reduce before each trial; bus bandwidth = bytes / time * 2 (n - 1) / n.

Prints (and writes to --output) lines "torch_busbw BYTES GBPS", plus "torch_init_seconds S": the
file-store initialisation and first all_reduce, and the NCCL version torch uses. NVLink
multicast stays off: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are forced.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def sizes(quick):
    result, size = [], 1 << 20
    while size <= (1 << 30):
        if quick and size > (16 << 20):
            break
        result.append(size)
        size *= 4
    return result


def iterations_for(size, quick):
    if quick:
        return 3
    if size <= 4 << 20:
        return 40
    if size <= 64 << 20:
        return 20
    if size <= 256 << 20:
        return 12
    return 8


def worker(rank, world, store_file, quick, output):
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    start = time.perf_counter()
    dist.init_process_group("nccl", init_method=f"file://{store_file}", rank=rank, world_size=world, device_id=device)
    one = torch.zeros(1, device=device)
    dist.all_reduce(one)
    torch.cuda.synchronize()
    init_seconds = time.perf_counter() - start
    lines = [f"torch_init_seconds {init_seconds:.3f}",
             f"torch_version {torch.__version__} nccl {'.'.join(map(str, torch.cuda.nccl.version()))} ranks {world}"]
    for size in sizes(quick):
        buffer = torch.zeros(size // 4, dtype=torch.float32, device=device)
        iterations = iterations_for(size, quick)
        for _ in range(3):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            dist.all_reduce(one)
            torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(iterations):
                work = dist.all_reduce(buffer, async_op=True)
            work.wait()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - begin) / iterations)
        busbw = size / best * 2 * (world - 1) / world / 1e9
        lines.append(f"torch_busbw {size} {busbw:.2f}")
        if rank == 0:
            print(f"torch all_reduce {size:>10} bytes: {best * 1e6:10.1f} us, bus bandwidth {busbw:8.1f} GB/s",
                  flush=True)
        del buffer
    if rank == 0:
        for line in lines:
            print(line, flush=True)
        if output:
            with open(output, "w") as file:
                file.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="")
    arguments = parser.parse_args()
    world = arguments.processes or torch.cuda.device_count()
    if world < 2:
        print(f"bench_allreduce_torch: {torch.cuda.device_count()} GPU(s); an all-reduce needs two")
        return 0
    with tempfile.TemporaryDirectory() as directory:
        store = os.path.join(directory, "store")
        mp.spawn(worker, args=(world, store, arguments.quick, arguments.output), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
