"""The compiler's pass list: one ordered list, walked here pass by pass; each pass pure and dumpable; every
caller lowered through it."""
import pytest
import torch

import tricomb as tc
from tricomb import compiler
from tricomb.errors import ArgumentError

PIPELINES = {
    "map": (tc.map(tc.exp), (torch.ones(5),)),
    "nanmean": (tc.parse("nanmean"), (torch.ones(3, 4),)),
    "no identity": (tc.reduce(lambda a, b: a, axis=1), (torch.ones(3, 4),)),
    "scan then reduce": (tc.parse("scan maximum | zip_with sub | max"), (torch.ones(9), torch.ones(9))),
}


def test_pass_names_in_order():
    assert compiler.NAMES == ("bind", "check_dtypes", "expand", "totalize", "fuse", "emit")
    assert len(set(compiler.NAMES)) == len(compiler.NAMES)


@pytest.mark.parametrize("name", PIPELINES)
def test_walk_the_passes_one_at_a_time(name):
    """Lowering up to each pass in turn, then on from there, reaches what one call reaches, and each step runs
    exactly the next pass; lowering the same unit twice gives equal results (the passes are pure)."""
    pipe, inputs = PIPELINES[name]
    whole = compiler.lower(pipe.ir, inputs)
    unit = compiler.Unit(pipe.ir, inputs)
    for i, step in enumerate(compiler.NAMES):
        again = compiler.compile_unit(unit, until=step)
        unit = compiler.compile_unit(unit, until=step)
        assert unit.done == compiler.NAMES[:i + 1]
        assert (again.binding, again.stages, again.plan, again.source) == (unit.binding, unit.stages, unit.plan,
                                                                            unit.source)
    assert unit.source == whole.source and unit.plan == whole.plan


@pytest.mark.parametrize("name", PIPELINES)
def test_every_pass_shows_its_ir(name):
    pipe, inputs = PIPELINES[name]
    record = []
    compiler.lower(pipe.ir, inputs, record=record)
    assert [n for n, _ in record] == list(compiler.NAMES)
    assert all(text.strip() for _, text in record)
    shown = dict(record)
    assert "def launch(" in shown["emit"] and "kernel" in shown["fuse"]


def test_rewrites_show_the_core_stages():
    record = []
    compiler.lower(tc.parse("nanmean").ir, (torch.ones(4),), record=record)
    shown = dict(record)
    assert shown["bind"].startswith("device cpu")
    assert "nanmean" in shown["check_dtypes"]
    assert "split_nan" in shown["expand"] and "nanmean" not in shown["expand"]
    record = []
    compiler.lower(tc.reduce(lambda a, b: a).ir, (torch.ones(4),), record=record)
    assert "with_valid_flag" in dict(record)["totalize"]


def test_dump_hook_writes_the_named_passes(monkeypatch, capsys):
    monkeypatch.setenv("TRICOMB_DUMP", "expand, fuse")
    tc.parse("nanmean").source(torch.ones(4))
    err = capsys.readouterr().err
    assert "after expand ===" in err and "after fuse ===" in err and "after emit" not in err
    monkeypatch.setenv("TRICOMB_DUMP", "all")
    tc.map(tc.exp).source(torch.ones(4))
    err = capsys.readouterr().err
    assert all(f"after {n} ===" in err for n in compiler.NAMES)


def test_dump_hook_refuses_an_unknown_pass(monkeypatch):
    monkeypatch.setenv("TRICOMB_DUMP", "fuse,optimize")
    with pytest.raises(ArgumentError, match="'optimize', which is no pass; the passes are bind, check_dtypes"):
        tc.map(tc.exp).source(torch.ones(4))
    with pytest.raises(ArgumentError, match="until='optimize' is no pass"):
        compiler.lower(tc.map(tc.exp).ir, (torch.ones(4),), until="optimize")


def test_explain_with_passes():
    plan = tc.parse("map softplus | sum").explain(torch.ones(8), passes=True)
    text = str(plan)
    assert [n for n, _ in plan.passes] == list(compiler.NAMES)
    assert text.index("=== after bind ===") < text.index("=== after fuse ===") < text.index("=== after emit ===")
    assert tc.parse("map softplus | sum").explain(torch.ones(8)).passes == ()
    with pytest.raises(ArgumentError, match="passes='yes'"):
        tc.map(tc.exp).explain(torch.ones(3), passes="yes")


def test_call_path_goes_through_the_compiler(monkeypatch):
    """A call, ``source`` and ``explain`` all lower through compiler.compile_unit."""
    seen = []
    real = compiler.compile_unit

    def spy(unit, until="emit", record=None):
        seen.append(until)
        return real(unit, until, record)

    monkeypatch.setattr(compiler, "compile_unit", spy)
    pipe = tc.map(lambda v: v * 3.0)
    pipe(torch.ones(7))
    pipe.source(torch.ones(7))
    pipe.explain(torch.ones(7))
    assert seen.count("emit") == 2 and "fuse" in seen
