"""tricomb under torch.compile on CUDA against its eager calls: static graphs record the kernels through
``wrap_triton`` (Inductor launches them), graphs over symbolic sizes take the opaque operator. Prints
microseconds per call (``do_bench``); a contender that fails prints its error. The figures in bench/NOTES.md
("triton_op") came from an earlier form of this script, when graphs over symbolic sizes recorded the kernels
too (unspecialized sizes: the 2.7x softmax slowdown that made them take the opaque operator).

    python3 bench/experiments/compiled_paths.py
"""
import torch
from triton.testing import do_bench

import tricomb as tc


def report(name, contenders, *args):
    for label, fn in contenders.items():
        try:
            fn(*args)
            us = do_bench(lambda: fn(*args), warmup=25, rep=100) * 1e3
            print(f"{name:28s} {label:24s} {us:9.1f} us", flush=True)
        except Exception as exc:  # (a failing contender is reported, the rest still run)
            print(f"{name:28s} {label:24s} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)


def compiled(fn, dynamic):
    return torch.compile(lambda *a: fn(*a), fullgraph=True, dynamic=dynamic)


def main():
    softmax = tc.library.softmax(axis=-1)
    x = torch.randn(32768, 8192, device="cuda")
    report("softmax 32768x8192 f32", {"tricomb eager": softmax, "compile static": compiled(softmax, False),
                                      "compile dynamic": compiled(softmax, True),
                                      "torch.compile softmax": compiled(lambda t: torch.softmax(t, -1), False)}, x)
    small = torch.randn(64, 512, device="cuda")
    report("softmax 64x512 (host cost)", {"tricomb eager": softmax, "compile static": compiled(softmax, False)}, small)
    cumsum = tc.cumsum(axis=-1)
    y = torch.randn(1 << 28, device="cuda")
    report("cumsum 2^28 f32", {"tricomb eager": cumsum, "compile dynamic": compiled(cumsum, True)}, y)
    norm = tc.library.rms_norm(eps=1e-6)
    xb = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(8192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn_like(xb)

    def step(f):
        return lambda a, b: torch.autograd.grad(f(a, b), (a, b), g)
    report("rms_norm bf16 fwd+bwd", {"tricomb eager": step(norm), "compile static": step(compiled(norm, False))},
           xb, w)


if __name__ == "__main__":
    main()
