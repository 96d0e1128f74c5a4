"""The grammar ships inside the wheel and loads from an installed wheel as from the source checkout."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.subprocess
def test_wheel_contains_the_grammar_and_parses_from_it(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("tricomb-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "tricomb/_grammar/tricomb.lark" in names
        every = {str(f.relative_to(ROOT)) for f in (ROOT / "tricomb").rglob("*.py") if "__pycache__" not in f.parts}
        assert every <= set(names), f"the wheel lacks {sorted(every - set(names))}"
        archive.extractall(tmp_path / "site")
    check = ("import tricomb, tricomb.dsl.parser as p; "
             "assert '_grammar' in str(p.grammar_path()), p.grammar_path(); "
             "print(tricomb.parse('map softplus | sum'))")
    path = os.pathsep.join(p for p in [str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")] if p)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "map softplus | sum"


def test_source_checkout_reads_grammar_from_the_top_level_folder():
    from tricomb.dsl.parser import grammar_path
    assert grammar_path() == ROOT / "grammar" / "tricomb.lark"


@pytest.mark.parametrize("triton_version, numpy_version, refused", [
    ("3.6.0", "2.4.6", True), ("3.6.0", "2.3.5", False), ("3.6.1", "2.5.0rc1", True), ("3.7.0", "2.4.6", False),
    ("3.9.0", "2.5.2", False), ("3.10.0+git1234", "1.26.4", False), ("3.6rc1", "2.4.0", True),
    ("3.6.0", "2.3rc1", False), ("3.6.0", "2.4.0.dev0+git", True), ("3", "2.4", False), ("3.6.0", "", False)])
def test_the_interpreter_is_refused_only_beside_a_numpy_its_triton_cannot_run_with(triton_version, numpy_version,
                                                                                    refused):
    from tricomb.runtime.loader import interpreter_problem
    assert (interpreter_problem(triton_version, numpy_version) is not None) == refused


def test_a_cpu_call_beside_such_a_numpy_says_what_to_install_before_it_runs(monkeypatch):
    import numpy
    import torch
    import triton

    import tricomb as tc
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    with pytest.raises(tc.DeviceError, match=r'pip install "numpy<2.4"\) or Triton 3.7 or newer'):
        tc.map(lambda v: v * 3.0 + 1.0)(torch.ones(3))


def test_a_cpu_call_raises_no_warning_of_the_interpreters_own(tmp_path):
    """Under ``-W error`` too: Triton 3.6's interpreter converts 1-element arrays with int(), which numpy 1.25 to
    2.3 warn of."""
    import warnings

    import torch

    import tricomb as tc
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tc.map(lambda v: v * 2.0 + 0.5)(torch.ones(3)).tolist() == [2.5] * 3
        assert tc.sum(axis=1)(torch.ones(2, 40)).tolist() == [40.0, 40.0]
