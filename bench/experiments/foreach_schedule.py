"""The foreach kernel's tile and warps for O1 (AdamW over 200 float32 tensors, about 1e9 elements): tricomb's
step timed with each schedule forced, beside torch's fused AdamW, in one process.

    python bench/experiments/foreach_schedule.py [--total 1000000000]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tricomb as tc  # noqa: E402
from optimizer import HYPER, _one, _sizes  # noqa: E402

SCHEDULES = [(256, 2), (512, 2), (512, 4), (1024, 2), (1024, 4), (1024, 8), (2048, 4), (4096, 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=10**9)
    args = parser.parse_args()
    sizes = _sizes(200, args.total)
    initial = [torch.randn(n, device="cuda") for n in sizes]
    grads = [torch.randn(n, device="cuda") * 1e-2 for n in sizes]
    bytes_ = 28 * sum(sizes)
    params, step = _one("torch fused", initial, grads)
    with torch.no_grad():
        fused = do_bench(step, warmup=5, rep=100)
    print(f"torch fused: {fused:.3f} ms, {bytes_ / fused / 1e6:.0f} GB/s")
    del params, step
    params, step = _one("tricomb", initial, grads)
    with torch.no_grad():
        step()
    runner = tc.library._ADAMW._runner
    for block, warps in SCHEDULES:
        for module, _ in runner.modules.values():
            module.schedule_foreach = lambda largest, total, interpret, b=block, w=warps: {"BLOCK": b, "num_warps": w}
        runner.prepared.clear()
        runner.calls.clear()
        with torch.no_grad():
            ms = do_bench(step, warmup=5, rep=100)
        print(f"tricomb BLOCK={block} num_warps={warps}: {ms:.3f} ms, {bytes_ / ms / 1e6:.0f} GB/s, "
              f"{fused / ms:.3f}x fused")
    print({k: v for k, v in HYPER.items()})


if __name__ == "__main__":
    main()
