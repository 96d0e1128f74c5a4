"""Host overhead per call and compile latency (BENCH.md, "Host overhead and compile latency"), on one CUDA GPU.

* Host time per call of ``map softplus | sum`` on 4096 float32: the time of many calls in a row (the GPU work is
  a few microseconds, so the host is the limit), for tricomb, one raw Triton launch of the same kernel
  (``kernel[grid](...)`` with every argument ready), torch eager and torch.compile.
* The first call of a new pipeline in a warm process: emit, load and Triton's cold compile (a constant no earlier
  run used keeps every cache cold).
* The first call in a new process whose disk caches hold the kernel, beyond ``import tricomb``: two fresh
  processes share empty cache directories; the second is timed.

    python bench/host.py [--out bench/results]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tricomb as tc  # noqa: E402

CALLS = 5000


def per_call_us(fn) -> float:
    """Median over 5 rounds of the wall time per call of ``CALLS`` calls in a row, synchronized at the ends."""
    rounds = []
    for _ in range(5):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return sorted(rounds)[2]


def host_overhead() -> dict:
    x = torch.randn(4096, device="cuda")
    pipe = tc.parse("map softplus | sum")
    pipe(x)
    from tricomb.runtime.launch import fast_key
    launcher = pipe._cache.entries()[fast_key((x,))].launcher
    out = torch.empty((), device="cuda")
    slots = (x, out)
    raw = lambda: launcher.fn[launcher.grid](*slots, *launcher.rest, **launcher.meta)  # noqa: E731
    eager = lambda: torch.nn.functional.softplus(x).sum()  # noqa: E731
    compiled = torch.compile(eager)
    compiled()
    times = {"tricomb": per_call_us(lambda: pipe(x)), "raw Triton launch": per_call_us(raw),
             "torch eager": per_call_us(eager), "torch.compile": per_call_us(compiled)}
    times["tricomb / raw Triton launch"] = times["tricomb"] / times["raw Triton launch"]
    return times


def first_call_warm_process() -> dict:
    x = torch.randn(4096, device="cuda")
    c = round(random.uniform(1, 2), 6)  # a new constant: a new module and a cold Triton compile
    pipe = tc.map(lambda v: tc.softplus(v) * c) >> tc.sum()
    tc.parse("map exp | sum")(x)  # the process is warm: tricomb has bound, emitted and compiled before
    start = time.perf_counter()
    pipe(x)
    torch.cuda.synchronize()
    return {"first call of a new pipeline, warm process (s)": time.perf_counter() - start}


_CHILD = """
import time, torch
torch.randn(1, device="cuda"); torch.cuda.synchronize()
start = time.perf_counter()
import tricomb as tc
imported = time.perf_counter()
x = torch.randn(4096, device="cuda")
pipe = tc.parse("map softplus | sum")
pipe(x)
torch.cuda.synchronize()
done = time.perf_counter()
print(imported - start, done - imported)
"""


def first_call_new_process() -> dict:
    with tempfile.TemporaryDirectory() as tricomb_cache, tempfile.TemporaryDirectory() as triton_cache:
        path = os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "TRICOMB_CACHE_DIR": tricomb_cache, "TRITON_CACHE_DIR": triton_cache, "PYTHONPATH": path}
        runs = []
        for _ in range(3):
            out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
            runs.append([float(v) for v in out.stdout.split()])
    return {"new process, empty caches: import, first call (s)": runs[0],
            "new process, caches hold the kernel: import, first call (s)": runs[1],
            "again (s)": runs[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--commit", default="unknown")
    args = parser.parse_args()
    result = {"gpu": torch.cuda.get_device_name(), "commit": args.commit, "torch": torch.__version__,
              "triton": triton.__version__, "host_us_per_call": host_overhead()}
    print(json.dumps(result, indent=2), flush=True)
    result.update(first_call_warm_process())
    result.update(first_call_new_process())
    print(json.dumps(result, indent=2))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
