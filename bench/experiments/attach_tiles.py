"""Tiles for attach kernels on rows held on chip: rows a program (BLOCK_M) and warps, for BENCH.md's N1, N3 and
N4 shapes, against torch.compile; one GPU, one process.

    python bench/experiments/attach_tiles.py

Each configuration is forced with ``schedule_overrides`` (no autotuning) and checked against torch before it is
timed. Times are do_bench medians (ms).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402

CONFIGS = [(1, 8), (1, 16), (1, 32), (2, 16), (2, 32), (4, 32)]  # (BLOCK_M, num_warps), BLOCK_K 8192


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    x = torch.randn(32768, 8192, device="cuda")
    xb = torch.randn(65536, 8192, device="cuda", dtype=torch.bfloat16)
    w, b, wb = torch.randn(8192, device="cuda"), torch.randn(8192, device="cuda"), xb[0].clone()
    cases = {"N1 softmax": (tc.library.softmax(), (x,), lambda x: torch.softmax(x, -1)),
             "N3 rms_norm bf16": (tc.library.rms_norm(), (xb, wb), lambda x, w: F.rms_norm(x, (8192,), w, 1e-6)),
             "N4 layer_norm": (tc.library.layer_norm(), (x, w, b), lambda x, w, b: F.layer_norm(x, (8192,), w, b))}
    for name, (pipe, inputs, ref) in cases.items():
        compiled = torch.compile(ref)
        print(f"{name}: torch.compile {ms(lambda: compiled(*inputs)):.3f} ms", flush=True)
        want = ref(*[t.float() for t in inputs]).to(inputs[0].dtype)
        for block_m, warps in CONFIGS:
            with schedule_overrides(BLOCK_M=block_m, BLOCK_K=8192, num_warps=warps):
                got = pipe(*inputs)
                torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)
                print(f"  BLOCK_M {block_m}, {warps} warps: {ms(lambda: pipe(*inputs)):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
