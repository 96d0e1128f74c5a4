"""Rows shared by programs (the attach plans' SHARED branch), for a whole array and a few long rows, at several
tiles: BENCH.md's N7 (``x / sum(x)`` over 2**28 float32) and softmax over 8 rows of 2**22, against torch eager and
torch.compile; one GPU, one process.

    python bench/experiments/shared_rows.py

Each program sweeps its part twice (the sum, then the division) in tiles of BLOCK_K, one program an SM; the
tiles and warps differ, and each is checked against torch before it is timed. Times are do_bench medians (ms);
GB/s counts the input and output once.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402

TILES = [{}, *({"BLOCK_K": k, "num_warps": w} for k, w in ((4096, 8), (8192, 8), (8192, 16), (16384, 16), (16384, 32)))]


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def report(name: str, time: float, nbytes: int) -> None:
    print(f"{name:44s} {time:8.3f} ms {nbytes / time / 1e6:7.0f} GB/s", flush=True)


def main() -> None:
    cases = [("N7 x / sum(x), 2**28", torch.rand(2 ** 28, device="cuda"),
              tc.attach(tc.sum()) >> tc.map(lambda v, s: v / s), lambda x: x / x.sum()),
             ("softmax 8 x 2**22", torch.randn(8, 2 ** 22, device="cuda"), tc.library.softmax(),
              lambda x: torch.softmax(x, -1))]
    for name, x, pipe, eager in cases:
        nbytes = 2 * x.numel() * x.element_size()
        want = eager(x)
        print(name, flush=True)
        print("  " + "\n  ".join(pipe.explain(x).chosen))
        report("  torch eager", ms(lambda: eager(x)), nbytes)
        compiled = torch.compile(eager)
        compiled(x)
        report("  torch.compile", ms(lambda: compiled(x)), nbytes)
        for tiles in TILES:
            with schedule_overrides(**tiles):
                torch.testing.assert_close(pipe(x), want, rtol=1e-4, atol=1e-9)
                report(f"  tricomb {tiles or 'schedule'}", ms(lambda: pipe(x)), nbytes)
        with schedule_overrides(SPLIT=1):
            report("  tricomb, not shared (one program a row)", ms(lambda: pipe(x)), nbytes)


if __name__ == "__main__":
    main()
