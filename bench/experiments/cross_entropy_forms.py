"""Cross-entropy per row (BENCH.md's N5 shape: 8192 x 128256 bf16 logits) written three ways, against torch
eager, torch.compile and Liger-Kernel's forward (loss only, and loss with the gradient written in place, as in
training); one GPU, one process.

    python bench/experiments/cross_entropy_forms.py

The forms: the library's (the softmax denominators attached, then the target's term summed, a one-hot sum the
planner reads at the target alone: one sweep), at the schedule's tiles and others; the attach form the issue
writes (the logsumexp attached, the target's term picked and summed), which takes the same one-hot form; and one
reduce of (max, shifted sum, picked logit, hits) by the generic tuple fold (two exps an element; hits are 1 for a
target in range, -C for an ignored row). bench/NOTES.md also gives a form measured and then removed: the online
normalizer's pair with the sums folded beside it, which read each row once but took 1.72-1.82 ms. Each is checked against torch before it is
timed; times are do_bench medians (ms); GB/s counts the logits, targets and losses once.
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

ROWS, CLASSES = 8192, 128256
TILES = [{"BLOCK_M": 1, "BLOCK_K": k, "num_warps": w} for k, w in ((4096, 8), (8192, 8), (8192, 16), (16384, 16))]


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def one_reduce() -> tc.Pipeline:
    def lse_and_sums(m1, s1, p1, h1, m2, s2, p2, h2):  # the online normalizer's pair, and two sums
        m = tc.maximum(m1, m2)
        s = tc.where(m1 == m, s1, s1 * tc.exp(m1 - m)) + tc.where(m2 == m, s2, s2 * tc.exp(m2 - m))
        return m, s, p1 + p2, h1 + h2

    lift = tc.zip_with(lambda v, t: (v * 1.0, tc.where(v == v, 1.0, v * 1.0), tc.where(tc.index(-1) == t, v * 1.0, 0.0),
                                     tc.where(tc.index(-1) == t, 1.0, tc.where(t == -100, -1.0, 0.0))))
    fold = tc.reduce(lse_and_sums, axis=-1, identity=(-float("inf"), 0.0, 0.0, 0.0))
    return lift >> fold >> tc.map(lambda m, s, p, h: tc.where(h == 0.0, float("nan"), tc.where(h < 0.0, 0.0, m + tc.log(s) - p)))


def liger(requires_grad: bool):
    try:
        from liger_kernel.ops.cross_entropy import cross_entropy_forward
    except ImportError:
        return None

    def run(x, t):
        x.requires_grad_(requires_grad)
        return cross_entropy_forward(x, t, None, -100, 0.0, 0.0, "none", None, False)[0]
    return run


def main() -> None:
    x = torch.randn(ROWS, CLASSES, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, CLASSES, (ROWS,), device="cuda")
    t[::97] = -100
    gb = (x.numel() * 2 + t.numel() * 8 + ROWS * 2) / 1e9
    want = F.cross_entropy(x.float(), t, reduction="none")
    runs = {"torch eager": lambda: F.cross_entropy(x, t, reduction="none"),
            "torch.compile": (lambda c: lambda: c(x, t))(torch.compile(lambda x, t: F.cross_entropy(
                x, t, reduction="none")))}
    for name, grad in (("Liger forward, loss only", False), ("Liger forward with gradient", True)):
        peer = liger(grad)
        if peer is not None:
            runs[name] = (lambda p, y: lambda: p(y, t))(peer, x.clone())
    library = tc.library.cross_entropy(reduction="none")
    runs["tricomb library"] = lambda: library(x, t[:, None])
    for tiles in TILES:
        runs[f"tricomb library {tiles}"] = (lambda tl_: lambda: _with(tl_, lambda: library(x, t[:, None])))(tiles)
    single = one_reduce()
    runs["tricomb generic tuple fold"] = lambda: single(x, t[:, None])
    attach = tc.parse("attach logsumexp(axis=-1) | zip_with (v, lse, t) -> where(index(-1) == t, lse - v, 0) "
                      "| sum(axis=-1)")
    runs["tricomb attach form"] = lambda: attach(x, t[:, None])
    print(str(library.explain(x, t[:, None])).splitlines()[-1], flush=True)
    for name, fn in runs.items():
        try:
            got = fn()
            if "gradient" not in name:
                torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
            time = ms(fn)
            print(f"{name}: {time:.3f} ms, {gb / time * 1e3:.0f} GB/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - an experiment reports each form's failure and goes on
            print(f"{name}: failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


def _with(tiles, fn):
    with schedule_overrides(**tiles):
        return fn()


if __name__ == "__main__":
    main()
