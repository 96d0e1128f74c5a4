"""L2's column sums (``sum(axis=0)`` of a 2**14-square float32 matrix) under a sweep of tiles, row splits and
warps, against torch.sum, one GPU, one process; the fastest configurations are printed first.

    python bench/experiments/column_sweep.py

Each configuration is checked against torch before it is timed; times are do_bench medians (ms), GB/s count
the matrix and the sums once.
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> None:
    side = 1 << 14
    x = torch.randn(side, side, device="cuda")
    want = torch.sum(x, 0)
    nbytes = (x.numel() + side) * 4
    pipe = tc.sum(axis=0)
    results = [("torch.sum(x, 0)", ms(lambda: torch.sum(x, 0))), ("tricomb heuristic", ms(lambda: pipe(x)))]
    print(results, flush=True)
    for block_m, block_k, split, warps in itertools.product((64, 128, 256), (8, 16, 32, 64), (1, 4, 16), (4,)):
        config = {"BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT": split, "num_warps": warps}
        try:
            with schedule_overrides(**config):
                if not torch.allclose(pipe(x), want, rtol=1e-3, atol=1e-2):
                    print(f"WRONG {config}")
                    continue
                results.append((str(config), ms(lambda: pipe(x))))
                print(f"  {results[-1][0]:70s} {results[-1][1]:7.3f} ms", flush=True)
        except Exception as exc:  # a configuration that fails to compile is reported, not fatal
            print(f"FAILED {config}: {type(exc).__name__}: {str(exc)[:120]}")
    for name, t in sorted(results, key=lambda r: r[1])[:25]:
        print(f"  {name:70s} {t:7.3f} ms {nbytes / t / 1e6:6.0f} GB/s")


if __name__ == "__main__":
    main()
