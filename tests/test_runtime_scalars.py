"""Runtime scalars: numbers given at each call are kernel arguments. A new value emits and compiles nothing,
promotes as torch promotes a Python number (a weak scalar), and reaches the kernel exactly; the text forms
(``param``, numbers in ``env``) are the same scalars by name; gradients, torch.compile and the standalone module
take them too."""
import math
import subprocess
import sys

import numpy
import pytest
import torch

import tricomb as tc
from tricomb import compiler
from tricomb.testing import assert_matches_torch


class _Count:
    """Calls of ``module.name`` in the test."""

    def __init__(self, monkeypatch, module, name):
        self.count = 0
        real = getattr(module, name)

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)


class _Compilations:
    """Triton compilations in the test (on the GPU), by Triton's post-compile hook."""

    def __init__(self, monkeypatch):
        import triton
        self.count = 0
        knobs = triton.knobs.runtime
        previous = knobs.jit_post_compile_hook

        def hook(*args, **kwargs):
            self.count += 1
            return previous(*args, **kwargs) if previous is not None else None
        monkeypatch.setattr(knobs, "jit_post_compile_hook", hook)


# (each its own kernel: the three forms of one pipeline would share one, which another test may have compiled)
_FORMS = {
    "python": (1.0, lambda: (tc.zip_with(lambda x, s: x * s + 1.0) >> tc.sum(axis=-1), lambda pipe, x, v: pipe(x, v))),
    "param": (2.0, lambda: (tc.parse("param s; map x -> x * s + 2.0 | sum(axis=-1)"), lambda pipe, x, v: pipe(x, s=v))),
    "env": (3.0, lambda: (None, lambda _, x, v: tc.parse("map x -> x * s + 3.0 | sum(axis=-1)", env={"s": v})(x))),
}


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_a_hundred_values_emit_one_module_and_compile_once(monkeypatch, device, form):
    emitted = _Count(monkeypatch, compiler, "emit_module")
    compiled = _Compilations(monkeypatch) if device == "cuda" else None
    shift, make = _FORMS[form]
    pipe, call = make()
    x = torch.randn(6, 50 + int(shift), device=device)
    for k in range(100):
        value = 0.37 * k - 11.0
        got = call(pipe, x, value)
        torch.testing.assert_close(got.cpu(), (x.cpu() * value + shift).sum(-1), rtol=1e-5, atol=1e-4)
    assert emitted.count == 1
    if compiled is not None:
        assert compiled.count == 1


def test_integer_scalars_of_every_size_compile_once(monkeypatch, device):
    """1, multiples of 16 and values past int32 are each a value Triton would specialize or retype on."""
    emitted = _Count(monkeypatch, compiler, "emit_module")
    compiled = _Compilations(monkeypatch) if device == "cuda" else None
    pipe = tc.zip_with(lambda x, n: x + n)
    x = torch.zeros(5, dtype=torch.int64, device=device)
    for n in (1, 16, 0, -1, 2**31, -2**40 - 3, 2**63 - 1, 48, 7):
        assert pipe(x, n).cpu().tolist() == [n] * 5
    assert emitted.count == 1
    if compiled is not None:
        assert compiled.count == 1


_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int32, torch.int64,
           torch.uint8, torch.bool]
_NUMBERS = [3, -2, 2.5, True, 1e-3]


def _sample(dtype, device):
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True], device=device)
    if not dtype.is_floating_point:
        return torch.tensor([0, 1, 7, 100], dtype=dtype, device=device)
    return torch.tensor([0.5, -1.25, 3.0, 1e-2], dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
@pytest.mark.parametrize("number", _NUMBERS, ids=repr)
@pytest.mark.parametrize("op", ["mul", "add", "sub", "maximum", "lt"])
def test_a_number_promotes_as_torch_promotes_a_python_scalar(device, dtype, number, op):
    x = _sample(dtype, device)
    fn = {"mul": torch.mul, "add": torch.add, "sub": torch.sub, "lt": torch.lt,
          "maximum": lambda a, b: torch.maximum(a, torch.tensor(b, device=device))}[op]
    try:
        expected = fn(x.cpu(), number)
    except RuntimeError:
        pytest.skip("torch refuses this pair")  # (bool minus a number, say)
    got = tc.zip_with(getattr(tc, op))(x, number)
    assert got.dtype == expected.dtype
    if dtype == torch.bfloat16 and device == "cpu":
        torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=1e-2, atol=1e-2)
    else:
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_a_scalar_in_a_reduce_or_scan_pipeline_matches_the_oracle(device, dtype):
    x = torch.randn(7, 33, device=device).mul(10).to(dtype)
    for pipe, numbers in [(tc.zip_with(lambda v, a: tc.exp(v * a * 0.01)) >> tc.cumsum(), (0.5,)),
                          (tc.zip_with(lambda v, a, b: tc.where(a > b, v, -v)) >> tc.sum(axis=-1), (3, 2.5)),
                          (tc.zip_with(lambda v, a: v * (1 - a ** 2)) >> tc.max(axis=0), (0.25,)),
                          (tc.attach(tc.max(axis=-1)) >> tc.zip_with(lambda v, m, t: (v - m) * t), (2.0,))]:
        assert_matches_torch(pipe, x, *numbers)


def test_a_float64_pipeline_reads_the_double_exactly(device):
    """A Python float passed to Triton as itself would be a float32: 0.1 rounded."""
    x = torch.ones(3, dtype=torch.float64, device=device)
    third = 1 / 3
    assert tc.zip_with(lambda v, s: v * s)(x, third).cpu().tolist() == [third] * 3
    assert tc.zip_with(lambda v, a, b: v * (a * b))(x, 0.1, 0.3).cpu().tolist() == [0.1 * 0.3] * 3


def test_arithmetic_of_numbers_alone_is_pythons(device):
    """Ops of runtime scalars alone compute in double (and int64), as Python computes them, and stay weak."""
    x = torch.ones(4, dtype=torch.float16, device=device)
    got = tc.zip_with(lambda v, a, b: v * (a ** b))(x, 0.999, 10)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.cpu(), x.cpu() * (0.999 ** 10))
    n = tc.zip_with(lambda v, a, b: v + a * b)(torch.zeros(2, dtype=torch.int8, device=device), 2**20, 2**20)
    assert n.dtype == torch.int8 and n.cpu().tolist() == [0, 0]  # 2**40 wraps to 0 in int8, as torch's
    kept = tc.zip_with(lambda v, s: s)(torch.ones(3, dtype=torch.int8, device=device), 2.5)
    assert kept.dtype == torch.float32 and kept.cpu().tolist() == [2.5] * 3


def test_numpy_scalars_and_0d_tensors(monkeypatch, device):
    emitted = _Count(monkeypatch, compiler, "emit_module")
    pipe = tc.zip_with(lambda v, s: v * s)
    x = torch.ones(3, dtype=torch.float16, device=device)
    for s in (numpy.float32(1.5), numpy.float64(2.5), 3.5):
        got = pipe(x, s)
        assert got.dtype == torch.float16 and got.cpu().tolist() == [float(s)] * 3
    assert emitted.count == 1  # numpy scalars are the Python numbers they equal
    assert pipe(x, numpy.int64(3)).dtype == torch.float16
    # a 0-d tensor is an input: torch promotes it as a 0-d tensor, and a new value compiles nothing either
    for value in (0.5, 0.25):
        got = pipe(torch.ones(3, dtype=torch.int32, device=device), torch.tensor(value, dtype=torch.float64,
                                                                                 device=device))
        assert got.dtype == torch.float64 and got.cpu().tolist() == [value] * 3
    assert emitted.count == 3


def test_bad_numbers_are_refused_before_anything_runs(device):
    x = torch.ones(3, device=device)
    pipe = tc.zip_with(lambda v, n: v + n)
    with pytest.raises(tc.ArgumentError, match=r"input 1 is 36893488147419103232, outside int64"):
        pipe(x, 2**65)
    with pytest.raises(tc.DTypeError, match="input 1 is a str, neither a torch.Tensor nor a number"):
        pipe(x, "0.5")
    with pytest.raises(tc.ArgumentError, match="input 0 is a number, but stage 0 needs a tensor"):
        tc.map(tc.exp)(2.0)
    with pytest.raises(tc.ArgumentError, match="stage 0 needs a tensor"):
        tc.sum()(3.0)
    with pytest.raises(tc.ArityError, match="takes 2 input"):
        pipe(x, 1.0, 2.0)
    assert pipe(x, 2**63 - 1).dtype == torch.float32  # (the largest int64 is taken)


def test_text_forms_name_their_scalars():
    x = torch.randn(10)
    slope = tc.parse("map x -> where(x > 0, x, x * slope)", env={"slope": 0.2})
    torch.testing.assert_close(slope(x), torch.where(x > 0, x, x * 0.2))
    torch.testing.assert_close(slope(x, slope=0.5), torch.where(x > 0, x, x * 0.5))
    step = tc.parse("param lr, wd; zip_with (p, g) -> p - lr * (g + wd * p)")
    g = torch.randn(10)
    torch.testing.assert_close(step(x, g, lr=0.1, wd=0.01), x - 0.1 * (g + 0.01 * x))
    with pytest.raises(tc.ArgumentError, match=r"wd= is not given"):
        step(x, g, lr=0.1)
    with pytest.raises(tc.ArgumentError, match=r"beta= names no runtime scalar of this pipeline \(it names lr=, wd="):
        step(x, g, lr=0.1, wd=0.0, beta=0.9)
    with pytest.raises(tc.ArgumentError, match="takes its inputs by position, not as lr="):
        tc.map(tc.exp)(x, lr=0.1)
    counted = tc.parse("param n: int; map x -> x + n")
    assert counted(torch.zeros(2, dtype=torch.int8), n=3).dtype == torch.int8
    with pytest.raises(tc.ParseError, match="declared twice"):
        tc.parse("param a, a; map x -> x * a")
    with pytest.raises(tc.ParseError, match="no kind of runtime scalar"):
        tc.parse("param a: double; map x -> x * a")


def test_a_named_scalar_keeps_its_kind():
    """A value of a kind its scalar holds exactly is taken (an int for a float); one it would change is refused."""
    x = torch.arange(4.0)
    counted = tc.parse("param n: int; map x -> x * n")
    with pytest.raises(tc.ArgumentError, match="n= is a float, but the runtime scalar n is a int"):
        counted(x, n=2.9)
    with pytest.raises(tc.ArgumentError, match="k= is a float, but the runtime scalar k is a int"):
        tc.parse("map x -> x * k", env={"k": 3})(x, k=2.5)
    assert tc.parse("param a; map x -> x * a")(x, a=2).tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(tc.ArgumentError, match="lr= is a list"):
        tc.parse("param lr; map x -> x * lr")(x, lr=[0.1])
    with pytest.raises(tc.UnknownNameError, match=r"env\['k'\] is a Tensor"):
        tc.parse("map x -> x * k", env={"k": torch.tensor(0.5)})


def test_an_operator_reading_a_runtime_scalar_is_refused():
    """An operator's laws are checked and its combine compiled for its constants alone."""
    with pytest.raises(tc.UnsupportedError, match="reduce's operator .* reads a runtime scalar"):
        tc.parse("param a; reduce ((u, v) -> u + v + a * u * v)(identity=0.0)")
    with pytest.raises(tc.UnsupportedError, match="scan's operator .* reads a runtime scalar"):
        tc.parse("scan ((u, v) -> u + v * a)(identity=0.0)", env={"a": 1.5})


def test_composed_pipelines_share_a_name_and_print_back():
    a = tc.parse("map x -> x * s", env={"s": 2.0})
    b = tc.parse("param n: int; map x -> x + n * s", env={"s": 2.0})
    both = a >> b
    assert [p.name for p in both.parameters] == ["s", "n"]
    x = torch.randn(5)
    torch.testing.assert_close(both(x, n=3), x * 2.0 + 6.0)
    assert str(both).startswith("param s = 2.0, n: int; ")
    again = tc.parse(str(both))
    torch.testing.assert_close(again(x, s=2.0, n=3), x * 2.0 + 6.0)
    with pytest.raises(tc.ArgumentError, match="as a float and as a int"):
        a >> tc.parse("param s: int; map x -> x + s")


def test_gradients_with_scalars(device):
    x = torch.randn(6, 9, dtype=torch.float64, device=device, requires_grad=True)
    pipe = tc.zip_with(lambda v, a, b: tc.exp(v * a) * b) >> tc.sum(axis=-1)
    pipe(x, 0.5, 3).sum().backward()
    torch.testing.assert_close(x.grad, 1.5 * torch.exp(0.5 * x.detach()))
    named = tc.parse("param lr; zip_with (p, g) -> p - lr * g")
    p, g = (torch.randn(4, dtype=torch.float64, device=device, requires_grad=True) for _ in range(2))
    named(p, g, lr=0.25).sum().backward()
    assert p.grad.tolist() == [1.0] * 4 and g.grad.tolist() == [-0.25] * 4


def test_torch_compile_takes_scalars(device):
    pipe = tc.zip_with(lambda v, s: v * s) >> tc.sum(axis=-1)
    compiled = torch.compile(lambda v, s: pipe(v, s), backend="aot_eager", fullgraph=True)
    x = torch.randn(3, 8, device=device)
    for s in (0.5, 2.0, 3.0):
        torch.testing.assert_close(compiled(x, s).cpu(), (x.cpu() * s).sum(-1), rtol=1e-5, atol=1e-5)
    named = tc.parse("param lr; zip_with (p, g) -> p - lr * g")
    step = torch.compile(lambda p, g, lr: named(p, g, lr=lr), backend="aot_eager", fullgraph=True)
    for lr in (0.1, 0.2, 0.3):  # (a new value may reach the trace as a symbol)
        torch.testing.assert_close(step(x, x, lr).cpu(), (x - lr * x).cpu())


def test_the_emitted_module_takes_scalars_after_its_tensors(tmp_path):
    x = torch.randn(20)
    source = tc.zip_with(lambda v, a, b: v * a + b).source(x, 0.5, 2)
    assert "def launch(in0, *scalars, out=None" in source and "do_not_specialize" in source
    path = tmp_path / "module.py"
    path.write_text(source)
    script = (f"import sys, torch; sys.path.insert(0, {str(tmp_path)!r}); import module; "
              "x = torch.arange(4.0); print(module.launch(x, 0.5, 2).tolist())")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", **_python_env()})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str([2.0, 2.5, 3.0, 3.5])


def test_the_emitted_module_says_a_runtime_scalar_is_missing():
    from tricomb.runtime.loader import load_module
    x = torch.ones(3)
    module = load_module(tc.zip_with(lambda p, g, lr: p - lr * g).source(x, x, 0.5), interpret=True)
    with pytest.raises(TypeError, match=r"takes 1 runtime scalar\(s\), numbers, by position .* got 0"):
        module.launch(x, x)
    assert module.launch(x, x, 0.25).tolist() == [0.75] * 3


def _python_env():
    import os
    return {k: v for k, v in os.environ.items() if k in ("HOME", "PYTHONPATH", "VIRTUAL_ENV", "TRICOMB_CACHE_DIR")}


def test_scalars_alone_are_pythons_arithmetic_and_an_unread_one_is_taken(device):
    x = torch.ones(2, dtype=torch.float64, device=device)
    assert tc.zip_with(lambda v, a, b: v * (a + b))(x, True, True).tolist() == [2.0, 2.0]  # True + True is 2
    assert tc.zip_with(lambda v, a, b: v * (a & b))(x, True, False).tolist() == [0.0, 0.0]
    assert tc.zip_with(lambda v, s: v * 2)(x, 3.0).tolist() == [2.0, 2.0]
    flags = tc.zip_with(lambda v, a, b: v * tc.maximum(a, b))(torch.tensor([True, False], device=device), True, False)
    assert flags.dtype == torch.bool and flags.tolist() == [True, False]  # (max(True, False) is True, a bool)
    assert tc.parse("param a; map x -> x * a")(x, a=2**63).tolist() == [2.0**63] * 2  # (a float holds it)


def test_defaults_print_and_parse_back():
    x = torch.ones(2)
    pipe = tc.parse("map x -> x * s", env={"s": 2})
    assert str(pipe) == "param s: int = 2; map (x -> (x * s))"
    assert tc.parse(str(pipe))(x).tolist() == [2.0, 2.0]
    declared = tc.parse("param lr = 0.5, n: int = 3, on: bool; map x -> where(on, x * lr + n, x)")
    assert declared(x, on=True).tolist() == [3.5, 3.5]
    assert math.isnan(tc.parse(str(tc.parse("map x -> x * s", env={"s": math.nan}))).parameters[0].default)
    with pytest.raises(tc.ParseError, match="the value is a float; give a int"):
        tc.parse("param n: int = 2.5; map x -> x * n")
    a, b = tc.parse("map x -> x * s", env={"s": 2.0}), tc.parse("map x -> x + s", env={"s": 100.0})
    with pytest.raises(tc.ArgumentError, match="with the values 2.0 and 100.0"):
        a >> b


def test_nan_and_infinities_pass_exactly(device):
    x = torch.ones(2, device=device)
    pipe = tc.zip_with(lambda v, s: v * s)
    assert math.isnan(pipe(x, float("nan"))[0].item())
    assert pipe(x, -float("inf")).cpu().tolist() == [-math.inf] * 2
    assert pipe(x, -0.0).cpu().tolist() == [-0.0] * 2 and math.copysign(1, pipe(x, -0.0)[0].item()) == -1
    # through a helper, which takes its operands as blocks: the sign of -0.0 kept (1 / -0.0 is -inf)
    helper = tc.zip_with(lambda v, s: 1.0 / tc.maximum(v, s))(torch.tensor([-1.0], device=device), -0.0)
    assert helper.cpu().tolist() == [-math.inf]
