"""``tricomb run | emit | explain | check | bench``: a pipeline from the command line; ``tricomb cache info |
clear``: the disk cache.

Exit codes: 0 success (for ``run``, ``check`` and ``bench``: tricomb's results match torch's); 1 a result
differs from torch's; 2 a mistake in the command (bad pipeline text, shapes, dtypes, files, no GPU for
``bench``).
"""
from __future__ import annotations

import argparse
import types
import runpy
import sys
import time
from pathlib import Path

import torch

EXAMPLES = """examples:
  tricomb run "map softplus | sum"
  tricomb run "zip_with mul | sum(axis=-1)" --shape 4096 1024 --dtype bfloat16
  tricomb run "map f | sum" --env my_functions.py          # f: a @triton.jit function defined there
  tricomb run "map exp | cumsum" --input x.pt
  tricomb emit "map softplus | sum" > kernel.py
  tricomb explain "map exp | sum(axis=0)" --shape 1000 37
  tricomb explain "nanmean" --shape 8 --passes
  tricomb check "map softplus | sum(axis=1)" --examples 200      # hypothesis against torch
  tricomb bench "map softplus | sum" --shape 268435456           # against torch eager and torch.compile (GPU)
  tricomb cache info                                             # where the disk cache is, what it holds
"""

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
          "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tricomb", description="Compile a map/zip_with/reduce/scan pipeline "
                                     "into one Triton kernel and run it.", epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_versions())
    sub = parser.add_subparsers(dest="command", required=True)
    cache = sub.add_parser("cache", help="show (info) or empty (clear) the disk cache",
                           description="show (info) or empty (clear) tricomb's disk cache")
    cache.add_argument("action", choices=["info", "clear"])
    for name, text in [("run", "run a pipeline and compare it with torch"),
                       ("emit", "print the emitted Triton module"),
                       ("explain", "print the kernel plan"),
                       ("check", "check a pipeline against torch on inputs hypothesis draws"),
                       ("bench", "time a pipeline against torch eager and torch.compile (CUDA)")]:
        p = sub.add_parser(name, help=text, description=text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("pipeline", help='pipeline text, e.g. "map softplus | sum"')
        if name == "check":
            p.add_argument("--examples", type=int, default=100, help="examples to draw (default: 100)")
            p.add_argument("--rank", type=int, default=2, help="rank of the drawn inputs (default: 2)")
            p.add_argument("--max-side", type=int, default=17, help="largest side drawn (default: 17)")
        else:
            p.add_argument("--shape", type=int, nargs="+", help="shape of generated inputs (default: 1000000)")
            p.add_argument("--input", nargs="+", metavar="FILE", help=".pt or .npy files, one per pipeline input")
        if name == "explain":
            p.add_argument("--passes", action="store_true", help="show the IR after each compiler pass")
        p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                       help="dtype of generated inputs (default: float32)")
        p.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default: 0)")
        p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when available, else cpu "
                       "(Triton's interpreter)")
        p.add_argument("--env", metavar="FILE.py", help="a Python file whose top-level names (functions, "
                       "@triton.jit functions) the pipeline text can use")
    return parser


def _versions() -> str:
    """tricomb's version and those of the Triton and torch it runs on."""
    import triton
    from . import __version__
    return f"tricomb {__version__} (triton {triton.__version__}, torch {torch.__version__})"


class UsageError(Exception):
    pass


def _device(args) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def _load(path: str) -> torch.Tensor:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--input {path}: no such file")
    try:
        return _read(file, path)
    except UsageError:
        raise
    except Exception as exc:  # a file numpy or torch cannot read: corrupt, pickled objects, byte order, ...
        raise UsageError(f"--input {path}: cannot read it as a tensor ({type(exc).__name__}: {exc})") from None


def _read(file: Path, path: str) -> torch.Tensor:
    if file.suffix == ".npy":
        import numpy as np
        return torch.from_numpy(np.load(file, allow_pickle=False))
    if file.suffix == ".pt":
        value = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"--input {path} holds a {type(value).__name__}, not a tensor")
        return value
    raise UsageError(f"--input {path}: use a .pt (torch.save) or .npy (numpy.save) file")


def _input_shapes(pipe, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """--shape for the inputs read before the reduce or scan; the reduced shape for those that join after."""
    from .lower.bind import combine_stage, input_stages, out_shape
    from .pipeline.verify import iteration_axes
    at, stage = combine_stage(pipe.ir)
    after = out_shape(torch.Size(shape), stage, iteration_axes(stage, len(shape)))
    return [after if owner > at else shape for owner in input_stages(pipe.ir)]


def _inputs(args, pipe, device: torch.device) -> list[torch.Tensor]:
    count = pipe.num_inputs
    if args.input and args.shape:
        raise UsageError("--shape and --input: the files fix the inputs' shapes; give one of the two")
    if args.input:
        if len(args.input) != count:
            raise UsageError(f"the pipeline takes {count} input(s) but --input names {len(args.input)} file(s)")
        return [_load(path).to(device) for path in args.input]
    sides = tuple(args.shape or [1_000_000])
    if any(n < 0 or n >= 2**62 for n in sides):
        raise UsageError(f"--shape {' '.join(map(str, sides))}: sizes must be 0 or more (and below 2**62)")
    _check_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    try:
        return [_random(shape, DTYPES[args.dtype], generator).to(device) for shape in _input_shapes(pipe, sides)]
    except (RuntimeError, MemoryError, TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"--shape {' '.join(map(str, sides))}: cannot make inputs of that shape ({exc})") \
            from None


def _random(shape, dtype: torch.dtype, generator) -> torch.Tensor:
    """Standard normal floats; integers from -100 to 100 (0 to 100 unsigned); bools half True."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 101, shape, generator=generator).to(dtype)


def _check_seed(seed: int) -> None:
    if not 0 <= seed < 2**63:
        raise UsageError(f"--seed {seed}: must be 0 or more and below 2**63")


def _pipeline(args):
    import tricomb as tc
    env = {}
    if args.env:
        if not Path(args.env).is_file():
            raise UsageError(f"--env {args.env}: no such file")
        try:
            namespace = runpy.run_path(args.env, run_name="tricomb_env")
        except BaseException as exc:  # the user's file failed (or exited): say so, not a traceback of tricomb
            raise UsageError(f"--env {args.env}: running it raised {type(exc).__name__}: {exc}") from None
        env = {k: v for k, v in namespace.items()
               if not k.startswith("__") and not isinstance(v, types.ModuleType)}  # `import triton` names no function
    return tc.parse(args.pipeline, env=env, source="<command line>")


def _summary(t: torch.Tensor) -> str:
    dtype = str(t.dtype).replace("torch.", "")
    flat = [_number(v) for v in t.detach().reshape(-1)[:4].cpu().tolist()]
    if t.dim() == 0:
        return f"{flat[0]} ({dtype}, shape ())"
    more = ", ..." if t.numel() > 4 else ""
    return f"[{', '.join(flat)}{more}] ({dtype}, shape {tuple(t.shape)})"


def _number(v) -> str:
    return str(v) if isinstance(v, (bool, int)) else f"{v:.7g}"


def _table(title: str, **options):
    """A rich table titled ``title`` as it is (user text is never read as markup); fill it with :func:`_row`."""
    from rich.table import Table
    from rich.text import Text
    return Table(title=Text(title), **options)


def _row(table, *cells: str) -> None:
    from rich.text import Text
    table.add_row(*(Text(c) for c in cells))


def _time(pipe, inputs, device: torch.device) -> str:
    if device.type == "cuda":
        import triton.testing
        ms = triton.testing.do_bench(lambda: pipe(*inputs), return_mode="median")
        return f"{ms * 1e3:.1f} us per call (median, CUDA events)"
    start = time.perf_counter()
    pipe(*inputs)
    return f"{(time.perf_counter() - start) * 1e3:.1f} ms (Triton's interpreter on the CPU: not a speed measure)"


def _run(args) -> int:
    from rich.console import Console
    from .pipeline.evaluate import evaluate
    from .runtime.tuning import progress_bar
    from .testing import count_launches, mismatches, reference
    pipe = _pipeline(args)
    device = _device(args)
    inputs = _inputs(args, pipe, device)
    with progress_bar():
        result = pipe(*inputs)  # first call: emit, load, compile (and tune, for a large input on the GPU)
    with count_launches() as launches:
        result = pipe(*inputs)
    eager = evaluate(pipe.ir, inputs)
    results, refs = _fields(result), _fields(reference(pipe, *inputs))
    differ = [r.numel() if r.dtype != f.dtype or r.shape != f.value.shape else int(mismatches(r, f, refs[0].compute).sum())
              for r, f in zip(results, refs)]
    wrong = any(r.dtype != f.dtype or r.shape != f.value.shape for r, f in zip(results, refs)) or any(differ)
    table = _table(f"tricomb run: {_short(args.pipeline)}", show_header=False)
    described = ", ".join(_described(t) for t in inputs)
    _row(table, "inputs", f"{len(inputs)} tensor(s) on {device}: {described}")
    _row(table, "tricomb", "\n".join(_summary(r) for r in results))
    _row(table, "torch", "\n".join(_summary(e) for e in _fields(eager)))
    total = sum(r.numel() for r in results)
    verdict = "yes" if not wrong else f"NO: {sum(differ)} of {total} elements differ (or the dtype or shape)"
    _row(table, "match", f"{verdict} (float64 torch oracle, tolerance scaled by length)")
    _row(table, "kernels", f"{launches.triton} Triton launch(es), {len(launches.torch_ops)} torch op(s)")
    _row(table, "time", _time(pipe, inputs, device))
    Console().print(table)
    return 1 if wrong else 0


def _fields(value) -> tuple:
    """A result as a tuple of its fields (one for a plain tensor; cummax's named pair is a tuple too)."""
    return tuple(value) if isinstance(value, tuple) else (value,)


def _short(text: str, limit: int = 100) -> str:
    """Pipeline text as the user wrote it, cut at ``limit`` characters."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _emit(args) -> int:
    pipe = _pipeline(args)
    inputs = _inputs(args, pipe, _device(args))
    sys.stdout.write(pipe.source(*inputs))
    return 0


def _explain(args) -> int:
    pipe = _pipeline(args)
    inputs = _inputs(args, pipe, _device(args))
    print(f"pipeline: {pipe}")
    print(pipe.explain(*inputs, passes=args.passes))
    return 0


def _check(args) -> int:
    from rich.console import Console
    from .commands.check import check
    if not (1 <= args.examples <= 10**6 and 0 <= args.rank <= 8 and 0 <= args.max_side):
        raise UsageError("--examples must be 1 to 1000000, --rank 0 to 8 and --max-side 0 or more")
    if args.max_side ** args.rank > 1 << 20:
        raise UsageError(f"--max-side {args.max_side} with --rank {args.rank} allows inputs of "
                         f"{args.max_side}**{args.rank} elements; hypothesis draws every element, so keep it at "
                         "most 2**20 (lower --max-side)")
    _check_seed(args.seed)
    pipe = _pipeline(args)
    device = _device(args)
    if device.type == "cpu":
        from .runtime.loader import require_interpreter
        require_interpreter()  # a DeviceError (exit 2): no example could run
    _runs_at_rank(pipe, args.rank)
    outcome = check(pipe, lambda shape: _input_shapes(pipe, shape), DTYPES[args.dtype], device, args.rank,
                    args.max_side, args.examples, args.seed)
    console = Console(highlight=False, soft_wrap=True)
    drawn = f"{outcome.examples} examples on {device}, {args.dtype}, rank {args.rank}, sides 0 to {args.max_side}"
    heading = f"tricomb check: {_short(args.pipeline)}\n{drawn}"
    if outcome.failing is None:
        refused = f" ({outcome.refusals} refused by torch and tricomb alike)" if outcome.refusals else ""
        console.print(f"{_escape(heading)}: [green]every result matches torch[/green]{_escape(refused)}")
        return 0
    verdict = "the last one raised an error" if outcome.raised else "the last one's result differs from torch"
    console.print(f"{_escape(heading)}: [bold red]{verdict}[/bold red]")
    console.print(outcome.message, markup=False)
    shrunk = f"after {outcome.shrinking} more runs shrinking it"
    if outcome.value_independent:
        console.print(f"smallest failing input ({shrunk}; filled with 0 and with 1 it fails too, so these are its "
                      "shapes alone):")
        for i, t in enumerate(outcome.failing):
            console.print(f"  input {i}: {_described(t)}", markup=False)
        return 1
    console.print(f"smallest failing input ({shrunk}):")
    for i, t in enumerate(outcome.failing):
        with _printing_values(t.dtype):
            console.print(f"  input {i}: {_described(t)} = {t.cpu()}", markup=False)
    return 1


def _described(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {str(t.dtype)[6:]}"


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)


def _runs_at_rank(pipe, rank: int) -> None:
    """A pipeline this version cannot run on inputs of ``rank`` at all is a mistake in the command, not a result
    that differs: say so before drawing examples."""
    from .errors import UnsupportedError
    try:
        pipe.explain(*[torch.ones(s) for s in _input_shapes(pipe, (2,) * rank)])
    except UnsupportedError as exc:
        raise UsageError(f"--rank {rank}: {exc.message} (try another --rank)") from None


# digits after the point in scientific notation: 17, 9, 5 and 4 significant digits, which give each value back
_DIGITS = {torch.float64: 16, torch.float32: 8, torch.float16: 4, torch.bfloat16: 3}


def _printing_values(dtype: torch.dtype):
    """Torch's printing of a ``dtype`` tensor on one line, floats in scientific notation with the significant
    digits that give back each value exactly; past 1000 elements, the first and last three of each dimension."""
    import contextlib

    @contextlib.contextmanager
    def printing():
        torch.set_printoptions(precision=_DIGITS.get(dtype, 4), sci_mode=dtype in _DIGITS, threshold=1000,
                               edgeitems=3, linewidth=10**6)
        try:
            yield
        finally:
            torch.set_printoptions(profile="default")
    return printing()


def _bench(args) -> int:
    from rich.console import Console
    from .commands.bench import bench
    if args.device == "cpu" or not torch.cuda.is_available():
        raise UsageError("bench times kernels on a CUDA GPU (none here); on the CPU, Triton's interpreter runs "
                         "them, which says nothing about speed")
    pipe = _pipeline(args)
    inputs = _inputs(args, pipe, torch.device("cuda"))
    rows = bench(pipe, inputs)
    table = _table(f"tricomb bench: {_short(args.pipeline)} on {torch.cuda.get_device_name()}")
    for column in ("implementation", "ms", "GB/s", "tricomb is faster by", "matches torch"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    for row in rows:
        _row(table, row.name, f"{row.ms:.4f}", f"{row.gbps:.0f}", f"{row.ms / rows[0].ms:.2f}x",
             "yes" if row.matches else "NO")
    Console().print(table)
    return 0 if all(row.matches for row in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tricomb`` command; returns the exit code."""
    from .errors import TricombError
    args = _parser().parse_args(argv)
    try:
        return {"run": _run, "emit": _emit, "explain": _explain, "check": _check,
                "bench": _bench, "cache": _cache}[args.command](args)
    except (TricombError, UsageError) as exc:
        located = isinstance(exc, TricombError) and exc.location is not None and exc.location.file == "<command line>"
        text = exc if located or not isinstance(exc, TricombError) else exc.message  # (not the console script's line)
        _error(f"tricomb {args.command}: ", str(text))
        return 2


def _cache(args) -> int:
    from .commands import cache
    if args.action == "clear":
        cleared, line = cache.clear()
        if not cleared:
            raise UsageError(line)
        print(line)
        return 0
    table = _table("tricomb cache", show_header=False)
    for what, value in cache.info():
        _row(table, what, value)
    from rich.console import Console
    Console().print(table)
    return 0


def _error(prefix: str, text: str) -> None:
    """``prefix`` and ``error:`` in bold red where standard error is a terminal that shows colour (rich decides,
    honouring ``NO_COLOR``), then ``text`` as it is."""
    from rich.console import Console
    from rich.text import Text
    line = Text(prefix)
    line.append("error:", style="bold red")
    line.append(f" {text}")
    Console(stderr=True, highlight=False, soft_wrap=True).print(line)


if __name__ == "__main__":
    sys.exit(main())
