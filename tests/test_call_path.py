"""The call path: a call like an earlier one goes straight to the prepared launch (no binding, planning or
argument computation); anything that could change the kernel or its arguments takes the full path. Also the
emitted module's own ``prepare``, and the progress reporter of Triton's autotuner."""
import pytest
import torch

import tricomb as tc
import tricomb.runtime.launch as launch
from tricomb.runtime import tuning
from tricomb import compiler
from tricomb.testing import schedule_overrides


class _CountBinds:
    def __init__(self, monkeypatch):
        self.count = 0
        real = compiler.bind  # the bind pass's function

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(compiler, "bind", counted)


def test_a_repeated_call_skips_binding_and_stays_right(monkeypatch, device):
    binds = _CountBinds(monkeypatch)
    pipe = tc.parse("map softplus | sum(axis=-1)")
    x = torch.randn(6, 40, device=device)
    first = pipe(x)
    assert binds.count == 1
    y = torch.randn(6, 40, device=device)  # new data, same layout
    got = pipe(y)
    assert binds.count == 1
    torch.testing.assert_close(got.cpu(), torch.nn.functional.softplus(y.cpu()).sum(-1), rtol=1e-5, atol=1e-5)
    assert not torch.equal(first.cpu(), got.cpu())


def test_shape_stride_alignment_dtype_and_default_dtype_each_take_the_full_path(monkeypatch, device):
    """Each of these can change the kernel or its arguments, so each is bound and prepared anew."""
    binds = _CountBinds(monkeypatch)
    pipe = tc.map(lambda a: a * 0.5 + 1)
    x = torch.randn(8, 16, device=device)
    calls = [x, torch.randn(8, 17, device=device), x.t(), x.reshape(-1)[1:],  # shape, strides, alignment
             x.double()]
    for t in calls:
        torch.testing.assert_close(pipe(t).cpu(), t.cpu() * 0.5 + 1)
    assert binds.count == len(calls)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert pipe(torch.arange(3, device=device)).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert binds.count == len(calls) + 1


def test_out_and_overrides_always_take_the_full_path(monkeypatch, device):
    binds = _CountBinds(monkeypatch)
    pipe = tc.cumsum()
    x = torch.randn(50, device=device)
    out = torch.empty_like(x)
    for _ in range(2):
        assert pipe(x, out=out) is out
        with schedule_overrides(BLOCK_K=4):
            torch.testing.assert_close(pipe(x).cpu(), torch.cumsum(x.cpu(), 0), rtol=1e-5, atol=1e-5)
    assert binds.count == 4
    torch.testing.assert_close(out.cpu(), torch.cumsum(x.cpu(), 0), rtol=1e-5, atol=1e-5)


def test_emitted_prepare_returns_a_launch_for_inputs_laid_out_alike(device):
    x = torch.randn(5, 30, device=device)
    source = tc.parse("map exp | sum(axis=1)").source(x)
    assert "def prepare(in0, *, out=None" in source and "return run" in source
    from tricomb.runtime.loader import load_module
    module = load_module(source, interpret=device == "cpu")
    run = module.prepare(x)
    for t in (x, torch.randn(5, 30, device=device)):
        torch.testing.assert_close(run(t).cpu(), t.cpu().exp().sum(1), rtol=1e-5, atol=1e-5)


def test_the_progress_reporter_draws_only_after_its_delay():
    """The CLI's bar: nothing for tuning that ends before the delay; a bar (and no error) once it passes."""
    quick = tuning._Bar(after_s=60.0)
    for done in range(3):
        quick(done, 3)
    assert quick.progress is None
    slow = tuning._Bar(after_s=0.0)
    slow(0, 2)
    slow(1, 2)
    assert slow.progress is not None
    slow.close()
    with tuning.progress_bar():
        assert len(tuning.REPORTERS) == 1
    assert tuning.REPORTERS == []


_NEW_PROCESS = """
import sys
import pytest
import torch
import tricomb as tc
x = torch.arange(4096, dtype=torch.float32) / 4096
got = tc.parse("map softplus | sum")(x)
assert torch.allclose(got, torch.nn.functional.softplus(x).sum(), rtol=1e-5), got
print("bound" if "torch._dynamo" in sys.modules else "from the index")
"""


@pytest.mark.subprocess
def test_a_new_process_finds_its_kernel_in_the_disk_index(tmp_path):
    """The first process binds, plans and emits (its meta evaluation imports torch._dynamo); a second process with
    the same cache directory and inputs of the same layout loads the module from the index and does none of it."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "TRICOMB_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _NEW_PROCESS], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert [r.stdout.strip() for r in runs] == ["bound", "from the index"]


class _CutOff:
    """Within the block, Triton's interpreter is interrupted (as by Ctrl-C) when it reaches program ``at``."""

    def __init__(self, at: int):
        from triton.runtime import interpreter
        self.builder, self.at = interpreter.interpreter_builder, at

    def __enter__(self):
        real = self.real = self.builder.set_grid_idx
        started = []

        def cut(x, y, z):
            if len(started) == self.at:
                raise KeyboardInterrupt
            started.append((x, y, z))
            real(x, y, z)
        self.builder.set_grid_idx = cut

    def __exit__(self, *exc):
        self.builder.set_grid_idx = self.real


def test_a_launch_cut_off_part_way_leaves_later_launches_right():
    """Interrupted look-back scans leave status words half-published and split reductions leave tickets
    mid-count: the next look-back launch publishes a larger status, and the launcher zeroes the tickets after a
    failed launch, so the next launch is right (it was wrong, or hung, before)."""
    import numpy
    import pytest
    x = torch.randn(3, 37)
    for pipe, tiles, want in [(tc.cumsum(axis=1), {"LOOKBACK": True, "BLOCK_K": 4, "WINDOW": 2}, x.cumsum(1)),
                              (tc.sum(axis=1), {"SPLIT": 5, "BLOCK_K": 4}, x.sum(1))]:
        module = launch.compile_for(pipe.ir, pipe._cache.entries(), (x,)).module
        with numpy.errstate(all="ignore"):
            run = module.prepare(x, **tiles)
            with _CutOff(at=3), pytest.raises(KeyboardInterrupt):
                run(x + 1)
            torch.testing.assert_close(run(x), want, rtol=1e-5, atol=1e-5)


def test_schedule_overrides_refuse_values_the_kernels_cannot_take():
    import pytest
    for bad in [{"WINDOW": 3}, {"BLOCK_K": 0}, {"SPLIT": 0}, {"LOOKBACK": 1}, {"num_warps": 6}]:
        with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
            with schedule_overrides(**bad):
                pass


def test_the_fast_path_refuses_what_the_full_path_refuses(device):
    """A lazily negated view and a sparse tensor share a layout with an earlier input (or have none), but each is
    refused as on a first call, never run as the earlier one; a tensor requiring grad records a graph."""
    import pytest
    pipe = tc.map(lambda v: v * 2.0) >> tc.sum()
    z = (torch.arange(64.0) * 1j).to(device)
    assert pipe(z.imag).item() == 4032.0
    with pytest.raises(tc.DTypeError, match="lazy negation"):
        pipe(z.conj().imag)
    x = torch.randn(64, device=device)
    pipe(x)
    assert pipe(x.clone().requires_grad_()).grad_fn is not None
    with pytest.raises(tc.DTypeError, match="sparse"):
        pipe(torch.randn(8).to_sparse().to(device))


def test_jit_functions_with_different_captured_numbers_never_share_a_module(device):
    """Two @triton.jit closures differ only in a captured number, which Triton's cache key does not name: the
    disk index leaves such pipelines out, so each runs its own module."""
    from scripts.jit_closures import make
    x = torch.arange(4.0, device=device)
    pipes = [tc.map(make(c)) for c in (2.0, 3.0)]
    for c, pipe in zip((2.0, 3.0), pipes):
        torch.testing.assert_close(pipe(x).cpu(), x.cpu() * c)


_RECORDED = """
import torch, triton
import tricomb as tc
compiles = []
triton.knobs.runtime.jit_cache_hook = lambda *args, **kwargs: compiles.append(1)  # called before each compile
torch.manual_seed(0)
x, rows, long = torch.randn(4096, device="cuda"), torch.randn(64, 8192, device="cuda"), torch.randn(1 << 22, device="cuda")
cases = [(tc.parse("map softplus | sum"), x, torch.nn.functional.softplus(x).sum()),
         (tc.parse("sum(axis=-1)"), rows, rows.sum(-1)),
         (tc.parse("scan add"), long, long.cumsum(0)),  # tuned: the record holds the autotuner's choice
         (tc.parse("map abs | max"), long, long.abs().max())]
for pipe, arg, want in cases:
    for _ in range(2):
        torch.testing.assert_close(pipe(arg), want, rtol=1e-4, atol=1e-2)
print(len(compiles))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.subprocess
def test_a_new_process_launches_the_recorded_kernel_without_triton_compiling(tmp_path):
    """The first process compiles each kernel through Triton and records it; a second process with the same
    caches launches the recorded kernels (a split reduce, a tuned look-back scan) with right results, and
    Triton's JIT compiles, or looks up, nothing. A third finds the recorded binaries damaged: it compiles through
    Triton again, with right results, and records them anew for a fourth."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "TRICOMB_CACHE_DIR": str(tmp_path / "tricomb"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def child() -> int:
        r = subprocess.run([sys.executable, "-c", _RECORDED], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return int(r.stdout)
    assert child() >= 4
    assert child() == 0
    damaged = list((tmp_path / "tricomb" / "binaries").glob("*/*.cubin"))
    assert len(damaged) == 4
    for path in damaged:
        path.write_bytes(b"not a kernel")
    assert child() >= 4
    assert child() == 0
