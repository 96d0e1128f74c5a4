"""Sharded scans across GPUs (issue 22's case): a cumsum and a linear recurrence over one axis of 2^28 float32
elements a GPU, sharded over 1, 2, 4 or 8 GPUs of one host (NCCL), for tricomb (``tricomb.distributed.call``:
each rank's kernel, one gather of the shard totals, the seeded scan) against tricomb's local kernel on one shard
and DTensor's own cumsum on the same placement (it all-gathers the tensor first).

Times are medians of CUDA events over ``--reps`` calls, each call between barriers; a rank's time is the
slowest rank's. ``vs local`` is the sharded call's time over the local kernel's on one shard (issue 22: at most
1.15); ``weak scaling`` is the one-GPU time over the W-GPU time at the same elements a GPU (at least 0.9).

    python bench/distributed.py --out bench/results --commit SHA [--per-gpu 268435456] [--gpus 1,2]
    python bench/distributed.py --backend gloo --device cpu --per-gpu 4096 --gpus 1,2   (a smoke run)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tricomb as tc  # noqa: E402
import tricomb.distributed as td  # noqa: E402
from common import write_results  # noqa: E402 (bench/, the script's folder)

PIPES = {"cumsum": lambda: tc.parse("cumsum"), "linear recurrence": lambda: tc.library.linear_recurrence()}


def _timed(fn, reps: int, device: str) -> float:
    """The median time of ``fn`` in ms, each call between barriers, the slowest rank's."""
    times = []
    for _ in range(reps):
        dist.barrier()
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e3)
    mine = torch.tensor([statistics.median(times)], dtype=torch.float64,
                        device=device if device == "cuda" else "cpu")
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def _inputs(name: str, n: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(dist.get_rank())
    x = torch.randn(n, device=device, generator=g)
    return (x,) if name == "cumsum" else (x, torch.rand(n, device=device, generator=g))


def _worker(rank: int, world: int, init: str, args, results: str) -> None:
    if args.device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(args.backend, init_method=f"file://{init}", rank=rank, world_size=world)
    device = args.device
    rows = {}
    for name, make in PIPES.items():
        pipe = make()
        inputs = _inputs(name, args.per_gpu, device)
        sizes = [args.per_gpu] * world
        td.call(pipe, *inputs, axis=-1, sizes=sizes)  # (compile and tune first)
        pipe(*inputs)
        rows[name] = {"local": _timed(lambda: pipe(*inputs), args.reps, device),
                      "sharded": _timed(lambda: td.call(pipe, *inputs, axis=-1, sizes=sizes), args.reps, device)}
        if name == "cumsum":
            rows[name]["dtensor"] = _dtensor_cumsum(inputs[0], world, device, args.reps)
    if rank == 0:
        Path(results).write_text(json.dumps(rows))
    dist.destroy_process_group()


def _dtensor_cumsum(x: torch.Tensor, world: int, device: str, reps: int) -> float | None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    mesh = init_device_mesh(device, (world,))
    sharded = DTensor.from_local(x, mesh, [Shard(0)], run_check=False)
    try:
        torch.cumsum(sharded, 0)
    except Exception as error:  # (a DTensor build without a cumsum rule: say so in the table)
        print(f"DTensor cumsum: {type(error).__name__}: {error}", file=sys.stderr)
        return None
    return _timed(lambda: torch.cumsum(sharded, 0), reps, device)


def markdown(meta: dict, runs: dict) -> str:
    lines = [f"# Sharded scans on {meta['gpu']} (commit {meta['commit']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, {meta['backend']})", "",
             f"{meta['per_gpu']:,} float32 elements a GPU along the scanned axis; ms are the slowest rank's medians.",
             "", "| case | GPUs | local kernel ms | sharded ms | vs local | weak scaling | DTensor cumsum ms |",
             "|---|---|---|---|---|---|---|"]
    for name in PIPES:
        one = runs[1][name]["sharded"] if 1 in runs else None
        for world, rows in sorted(runs.items()):
            r = rows[name]
            scaling = f"{one / r['sharded']:.2f}" if one else ""
            dt = f"{r['dtensor']:.3f}" if r.get("dtensor") else ""
            lines.append(f"| {name} | {world} | {r['local']:.3f} | {r['sharded']:.3f} | "
                         f"{r['sharded'] / r['local']:.2f} | {scaling} | {dt} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--per-gpu", type=int, default=2 ** 28)
    parser.add_argument("--gpus", default=None, help="world sizes, comma-separated (all powers of 2 up to the count)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    count = torch.cuda.device_count() if args.device == "cuda" else os.cpu_count()
    worlds = [int(w) for w in args.gpus.split(",")] if args.gpus else [w for w in (1, 2, 4, 8) if w <= count]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            results = os.path.join(tmp, f"{world}.json")
            mp.spawn(_worker, args=(world, os.path.join(tmp, f"init{world}"), args, results), nprocs=world)
            runs[world] = json.loads(Path(results).read_text())
    import triton
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    meta = {"gpu": gpu, "commit": args.commit, "torch": torch.__version__, "triton": triton.__version__,
            "backend": args.backend, "per_gpu": args.per_gpu}
    write_results(args.out, "distributed", meta, {"runs": runs}, markdown(meta, runs))


if __name__ == "__main__":
    main()
