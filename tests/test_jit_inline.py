"""User @triton.jit functions are copied into the emitted module (never imported from the user's module)."""
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch
import triton
import triton.language as tl
from triton.language import sigmoid as _tl_sigmoid
from triton.language import sum as _tl_sum

import tricomb as tc

SCRIPTS = Path(__file__).parent / "scripts"

SCALE = tl.constexpr(3.0)


@triton.jit
def _helper(x):
    return x * SCALE


@triton.jit
def _outer(x):
    return _helper(x) + 1.0


@triton.jit
def _two(a, b):
    return a * b - a


@triton.jit
def _with_constexpr_param(x, N: tl.constexpr):
    return x * N


NOT_CONSTANT = [1, 2, 3]


@triton.jit
def _reads_a_list(x):
    return x * NOT_CONSTANT


@pytest.mark.subprocess
def test_script_defined_in_main_matches_softplus(device):
    """The issue's acceptance test: a __main__ script's jit softplus (calling a jit helper) on (3, 4) and
    10,000,001 elements equals torch's softplus, and its sum equals the sum."""
    done = subprocess.run([sys.executable, str(SCRIPTS / "softplus_main.py"), device], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


def test_nested_jit_functions_and_constexpr_globals_are_copied(device):
    x = torch.randn(257, device=device)
    pipe = tc.map(_outer)
    torch.testing.assert_close(pipe(x), x * 3.0 + 1.0)
    source = pipe.source(x)
    assert "def user__helper(x):" in source and "def user__outer(x):" in source
    assert "return user__helper(x) + 1.0" in source
    assert "user_SCALE = tl.constexpr(3.0)" in source
    assert "test_jit_inline" not in source  # the user's module is never imported


def test_jit_function_of_two_arguments_as_zip_with(device):
    a, b = torch.randn(100, device=device), torch.randn(100, device=device)
    torch.testing.assert_close(tc.zip_with(_two)(a, b), a * b - a)


@triton.jit
def mask(v):
    # named like a kernel local on purpose
    return v + 1.0


@triton.jit
def combine_add(a, b):
    # named like an emitted combine function on purpose
    return a * b


def test_user_function_names_never_clash_with_kernel_names(device):
    x, y = torch.randn(50, device=device), torch.randn(50, device=device)
    torch.testing.assert_close(tc.map(mask)(x), x + 1.0)
    torch.testing.assert_close((tc.zip_with(combine_add) >> tc.sum())(x, y), (x * y).sum())


@triton.jit
def _pair(x):
    return x, x


def test_tuple_returning_jit_function_is_unsupported_before_launch():
    with pytest.raises(tc.UnsupportedError, match="returns a tuple"):
        tc.map(_pair).source(torch.randn(3))


def test_constexpr_parameters_are_rejected_with_a_fix():
    with pytest.raises(tc.ArityError, match="tl.constexpr parameters.*module-level tl.constexpr"):
        tc.map(_with_constexpr_param)


def test_a_global_that_cannot_be_copied_is_named_when_the_stage_is_built():
    with pytest.raises(tc.InlineError, match="NOT_CONSTANT.*list") as info:
        tc.map(_reads_a_list)
    assert info.value.location.file.endswith("test_jit_inline.py")


# Found by the hostile review of 2026-11-30: what an element function cannot do is refused when the stage is
# built, with the user's file and line, instead of running wrong (the interpreter takes one branch for a whole
# block) or failing at launch.

@triton.jit
def _branchy(x):
    if x > 0:
        return x
    return -x


@triton.jit
def _folds_the_block(x):
    return tl.sum(x, axis=0)


@triton.jit
def _calls_itself(x):
    return _calls_itself(x)


@triton.jit
def _ping(x):
    return _pong(x)


@triton.jit
def _pong(x):
    return _ping(x)


@triton.jit
def _misspelt(x):
    return tl.exq(x)


@triton.jit
def _returns_nothing(x):
    y = x * 2.0  # noqa: F841


@pytest.mark.parametrize("fn,message", [
    (_branchy, "uses if on its values; .* Use tl.where"),
    (_folds_the_block, r"calls tl.sum, which works on a whole block"),
    (_calls_itself, r"calls itself \(_calls_itself -> _calls_itself\)"),
    (_ping, r"calls itself \(_ping -> _pong -> _ping\)"),
    (_misspelt, r"uses tl.exq, which triton.language does not have"),
    (_returns_nothing, "returns nothing"),
])
def test_what_an_element_function_cannot_do_is_refused_when_the_stage_is_built(fn, message):
    with pytest.raises(tc.InlineError, match=message) as info:
        tc.map(fn)
    first = fn.fn.__code__.co_firstlineno
    assert info.value.location.file == __file__ and first <= info.value.location.line <= first + 3


@triton.jit
def _python_min(x):
    return min(max(x, 0.0), 6.0)


@triton.jit
def _calls_a_branching_helper(x):
    return _branchy(x) + 1.0


def test_python_builtins_on_values_and_faults_in_called_functions_are_refused_at_their_lines():
    with pytest.raises(tc.InlineError, match=r"passes its values to Python's min\(\).* write tl.minimum") as info:
        tc.map(_python_min)
    assert info.value.location.line == _python_min.fn.__code__.co_firstlineno + 2
    with pytest.raises(tc.InlineError, match="'_branchy' uses if on its values") as info:
        tc.map(_calls_a_branching_helper)
    assert info.value.location.line == _branchy.fn.__code__.co_firstlineno + 2


@triton.jit
def _clip(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


def test_a_jit_function_of_three_arguments_in_a_stage_and_in_a_lambda():
    x = torch.randn(50) * 4
    lo, hi = torch.full((50,), -1.0), torch.full((1,), 2.0)
    torch.testing.assert_close(tc.zip_with(_clip)(x, lo, hi), x.clamp(-1.0, 2.0))
    torch.testing.assert_close(tc.map(lambda v: _clip(v, 0.0, 6.0))(x), x.clamp(0.0, 6.0))


def test_a_python_lambda_may_call_a_jit_function():
    x = torch.tensor([-1.0, 2.0, 3.0])
    got = tc.map(lambda v: _outer(v) * 2.0 + _two(v, v))(x)
    torch.testing.assert_close(got, (x * 3.0 + 1.0) * 2.0 + (x * x - x))


def test_a_jit_function_called_with_the_wrong_number_of_arguments_says_so_where_it_is_called():
    with pytest.raises(tc.ArityError, match=r"'_two' takes \(a, b\): missing a required argument: 'b'") as info:
        tc.map(lambda v: _two(v))  # one-argument
    assert info.value.location.line == _line_of("# one-argument")
    with pytest.raises(tc.ArityError, match=r"'_two' takes \(a, b\): too many positional arguments") as info:
        tc.parse("map x -> _two(x, x, x)", env={"_two": _two})
    assert info.value.location.column == 10


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.rstrip().endswith(marker))


# Found by the second hostile review of 2026-11-30.

@triton.jit
def _chained(x):
    return tl.where(0.0 < x < 1.0, x, 0.0)


@triton.jit
def _loops_by_value(x):
    r = x
    for _ in range(x):
        r = r + 1.0
    return r


@triton.jit
def _method_sum(x):
    return x.sum(0)


@triton.jit
def _raises(x):
    raise ValueError("no")


@triton.jit
def _aliased_sum(x):
    return _tl_sum(x, 0)


@pytest.mark.parametrize("fn,message", [
    (_chained, r"chains comparisons on its values.*\(a < x\) & \(x < b\)"),
    (_loops_by_value, "loops a number of times that depends on its values"),
    (_method_sum, r"calls .sum\(\) on a value"),
    (_raises, "raises; a kernel cannot"),
    (_aliased_sum, r"calls _tl_sum \(Triton's sum\), which works on a whole block"),
])
def test_more_that_an_element_function_cannot_do_is_refused(fn, message):
    with pytest.raises(tc.InlineError, match=message):
        tc.map(fn)


@triton.jit
def _aliased_sigmoid(x):
    return _tl_sigmoid(x) * 2.0


USER_K = tl.constexpr(2.0)


@triton.jit
def _local_named_like_a_copied_global(x):
    user_USER_K = x * 3.0
    return user_USER_K + USER_K


@triton.jit
def _parameter_named_like_a_copied_helper(tl_sigmoid):
    return tl.sigmoid(tl_sigmoid)


@triton.jit
def _with_default(x, y=3.0):
    return x + y


@triton.jit
def _half(x):
    return x * 0.5


def test_copied_names_never_clash_with_a_functions_own_locals():
    """A local named user_USER_K next to the global USER_K (copied as user_USER_K) read the local twice."""
    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(tc.map(_local_named_like_a_copied_global)(x), x * 3.0 + 2.0)
    torch.testing.assert_close(tc.map(_parameter_named_like_a_copied_helper)(x), torch.sigmoid(x))
    torch.testing.assert_close(tc.map(_aliased_sigmoid)(x), torch.sigmoid(x) * 2.0)


def test_a_lambda_calls_jit_functions_on_constants_with_keywords_and_defaults():
    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(tc.map(lambda v: _outer(2.0) + v)(x), x + 7.0)
    torch.testing.assert_close(tc.map(lambda v: _with_default(v, y=10.0))(x), x + 10.0)
    torch.testing.assert_close(tc.map(lambda v: _with_default(v))(x), x + 3.0)
    torch.testing.assert_close(tc.parse("map v -> f(v, 0.5)", env={"f": _with_default})(x), x + 0.5)
    with pytest.raises(tc.ArityError, match="too many positional arguments"):
        tc.map(lambda v: _with_default(v, 1.0, 2.0))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16])
def test_a_jit_result_is_taken_in_the_arguments_dtype(dtype):
    """x * 0.5 on integers computes a float inside the function; the result is converted to the arguments'
    dtype, as the guide says (it crashed for int8 to int32, where the wrap met a float)."""
    x = torch.arange(0, 8).to(dtype)
    assert torch.equal(tc.map(_half)(x), (x * 0.5).to(dtype))


@triton.jit
def _random_noise(x):
    return x + tl.rand(0, x.to(tl.int32))


def test_what_triton_cannot_run_is_an_unsupported_error_at_the_stage():
    """tl.rand does not run in Triton's interpreter (CPU tensors): the failure is wrapped once, at the stage."""
    pipe = tc.map(_random_noise)  # noise-stage
    with pytest.raises(tc.UnsupportedError, match="Triton could not run this pipeline's kernel") as info:
        pipe(torch.ones(4))
    assert info.value.location.line == _line_of("# noise-stage")


# Hygiene (found by the review of the inliner): the copy of a function means what the function means, whatever
# its names, its scopes and the numbers it reads; the helper functions live in tests/scripts.

def _copied(fn, x):
    """``fn``'s copy in the module tricomb emits for ``tc.map(lambda v: fn(v))``, as a Python function."""
    from tricomb.runtime.loader import load_module
    module = load_module(tc.map(lambda v: fn(v)).source(x), interpret=True)
    return getattr(module, f"user_{fn.fn.__name__}").fn


def _plain(value):
    """A value computed by a copied function run as plain Python (its constants are tl.constexpr)."""
    while isinstance(value, tl.constexpr):
        value = value.value
    return value


def test_a_callers_local_named_like_the_constant_made_for_its_callees_global_stays_its_own():
    """The caller's local user_K met the constant user_K made for reads_k's K: K then read the local."""
    from scripts import jit_hygiene
    x = torch.tensor([1.0, 2.0, -3.0])
    torch.testing.assert_close(tc.map(jit_hygiene.local_named_like_the_constant)(x), (x * 2.0 + 1.0) * 2.0)


def test_a_local_named_like_a_module_level_name_the_copy_reads_is_renamed():
    """A local tl next to triton.language imported as `language` (written as tl in the copy); and Triton's own
    function reached through that alias (its module-level re-decoration named the user's alias)."""
    from scripts import jit_hygiene
    x = torch.tensor([-1.0, 0.5, 2.0])
    torch.testing.assert_close(tc.map(jit_hygiene.local_named_tl)(x), x.clamp(min=0.0) * 3.0)
    torch.testing.assert_close(tc.map(jit_hygiene.library_function_through_an_alias)(x), torch.sigmoid(x) * 2.0)


# Each function of tests/scripts/jit_scopes.py binds a K of its own in one binding form, beside the global K:
# its copy, run as plain Python on tensors, must give what the function itself gives. Those Triton's interpreter
# can run (it cannot run a nested def or a class with a method) also run through tricomb.
_BINDING_FORMS = [
    ("lambda_parameter", True), ("lambda_default_and_keyword_only", True), ("lambda_star_parameters", True),
    ("lambda_parameter_named_like_a_jit_function", True), ("nested_def_parameter", False),
    ("nested_def_name", False), ("nested_nonlocal", False), ("nested_global", False), ("class_scope", False),
    ("list_comprehension_target", True), ("comprehension_first_iterable_outside", True),
    ("dict_comprehension_target", True), ("two_generators", True), ("walrus_in_comprehension", True),
    ("walrus", True), ("for_target", True), ("with_target", True), ("except_target", True), ("import_as", True),
    ("from_import_as", True), ("augmented_assignment", True), ("annotated_assignment", True),
    ("annotation_then_assignment", True), ("deleted", True), ("starred_assignment", True),
    ("match_capture", True), ("match_star_and_rest", True), ("global_statement", True),
    ("default_read_outside", True),
]


@pytest.mark.parametrize("name,runs_in_triton", _BINDING_FORMS)
def test_every_binding_form_keeps_its_name_apart_from_the_global(name, runs_in_triton):
    from scripts import jit_scopes
    fn = getattr(jit_scopes, name)
    x = torch.tensor([1.0, 2.0, -4.0])
    expected = fn.fn(x)  # the function itself, as Python on tensors
    assert torch.equal(torch.as_tensor(_plain(_copied(fn, x)(x))), expected)
    if runs_in_triton:
        torch.testing.assert_close(tc.map(fn)(x), expected)


def test_a_jit_function_that_assigns_a_global_is_refused_at_its_line():
    from scripts import jit_hygiene
    with pytest.raises(tc.InlineError, match="assigns to 'K', a global; a kernel cannot change") as info:
        tc.map(jit_hygiene.assigns_a_global)
    assert info.value.location.line == jit_hygiene.assigns_a_global.fn.__code__.co_firstlineno + 3


def _keeps_signed_zeros(device) -> bool:
    """Whether Triton keeps the sign of a scalar zero in a jit function here (Triton 3.6's interpreter drops it:
    x * -0.0 is 0.0)."""
    from scripts import jit_numbers_b
    return bool(torch.signbit(tc.map(jit_numbers_b.times_negative_zero)(torch.ones(1, device=device))).item())


def test_numbers_equal_as_numbers_but_not_as_values_stay_apart(device):
    """Z is 0.0 in one module and -0.0 in the other, ONE is 1, 1.0 and True: one constant each, never merged."""
    from scripts import jit_numbers_a as a, jit_numbers_b as b
    x = torch.tensor([1.0, 2.0], device=device)
    pipe = tc.map(lambda v: (a.reciprocal_of_zero(v), b.reciprocal_of_zero(v)))
    positive, negative = pipe(x)
    assert torch.equal(positive.cpu(), torch.full((2,), float("inf")))
    if _keeps_signed_zeros(device):
        assert torch.equal(negative.cpu(), torch.full((2,), float("-inf")))
    source = pipe.source(x)
    assert "tl.constexpr(0.0)\n" in source and "tl.constexpr(-0.0)\n" in source
    n = torch.tensor([2 ** 24 + 1, 3], dtype=torch.int32, device=device)  # 2**24 + 1 is no float32
    pipe = tc.map(lambda v: (a.times_one(v), b.times_one(v), a.times(True)(v)))
    by_int, by_float, by_bool = pipe(n)
    assert torch.equal(by_int, n) and torch.equal(by_bool, n)
    assert torch.equal(by_float, (n.to(torch.float32) * 1.0).to(torch.int32))
    source = pipe.source(n)
    for text in ("tl.constexpr(1)\n", "tl.constexpr(1.0)\n", "tl.constexpr(True)\n"):
        assert text in source


def test_non_finite_and_numpy_globals_are_written_as_expressions_of_their_values(device):
    """inf (in a tl.constexpr), -inf, nan, numpy.float64, numpy.float32, numpy.int64 and numpy.bool_ globals
    (tl.constexpr(inf) was a NameError when the module was imported)."""
    from scripts import jit_hygiene
    x = torch.tensor([-1.0, 0.5, 3.0, float("inf"), float("-inf")], device=device)
    pipe = tc.map(jit_hygiene.special_numbers)
    third = float(numpy.float32(1 / 3))
    expected = torch.where(x > 0.0, x * 0.25 + x * third * 3, float("nan"))
    torch.testing.assert_close(pipe(x), expected, equal_nan=True)
    source = pipe.source(x)
    for text in ('tl.constexpr(float("inf"))', 'tl.constexpr(float("-inf"))', 'tl.constexpr(float("nan"))',
                 "tl.constexpr(0.25)", f"tl.constexpr({third!r})", "tl.constexpr(3)", "tl.constexpr(True)"):
        assert text in source
    assert "numpy" not in source and "np." not in source


def test_a_number_no_python_number_equals_exactly_is_refused():
    from scripts import jit_hygiene
    with pytest.raises(tc.InlineError, match="'LONG_THIRD': .* which no Python float equals exactly"):
        tc.map(jit_hygiene.reads_a_longdouble)


def test_a_changed_global_or_closure_cell_gives_a_new_kernel(device):
    """Triton reads a jit function's globals when it runs; so does tricomb's kernel cache, through the functions
    it calls (SCALE read by scaled, called by calls_scaled), a rebound function (STEP), another module's
    attribute (jit_numbers_a.ONE) and a closure cell. They ran their first value for good."""
    from scripts import jit_globals, jit_numbers_a
    x = torch.tensor([1.0, 2.0, 4.0], device=device)
    pipes = [tc.map(f) for f in (jit_globals.scaled, jit_globals.calls_scaled, jit_globals.calls_step,
                                 jit_globals.reads_another_module)]
    times_cell, set_cell = jit_globals.with_cell(3.0)
    pipes.append(tc.map(times_cell))
    for pipe, expected in zip(pipes, (x * 2.0, x * 2.0 + 1.0, x + 1.0, x, x * 3.0)):
        torch.testing.assert_close(pipe(x), expected)
    try:
        jit_globals.SCALE, jit_globals.STEP, jit_numbers_a.ONE = 5.0, jit_globals.plus_two, 7
        set_cell(4.0)
        for pipe, expected in zip(pipes, (x * 5.0, x * 5.0 + 1.0, x + 2.0, x * 7.0, x * 4.0)):
            torch.testing.assert_close(pipe(x), expected)
    finally:
        jit_globals.SCALE, jit_globals.STEP, jit_numbers_a.ONE = 2.0, jit_globals.plus_one, 1
    torch.testing.assert_close(pipes[0](x), x * 2.0)


def test_a_global_changed_to_what_cannot_be_copied_is_refused_at_the_next_call():
    from scripts import jit_globals
    pipe, x = tc.map(jit_globals.calls_scaled), torch.tensor([1.0])
    pipe(x)
    try:
        jit_globals.SCALE = [2.0]
        with pytest.raises(tc.InlineError, match="'scaled' uses 'SCALE', a list"):
            pipe(x)
    finally:
        jit_globals.SCALE = 2.0
    torch.testing.assert_close(pipe(x), x * 2.0 + 1.0)
