"""Each error class: its message names the problem and the fix, and points at the user's own code."""
import math

import pytest
import torch

import tricomb as tc

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


def test_second_reduce_is_rejected_with_a_fix():
    with pytest.raises(tc.UnsupportedError, match="Split it into two pipelines"):
        tc.sum(axis=0) >> tc.max()


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
    with pytest.raises(tc.TricombError, match="not a torch.Tensor"):
        tc.map(tc.exp)([1.0, 2.0])


def test_out_buffer_checks():
    x = torch.ones(4)
    with pytest.raises(tc.ShapeError, match="out= has shape"):
        tc.map(tc.exp)(x, out=torch.empty(5))
    with pytest.raises(tc.DTypeError, match="out= has dtype"):
        tc.map(tc.exp)(x, out=torch.empty(4, dtype=torch.float64))
    with pytest.raises(tc.TricombError, match="lies in the storage of an input"):
        tc.map(tc.exp)(x, out=x)


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
                tc.AxisError, tc.DTypeError, tc.DeviceError, tc.UnsupportedError):
        assert issubclass(cls, tc.TricombError)


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
