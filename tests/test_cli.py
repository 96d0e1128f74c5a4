"""The command line: run compares with torch and counts kernels; emit and explain print; check draws examples with
hypothesis and reports the smallest failing one; bench needs a GPU; mistakes exit 2."""
import ast

import pytest
import torch

import tricomb
from tricomb.cli import main


def test_run_prints_result_torch_match_kernels_and_time(capsys):
    assert main(["run", "map softplus | sum", "--shape", "5000"]) == 0
    out = capsys.readouterr().out
    for word in ("tricomb", "torch", "match", "yes", "kernels", "1 Triton launch", "time"):
        assert word in out


def test_run_with_two_inputs_and_half_precision(capsys):
    assert main(["run", "zip_with mul | sum(axis=-1)", "--shape", "8", "33", "--dtype", "bfloat16"]) == 0
    assert "(8,)" in capsys.readouterr().out


def test_run_reads_input_files(tmp_path, capsys):
    import numpy as np
    import torch
    torch.save(torch.arange(6.0).reshape(2, 3), tmp_path / "x.pt")
    np.save(tmp_path / "y.npy", np.ones((2, 3), dtype=np.float32))
    assert main(["run", "zip_with add | sum", "--input", str(tmp_path / "x.pt"), str(tmp_path / "y.npy")]) == 0
    assert "21 (float32, shape ())" in capsys.readouterr().out


def test_env_file_supplies_jit_functions(tmp_path, capsys):
    (tmp_path / "fns.py").write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef twice(x):\n    return x * 2.0\n")
    assert main(["run", "map twice | sum", "--shape", "100", "--env", str(tmp_path / "fns.py")]) == 0


def test_an_unknown_name_lists_the_env_files_functions_not_its_modules(tmp_path, capsys):
    (tmp_path / "fns.py").write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef twice(x):\n    return x * 2.0\n")
    assert main(["run", "map twise | sum", "--shape", "10", "--env", str(tmp_path / "fns.py")]) != 0
    err = capsys.readouterr().err
    assert "did you mean twice" in err and "(names given: twice)" in err


def test_emit_prints_a_module_that_parses(capsys):
    assert main(["emit", "map exp | sum(axis=0)", "--shape", "10", "3"]) == 0
    source = capsys.readouterr().out
    ast.parse(source)
    assert "def launch(in0" in source


def test_explain_prints_the_plan(capsys):
    assert main(["explain", "map exp | cumsum", "--shape", "4", "6"]) == 0
    assert "1 kernel: scan" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "map sofplus"], "did you mean softplus"),
    (["run", "map exp |"], "unexpected"),
    (["run", "zip_with mul", "--input", "missing.pt", "other.pt"], "no such file"),
    (["run", "zip_with mul", "--input", "a.pt"], "takes 2 input(s)"),
    (["run", "sum(axis=3)", "--shape", "4"], "axis 3 is out of range"),
    (["run", "map exp", "--shape", "5", "--input", "x.pt"], "give one of the two"),
])
def test_mistakes_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    assert 'tricomb run "map softplus | sum"' in capsys.readouterr().out


def test_generated_inputs_joining_after_a_reduce_have_the_reduced_shape(capsys):
    assert main(["run", "sum(axis=1) | zip_with sub", "--shape", "30", "20"]) == 0
    assert "(30, 20) float32, (30,) float32" in capsys.readouterr().out


def test_unreadable_files_and_impossible_shapes_exit_2(tmp_path, capsys):
    (tmp_path / "bad.pt").write_bytes(b"not a tensor")
    (tmp_path / "raise.py").write_text("raise ValueError('boom')\n")
    assert main(["run", "map exp", "--input", str(tmp_path / "bad.pt")]) == 2
    assert main(["run", "map exp", "--env", str(tmp_path / "raise.py")]) == 2
    assert main(["run", "map exp", "--shape", "99999999999", "99999999999"]) == 2
    err = capsys.readouterr().err
    assert "cannot read it as a tensor" in err and "ValueError: boom" in err and "cannot make inputs" in err


def test_check_draws_examples_and_reports_agreement(capsys):
    assert main(["check", "map softplus | sum(axis=1)", "--examples", "8", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "examples on cpu, float32, rank 2" in out and "every result matches torch" in out


def test_check_reports_the_smallest_failing_input_and_exits_1(monkeypatch, capsys):
    """A stand-in oracle that calls any input element above 0.5 wrong: hypothesis finds one, shrinks it to a single
    element, and the command prints it."""
    import tricomb.testing

    def picky(pipe, *inputs, **kwargs):
        if any(bool((t > 0.5).any()) for t in inputs):
            raise AssertionError("stand-in oracle: an element above 0.5")
    monkeypatch.setattr(tricomb.testing, "assert_matches_torch", picky)
    assert main(["check", "map exp | sum", "--examples", "50", "--device", "cpu", "--rank", "1"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "the last one's result differs from torch" in out and "stand-in oracle" in out
    assert "more runs shrinking it):" in out and "input 0: (1,) float32" in out
    drawn = int(out.split("examples on cpu")[0].split()[-1])
    assert 1 <= drawn <= 50, "the count is of examples drawn up to the first failure, not of shrinking runs"


def test_check_leaves_out_where_a_user_operator_meets_an_infinity():
    """linear_recurrence's operator multiplies decays: with 0 and inf among them, a tree of combines gives NaN
    where the sequence gives inf. The oracle leaves such elements out (docs/numerics.md), so check passes."""
    assert main(["check", "linear_recurrence", "--examples", "30", "--device", "cpu", "--rank", "1"]) == 0


@pytest.mark.parametrize("argv", [["check", "map exp | sum", "--examples", "0"],
                                  ["bench", "map exp | sum", "--device", "cpu"],
                                  # found by the hostile review of 2026-11-30 (each was a traceback and exit 1)
                                  ["run", "map exp | sum", "--shape", "10", "--seed", str(10**23)],
                                  ["run", "map exp | sum", "--shape", str(10**20)],
                                  ["check", "map exp | sum", "--rank", "40", "--examples", "2"],
                                  ["check", "map exp | sum", "--max-side", "100000"]])
def test_check_and_bench_mistakes_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_run_compares_every_field_of_a_tuple_result(capsys):
    assert main(["run", "linear_recurrence", "--shape", "3", "40", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "tricomb run: linear_recurrence" in out and out.count("float32") >= 6 and "yes" in out  # 2 inputs, 2 x 2 fields


def test_check_reports_an_error_raised_while_checking(monkeypatch, capsys):
    import tricomb.testing

    def broken(pipe, *inputs, **kwargs):
        raise ValueError("the oracle broke")
    monkeypatch.setattr(tricomb.testing, "assert_matches_torch", broken)
    assert main(["check", "map exp | sum", "--examples", "5", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "the last one raised an error" in out and "differs" not in out
    assert "ValueError: the oracle broke" in out


def test_check_gives_shapes_alone_for_a_failure_whatever_the_values(monkeypatch, capsys):
    """A failure that zeros of the same shapes reproduce is reported by shapes and dtypes, not by values."""
    import tricomb.testing

    def refuses_rank_one(pipe, *inputs, **kwargs):
        if inputs[0].dim() == 1 and inputs[0].numel() > 3:
            raise tricomb.UnsupportedError("stand-in: no kernel for this shape")
    monkeypatch.setattr(tricomb.testing, "assert_matches_torch", refuses_rank_one)
    assert main(["check", "map exp | sum", "--examples", "40", "--device", "cpu", "--rank", "1"]) == 1
    out = capsys.readouterr().out
    assert "filled with 0 and with 1 it fails too" in out and "input 0: (4,) float32\n" in out
    assert "tensor(" not in out


def test_check_prints_a_failing_input_on_one_line(monkeypatch, capsys):
    """Values a failure depends on are printed unwrapped, each with the digits that give it back exactly."""
    import tricomb.testing

    def picky(pipe, *inputs, **kwargs):
        if inputs[0].numel() >= 70 and bool((inputs[0] > 0.5).any()):
            raise AssertionError("stand-in oracle: an element above 0.5 in a long input")
    monkeypatch.setattr(tricomb.testing, "assert_matches_torch", picky)
    assert main(["check", "map exp | sum", "--examples", "60", "--device", "cpu", "--rank", "1",
                 "--max-side", "100"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  input 0: (")]
    assert len(lines) == 1, lines
    printed = torch.tensor([float(v) for v in lines[0].split("tensor([")[1].split("])")[0].split(",")])
    assert printed.numel() >= 70 and bool((printed > 0.5).any())
    assert torch.equal(printed, printed.to(torch.float32).to(torch.float64).to(torch.float32)), "digits lost"


def test_version_names_tricomb_triton_and_torch(capsys):
    import triton
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == (f"tricomb {tricomb.__version__} (triton {triton.__version__}, "
                                               f"torch {torch.__version__})")


@pytest.mark.parametrize("colour", ["FORCE_COLOR", "NO_COLOR"])
def test_errors_are_red_where_the_terminal_shows_colour(colour, monkeypatch, capsys):
    monkeypatch.delenv("FORCE_COLOR" if colour == "NO_COLOR" else "NO_COLOR", raising=False)
    monkeypatch.setenv(colour, "1")
    assert main(["run", "map sofplus"]) == 2
    err = capsys.readouterr().err
    assert ("\x1b[1;31merror:\x1b[0m" in err) == (colour == "FORCE_COLOR")
    assert "did you mean softplus" in err


def test_an_env_file_that_exits_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(5)\n")
    assert main(["run", "map exp | sum", "--shape", "4", "--env", str(tmp_path / "exits.py")]) == 2
    assert "running it raised SystemExit: 5" in capsys.readouterr().err


def test_check_of_a_pipeline_unsupported_at_the_rank_is_a_usage_error(capsys):
    """(new-user trial, 2026-11-30) drawdown at the default rank 2 reduces more axes than it scans; this was
    reported as a result that differs from torch, with shrinking."""
    assert main(["check", "scan maximum | zip_with sub | max", "--examples", "3", "--device", "cpu"]) == 2
    assert "--rank 2: a scan and a reduce after it fuse" in capsys.readouterr().err


def test_run_and_check_take_integer_and_bool_dtypes(capsys):
    """(new-user trial round 2) --dtype offered floats only"""
    assert main(["run", "map x -> x * 3 | sum", "--shape", "50", "--dtype", "int32", "--device", "cpu"]) == 0
    assert main(["check", "cummax", "--examples", "5", "--dtype", "int16", "--rank", "1", "--device", "cpu"]) == 0
    assert main(["run", "any", "--shape", "20", "--dtype", "bool", "--device", "cpu"]) == 0


@pytest.mark.subprocess
def test_python_dash_m_tricomb_is_the_command():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "tricomb", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: tricomb" in out.stdout


@pytest.mark.parametrize("text", ["map exp | sum # [/red]", "map exp | sum # [bold]x"])
def test_pipeline_text_is_printed_as_it_is_never_as_markup(text, capsys):
    assert main(["run", text, "--shape", "6"]) == 0
    assert text in capsys.readouterr().out


def test_run_shows_nan_infinities_and_bools(tmp_path, capsys):
    torch.save(torch.tensor([float("nan"), float("inf"), -float("inf"), 2.5]), tmp_path / "x.pt")
    assert main(["run", "map x -> x * 1.0", "--input", str(tmp_path / "x.pt")]) == 0
    assert main(["run", "map x -> x > 0.0", "--input", str(tmp_path / "x.pt")]) == 0
    out = capsys.readouterr().out
    assert out.count("[nan, inf, -inf, 2.5] (float32, shape (4,))") == 2
    assert out.count("[False, True, False, True] (bool, shape (4,))") == 2


def test_check_beside_a_numpy_the_interpreter_cannot_use_is_a_usage_error(monkeypatch, capsys):
    import numpy
    import triton
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    assert main(["check", "map exp | sum(axis=1)", "--examples", "5", "--device", "cpu"]) == 2
    assert 'pip install "numpy<2.4"' in capsys.readouterr().err
