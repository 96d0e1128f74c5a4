"""What limits `map softplus | sum` (P2)? Time variants of the map function inside the same reduce kernel.

If plain `sum` runs near the read ceiling and `exp | sum` too, the reduce kernel is not the limit and the
softplus arithmetic is. Run on a CUDA GPU: python bench/experiments/softplus_sum.py
"""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
import triton.testing
from triton.language.extra import libdevice

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402


@triton.jit
def naive_softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


@triton.jit
def libdevice_softplus(x):
    return tl.where(x > 20.0, x, libdevice.log1p(tl.exp(x)))


@triton.jit
def stable_softplus(x):
    # max(x, 0) + log1p(exp(-|x|)) with libdevice's log1p
    return tl.maximum(x, 0.0) + libdevice.log1p(tl.exp(-tl.abs(x)))


def main():
    x = torch.randn(1 << 28, device="cuda")
    nbytes = x.numel() * 4
    want = torch.nn.functional.softplus(x.double()).sum().item()
    variants = {
        "sum (no map)": tc.sum(),
        "map exp | sum": tc.map(tc.exp) >> tc.sum(),
        "map softplus | sum (builtin)": tc.map(tc.softplus) >> tc.sum(),
        "naive log(1+exp) | sum": tc.map(naive_softplus) >> tc.sum(),
        "libdevice log1p | sum": tc.map(libdevice_softplus) >> tc.sum(),
        "max + log1p(exp(-|x|)) | sum": tc.map(stable_softplus) >> tc.sum(),
    }
    compiled = torch.compile(lambda t: torch.nn.functional.softplus(t).sum())
    compiled(x)
    ms = triton.testing.do_bench(lambda: compiled(x), warmup=100, rep=500, return_mode="median")
    print(f"{'torch.compile softplus | sum':>32}: {ms:.3f} ms {nbytes / ms / 1e6:7.0f} GB/s")
    for name, pipe in variants.items():
        got = pipe(x).item()
        ms = triton.testing.do_bench(lambda: pipe(x), warmup=100, rep=500, return_mode="median")
        err = abs(got - want) / abs(want) if "softplus" in name or "log" in name else float("nan")
        print(f"{name:>32}: {ms:.3f} ms {nbytes / ms / 1e6:7.0f} GB/s  rel.err vs float64 {err:.2e}")


if __name__ == "__main__":
    main()
