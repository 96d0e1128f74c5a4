"""The compiler's pass list: one ordered list, walked here pass by pass; each pass pure and dumpable; every
caller lowered through it."""
import pytest
import torch

import tricomb as tc
from tricomb import compiler
from tricomb.errors import ArgumentError
from tricomb.testing import assert_matches_torch

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
    compiler.lower(tc.parse("argmax").ir, (torch.ones(4),), record=record)
    assert "with_position" in dict(record)["expand"] and "argmax(" not in dict(record)["expand"]
    record = []
    compiler.lower(tc.reduce(lambda a, b: a).ir, (torch.ones(4),), record=record)
    assert "with_valid_flag" in dict(record)["totalize"]


def _values(shape, dtype=torch.float32) -> torch.Tensor:
    """Random values of ``dtype``; floats with a NaN and repeated values (ties for the index folds)."""
    g = torch.Generator().manual_seed(7)
    if not dtype.is_floating_point:
        return torch.randint(-100, 100, shape, generator=g).to(dtype)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype) * 0.5
    x.view(-1)[1] = float("nan")
    return x


DERIVED = {  # each derived stage, on inputs it takes
    "mean(axis=1)": _values((3, 4), torch.float16),
    "mean(dtype=float64)": _values((3, 4)),
    "nanmean(axis=0)": _values((3, 4)),
    "nanmean(axis=1, dtype=float64)": _values((3, 4)),
    "nansum(axis=1)": _values((3, 4)),
    "nansum(dtype=int8)": _values((3, 4), torch.int32),
    "sum(dtype=int16)": _values((3, 4), torch.int8),
    "prod(dtype=float64)": _values((3, 4)),
    "argmax(axis=1)": _values((3, 4)),
    "argmin": _values((3, 4), torch.int8),
    "cumsum(dtype=int8)": _values((3, 4), torch.int32),
    "cummax(axis=0)": _values((3, 4)),
    "cummin(reverse=True)": _values((3, 4)),
    "map exp | mean | map neg": _values((5,)),
}


def _derived_flags(stage) -> dict:
    return {name: getattr(stage, name) for name in ("mean", "index", "skip_nan", "dtype")
            if getattr(stage, name, None) not in (None, False)}


@pytest.mark.parametrize("text", DERIVED)
def test_expand_leaves_only_core_stages(text):
    """After ``expand``, no stage is a derived one: every reduce and scan is its operator alone, and the
    result is torch's."""
    x = DERIVED[text]
    unit = compiler.lower(tc.parse(text).ir, (x,), until="expand")
    assert unit.pipeline.stages != unit.stages.stages
    assert [_derived_flags(s) for s in unit.stages.stages] == [{}] * len(unit.stages.stages)
    assert_matches_torch(tc.parse(text), x)


@pytest.mark.parametrize("text", ["mean", "mean(axis=1)", "nanmean(axis=1)", "argmax(axis=1)", "cummax(axis=1)",
                                  "cumsum(axis=1, dtype=int8) | sum(axis=1)"])
def test_derived_stages_over_one_element(text, device):
    """Rows of one element and 0-d inputs: the compiler passes a count of 1 (K) to the kernel as a Python int,
    which the count and position leaves must take."""
    for x in (torch.full((), 2.5, device=device), torch.full((3, 1), 2.5, device=device)):
        if x.dim() == 0 and "axis=1" in text:
            continue
        assert_matches_torch(tc.parse(text), x)


def test_no_pass_after_expand_reads_a_derived_flag():
    """The planner and the emitters never read ``mean``, ``index``, ``skip_nan`` or a stage's ``dtype``: the
    expand pass has rewritten them away."""
    import ast
    import pathlib
    root = pathlib.Path(tc.__file__).parent
    files = [root / "lower" / n for n in ("fuse.py", "segments.py", "totalize.py")] + \
        sorted((root / "codegen").glob("*.py"))
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("mean", "index", "skip_nan") and \
                    isinstance(node.value, ast.Attribute) and node.value.attr == "stage":
                found.append(f"{path.name}:{node.lineno} .stage.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "dtype" and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "stage":
                found.append(f"{path.name}:{node.lineno} .stage.dtype")
    assert found == []


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
