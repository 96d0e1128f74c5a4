"""Each float builtin at subnormal inputs (and at outputs that are subnormal) against torch on the same device:
where a GPU's approximate instructions flush subnormals to zero, a finite result of torch's becomes 0 or inf
here. Prints each op and dtype whose result differs from torch's beyond 4 ulp or in kind (zero, finite, inf).

    python bench/experiments/subnormals.py [--device cuda]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.scalar.trace import BUILTINS  # noqa: E402

VALUES = [1e-45, 1e-44, 3e-42, 1e-40, 5.9e-39, 1.1754942e-38, 1.1754944e-38, 2e-38, 1e-30, 1.0, 4.0]


def _inputs(dtype: torch.dtype, device: str) -> torch.Tensor:
    tiny = torch.finfo(dtype).tiny
    scales = [v / 1.1754944e-38 for v in VALUES]
    x = torch.tensor([s * tiny for s in scales], dtype=torch.float64)
    return torch.cat([x, -x]).to(dtype).to(device)


def _kind(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.isnan(), 3, torch.where(t.isinf(), 2, torch.where(t == 0, 0, 1)))


def _report(name: str, dtype: torch.dtype, got: torch.Tensor, ref: torch.Tensor, x: torch.Tensor) -> None:
    eps = torch.finfo(dtype).eps
    both = (_kind(got) == 1) & (_kind(ref) == 1)
    rel = ((got.double() - ref.double()).abs() / ref.double().abs()).where(both, 0.0)
    bad = (_kind(got) != _kind(ref)) | (rel > 4 * eps)
    for i in bad.nonzero().flatten().tolist():
        print(f"{name:>12} {str(dtype):>14} x={x[i].item():.4g}: got {got[i].item():.6g}, torch {ref[i].item():.6g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    for dtype in (torch.float32, torch.float64):
        x = _inputs(dtype, args.device)
        y = torch.full_like(x, 3.0)
        for name, fn in BUILTINS.items():
            spec = getattr(fn, "spec", None)
            if spec is None or spec.arity not in (1, 2):
                continue
            args_ = (x,) if spec.arity == 1 else (x, y)
            try:
                pipe = tc.map(fn) if spec.arity == 1 else tc.zip_with(fn)
                got = pipe(*args_)
                ref = spec.torch(*args_)
            except tc.TricombError as error:  # an op that takes no floats, or no element: not this experiment's
                print(f"{name:>12} {str(dtype):>14} skipped: {type(error).__name__}")
                continue
            if isinstance(got, torch.Tensor) and got.is_floating_point():
                _report(name, dtype, got, ref.to(got.dtype), x)
            if spec.arity == 2:
                got, ref = pipe(y, x), spec.torch(y, x)
                if isinstance(got, torch.Tensor) and got.is_floating_point():
                    _report(name + "(3,x)", dtype, got, ref.to(got.dtype), x)


if __name__ == "__main__":
    main()
