"""pipe.source(x) saved to a file runs in a fresh process where tricomb cannot be imported, giving pipe(x)."""
import subprocess
import sys
import textwrap

import pytest
import torch

import tricomb as tc
from tricomb.testing import schedule_overrides

RUNNER = textwrap.dedent('''
    import importlib.abc, importlib.util, sys
    class NoTricomb(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tricomb" or name.startswith("tricomb."):
                raise ImportError("tricomb must not be needed by an emitted module")
    sys.meta_path.insert(0, NoTricomb())
    import torch
    module_path, inputs_path, output_path, device = sys.argv[1:5]
    overrides = eval(sys.argv[5])
    spec = importlib.util.spec_from_file_location("emitted", module_path)
    module = importlib.util.module_from_spec(spec)
    if device == "cpu":
        import triton
        triton.knobs.runtime.interpret = True
    spec.loader.exec_module(module)
    inputs = [t.to(device) for t in torch.load(inputs_path)]
    torch.save(module.launch(*inputs, **overrides).cpu(), output_path)
''')

CASES = {
    "map": (lambda: tc.map(tc.softplus), [(37, 5)]),
    "map-broadcast-zip": (lambda: tc.zip_with(lambda a, b: a * b + 1) >> tc.map(tc.tanh), [(4, 1, 6), (5, 1)]),
    "reduce-rows": (lambda: tc.map(tc.exp) >> tc.sum(axis=-1), [(33, 70)]),
    "reduce-columns-keepdim": (lambda: tc.max(axis=0, keepdim=True), [(65, 3)]),
    "reduce-all-mean-then-map": (lambda: tc.map(tc.square) >> tc.mean() >> tc.map(tc.sqrt), [(1000,)]),
    "reduce-then-zip": (lambda: tc.sum(axis=1) >> tc.zip_with(tc.sub), [(6, 9), (6,)]),
    "scan-rows": (lambda: tc.map(tc.exp) >> tc.cumsum(axis=-1), [(5, 300)]),
    "scan-columns": (lambda: tc.cumprod(axis=0) >> tc.map(tc.neg), [(40, 3)]),
}
SPLIT = {"BLOCK_K": 16, "SPLIT": 8}  # forces several programs per row and the last-program ticket path


@pytest.mark.parametrize("name", sorted(CASES) + ["reduce-split"])
@pytest.mark.subprocess
def test_emitted_module_runs_without_tricomb(name, device, tmp_path):
    make, shapes = CASES["reduce-all-mean-then-map" if name == "reduce-split" else name]
    overrides = SPLIT if name == "reduce-split" else {}
    pipe = make()
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(s, generator=generator).to(device) for s in shapes]
    with schedule_overrides(**overrides):
        expected = pipe(*inputs)
    module = tmp_path / "kernel.py"
    module.write_text(pipe.source(*inputs))
    torch.save([t.cpu() for t in inputs], tmp_path / "inputs.pt")
    done = subprocess.run([sys.executable, "-c", RUNNER, str(module), str(tmp_path / "inputs.pt"),
                           str(tmp_path / "out.pt"), device, repr(overrides)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = torch.load(tmp_path / "out.pt")
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected.cpu(), rtol=0, atol=0, equal_nan=True)
