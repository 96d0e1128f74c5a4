"""The benchmark suite of BENCH.md, on one CUDA GPU, in one process.

For each case: build the inputs (1 GiB or more), check that every implementation's result matches torch's,
then time tricomb, torch eager and torch.compile with ``triton.testing.do_bench`` (median) and report GB/s
(unique bytes: inputs read once, the output written once), the fraction of the copy ceiling C measured in the
same run, and the ratios. Writes ``<out>/<gpu>.json`` and ``<out>/<gpu>.md``.

    python bench/run.py --out bench/results --commit $(git rev-parse HEAD) [--cases P1 P2]
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import triton
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tricomb as tc  # noqa: E402

N = 1 << 28


@dataclass
class Case:
    name: str
    text: str
    make_inputs: Callable[[], list[torch.Tensor]]
    pipeline: Callable[[], tc.Pipeline]
    eager: Callable
    others: dict[str, Callable]
    target: str
    reference: Callable | None = None  # what results are checked against, when not eager's (which rounds more)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _cases() -> list[Case]:
    F = torch.nn.functional
    return [
        Case("P1", "map softplus", lambda: [_randn(N)], lambda: tc.map(tc.softplus), F.softplus, {},
             ">= 0.97x compile"),
        Case("P2", "map softplus | sum", lambda: [_randn(N)], lambda: tc.parse("map softplus | sum"),
             lambda x: F.softplus(x).sum(), {}, ">= 1.25x compile (>= 0.85 R)"),
        Case("P3", "zip_with mul | sum", lambda: [_randn(N), _randn(N)], lambda: tc.parse("zip_with mul | sum"),
             lambda a, b: (a * b).sum(), {"torch.dot": torch.dot}, ">= 0.97x torch.dot"),
        Case("P4", "map exp | scan add (1-D)", lambda: [_randn(N)], lambda: tc.parse("map exp | cumsum"),
             lambda x: torch.cumsum(torch.exp(x), 0), {"torch.cumsum alone": lambda x: torch.cumsum(x, 0)},
             ">= 0.80 C, >= 1.3x CUB cumsum"),
        Case("P5", "map softplus | sum(axis=-1)", lambda: [_randn(32768, 8192)],
             lambda: tc.parse("map softplus | sum(axis=-1)"), lambda x: F.softplus(x).sum(-1), {},
             ">= 1.25x compile"),
        Case("P6", "scan add along rows", lambda: [_randn(16384, 16384)], lambda: tc.parse("cumsum(axis=-1)"),
             lambda x: torch.cumsum(x, -1), {}, ">= 1.1x compile"),
        Case("P7", "map square | sum | map sqrt (bf16)", lambda: [_randn(N, dtype=torch.bfloat16)],
             lambda: tc.parse("map square | sum | map sqrt"), lambda x: torch.linalg.vector_norm(x),
             {}, ">= 1.0x compile"),
        Case("P8", "logsumexp along rows (tuple reduce: online max and rescaled sum)", lambda: [_randn(32768, 8192)],
             lambda: tc.library.logsumexp(axis=-1), lambda x: torch.logsumexp(x, -1), {}, ">= 1.0x compile"),
        Case("P9", "linear recurrence h = d*h + v along rows (tuple scan)",
             lambda: [_randn(4096, 16384), torch.rand(4096, 16384, device="cuda")],
             lambda: _recurrence(), _recurrence_torch, {}, ">= 1.2x compile"),
        Case("P10", "linear recurrence, one long row (1-D tuple scan)",
             lambda: [_randn(1 << 26), torch.rand(1 << 26, device="cuda")],
             lambda: _recurrence(), _recurrence_torch, {}, ">= 0.75 C"),
        Case("P11", "drawdown: running max minus the input, max (scan then reduce)", lambda: [_randn(N)] * 2,
             lambda: tc.parse("scan maximum | zip_with sub | max"), lambda x, y: (torch.cummax(x, 0).values - y).max(),
             {"tricomb, one input as (max, price) pairs": _pairs_drawdown()}, ">= 1.5x compile"),
        Case("P12", "eight-op map/zip_with chain over 3 inputs", lambda: [_randn(N), _randn(N), _randn(N)],
             lambda: tc.zip_with(_chain), lambda a, b, c: _chain_torch(a, b, c), {}, ">= 0.95x compile, >= 0.9 C"),
    ] + _layout_cases() + _attach_cases()


def _liger(name: str):
    """Liger-Kernel's forward of ``name`` (softmax, rms_norm, layer_norm, cross_entropy), or None where it is not
    installed."""
    try:
        from liger_kernel.ops import cross_entropy, layer_norm, rms_norm, softmax
    except ImportError:
        return None
    return {"cross_entropy": lambda x, t: cross_entropy.cross_entropy_forward(  # the loss only: x needs no grad
                x, t[:, 0], None, -100, 0.0, 0.0, "mean", None, False)[0],
            "softmax": lambda x: softmax.LigerSoftmaxFunction.apply(x),
            "rms_norm": lambda x, w: rms_norm.LigerRMSNormFunction.apply(x, w, 1e-6),
            "layer_norm": lambda x, w, b: layer_norm.LigerLayerNormFunction.apply(x, w, b, 1e-5)}[name]


def _cross_entropy_inputs() -> list[torch.Tensor]:
    """Llama 3's vocabulary (128256) over 8192 tokens, the targets with the class axis kept ((N, 1))."""
    t = torch.randint(0, 128256, (8192, 1), device="cuda")
    t[::97] = -100
    return [_randn(8192, 128256, dtype=torch.bfloat16), t]


def _peers(name: str) -> dict:
    peer = _liger(name)
    return {} if peer is None else {"Liger-Kernel": peer}


def _two_pass_softmax() -> tc.Pipeline:
    return tc.parse("attach max(axis=-1) | map (v, m) -> exp(v - m) | attach sum(axis=-1) | map (e, s) -> e / s")


def _attach_cases() -> list[Case]:
    """Reductions used again on every element of the row (BENCH.md's N cases), against Liger-Kernel's kernels."""
    F = torch.nn.functional
    return [
        Case("N1", "softmax along rows (tc.library.softmax)", lambda: [_randn(32768, 8192)],
             lambda: tc.library.softmax(), lambda x: torch.softmax(x, -1), _peers("softmax"),
             ">= 1.0x Liger, >= 1.1x compile"),
        Case("N2", "softmax along long rows", lambda: [_randn(1024, 262144)], lambda: tc.library.softmax(),
             lambda x: torch.softmax(x, -1), {}, ">= 1.2x compile"),
        Case("N3", "RMSNorm rows with weight (bf16)",
             lambda: [_randn(65536, 8192, dtype=torch.bfloat16), _randn(8192, dtype=torch.bfloat16)],
             lambda: tc.library.rms_norm(), lambda x, w: F.rms_norm(x, (8192,), w, 1e-6), _peers("rms_norm"),
             ">= 1.0x compile and Liger",
             # eager rounds to bfloat16 between its ops; the others (and the check) round once
             lambda x, w: F.rms_norm(x.float(), (8192,), w.float(), 1e-6).to(torch.bfloat16)),
        Case("N4", "LayerNorm rows with weight and bias", lambda: [_randn(32768, 8192), _randn(8192), _randn(8192)],
             lambda: tc.library.layer_norm(), lambda x, w, b: F.layer_norm(x, (8192,), w, b), _peers("layer_norm"),
             ">= 1.0x compile and Liger"),
        Case("N5", "cross-entropy, mean loss, bf16 logits, 1% of targets ignored (tc.library.cross_entropy)",
             _cross_entropy_inputs, lambda: tc.library.cross_entropy(),
             lambda x, t: F.cross_entropy(x, t[:, 0]), _peers("cross_entropy"),
             ">= 1.0x Liger's forward",
             lambda x, t: F.cross_entropy(x.float(), t[:, 0]).to(torch.bfloat16)),
        Case("N6", "two-pass softmax written by the user", lambda: [_randn(32768, 8192)], _two_pass_softmax,
             lambda x: torch.softmax(x, -1), {"tc.library.softmax": tc.library.softmax()},
             "within 10% of N1"),
        Case("N2u", "two-pass softmax written by the user, long rows", lambda: [_randn(1024, 262144)],
             _two_pass_softmax, lambda x: torch.softmax(x, -1), {}, "within 10% of N2"),
        Case("N7", "x / sum(x), whole array (the row shared by the programs)",
             lambda: [torch.rand(2 ** 28, device="cuda")],
             lambda: tc.attach(tc.sum()) >> tc.map(lambda v, s: v / s), lambda x: x / x.sum(), {},
             ">= 1.0x compile (two reads are the floor)"),
        Case("N8", "softmax of 8 rows of 2**22 (rows shared by the programs)", lambda: [_randn(8, 2 ** 22)],
             lambda: tc.library.softmax(), lambda x: torch.softmax(x, -1), {}, ">= 1.0x compile (not in BENCH.md)"),
    ]


def _pairs_drawdown():
    """The drawdown of one input read once: (running max, price) pairs scanned, the difference, its max."""
    running = tc.scan(lambda m1, p1, m2, p2: (tc.maximum(m1, m2), p2))  # p2: the later price (no identity)
    pipe = tc.map(lambda x: (x, x)) >> running >> tc.map(lambda m, p: m - p) >> tc.max()
    return lambda x, y: pipe(x)


def _recurrence():
    """h[t] = d[t] * h[t-1] + v[t] along the last axis: the library's scan of (value, decay) pairs, keeping h."""
    return tc.library.linear_recurrence() >> tc.map(lambda h, decays: h)


def _recurrence_torch(v, d):
    """torch's associative scan of the same pairs (Inductor lowers it to one Triton scan when compiled)."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def combine(x, y):
        return x[0] * y[1] + y[0], x[1] * y[1]
    return associative_scan(combine, (v, d), dim=-1, combine_mode="pointwise")[0]


def _chain(a, b, c):
    return tc.where(a > b, tc.exp(a - c) * b, tc.sigmoid(c) + a * b) / (1.0 + tc.abs(c))


def _chain_torch(a, b, c):
    return torch.where(a > b, torch.exp(a - c) * b, torch.sigmoid(c) + a * b) / (1.0 + torch.abs(c))


def _copy_first(pipe_text: str, view):
    """The plan tricomb does not take: copy the strided input to contiguous, then run on the copy."""
    pipe = tc.parse(pipe_text)
    return lambda x: pipe(view(x).contiguous())


def _layout_cases() -> list[Case]:
    """Strided inputs read in place, against copying them to contiguous first (the measured reason tricomb's plans
    never copy: bind.py). Each "copy first" baseline computes the same result from a contiguous copy."""
    side = 16384
    F = torch.nn.functional
    return [
        Case("L1", "map softplus on a transposed input", lambda: [_randn(side, side).t()],
             lambda: tc.map(tc.softplus), F.softplus, {"tricomb, copy first": _copy_first("map softplus", lambda x: x)},
             "in place >= 1.0x copy first"),
        Case("L2", "sum(axis=0): columns, the reduced axis strided", lambda: [_randn(side, side)],
             lambda: tc.sum(axis=0), lambda x: x.sum(0),
             {"tricomb, copy first": _copy_first("sum(axis=-1)", lambda x: x.t())}, "in place >= 1.0x copy first"),
        Case("L3", "map softplus | sum of a transposed input", lambda: [_randn(side, side).t()],
             lambda: tc.parse("map softplus | sum"), lambda x: F.softplus(x).sum(),
             {"tricomb, copy first": _copy_first("map softplus | sum", lambda x: x)}, "in place >= 1.0x copy first"),
        # positive values: a long cumsum of mixed signs cancels, and then any two summation orders differ by more
        # than the check's relative tolerance (torch.compile's own result fails it)
        Case("L4", "cumsum(axis=0): scan along the strided axis",
             lambda: [torch.rand(side, side, device="cuda")],
             lambda: tc.cumsum(axis=0), lambda x: torch.cumsum(x, 0),
             {"tricomb, copy first": lambda x: tc.cumsum(axis=-1)(x.t().contiguous()).t()},
             "in place >= 1.0x copy first"),
    ]


def _bytes(inputs, output) -> int:
    """Unique bytes: each distinct input once (P11 passes the same tensor twice), and the output."""
    unique = {t.data_ptr(): t for t in inputs}.values()
    return sum(t.numel() * t.element_size() for t in unique) + output.numel() * output.element_size()


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    rtol = 1e-2 if got.dtype == torch.bfloat16 else 2e-3  # (bfloat16's unit roundoff is 2**-8, 3.9e-3)
    got, want = got.double(), want.double()
    scale = want.abs().max().item() if want.numel() else 0.0
    return got.shape == want.shape and bool(((got - want).abs() <= rtol * (want.abs() + 1e-3 * scale + 1e-6)).all())


def ceilings() -> dict:
    x = _randn(N)
    y = torch.empty_like(x)
    copy_ms = _ms(lambda: y.copy_(x))
    read_ms = _ms(lambda: torch.sum(x))
    nbytes = x.numel() * x.element_size()
    return {"C_GBps": 2 * nbytes / copy_ms / 1e6, "R_GBps": nbytes / read_ms / 1e6}


def run_case(case: Case, C: float) -> dict:
    inputs = case.make_inputs()
    pipe = case.pipeline()
    want = (case.reference or case.eager)(*inputs)
    compiled = torch.compile(case.eager)
    impls = {"tricomb": lambda: pipe(*inputs), "torch eager": lambda: case.eager(*inputs),
             "torch.compile": lambda: compiled(*inputs)}
    impls.update({name: (lambda f=f: f(*inputs)) for name, f in case.others.items()})
    row = {"case": case.name, "pipeline": case.text, "target": case.target,
           "inputs": [f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in inputs], "impls": {}}
    for name, fn in impls.items():
        got = fn()
        matches = True if "alone" in name else _close(got, want)  # "alone" baselines compute less
        ms = _ms(fn)
        gbps = _bytes(inputs, got) / ms / 1e6
        row["impls"][name] = {"ms": ms, "GBps": gbps, "of_C": gbps / C, "matches_torch": matches}
        print(f"  {case.name} {name:>22}: {ms:8.3f} ms {gbps:8.1f} GB/s  {gbps / C:5.2f} C  match={matches}",
              flush=True)
    base = row["impls"]["tricomb"]["ms"]
    row["ratios"] = {f"tricomb vs {name}": row["impls"][name]["ms"] / base for name in row["impls"] if name != "tricomb"}
    return row


def markdown(result: dict) -> str:
    lines = [f"# tricomb benchmarks on {result['gpu']}", "",
             f"{result['date']}, commit `{result['commit']}`, torch {result['torch']}, triton {result['triton']}. "
             f"Copy ceiling C = {result['C_GBps']:.0f} GB/s, read ceiling R = {result['R_GBps']:.0f} GB/s "
             "(measured in this run). GB/s counts unique bytes; a ratio above 1 means tricomb is faster.", "",
             "| case | pipeline | implementation | ms | GB/s | of C | matches torch |",
             "|---|---|---|---|---|---|---|"]
    for row in result["cases"]:
        for name, m in row["impls"].items():
            lines.append(f"| {row['case']} | `{row['pipeline']}` | {name} | {m['ms']:.3f} | {m['GBps']:.0f} | "
                         f"{m['of_C']:.2f} | {'yes' if m['matches_torch'] else 'NO'} |")
    lines += ["", "| case | target | " + "ratios (time of the other / time of tricomb) |", "|---|---|---|"]
    for row in result["cases"]:
        ratios = ", ".join(f"{k.replace('tricomb vs ', 'vs ')} {v:.2f}x" for k, v in row["ratios"].items())
        lines.append(f"| {row['case']} | {row['target']} | {ratios} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--cases", nargs="*")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/run.py needs a CUDA GPU")
    gpu = torch.cuda.get_device_name()
    result = {"gpu": gpu, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": args.commit, "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), **ceilings(), "cases": []}
    print(f"{gpu}: C = {result['C_GBps']:.0f} GB/s, R = {result['R_GBps']:.0f} GB/s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = gpu.lower().replace("nvidia ", "").replace(" ", "-")
    for case in _cases():
        if args.cases and case.name not in args.cases:
            continue
        result["cases"].append(run_case(case, result["C_GBps"]))
        torch.cuda.empty_cache()
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2))  # after each case: a partial run is kept
        (out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    try:
        from chart import chart
        chart(out / f"{stem}.json")
    except ImportError:
        print(f"no matplotlib here: draw the chart with python bench/chart.py {out / stem}.json")


if __name__ == "__main__":
    main()
