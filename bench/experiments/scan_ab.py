"""A/B of emitted look-back scan modules on the GPU: P4 (`map exp | cumsum` of 2^28 float32), P10 (the linear
recurrence over 2^26 pairs) and P11 (drawdown of 2^28 float32), as BENCH.md sizes them.

    python bench/experiments/scan_ab.py --write DIR      # this tricomb's emitted modules, DIR/P4.py ...
    python bench/experiments/scan_ab.py DIR [DIR ...] [--cases P4 P10]   # time each folder's modules

Emitted modules run with nothing but torch and triton, so folders written by two tricomb versions are timed in
one process, on the same inputs, beside the copy and torch's own. Each schedule is passed to the module's
``prepare`` as overrides (``maxnreg=None`` lifts the heuristic's register cap); ``{}`` is the autotuned
default. Each result is checked against torch first. Times are do_bench medians; C is the copy ceiling.
"""
import importlib.util
import sys
from pathlib import Path

import torch
import triton
import triton.testing

P4_SCHEDULES = [{}, *({"BLOCK_K": k, "num_warps": w, "maxnreg": r, "WINDOW": win}
                      for k, w, r, win in [(4096, 4, None, 16), (4096, 4, 64, 16), (4096, 4, None, 32),
                                           (2048, 4, None, 16), (2048, 2, None, 16), (2048, 2, 64, 16),
                                           (8192, 8, None, 16), (8192, 4, None, 16), (1024, 2, None, 16),
                                           (8192, 4, None, 32), (8192, 4, 128, 16), (16384, 4, None, 16),
                                           (16384, 8, None, 16)])]
P10_SCHEDULES = [{}, *({"BLOCK_K": k, "num_warps": w, "maxnreg": r, "WINDOW": win}
                       for k, w, r, win in [(4096, 4, None, 16), (2048, 4, None, 16), (2048, 2, None, 16),
                                            (4096, 8, None, 16), (8192, 8, None, 16), (1024, 2, None, 16),
                                            (4096, 4, None, 32), (8192, 4, None, 32), (4096, 4, 96, 16),
                                            (4096, 4, 80, 16), (4096, 4, 96, 32), (8192, 4, 168, 16),
                                            (8192, 4, 128, 16), (2048, 2, 96, 16)])]
P11_SCHEDULES = [{}, *({"BLOCK_K": k, "num_warps": w, "maxnreg": r}
                       for k, w, r in [(4096, 4, None), (2048, 4, None), (4096, 8, None), (8192, 8, None)])]


def write(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import tricomb as tc
    x, d = torch.randn(1 << 12), torch.rand(1 << 12)
    pipes = {"P4": (tc.parse("map exp | cumsum"), (x,)),
             "P10": (tc.library.linear_recurrence() >> tc.map(lambda h, decays: h), (x, d)),
             "P11": (tc.map(lambda v: (v, v)) >> tc.scan(lambda m1, p1, m2, p2: (tc.maximum(m1, m2), p2))
                     >> tc.map(lambda m, p: m - p) >> tc.max(), (x,))}
    folder.mkdir(parents=True, exist_ok=True)
    for name, (pipe, inputs) in pipes.items():
        (folder / f"{name}.py").write_text(pipe.source(*inputs))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")


def cases():
    x = torch.randn(1 << 28, device="cuda")
    v, d = torch.randn(1 << 26, device="cuda"), torch.rand(1 << 26, device="cuda")
    from torch._higher_order_ops.associative_scan import associative_scan
    recurrence = associative_scan(lambda a, b: (a[0] * b[1] + b[0], a[1] * b[1]), (v, d), dim=-1)[0]
    drawdown = (torch.cummax(x, 0).values - x).max()
    return [("P4", (x,), torch.cumsum(torch.exp(x).double(), 0).float(), 8 << 28, P4_SCHEDULES),
            ("P10", (v, d), recurrence, 12 << 26, P10_SCHEDULES),
            ("P11", (x,), drawdown, 4 << 28, P11_SCHEDULES)]


def ceiling() -> float:
    """The copy of 1 GiB (ms), printed with torch.cumsum (CUB) of the same 2^28 float32."""
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    copy = ms(lambda: y.copy_(x))
    print(f"copy {copy:.3f} ms, C = {8 * (1 << 28) / copy / 1e6:.0f} GB/s; "
          f"torch.cumsum {ms(lambda: torch.cumsum(x, 0)):.3f} ms", flush=True)
    return copy


def main(folders: list[Path], only: list[str]) -> None:
    copy = ceiling()
    for name, inputs, want, nbytes, schedules in cases():
        if only and name not in only:
            continue
        for folder in folders:
            module = load(folder / f"{name}.py")
            for schedule in schedules:
                run = module.prepare(*inputs, **schedule)
                got = run(*inputs)
                err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
                t = ms(lambda: run(*inputs))
                fraction = nbytes / t / 1e6 / (8 * (1 << 28) / copy / 1e6)
                print(f"{name} {folder.name} {schedule or 'tuned'}: {t:.3f} ms, {fraction:.3f} C, "
                      f"rel.err {err:.1e}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    if sys.argv[1] == "--write":
        write(Path(sys.argv[2]))
    else:
        args = sys.argv[1:] + ["--cases"]
        split = args.index("--cases")
        main([Path(a) for a in args[:split]], args[split + 1:])
