"""Run as a script (``__main__``): a user @triton.jit softplus that calls another @triton.jit helper."""
import sys

import torch
import triton
import triton.language as tl

import tricomb as tc

THRESHOLD = tl.constexpr(20.0)


@triton.jit
def log1p_exp(x):
    # log(1 + exp(x)) without losing exp(x) when it is tiny
    e = tl.exp(x)
    u = 1.0 + e
    return tl.where(u == 1.0, e, tl.log(u) * (e / (u - 1.0)))


@triton.jit
def f(x):
    return tl.where(x > THRESHOLD, x, log1p_exp(x))


def main(device: str) -> None:
    generator = torch.Generator().manual_seed(0)
    for shape in [(3, 4), (10_000_001,)]:
        x = (torch.randn(shape, generator=generator) * 8).to(device)
        y = tc.map(f)(x)
        torch.testing.assert_close(y, torch.nn.functional.softplus(x), rtol=2e-6, atol=1e-7)
        total = (tc.map(f) >> tc.reduce(tc.add))(x)
        torch.testing.assert_close(total, torch.nn.functional.softplus(x.double()).sum().float(), rtol=1e-5, atol=1e-5)
        print(f"ok {shape}: sum {total.item():.6g}")
    source = tc.map(f).source(x)
    assert "import __main__" not in source and "from __main__" not in source
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
