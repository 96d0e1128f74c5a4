"""Each error class: its message names the problem and the fix, and points at the user's own code."""
import math
from pathlib import Path

import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, count_launches, schedule_overrides

HERE = __file__


def _line_of(text: str) -> int:
    with open(HERE) as f:
        for number, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return number
    raise LookupError(text)


def test_traced_value_used_as_bool_says_use_where():
    with pytest.raises(tc.TraceError, match="Use tc.where") as info:
        tc.map(lambda x: x if x > 0 else -x)  # traced-bool-here
    assert info.value.location.file == HERE


def test_math_module_on_traced_value_points_to_builtins():
    with pytest.raises(tc.TraceError, match="tc.exp"):
        tc.map(lambda x: math.exp(x))


def test_wrong_arity_names_the_stage_and_where_it_was_built():
    """A map of two arguments is a fragment (it may follow a stage returning pairs); called first, it is an error
    that points at the line that built the map, raised before anything launches."""
    pipe = tc.map(lambda a, b: a + b)  # map-arity-here
    with pytest.raises(tc.ArityError, match="map's function .* takes 2 arguments.*use zip_with") as info:
        pipe(torch.ones(3))
    assert info.value.location.file == HERE
    assert info.value.location.line == _line_of("# map-arity-here")
    with pytest.raises(tc.ArityError, match="takes 3 arguments but map passes a 2-tuple stream's fields"):
        tc.map(lambda v: (v, v)) >> tc.map(lambda a, b, c: a)


def test_non_callable_function():
    with pytest.raises(tc.TraceError, match="must be a builtin"):
        tc.map(3)


def test_tuple_operators_need_a_tuple_stream_and_a_tuple_identity():
    """An operator on pairs takes 4 arguments and returns 2 values; it combines a 2-field stream."""
    pairs = tc.zip_with(lambda v, d: (v, d))
    linear = tc.scan(lambda a, b, c, d: (a * d + c, b * d), identity=(0.0, 1.0))  # a fragment, until composed
    with pytest.raises(tc.ArityError, match=r"combines 2-tuples, but as the first stage it gets one input; put a map "
                                            r"or zip_with returning a 2-tuple before it \(tc.zip_with\(lambda x0, x1"):
        linear(torch.ones(3))
    with pytest.raises(tc.ArityError, match=r"combines 2-tuples but the stream entering it has 1 field\(s\); "
                                            "return a k-tuple from the map or zip_with before it"):
        tc.map(tc.exp) >> linear
    with pytest.raises(tc.LawError, match=r"identity=0.0 has 1 field\(s\) but operator .* combines 2-tuples"):
        pairs >> tc.scan(lambda a, b, c, d: (a * d + c, b * d), identity=0.0)
    with pytest.raises(tc.ArityError, match="takes 3 arguments and returns 2 value"):
        pairs >> tc.scan(lambda a, b, c: (a + c, b + c), identity=(0.0, 0.0))
    with pytest.raises(tc.ArityError, match="receives a 2-tuple stream but its operator add"):
        pairs >> tc.cumsum()


@pytest.mark.parametrize("build", [lambda: tc.sum(axis=0) >> tc.cumsum(), lambda: tc.cumsum() >> tc.sum() >> tc.max(),
                                   lambda: tc.sum(axis=0) >> tc.max() >> tc.sum()], ids=["scan after a reduce", "after a scan and a reduce", "third fold"])
def test_another_reduce_or_scan_is_rejected_with_a_fix(build):
    """A reduce may follow a reduce (the reduce over the rows) or a scan (over the scanned axis), nothing more."""
    with pytest.raises(tc.UnsupportedError, match="Split it into two pipelines"):
        build()


def test_composing_with_a_function_says_wrap_it():
    with pytest.raises(tc.TricombError, match=r"wrap functions in tc.map"):
        tc.map(tc.exp) >> tc.exp


def test_shapes_that_do_not_broadcast_are_quoted_at_the_stage_that_brings_the_input_in():
    pipe = tc.map(tc.exp) >> tc.zip_with(tc.add)  # brings-it-in
    with pytest.raises(tc.ShapeError, match=r"input 1 of the pipeline, brought in by this zip_with, has shape "
                                            r"\(5,\), which does not broadcast with shape \(3, 4\)") as info:
        pipe(torch.ones(3, 4), torch.ones(5))
    assert info.value.location.line == _line_of("# brings-it-in")


def test_input_after_reduce_must_not_grow_the_stream():
    pipe = tc.sum(axis=1) >> tc.zip_with(tc.add)  # grow-here
    with pytest.raises(tc.ShapeError, match="would grow it") as info:
        pipe(torch.ones(3, 4), torch.ones(2, 3))
    assert info.value.location.line == _line_of("# grow-here")


def test_axis_out_of_range_names_axis_and_rank():
    with pytest.raises(tc.AxisError, match="axis 2 is out of range for a stream of rank 2"):
        tc.sum(axis=2)(torch.ones(3, 4))
    with pytest.raises(tc.AxisError, match="repeated"):
        tc.sum(axis=(0, -2))(torch.ones(3, 4))
    with pytest.raises(tc.AxisError, match="axis must be None, an int or a tuple"):
        tc.sum(axis=1.5)


def test_wrong_number_of_inputs():
    with pytest.raises(tc.TricombError, match="takes 2 input tensor"):
        tc.zip_with(tc.mul)(torch.ones(3))


def test_unsupported_dtype_says_how_to_convert():
    with pytest.raises(tc.DTypeError, match=r"complex64.*Convert it with \.to"):
        tc.map(tc.exp)(torch.ones(3, dtype=torch.complex64))


def test_non_tensor_input():
    with pytest.raises(tc.TricombError, match="neither a torch.Tensor nor a number"):
        tc.map(tc.exp)([1.0, 2.0])


def test_out_buffer_checks():
    x = torch.ones(4)
    with pytest.raises(tc.ShapeError, match="out= has shape"):
        tc.map(tc.exp)(x, out=torch.empty(5))
    with pytest.raises(tc.DTypeError, match="out= has dtype"):
        tc.map(tc.exp)(x, out=torch.empty(4, dtype=torch.float64))
    with pytest.raises(tc.AliasError, match="span overlapping memory but are not the same elements"):
        tc.map(tc.exp)(x[1:], out=x[:-1])


def test_out_buffer_is_filled(device):
    x = torch.randn(3, 5, device=device)
    out = torch.empty(5, device=device)
    result = tc.sum(axis=0)(x, out=out)
    assert result is out
    torch.testing.assert_close(out, x.sum(0))
    strided = torch.empty(5, 2, device=device)[:, 0]
    tc.sum(axis=0)(x, out=strided)
    torch.testing.assert_close(strided, x.sum(0))


def test_every_error_class_is_a_tricomb_error():
    for cls in (tc.ParseError, tc.UnknownNameError, tc.ArityError, tc.TraceError, tc.InlineError, tc.ShapeError,
                tc.AxisError, tc.DTypeError, tc.DeviceError, tc.UnsupportedError, tc.StageError, tc.LawError,
                tc.ArgumentError):
        assert issubclass(cls, tc.TricombError)
    assert issubclass(tc.ArgumentError, ValueError)


# Found by the new-user trial of 2026-11-30: each mistake's message says what to write instead.

@pytest.mark.parametrize("text,hint", [
    ("map softplus | summ", "did you mean sum"),
    ("logsumexpp(axis=1)", "did you mean logsumexp?"),
    ("map x -> x if x > 0 else 0 | sum", "the text form has no `if`: write where(cond, a, b)"),
    ("map x -> (x > 0) and (x < 1)", "the text form has no `and`: write logical_and(a, b)"),
    ("map exp >> sum", "stages are separated by `|` in the text form"),
    ("logsumexp(dim=1)", "'dim' is not an argument of logsumexp (torch's dim is axis here)"),
])
def test_text_mistakes_get_a_hint(text, hint):
    with pytest.raises(tc.ParseError, match=None) as info:
        tc.parse(text)
    assert hint in str(info.value) and info.value.location.column is not None


def test_a_misspelt_attribute_names_the_closest_public_name():
    with pytest.raises(AttributeError, match=r"no attribute 'sofplus'; did you mean tc.softplus\?"):
        tc.sofplus  # noqa: B018


def test_a_library_function_given_dim_says_axis_at_the_callers_line():
    with pytest.raises(tc.TricombError, match=r"takes axis, keepdim, not dim= \(torch's dim is axis here\)") as info:
        tc.library.logsumexp(dim=-1)  # library-dim
    assert info.value.location.line == _line_of("# library-dim")


def test_inputs_passed_as_one_list_are_told_to_unpack_at_the_callers_line():
    dot = tc.zip_with(tc.mul) >> tc.sum()
    with pytest.raises(tc.ArityError, match=r"called with 1 \(a list of 2: unpack it, pipe\(\*inputs\)\)") as info:
        dot([torch.ones(3), torch.ones(3)])  # packed-inputs
    assert info.value.location.line == _line_of("# packed-inputs")


def test_the_law_error_hint_fits_the_operator():
    with pytest.raises(tc.LawError) as difference:
        tc.reduce(lambda a, b: a - b)
    assert "sub, div and pow are not" in str(difference.value) and "recurrence" not in str(difference.value)
    with pytest.raises(tc.LawError) as step:
        tc.scan(lambda h, x: 0.5 * h + x)
    assert "tc.library.linear_recurrence() is that scan" in str(step.value)


# Found by the hostile review of 2026-11-30: raw Python, lark and Triton errors that leaked, and locations that
# pointed inside tricomb or lark.

@pytest.mark.parametrize("build,message", [
    (lambda: tc.library.norm(ord=-1), "norm's ord must be a positive number"),  # argument-line
    (lambda: tc.library.norm(ord="fro"), "norm's ord must be a positive number"),  # argument-line
    (lambda: tc.library.ema(alpha=0), r"ema's alpha must be a number in \(0, 1\]"),  # argument-line
    (lambda: tc.library.ema(alpha="a"), r"ema's alpha must be a number in \(0, 1\]"),  # argument-line
    (lambda: tc.library.var(correction="a"), "correction must be an int"),  # argument-line
    (lambda: tc.reduce(tc.add, dim=0), r"not dim= \(torch's dim is axis here\)"),  # argument-line
    (lambda: tc.scan(tc.add, dim=0), r"not dim= \(torch's dim is axis here\)"),  # argument-line
    (lambda: tc.reduce(lambda a, b: a + b, identity=(v for v in [0.0])), "identity= must be a Python number"),  # argument-line
    (lambda: tc.parse("sum", env="abc"), "env must be a dict"),  # argument-line
    (lambda: tc.sum()(x=torch.ones(2)), "takes its inputs by position, not as x="),  # argument-line
])
def test_bad_arguments_raise_argument_error_at_the_users_line(build, message):
    with pytest.raises(tc.ArgumentError, match=message) as info:
        build()
    assert info.value.location.file == __file__
    assert "# argument-line" in Path(__file__).read_text().splitlines()[info.value.location.line - 1]


def test_a_type_as_a_function_says_what_to_write():
    with pytest.raises(tc.TraceError, match=r"the type float, .* write x \* 1.0"):
        tc.map(float)


@pytest.mark.parametrize("text,message,column", [
    ("map x -> x + " + "1" * 5000, "ValueError: Exceeds the limit", 14),
    ("var(axis=1, keepdim=2)", "keepdim must be True or False", 1),
    ("linear_recurrence(reverse=3)", "reverse must be True or False", 1),
    ("norm(ord=None)", "norm's ord must be a positive number", 1),
])
def test_errors_inside_the_text_builder_point_at_the_text(text, message, column):
    with pytest.raises(tc.TricombError, match=message) as info:
        tc.parse(text)
    assert info.value.location.file == "<pipeline>" and info.value.location.column == column


def test_text_nested_past_the_recursion_limit_is_a_parse_error():
    with pytest.raises(tc.ParseError, match="nests too deeply"):
        tc.parse("map x -> " + "exp(" * 2000 + "x" + ")" * 2000)


def test_a_long_line_shows_the_hundred_characters_around_the_caret():
    with pytest.raises(tc.ParseError) as info:
        tc.parse("map x -> x + " + "y+" * 300 + " | sum")
    shown = str(info.value).splitlines()[-2:]
    assert shown[0].strip().startswith("...") and len(shown[0].strip()) < 110
    assert shown[1].index("^") == shown[0].index("| sum")


def test_errors_tracing_a_text_lambda_point_at_the_lambda():
    def one(a):
        return a
    with pytest.raises(tc.TraceError, match="one\\(\\) takes 1 positional argument") as info:
        tc.parse("map x -> g(x, x)", env={"g": one})
    assert info.value.location.file == "<pipeline>" and info.value.location.column == 5


def test_a_function_nested_past_the_recursion_limit_runs():
    """Every pass walks expressions without recursion (tricomb.scalar.ir.walk and fold)."""
    pipe = tc.map(lambda v: sum([v * 1.0] * 3000, 0.0))
    torch.testing.assert_close(pipe(torch.ones(2)), torch.full((2,), 3000.0))


def test_inputs_and_out_errors_name_the_call_line():
    with pytest.raises(tc.DTypeError) as info:
        tc.sum()(torch.ones(2, dtype=torch.complex64))  # complex-call
    assert info.value.location.line == _line_of("# complex-call")


def test_device_error_names_the_device_and_the_call_line():
    with pytest.raises(tc.DeviceError, match="inputs are on meta; tricomb runs on CUDA devices") as info:
        tc.sum()(torch.ones(3, device="meta"))  # meta-call
    assert info.value.location.line == _line_of("# meta-call")


def test_stage_error_is_located_where_the_stage_was_built():
    pipe = tc.map(tc.exp) >> tc.max()  # max-of-nothing
    with pytest.raises(tc.StageError, match="max") as info:
        pipe(torch.ones(0))
    assert info.value.location.line == _line_of("# max-of-nothing")


def test_text_errors_found_at_call_time_and_inside_lambdas_point_at_the_text():
    """(second hostile review) these pointed at lark's visitors.py"""
    with pytest.raises(tc.AxisError) as info:
        tc.parse("map exp | var(axis=3)")(torch.ones(2, 3))
    assert info.value.location.file == "<pipeline>" and info.value.location.column == 11
    with pytest.raises(tc.TraceError) as info:
        tc.parse("map x -> exp((x, x))")
    assert info.value.location.file == "<pipeline>" and info.value.location.column == 5
    with pytest.raises(tc.ParseError, match="a lambda needs a parameter") as info:
        tc.parse("map () -> 1.0")
    assert info.value.location.column == 5
    with pytest.raises(tc.ParseError, match="the text form has no `not`: write x == 0"):
        tc.parse("map x -> not x")


def test_library_functions_given_the_wrong_arguments_raise_argument_error():
    with pytest.raises(tc.ArgumentError, match="tc.library.ema takes alpha, axis: missing a required argument"):
        tc.library.ema()
    with pytest.raises(tc.ArgumentError, match="too many positional arguments"):
        tc.library.var(0, False, 1, 5)


def test_an_operator_returning_a_constant_is_refused():
    """(second hostile review) it failed at the call with an unrelated shape message"""
    with pytest.raises(tc.UnsupportedError, match="scan's operator returns a constant, which reads neither operand"):
        tc.scan(lambda p, q: tc.exp(0.0))


def test_a_tuple_where_one_value_belongs_says_so():
    with pytest.raises(tc.TraceError, match="used a tuple of 2 where one value was expected"):
        tc.map(lambda x: tc.exp((x, x)))


@pytest.mark.parametrize("entries, message", [
    ({"maxnerg": 64}, "unknown entry 'maxnerg'; the entries are BLOCK, BLOCK_M"),
    ({"maxnreg": True}, "maxnreg=True must be None or an integer from 1 to 255"),
    ({"maxnreg": 256}, "maxnreg=256 must be None or an integer from 1 to 255"),
    ({"BLOCK_K": True}, r"BLOCK_K=True must be a power of two"),
    ({"BLOCK_K": 12}, r"BLOCK_K=12 must be a power of two"),
    ({"SPLIT": False}, "SPLIT=False must be an integer of 1 or more"),
    ({"LOOKBACK": 1}, "LOOKBACK=1 must be True or False"),
])
def test_schedule_overrides_refuse_unknown_entries_and_bad_values_before_anything_runs(entries, message):
    """A misspelt entry used to be ignored (and turned autotuning off); a bool passed as a count was taken as 1."""
    with count_launches() as launches, pytest.raises(ValueError, match=message):
        with schedule_overrides(**entries):
            tc.cumsum()(torch.randn(10))
    assert launches.triton == 0


def test_a_register_cap_override_may_be_none_or_a_count():
    x = torch.randn(3, 37)
    for cap in (None, 64):
        with schedule_overrides(maxnreg=cap, BLOCK_K=4, LOOKBACK=True, WINDOW=2):
            assert_matches_torch(tc.cumsum(axis=1), x)


def test_every_error_raised_on_purpose_is_a_subclass_of_tricomb_error():
    """The guide's table gives a class for every mistake, so no mistake raises the base class itself. (A broken
    installation, the DSL grammar missing, is no mistake of the caller's, and the one exception.)"""
    import ast
    root = Path(tc.__file__).parent
    base = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", None) == "TricombError":
                base.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(base) == 1 and base[0].startswith("dsl/parser.py:"), base  # grammar_path's


@pytest.mark.parametrize("make, error", [
    (lambda: tc.fanout(tc.mean(axis=1), tc.max(axis=1)), tc.UnsupportedError),
    (lambda: tc.fanout(tc.sum(axis=1)), tc.ArgumentError),
    (lambda: tc.fanout(tc.sum(axis=1), tc.max(axis=0)), tc.ArgumentError),
    (lambda: tc.map(tc.exp) >> tc.exp, tc.ArgumentError),
    (lambda: tc.exp >> tc.sum(), tc.ArgumentError),
    (lambda: tc.map(tc.exp) | tc.sum(), tc.ArgumentError),
    (lambda: (lambda v: v) >> tc.sum(), tc.ArgumentError),
    (lambda: tc.parse(b"map exp"), tc.ArgumentError),
    (lambda: tc.parse("map f", env={1: tc.exp}), tc.ArgumentError),
])
def test_mistakes_building_a_pipeline_raise_their_own_class(make, error):
    with pytest.raises(error):
        make()


def test_out_sharing_memory_is_an_alias_error():
    x = torch.randn(6)
    base = torch.randn(12)
    with pytest.raises(tc.AliasError, match="span overlapping memory"):
        tc.map(tc.exp)(base[::2], out=base[1::2])  # interleaved: no element shared, the spans meet
    pair = tc.map(lambda v: (v, v * 2.0))
    buf = torch.empty(12)
    with pytest.raises(tc.AliasError, match="share memory"):
        pair(x, out=(buf[:6], buf[:6]))
    assert isinstance(tc.AliasError("m"), ValueError)


class _Wrapper(torch.Tensor):
    """A wrapper subclass: a tensor of its own __torch_dispatch__ with no memory of its own (as DTensor's)."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.elem if isinstance(t, _Wrapper) else t  # noqa: E731
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


def _fake(shape):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(shape)


_UNREADABLE = {
    "nested": (lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]), "a nested tensor"),
    "nested jagged": (lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)], layout=torch.jagged),
                      "a nested tensor"),
    "sparse coo": (lambda: torch.randn(2, 3).to_sparse(), "sparse_coo"),
    "sparse csr": (lambda: torch.randn(2, 3).to_sparse_csr(), "sparse_csr"),
    "wrapper subclass": (lambda: _Wrapper(torch.randn(2, 3)), "_Wrapper"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # (nested tensors are a prototype)
@pytest.mark.parametrize("kind", sorted(_UNREADABLE))
def test_a_tensor_kind_a_kernel_cannot_read_is_a_dtype_error_before_anything_runs(kind):
    """As an input or as out=, on the first call and after a launch of the same dtypes, shapes and strides was
    prepared (which a FakeTensor or a wrapper imitates), at the user's call line; nothing launches."""
    make, words = _UNREADABLE[kind]
    pipe = tc.map(tc.exp)
    plain = torch.randn(2, 3)
    calls = [("input 0 is", lambda: pipe(make())), ("out= is", lambda: pipe(plain, out=make()))]  # kind-call
    for name, call in calls:
        for prepared in (False, True):
            if prepared:
                pipe(plain)
            with count_launches() as launches, pytest.raises(tc.DTypeError, match=words) as info:
                call()
            assert launches.triton == 0
            assert f"{name} " in str(info.value) and "pass a plain dense tensor (" in str(info.value)
            assert (info.value.location.file, info.value.location.line) == (HERE, _line_of("# kind-call"))


def test_a_fake_out_is_a_dtype_error_before_anything_runs():
    """A FakeTensor input goes through the torch operator (tests/test_compile.py), but as out= beside real
    inputs it has no memory to write, like the kinds above."""
    with count_launches() as launches, pytest.raises(tc.DTypeError, match="FakeTensor"):
        tc.map(tc.exp)(torch.randn(2, 3), out=_fake((2, 3)))
    assert launches.triton == 0
    with pytest.raises(tc.DTypeError, match="fake"):
        tc.map(tc.exp)(_fake((2, 3)), out=torch.empty(2, 3))


_TRANSFORMS = {  # a torch.func transform calling a pipeline, from this file's line marked "# transform-call",
    # and the error it meets: a tensor a kernel cannot read, or (jvp's dual tensors) a tangent it would drop
    "vmap": (lambda pipe, x: torch.vmap(pipe)(x), tc.DTypeError, "torch.func transform"),  # transform-call
    "grad": (lambda pipe, x: torch.func.grad(lambda t: pipe(t).sum())(x),  # transform-call
             tc.DTypeError, "torch.func transform"),
    "vjp": (lambda pipe, x: torch.func.vjp(pipe, x), tc.DTypeError, "torch.func transform"),  # transform-call
    "jvp": (lambda pipe, x: torch.func.jvp(pipe, (x,), (torch.ones_like(x),)),  # transform-call
            tc.UnsupportedError, "forward-mode tangent"),
}


@pytest.mark.parametrize("transform", sorted(_TRANSFORMS))
def test_a_tensor_inside_a_torch_func_transform_is_refused_at_the_call(transform):
    """Whether the transform's tensor requires grad (grad, vjp) or not (vmap, jvp): tricomb's error, before torch's
    autograd sees the call, located at the user's line (not inside torch), naming the alternative."""
    pipe = tc.map(tc.exp)
    call, kind, words = _TRANSFORMS[transform]
    with count_launches() as launches, pytest.raises(kind, match=words) as info:
        call(pipe, torch.randn(3, 4, dtype=torch.float64))
    assert launches.triton == 0 and "torch.autograd.grad" in str(info.value)
    assert info.value.location.file == HERE
    assert "# transform-call" in open(HERE).read().splitlines()[info.value.location.line - 1]


def test_out_over_an_inputs_memory_through_another_storage_is_an_alias_error():
    """Memory is compared, not storage objects: two storages over one buffer (torch.frombuffer twice, a slice of
    an UntypedStorage, torch.from_numpy twice) meet where their address ranges do."""
    import numpy as np
    buffer = bytearray(64)
    x = torch.frombuffer(buffer, dtype=torch.float32, count=8)
    overlapping = torch.frombuffer(buffer, dtype=torch.float32, offset=16, count=8)  # from x[4] on
    array = np.zeros(6, dtype=np.float32)
    y = torch.randn(8)
    y_slice = torch.empty(0).set_(y.untyped_storage()[8:24])  # y[2:6], through a storage of its own
    exp, add = tc.map(tc.exp), tc.zip_with(tc.add)
    for pipe, inputs, out in [(exp, (x,), overlapping), (exp, (torch.from_numpy(array)[:4],), torch.from_numpy(array)[1:5]),
                              (exp, (y[:4],), y_slice), (add, (torch.randn(8), x), overlapping)]:
        with pytest.raises(tc.AliasError, match="span overlapping memory"):
            pipe(*inputs, out=out)
    pair = tc.map(lambda v: (v, v * 2.0))
    with pytest.raises(tc.AliasError, match=r"share memory \(out\[0\] and out\[1\]\)"):
        pair(torch.randn(8), out=(x, overlapping))


def test_out_in_an_inputs_storage_is_allowed_only_where_their_memory_is_disjoint():
    buf = torch.randn(12)
    want = buf[:6] * 2.0
    assert tc.map(lambda v: v * 2.0)(buf[:6], out=buf[6:]) is not None and torch.equal(buf[6:], want)
    buffer = bytearray(64)
    x = torch.frombuffer(buffer, dtype=torch.float32, count=8)
    x.copy_(torch.arange(8.0))
    after = torch.frombuffer(buffer, dtype=torch.float32, offset=32, count=8)
    assert torch.equal(tc.map(lambda v: v + 1.0)(x, out=after), torch.arange(8.0) + 1.0)
    grid = torch.randn(5, 2)
    with pytest.raises(tc.AliasError, match="input 0 span overlapping memory"):  # interleaved: the ranges meet
        tc.map(tc.exp)(grid[:, 0], out=grid[:, 1])


def test_an_input_declared_constant_along_an_axis_must_have_size_1_there(device):
    """zip_with(constant_along=...): an input of size 1 along the axis (or missing it) broadcasts along it; one
    that varies there is refused before anything runs, in Python and in text; malformed axes are refused when
    the stage is built."""
    x = torch.randn(3, 4, device=device)
    pipe = tc.sum(axis=-1, keepdim=True) >> tc.zip_with(lambda s, c: s * c, constant_along=-1)
    assert_matches_torch(pipe, x, torch.randn(3, 1, device=device))
    assert_matches_torch(pipe, x, torch.randn(1, device=device))
    text = tc.parse("attach max(axis=-1) | zip_with ((v, m, c) -> (v - m) * c)(constant_along=1)")
    assert tc.parse(str(text)) == text and "(constant_along=1)" in str(text)
    assert_matches_torch(text, x, torch.randn(3, 1, device=device))
    with pytest.raises(tc.ShapeError, match=r"input 1 of shape \(4,\) must have size 1 along axis 1"):
        text(x, torch.randn(4, device=device))
    with pytest.raises(tc.AxisError, match="constant_along=2 is out of range"):
        (tc.attach(tc.max(axis=-1)) >> tc.zip_with(lambda v, m, c: v * c, constant_along=2))(x, x)
    with pytest.raises(tc.ArgumentError, match="constant_along must be an int or a tuple of ints"):
        tc.zip_with(tc.mul, constant_along=1.0)
    with pytest.raises(tc.ParseError, match="'along' is not an argument of zip_with"):
        tc.parse("map exp | zip_with mul(along=1)")
    grows = tc.map(tc.exp) >> tc.zip_with(tc.add, constant_along=-1)  # an input of more axes aligns from the right
    assert grows(torch.randn(4, device=device), torch.randn(2, 1, device=device)).shape == (2, 4)
    with pytest.raises(tc.ShapeError, match=r"input 1 of shape \(1, 4\) must have size 1 along axis -1"):
        grows(torch.randn(4, device=device), torch.randn(1, 4, device=device))
    with pytest.raises(tc.AxisError, match="is 0-d, with no axis"):
        grows(torch.tensor(1.0, device=device), torch.tensor(2.0, device=device))
    with pytest.raises(tc.ArgumentError, match="an attached pipeline brings in no input"):
        tc.attach(tc.zip_with(lambda v: v, constant_along=-1) >> tc.sum(axis=-1))
    with pytest.raises(tc.ArgumentError, match="brings in no input"):
        tc.map(tc.exp) >> tc.zip_with(lambda v: v, constant_along=-1)
