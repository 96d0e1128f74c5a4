"""The DSL parses to the same IR the Python API builds; mistakes name line, column, and a fix."""
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tricomb as tc
from tricomb.testing.strategies import integer_pipelines_and_inputs, pipelines_and_inputs


def _equal(text, pipe):
    assert tc.parse(text) == pipe, f"{text!r} parsed to {tc.parse(text)}, expected {pipe}"


def test_stages_and_shorthands_match_the_python_api():
    _equal("map softplus | sum", tc.map(tc.softplus) >> tc.reduce(tc.add))
    _equal("zip_with mul | sum(axis=-1)", tc.zip_with(tc.mul) >> tc.sum(axis=-1))
    _equal("reduce maximum(axis=(0, 2), keepdim=True)", tc.reduce(tc.maximum, axis=(0, 2), keepdim=True))
    _equal("scan add(axis=0)", tc.scan(tc.add, axis=0))
    _equal("map exp | cumsum | map log", tc.map(tc.exp) >> tc.cumsum() >> tc.map(tc.log))
    for short, long in [("prod", tc.prod()), ("max", tc.max()), ("min", tc.min()), ("mean", tc.mean()),
                        ("cumprod", tc.cumprod()), ("cummax", tc.cummax()), ("cummin", tc.cummin())]:
        _equal(short, long)
    _equal("sum(axis=())", tc.sum(axis=()))
    _equal("sum(axis=None)", tc.sum())


def test_comments_and_multiple_lines():
    text = """
    # softplus, then a row sum
    map softplus      # elementwise
    | sum(axis=-1)
    """
    _equal(text, tc.map(tc.softplus) >> tc.sum(axis=-1))


def test_env_names_take_precedence_and_run():
    double = lambda x: x * 2  # noqa: E731
    pipe = tc.parse("map double | sum", env={"double": double})
    x = torch.arange(4.0)
    assert pipe(x).item() == 12.0


def test_str_of_a_pipeline_parses_back():
    for pipe in [tc.map(tc.softplus) >> tc.sum(axis=-1, keepdim=True), tc.zip_with(tc.mul) >> tc.cumsum(axis=0),
                 tc.mean(axis=(0, 1)) >> tc.map(tc.sqrt), tc.reduce(tc.minimum, axis=1)]:
        assert tc.parse(str(pipe)) == pipe


def test_unknown_name_suggests_the_closest():
    with pytest.raises(tc.UnknownNameError) as info:
        tc.parse("map sofplus | sum")
    err = info.value
    assert "did you mean softplus" in str(err)
    assert (err.location.line, err.location.column) == (1, 5)
    assert "    map sofplus | sum\n        ^" in str(err)


def test_syntax_error_shows_line_column_caret_and_expectation():
    with pytest.raises(tc.ParseError) as info:
        tc.parse("map exp |\n  sum(axis=1,,)")
    err = info.value
    assert (err.location.line, err.location.column) == (2, 14)
    assert "unexpected ','" in str(err) and "expected" in str(err) and "\n    " + " " * 13 + "^" in str(err)


def test_unexpected_end_of_text():
    with pytest.raises(tc.ParseError, match="unexpected end of text; expected '\\(', a name") as info:
        tc.parse("map exp | map")
    assert info.value.location.column == 14


def test_keywords_end_at_a_word_boundary():
    with pytest.raises(tc.ParseError, match="unexpected 'mapexp'"):
        tc.parse("mapexp | sum")


def test_call_syntax_gets_a_hint():
    with pytest.raises(tc.ParseError, match="not `map\\(exp\\)`"):
        tc.parse("map(exp)")


def test_shorthand_names_work_as_operators():
    _equal("reduce max(axis=0)", tc.reduce(tc.maximum, axis=0))
    _equal("scan sum", tc.scan(tc.add))


def test_errors_found_after_parsing_show_the_dsl_caret():
    pipe = tc.parse("map exp |\n  sum(axis=5)")
    with pytest.raises(tc.AxisError) as info:
        import torch
        pipe(torch.ones(3))
    assert (info.value.location.line, info.value.location.column) == (2, 3)
    assert str(info.value).endswith("\n      sum(axis=5)\n      ^")


def test_unknown_stage_argument_is_named():
    with pytest.raises(tc.ParseError, match="'keepdims' is not an argument of sum; sum takes axis, keepdim"):
        tc.parse("sum(keepdims=True)")
    with pytest.raises(tc.ParseError, match="'axis' is given twice"):
        tc.parse("cumsum(axis=0, axis=1)")


def test_text_must_be_a_string():
    with pytest.raises(tc.TricombError, match="takes DSL text"):
        tc.parse(tc.map(tc.exp))


def test_grammar_is_lalr_and_strict():
    from tricomb.dsl.parser import _parser
    parser = _parser()
    assert parser.options.parser == "lalr" and parser.options.strict


LAMBDA_PIPELINES = [
    "map x -> exp(x) * 2 | sum(axis=1)",
    "map (x -> (x >= -3))",
    "zip_with (v, d) -> (v, d) | scan ((a, b, c, e) -> (a * e + c, b * e))(identity=(0.0, 1.0))",
    "reduce ((a, b) -> a + b + 0.25 * a * b)(axis=1, identity=0.0)",
    "scan (a, b) -> a",
    "map x -> where(x > 0.5e1, x ** 2, -x / 3.0) | max(axis=-1)",
    "scan ((a, b) -> where(b != 0, b, a))(axis=0, reverse=True, identity=0.0)",
]


@pytest.mark.parametrize("text", LAMBDA_PIPELINES)
def test_lambdas_in_text_print_back_and_mean_the_same_as_in_python(text):
    """A DSL lambda is traced like the Python lambda it spells; str(pipe) of any lambda pipeline parses back
    to the same IR."""
    pipe = tc.parse(text)
    assert tc.parse(str(pipe)).ir == pipe.ir


def test_lambda_results_match_the_python_form(device):
    x = torch.randn(4, 9, device=device)
    text = tc.parse("map x -> where(x > 0.5, x ** 2, -x / 3.0) | sum(axis=-1)")
    python = tc.map(lambda v: tc.where(v > 0.5, v ** 2, -v / 3.0)) >> tc.sum(axis=-1)
    assert text.ir == python.ir
    torch.testing.assert_close(text(x), python(x))
    first = tc.parse("scan (a, b) -> a")(x)
    assert torch.equal(first.cpu(), x.cpu()[:, :1].expand(4, 9))


def test_lambda_errors_name_the_problem():
    with pytest.raises(tc.UnknownNameError, match="unknown name 'y' in a lambda: not one of its parameters"):
        tc.parse("map x -> x + y")(torch.ones(2))
    with pytest.raises(tc.ParseError, match="names a parameter twice"):
        tc.parse("zip_with (a, a) -> a")
    with pytest.raises(tc.UnknownNameError, match="unknown name 'exq'; did you mean .*exp"):
        tc.parse("map x -> exq(x)")


@pytest.mark.parametrize("text", ["var(axis=1)", "std(axis=1, correction=0, keepdim=True)", "logsumexp(axis=-1)",
                                  "norm(ord=inf, axis=1)", "map exp | logsumexp", "ema(alpha=0.5, axis=0)",
                                  "softmax_denominators(axis=1)", "linear_recurrence(axis=0, reverse=True)"])
def test_library_pipelines_by_name_in_text(text):
    """tricomb.library's pipelines are stages of the text form, with their functions' arguments; what str()
    prints of them parses back to the same pipeline."""
    pipe = tc.parse(text)
    assert tc.parse(str(pipe)).ir == pipe.ir


def test_library_stage_results_and_errors(device):
    x = torch.randn(5, 40, device=device) * 3
    torch.testing.assert_close(tc.parse("var(axis=1)")(x).cpu(), x.cpu().var(1), rtol=1e-5, atol=1e-5)
    with pytest.raises(tc.ParseError, match="'axes' is not an argument of var; var takes axis, keepdim"):
        tc.parse("var(axes=1)")
    with pytest.raises(tc.ArgumentError, match=r"alpha must be a number in \(0, 1\]"):
        tc.parse("ema(alpha=2.0)")


def test_a_comparison_chain_is_refused_with_the_parenthesized_form():
    """Python chains `a < b < c`; the text form does not, and says how to write it instead."""
    with pytest.raises(tc.ParseError, match=r"comparisons do not chain .*\(a < b\) & \(b < c\)") as info:
        tc.parse("map x -> 0 < x < 1 | sum")
    assert (info.value.location.line, info.value.location.column) == (1, 16)
    with pytest.raises(tc.ParseError) as info:
        tc.parse("map x -> x == == 1")
    assert "chain" not in str(info.value)
    assert str(tc.parse("map x -> (x < 1) == True")) == "map (x -> ((x < 1) == True))"


def test_an_error_about_a_stage_argument_points_at_that_argument():
    with pytest.raises(tc.DTypeError) as info:
        tc.parse("map exp | cumsum(dtype=int9)")
    assert (info.value.location.line, info.value.location.column) == (1, 18)
    assert info.value.message.startswith("dtype='int9' is not a dtype")
    with pytest.raises(tc.LawError) as info:
        tc.parse("map exp |\n  reduce add(axis=0, identity=1.5)")
    assert (info.value.location.line, info.value.location.column) == (2, 22)


def test_torch_dim_in_text_says_axis():
    with pytest.raises(tc.ParseError, match=r"'dim' is not an argument of sum \(torch's dim is axis here\)"):
        tc.parse("sum(dim=1)")


_USER_OPERATORS = [(lambda a, b: a + b + 0.25 * a * b, 0.0), (lambda a, b: tc.where(b != 0, b, a), 0.0),
                   (lambda a, b: a, None), (lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), (0.0, 1.0)),
                   (lambda m1, p1, m2, p2: (tc.maximum(m1, m2), p2), None)]


@st.composite
def _user_combines(draw):
    """A user operator (single or on pairs, with or without identity) in a reduce or a scan, with random
    arguments, after a map that makes the stream it takes."""
    op, identity = draw(st.sampled_from(_USER_OPERATORS))
    pairs = isinstance(identity, tuple) or op.__code__.co_argcount == 4
    head = tc.map(lambda x: (x, x * 0.5)) if pairs else tc.map(lambda x: x * 2.0)
    kwargs = {"identity": identity} if identity is not None else {}
    if draw(st.booleans()):
        stage = tc.reduce(op, axis=draw(st.sampled_from([None, 0, 1, (0, 1)])), keepdim=draw(st.booleans()), **kwargs)
    else:
        stage = tc.scan(op, axis=draw(st.sampled_from([0, 1, -1])), reverse=draw(st.booleans()),
                        exclusive=identity is not None and draw(st.booleans()), **kwargs)
    return head >> stage


_LIBRARY = [lambda: tc.library.var(axis=1, correction=0), lambda: tc.library.std(axis=0),
            lambda: tc.library.logsumexp(axis=1, keepdim=True), lambda: tc.library.norm(ord=3.0),
            lambda: tc.library.softmax_denominators(axis=1), lambda: tc.library.linear_recurrence(reverse=True),
            lambda: tc.library.ema(0.25, axis=0), lambda: tc.library.mean(axis=1)]


@settings(max_examples=200, deadline=None)
@given(st.one_of(pipelines_and_inputs().map(lambda case: case.pipeline),
                 integer_pipelines_and_inputs().map(lambda case: case.pipeline),
                 _user_combines(), st.sampled_from(_LIBRARY).map(lambda make: make())))
def test_every_pipeline_prints_as_text_that_parses_back_to_it(pipe):
    """str(pipe) is DSL text for any pipeline the Python API builds: random maps, zip_withs, reduces and scans
    with their arguments (axis, keepdim, reverse, exclusive, dtype), integer pipelines, user operators with and
    without identity, on single values and pairs, and the library's pipelines."""
    text = str(pipe)
    note(text)
    assert tc.parse(text).ir == pipe.ir


def test_stage_arguments_after_an_unparenthesized_lambda_say_to_parenthesize_it():
    """New-user trial: `scan (a, b) -> a(axis=0)` reads `a(axis=0)` as a call; the error says how to write it."""
    with pytest.raises(tc.ParseError, match=r"need the lambda in parentheses: `scan \(\(a, b\) -> a \* b\)\(axis=0\)`"):
        tc.parse("scan (a, b) -> a(axis=0)")
    assert str(tc.parse("scan ((a, b) -> a)(axis=0)")) == "scan ((x, y) -> x)(axis=0)"


def test_each_shorthand_constructor_is_bound_to_its_own_row():
    """``tc.sum`` builds a sum, ``tc.cummax`` a cummax, ...: each public name is its own table row's stage."""
    from tricomb.pipeline.shorthands import SHORTHANDS
    for name, spec in SHORTHANDS.items():
        stage = getattr(tc, name)
        assert stage.__name__ == name and stage.operator == spec.op, name


@pytest.mark.parametrize("text", ["mean(axis=1, identity=0.0)", "argmax(dtype=int32)", "max(dtype=float64)",
                                  "cummax(dtype=float64)", "nansum(reverse=True)", "cumsum(keepdim=True)"])
def test_a_shorthand_takes_the_arguments_of_its_torch_function(text):
    """A shorthand takes what its torch function takes, as ``tc.<shorthand>`` does, and says which."""
    with pytest.raises(tc.ParseError, match="is not an argument of .* takes axis"):
        tc.parse(text)


def test_nanmean_takes_dtype_as_torch():
    x = torch.tensor([[1e8, 1.0, -1e8, float("nan")]])
    got = tc.parse("nanmean(axis=1, dtype=float64)")(x)
    assert got.dtype == torch.float64 and torch.allclose(got, torch.nanmean(x, 1, dtype=torch.float64))
    assert str(tc.parse("nanmean(axis=1, dtype=float64)")) == "nanmean(axis=1, dtype=float64)"
