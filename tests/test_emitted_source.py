"""The emitted module holds only what tricomb wrote. User text (function names, in the stage comments and the
docstring) is escaped, and a number the user gave (a captured constant, an identity, a jit function's global)
enters as the literal of its plain value, whatever its type's ``__repr__``, ``__str__`` or ``__format__`` say:
a hostile pipeline's module has exactly the statements of the same pipeline with benign names and values."""
import ast
import enum
import math
import tokenize
import types
from io import StringIO

import numpy as np
import pytest
import torch
import triton
from hypothesis import given, settings
from hypothesis import strategies as st

import tricomb as tc
from tricomb.codegen.writer import escape_text
from tricomb.scalar.literals import number_literal
from tricomb.testing import assert_matches_torch

INJECTED = 'print("injected") or 0'  # what a hostile repr returns: code, if it ever reached the module as code

# pieces that end a comment or a docstring, or that a tokenizer or a file treats specially
PIECES = ["\n", "\r", "\r\n", '"""', "'''", '"', "\\", "\\n", "\\x", "#", "\u2028", "\u2029", "\x85", "\x0c",
          "\x0b", "\x00", "\t", "\u202e", "\ud800", "\U0001f600", "é", " ", ")", "f", "import os", INJECTED]
HOSTILE_NAMES = st.one_of(st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join),
                          st.sampled_from(PIECES).map(lambda piece: "n" * 5000 + piece + "n" * 5000),
                          st.text(max_size=20))


class HostileInt(int):
    """An int whose every text form, and every conversion but its digits, is something else."""

    def __repr__(self):
        return INJECTED

    __str__ = __repr__

    def __format__(self, spec):
        return INJECTED

    def __int__(self):
        return 7

    def __index__(self):
        return 7

    def __float__(self):
        return 7.0


class HostileFloat(float):
    def __repr__(self):
        return INJECTED

    __str__ = __repr__

    def __format__(self, spec):
        return INJECTED

    def __float__(self):
        return 7.0


class Small(enum.IntEnum):
    ZERO = 0
    THREE = 3


# (hostile, the plain value Python's arithmetic sees in it)
CONSTANTS = [(HostileInt(3), 3), (Small.THREE, 3), (np.int64(3), 3), (np.int8(-3), -3), (HostileFloat(2.5), 2.5),
             (np.float64(0.1), 0.1), (np.float32(0.1), float(np.float32(0.1))), (HostileFloat(math.inf), math.inf),
             (np.float64(math.nan), math.nan), (HostileFloat(-0.0), -0.0), (True, True), (np.True_, True)]
IDENTITIES = [(HostileInt(0), 0), (Small.ZERO, 0), (np.int64(0), 0), (HostileFloat(0.0), 0.0),
              (np.float32(0.0), 0.0), (np.float64(0.0), 0.0)]

SCALE = 3  # read by _jit_scaled: a test swaps in a hostile value


@triton.jit
def _jit_base(x):
    return x * 0.5 + 1.0


@triton.jit
def _jit_scaled(x):
    return x * SCALE


def _renamed(fn, name: str):
    """A copy of the Python function ``fn`` (same code, so the same source) whose ``__name__`` is ``name``."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__name__ = copy.__qualname__ = name
    return copy


def _scaled(v):
    return v * 2.0 - 1.0


def _combine(a, b):
    return a + b + 0.25 * a * b


def _first(a, b):
    return a


def _named(name):
    """Pipelines whose user functions are all called ``name``: a def, a user operator with and without an
    identity, a @triton.jit function as a stage and called from a lambda."""
    jit = triton.jit(_renamed(_jit_base.fn, name))
    lam = _renamed(lambda v: jit(v) * 2.0, name)
    return {
        "map def": (tc.map(_renamed(_scaled, name)), (5, 7)),
        "reduce user op": (tc.map(_renamed(_scaled, name)) >> tc.reduce(_renamed(_combine, name), axis=1,
                                                                     identity=0.0), (5, 7)),
        "scan without identity": (tc.scan(_renamed(_first, name), axis=0), (5, 7)),
        "map jit": (tc.map(jit), (9,)),
        "jit called from a lambda, then a sum": (tc.map(lam) >> tc.sum(axis=0), (4, 3)),
    }


def _with_constant(c):
    return {
        "captured constant": (tc.map(lambda v: v * c + c), (6,)),
        "captured constant, reduced": (tc.map(lambda v: tc.where(v > c, v, c)) >> tc.max(axis=-1), (3, 5)),
    }


def _with_identity(e):
    return {"user op identity": (tc.reduce(_combine, axis=1, identity=e), (4, 6)),
            "user scan identity": (tc.scan(_combine, axis=1, identity=e), (4, 6))}


class _BlankStrings(ast.NodeTransformer):
    def visit_Constant(self, node):
        return ast.Constant("") if isinstance(node.value, str) else node


def statements(source: str) -> str:
    """The module's statements, string constants (its docstrings) blanked: what runs when it is imported."""
    return ast.dump(_BlankStrings().visit(ast.parse(source)))


def _source(pipe, shape) -> str:
    return pipe.source(torch.randn(shape))


def _assert_only_tricomb_text(hostile: str, benign: str) -> None:
    """``hostile`` has exactly ``benign``'s statements, and no character a tokenizer or a file treats specially."""
    assert statements(hostile) == statements(benign)
    assert all(ch == "\n" or " " <= ch <= "~" for ch in hostile), "a raw control or non-ASCII character"


_BENIGN = {}


def _benign(key: str) -> str:
    """The module of pipeline ``key`` of :func:`_named` with the benign name ``f``."""
    if key not in _BENIGN:
        pipe, shape = _named("f")[key]
        _BENIGN[key] = _source(pipe, shape)
    return _BENIGN[key]


# --- user text: names in comments and docstrings ---------------------------------------------------------


@settings(max_examples=25)
@given(name=HOSTILE_NAMES, key=st.sampled_from(sorted(_named("f"))))
def test_hostile_function_names_change_only_comments_and_docstrings(name, key):
    pipe, shape = _named(name)[key]
    source = _source(pipe, shape)
    _assert_only_tricomb_text(source, _benign(key))
    if name and not name.startswith("<"):  # (a "<lambda>" is printed as its expression)
        assert name in ast.get_docstring(ast.parse(source), clean=False)  # the docstring reads back the name


@pytest.mark.parametrize("name", ['f"""\nraise SystemExit(3)\n"""', "g\r\nraise SystemExit(3)  #"])
def test_modules_with_hostile_names_run_and_match_torch(name):
    for pipe, shape in _named(name).values():
        assert_matches_torch(pipe, torch.randn(shape))  # (were the name code, importing the module would exit)
    x = torch.randn(4, 3)
    torch.testing.assert_close(_named(name)["jit called from a lambda, then a sum"][0](x), ((x * 0.5 + 1) * 2).sum(0))


@settings(max_examples=200)
@given(text=st.text())
def test_escaped_text_ends_neither_a_comment_nor_a_docstring(text):
    escaped = escape_text(text)
    assert all(" " <= ch <= "~" for ch in escaped)
    comment = [t for t in tokenize.generate_tokens(StringIO(f"x = 1  # {escaped}\n").readline)
               if t.type == tokenize.COMMENT]
    assert len(comment) == 1 and comment[0].string == f"# {escaped}"
    if "\x00" not in text and not any(0xd800 <= ord(ch) < 0xe000 for ch in text):
        assert ast.literal_eval(f'"""{escaped}"""') == text  # a docstring reads back the text itself


def test_comments_and_docstrings_of_tricomb_itself_are_unchanged_by_escaping():
    source = _benign("reduce user op")
    assert "\\" not in "".join(t.string for t in tokenize.generate_tokens(StringIO(source).readline)
                               if t.type == tokenize.COMMENT)


# --- numbers: captured constants, identities, jit globals -------------------------------------------------


@pytest.mark.parametrize("hostile, plain", CONSTANTS, ids=lambda v: type(v).__name__)
def test_captured_constants_of_any_number_type_enter_as_their_plain_value(hostile, plain):
    for key, (pipe, shape) in _with_constant(hostile).items():
        benign, _ = _with_constant(plain)[key]
        _assert_only_tricomb_text(_source(pipe, shape), _source(benign, shape))


@pytest.mark.parametrize("hostile, plain", IDENTITIES, ids=lambda v: type(v).__name__)
def test_identities_of_any_number_type_enter_as_their_plain_value(hostile, plain):
    for key, (pipe, shape) in _with_identity(hostile).items():
        benign, _ = _with_identity(plain)[key]
        _assert_only_tricomb_text(_source(pipe, shape), _source(benign, shape))


@pytest.mark.parametrize("hostile, plain", [(HostileInt(3), 3), (Small.THREE, 3), (HostileFloat(math.inf), math.inf),
                                            (np.float64(math.nan), math.nan)], ids=lambda v: type(v).__name__)
def test_jit_globals_of_any_number_type_enter_as_their_plain_value(hostile, plain, monkeypatch):
    shape = (8,)
    monkeypatch.setitem(globals(), "SCALE", plain)
    benign = _source(tc.map(_jit_scaled), shape)
    monkeypatch.setitem(globals(), "SCALE", hostile)
    _assert_only_tricomb_text(_source(tc.map(_jit_scaled), shape), benign)


@pytest.mark.parametrize("hostile, plain", [(HostileInt(3), 3), (HostileFloat(2.5), 2.5), (np.float32(0.1), None)],
                         ids=lambda v: type(v).__name__)
def test_modules_with_hostile_constants_run_and_match_torch(hostile, plain):
    x = torch.randn(6)
    value = float(np.float32(0.1)) if plain is None else plain
    pipe = tc.map(lambda v: v * hostile + hostile)
    torch.testing.assert_close(pipe(x), x * value + value)


def test_a_module_with_a_hostile_identity_runs_and_matches_torch():
    x = torch.randn(4, 6)
    assert_matches_torch(tc.reduce(_combine, axis=1, identity=HostileInt(0)), x)
    assert_matches_torch(tc.scan(_combine, axis=1, identity=Small.ZERO), x)


def test_a_jit_global_of_infinity_is_a_valid_expression(monkeypatch):
    monkeypatch.setitem(globals(), "SCALE", math.inf)
    x = torch.rand(5) + 0.5
    assert torch.equal(tc.map(_jit_scaled)(x), torch.full((5,), math.inf))


@pytest.mark.parametrize("value", [HostileInt(1), Small.ZERO, np.int64(1), np.float32(1.0), HostileFloat(1.0)],
                         ids=lambda v: type(v).__name__)
def test_number_literal_refuses_what_is_not_exactly_bool_int_or_float(value):
    with pytest.raises(TypeError, match="internal error"):
        number_literal(value)


@pytest.mark.parametrize("value", [True, False, 0, -5, 2**70, 0.1, -0.0, 1e-310, math.inf, -math.inf, math.nan])
def test_number_literal_reads_back_as_the_value(value):
    back = eval(number_literal(value))
    assert type(back) is type(value) and (back == value or math.isnan(value)) and \
        math.copysign(1, back) == math.copysign(1, value)
