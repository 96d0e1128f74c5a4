"""Where a new process's first call goes, when the disk caches already hold the kernel.

Runs fresh processes that share empty cache directories: the first fills the caches, the later ones are timed.
Two children: tricomb's ``map softplus | sum`` on 4096 float32, and a plain ``@triton.jit`` kernel of the same
work launched once (the floor that Triton's own first launch sets). With ``--profile DIR`` the last tricomb child
writes a cProfile of its first call to ``DIR/new_process.prof`` and prints the top entries.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]

_TRICOMB = """
import sys, time, torch
torch.randn(1, device="cuda"); torch.cuda.synchronize()
start = time.perf_counter()
import tricomb as tc
imported = time.perf_counter()
x = torch.randn(4096, device="cuda")
profile = None
if len(sys.argv) > 1:
    import cProfile
    profile = cProfile.Profile(); profile.enable()
begin = time.perf_counter()
pipe = tc.parse("map softplus | sum")
pipe(x)
torch.cuda.synchronize()
done = time.perf_counter()
if profile:
    profile.disable(); profile.dump_stats(sys.argv[1])
print(imported - start, done - begin)
"""

_RAW = """
import time, torch
torch.randn(1, device="cuda"); torch.cuda.synchronize()
start = time.perf_counter()
import triton, triton.language as tl
imported = time.perf_counter()


@triton.jit
def kernel(x, out, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    v = tl.load(x + offsets, mask=offsets < n, other=0.0)
    tl.store(out, tl.sum(v, axis=0))


x = torch.randn(4096, device="cuda")
out = torch.empty(1, device="cuda")
begin = time.perf_counter()
kernel[(1,)](x, out, 4096, BLOCK=4096)
torch.cuda.synchronize()
done = time.perf_counter()
print(imported - start, done - begin)
"""



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="folder for the cProfile of the last tricomb child")
    args = parser.parse_args()
    # each child is a file: Triton's JIT reads the source of the functions it compiles
    for name, code in (("tricomb", _TRICOMB), ("raw Triton kernel", _RAW)):
        with tempfile.TemporaryDirectory() as work:
            env = {**os.environ, "TRICOMB_CACHE_DIR": f"{work}/tricomb", "TRITON_CACHE_DIR": f"{work}/triton",
                   "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
            script = Path(work, "child.py")
            script.write_text(code)
            extra = [str(Path(args.profile, "new_process.prof"))] if args.profile and name == "tricomb" else []
            runs = []
            for index in range(4):
                cmd = [sys.executable, str(script)] + (extra if index == 3 else [])
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if out.returncode:
                    print(out.stderr)
                    raise SystemExit(out.returncode)
                runs.append([round(float(v), 4) for v in out.stdout.split()])
            print(f"{name}: [import s, first call s] per process, first with empty caches: {runs}")
    if args.profile:
        import pstats
        pstats.Stats(str(Path(args.profile, "new_process.prof"))).sort_stats("cumtime").print_stats(45)


if __name__ == "__main__":
    main()
