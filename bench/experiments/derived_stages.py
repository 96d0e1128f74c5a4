"""Derived stages (mean, nansum, argmax/argmin, cummax/cummin, dtype=) timed against torch eager, one GPU, one
process: run it once per tricomb tree to compare the flag emitters with the ``expand`` pass's core stages.

    python bench/experiments/derived_stages.py [--tree PATH]

``--tree`` puts that checkout's ``tricomb`` first on the path (default: this one). Each case is checked against
torch before it is timed. Times are do_bench medians (ms).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton.testing


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def cases(tc):
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = torch.randn(8192, 8192, device="cuda", generator=g)
    flat = torch.randn(2 ** 26, device="cuda", generator=g)
    flat[::977] = float("nan")
    half = rows.half()
    return [
        ("argmax(axis=1) 8192^2 f32", tc.parse("argmax(axis=1)"), rows, lambda x: torch.argmax(x, 1)),
        ("argmin 2^26 f32", tc.parse("argmin"), rows.view(-1)[:2 ** 26], torch.argmin),
        ("cummax(axis=1) 8192^2 f32", tc.parse("cummax(axis=1)"), rows, lambda x: torch.cummax(x, 1)),
        ("mean(axis=1) 8192^2 f16", tc.parse("mean(axis=1)"), half, lambda x: torch.mean(x, 1)),
        ("nansum 2^26 f32", tc.parse("nansum"), flat, torch.nansum),
        ("sum(dtype=float64) 2^26 f32", tc.parse("sum(dtype=float64)"), rows.view(-1)[:2 ** 26],
         lambda x: torch.sum(x, dtype=torch.float64)),
    ]


def same(got, want) -> bool:
    got = got if isinstance(got, tuple) else (got,)
    want = tuple(want) if isinstance(want, tuple) else (want,)
    return all(torch.allclose(a.double(), b.double(), rtol=2e-3, atol=1e-3, equal_nan=True) for a, b in zip(got, want))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]))
    tree = parser.parse_args().tree
    sys.path.insert(0, tree)
    import tricomb as tc
    print(f"tree {tree}: tricomb from {Path(tc.__file__).parent}")
    for name, pipe, x, ref in cases(tc):
        ok = "ok" if same(pipe(x), ref(x)) else "WRONG"
        ours, theirs = ms(lambda: pipe(x)), ms(lambda: ref(x))
        print(f"  {name:32s} tricomb {ours:7.3f} ms  torch {theirs:7.3f} ms  {theirs / ours:5.2f}x  {ok}")


if __name__ == "__main__":
    main()
