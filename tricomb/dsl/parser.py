"""The DSL: text such as ``"map softplus | sum(axis=-1)"`` parsed by Lark (LALR, strict) into the same
pipeline IR the Python API builds.

The grammar is ``grammar/tricomb.lark``; a source checkout reads it from there and an installed wheel from
``tricomb/_grammar/`` (the same file, packaged). Names resolve first in ``env`` and then among the builtins;
an unknown name raises :class:`UnknownNameError` with the closest known names.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import functools
import hashlib
import io
import re
from pathlib import Path

import lark

from ..errors import ArgumentError, Location, ParseError, TricombError, UnknownNameError, caller_location
from ..pipeline.scalars import HOLDS, KIND_NAMES, Parameter, is_number, plain_scalar, runtime_scalar
from ..pipeline.shorthands import OPERATOR_ALIASES, SHORTHANDS
from ..scalar.trace import BUILTINS, Traced
from .lambdas import Expressions

_STAGE_ARGUMENTS = {"reduce": ("axis", "keepdim", "dtype", "identity"),
                    "scan": ("axis", "reverse", "exclusive", "dtype", "identity")}


def grammar_path() -> Path:
    """The grammar file: inside an installed package, else at the top of the source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_grammar" / "tricomb.lark", package.parent / "grammar" / "tricomb.lark"):
        if candidate.is_file():
            return candidate
    raise TricombError(f"the DSL grammar tricomb.lark is missing (looked in {package / '_grammar'} and "
                       f"{package.parent / 'grammar'}); reinstall tricomb")


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    """The LALR parser. Building its tables takes 0.3 s, loading them 5 ms, so they are kept in the disk cache;
    lark's own cache is not used, because it unpickles a file before checking it. tricomb keeps them as a
    sealed entry (:mod:`tricomb.store`) and unpickles only what its seal proves tricomb wrote."""
    from .. import store

    text = grammar_path().read_text()
    options = dict(parser="lalr", strict=True, propagate_positions=True, maybe_placeholders=False)
    name = hashlib.sha256(repr((text, sorted(options.items()), lark.__version__)).encode()).hexdigest()[:32]
    kept = store.store()
    tables = kept.read_sealed("grammar", name)
    if tables is not None:
        try:
            return lark.Lark.load(io.BytesIO(tables))
        except Exception:  # tables of another lark (a sealed entry is tricomb's own): built again
            kept.discard("grammar", name, "lark could not load it")
    parser = lark.Lark(text, **options)
    saved = io.BytesIO()
    parser.save(saved)
    kept.write_sealed("grammar", name, saved.getvalue())
    return parser


def _location(text: str, source: str, line: int, column: int) -> Location:
    lines = text.split("\n")
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    return Location(source, line, column, source_line)


def _expected(exc: lark.exceptions.UnexpectedInput) -> str:
    names = sorted(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    readable = {"NAME": "a name", "INT": "an integer", "SHORTHAND": "a shorthand (sum, mean, cumsum, ...)",
                "VBAR": "'|'", "LPAR": "'('", "RPAR": "')'", "COMMA": "','", "EQUAL": "'='", "MINUS": "'-'",
                "$END": "end of text", "_MAP": "map", "_ZIP_WITH": "zip_with", "_REDUCE": "reduce",
                "_SCAN": "scan", "_ATTACH": "attach", "TRUE": "True", "FALSE": "False", "NONE": "None", "_ARROW": "'->'",
                "FLOAT": "a number", "PLUS": "'+'", "STAR": "'*'", "SLASH": "'/'", "LESSTHAN": "'<'",
                "MORETHAN": "'>'", "_EQ": "'=='", "_NE": "'!='", "_LE": "'<='", "_GE": "'>='", "_POW": "'**'",
                "INF": "inf", "LIBRARY": "a library pipeline (logsumexp, var, ...)"}
    listed = [readable.get(n, n.lower()) for n in names]
    return f"; expected {', '.join(listed)}" if listed else ""


_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def _after_comparison(text: str, exc: lark.exceptions.UnexpectedInput) -> bool:
    """Whether the offending comparison follows another one in the same expression (a chain)."""
    before = text[:getattr(exc, "pos_in_stream", None) or 0]
    tail = re.split(r"[(,|]|->", before)[-1]
    return re.search(r"(<=|>=|==|!=|<|>)", tail) is not None


_PYTHON_WORDS = {"if": "where(cond, a, b)", "else": "where(cond, a, b)", "and": "logical_and(a, b) or (a) & (b)",
                 "or": "logical_or(a, b) or (a) | (b)", "not": "x == 0 (or where(x, False, True))"}


def _word_hint(found: str, exc: lark.exceptions.UnexpectedInput, text: str) -> str:
    """A hint for a Python word in a lambda, ``>>`` between stages, or a misspelt stage word."""
    position = getattr(exc, "pos_in_stream", None) or 0
    before = re.search(r"\b(if|else|and|or|not)\s*$", text[:position])
    word = found if found in _PYTHON_WORDS else before.group(1) if before else None
    if word is not None:
        return f"; the text form has no `{word}`: write {_PYTHON_WORDS[word]}"
    if found == ">" and text[position:position + 2] == ">>":
        return "; stages are separated by `|` in the text form (`>>` joins pipelines in Python)"
    expected = set(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    if "_MAP" in expected and re.fullmatch(r"\w+", found):
        from .. import library
        stage_words = ["map", "zip_with", "reduce", "scan", *SHORTHANDS, *library.__all__]
        close = difflib.get_close_matches(found, stage_words, n=3, cutoff=0.6)
        return f"; did you mean {' or '.join(close)}?" if close else ""
    return ""


def _syntax_error(text: str, exc: lark.exceptions.UnexpectedInput, source: str) -> ParseError:
    line, column = exc.line, exc.column
    at_end = isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END"
    if isinstance(exc, lark.exceptions.UnexpectedEOF) or at_end or line in (None, -1):
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        token = str(exc.token)
        found = "end of text" if exc.token.type == "$END" else repr(token if len(token) <= 40 else token[:37] + "...")
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        found = repr(text[exc.pos_in_stream]) if exc.pos_in_stream < len(text) else "end of text"
    else:
        found = "end of text"
    hint = ""
    called = re.search(r"\b(map|zip_with|reduce|scan)\s*\(\s*\w+\s*\)", text)
    if (found == "'('" and "a name" in _expected(exc)) or ("'->'" in _expected(exc) and called):
        hint = "; a stage is written `map exp` or `reduce add(axis=0)` (or with a lambda, `map x -> exp(x)`), not " \
               "`map(exp)`"
    before = text[:getattr(exc, "pos_in_stream", None) or 0]
    if found == "'='" and "->" in before and re.search(r"\(\s*\w+\s*$", before):
        hint = "; stage arguments after a lambda need the lambda in parentheses: `scan ((a, b) -> a * b)(axis=0)`"
    hint = _word_hint(found.strip("'"), exc, text) or hint
    complete = "a name" not in _expected(exc)  # the parser had a whole operand before the comparison
    if found.strip("'") in _COMPARISONS and complete and _after_comparison(text, exc):
        hint = "; comparisons do not chain in the text form (Python's `a < b < c`): write `(a < b) & (b < c)`, " \
               "or parenthesize, `(a < b) == c`"
    return ParseError(f"unexpected {found}{_expected(exc)}{hint}", _location(text, source, line, column))


def _named(fn, name: str, where: Location):
    """``fn`` as a Function named by its ``env`` key, so ``str(pipe)`` prints the name the text used."""
    from ..scalar.trace import to_function
    try:
        function = to_function(fn, role=f"env[{name!r}]", location=where)
    except TricombError:
        return fn  # the stage reports the problem, with its location
    return dataclasses.replace(function, name=name) if function.name != name else function


class _Build(Expressions):
    """Parse tree -> Pipeline, resolving names as it goes."""

    def __init__(self, text: str, env: dict, source: str):
        super().__init__()
        self.text, self.env, self.source = text, env, source
        self.declared: dict[str, Parameter] = {}  # the runtime scalars named, in index order

    def parameter(self, items):
        name = str(items[0])
        kind_token = next((i for i in items[1:] if isinstance(i, lark.Token)), None)
        default = next((i for i in items[1:] if not isinstance(i, lark.Token)), None)
        kind = str(kind_token) if kind_token is not None else type(default).__name__ if default is not None else "float"
        if name in self.declared:
            raise ParseError(f"param {name!r} is declared twice; declare each runtime scalar once", self._where(items[0]))
        if kind not in KIND_NAMES:
            raise ParseError(f"param {name}: {kind!r} is no kind of runtime scalar; write float, int or bool",
                             self._where(kind_token or items[0]))
        if default is not None and type(default) not in HOLDS[KIND_NAMES[kind]]:
            raise ParseError(f"param {name}: {kind} = {default!r}: the value is a {type(default).__name__}; give a "
                             f"{kind}", self._where(items[0]))
        value = KIND_NAMES[kind](default) if default is not None else None
        self.declared[name] = Parameter(name, KIND_NAMES[kind], len(self.declared), value)

    def _runtime(self, name: str):
        """The runtime scalar a lambda reads by ``name``: a declared ``param``, or a number in ``env`` (a runtime
        scalar whose value is given at parse time, and may be given again at a call); None for another name."""
        if name not in self.declared:
            if name not in self.env:
                return None
            value = self.env[name]
            if not is_number(value):
                raise UnknownNameError(f"a lambda reads {name!r} as a value, but env[{name!r}] is a "
                                       f"{type(value).__name__}: a name read as a value is a parameter of the lambda, "
                                       "a param, or a number in env (a runtime scalar). Call a function with "
                                       "parentheses; pass a tensor as an input of the pipeline")
            plain = plain_scalar(value, f"env[{name!r}]")
            self.declared[name] = Parameter(name, type(plain), len(self.declared), plain)
        found = self.declared[name]
        return Traced(runtime_scalar(found.index, found.kind))

    def _where(self, meta_or_token) -> Location:
        return _location(self.text, self.source, meta_or_token.line, meta_or_token.column)

    def _resolve(self, token: lark.Token, operator: bool = False):
        name = str(token)
        if name in self.env:
            return _named(self.env[name], name, self._where(token))
        if operator and name in OPERATOR_ALIASES:
            name = OPERATOR_ALIASES[name]
        if name in BUILTINS:
            return BUILTINS[name]
        known = sorted(set(self.env) | set(BUILTINS))
        close = difflib.get_close_matches(name, known, n=3)
        how = "--env FILE.py" if self.source == "<command line>" else "tc.parse(text, env={'name': fn})"
        hint = f"; did you mean {' or '.join(close)}?" if close else f"; pass your own functions with {how}"
        if self.env:
            hint += f" (names given: {', '.join(sorted(self.env))})"
        if name in SHORTHANDS:
            hint = f"; {name} is a stage of its own (`| {name}`)" + (
                f", and after reduce it names the operator {OPERATOR_ALIASES[name]}" if name in OPERATOR_ALIASES else "")
        raise UnknownNameError(f"unknown name {name!r}{hint}", self._where(token))

    # values
    def int_value(self, items): return int(items[0])
    def neg_int_value(self, items): return -int(items[0])
    def true_value(self, _): return True
    def false_value(self, _): return False
    def none_value(self, _): return None
    def tuple_value(self, items): return tuple(i for i in items if i is not None)
    def float_value(self, items): return float(items[0])
    def neg_float_value(self, items): return -float(items[0])
    def inf_value(self, _): return float("inf")
    def neg_inf_value(self, _): return -float("inf")
    def nan_value(self, _): return float("nan")

    def _callable(self, token: lark.Token):
        """A name called inside a lambda: the ``env`` object itself (a Python function is traced inline, a
        ``@triton.jit`` one becomes a call of it), else a builtin."""
        name = str(token)
        return self.env[name] if name in self.env else self._resolve(token)

    def _function(self, item, operator: bool = False):
        """A stage's function: a name resolved (env, then builtins), or a lambda already built."""
        return self._resolve(item, operator) if isinstance(item, lark.Token) else item
    def name_value(self, items): return str(items[0])  # a dtype name: dtype=bfloat16

    def argument(self, items):
        return (items[0], items[1])

    def arguments(self, items):
        return list(items)

    def _stage(self, kind: str, meta_token, op, arguments, short=None):
        """A reduce or scan stage; ``short`` is the shorthand row it was written as (mean, argmax, nansum...)."""
        from .. import api
        allowed = short.arguments if short else _STAGE_ARGUMENTS[kind]
        stage_name = short.name if short else kind
        kwargs = {}
        for name_token, value in arguments or []:
            name = str(name_token)
            if name not in allowed or name in kwargs:
                problem = "is given twice" if name in kwargs else "is not an argument of " + stage_name
                problem += " (torch's dim is axis here)" if name == "dim" else ""
                raise ParseError(f"{name!r} {problem}; {stage_name} takes {', '.join(allowed)}",
                                 self._where(name_token))
            kwargs[name] = value
        where = self._where(meta_token)
        try:
            if kind == "reduce":
                return api.build_reduce(op, kwargs.get("axis"), kwargs.get("keepdim", False),
                                        bool(short and short.mean), where, kwargs.get("dtype"),
                                        bool(short and short.index), bool(short and short.skip_nan),
                                        identity=kwargs.get("identity"))
            return api.build_scan(op, kwargs.get("axis", -1), where, kwargs.get("dtype"), kwargs.get("reverse", False),
                                  kwargs.get("exclusive", False), kwargs.get("identity"),
                                  index=bool(short and short.index))
        except TricombError as exc:
            raise self._at_argument(exc, where, arguments or []) from None

    def _at_argument(self, exc: TricombError, where, arguments) -> TricombError:
        """An error about one argument (its message starts ``name=``) pointed at that argument in the text."""
        for name_token, _ in arguments:
            if exc.location == where and exc.message.startswith(f"{name_token}="):
                return type(exc)(exc.message, self._where(name_token))
        return exc

    @lark.v_args(meta=True)
    def map_stage(self, meta, items):
        from .. import api
        return api.build_map(self._function(items[0]), self._where(meta))

    @lark.v_args(meta=True)
    def zip_with_stage(self, meta, items):
        from .. import api
        kwargs = {}
        for name_token, value in (items[1] if len(items) > 1 else None) or []:
            key = str(name_token)
            if key != "constant_along" or key in kwargs:
                problem = "is given twice" if key in kwargs else "is not an argument of zip_with"
                raise ParseError(f"{key!r} {problem}; zip_with takes constant_along", self._where(name_token))
            kwargs[key] = value
        return api.build_zip_with(self._function(items[0]), self._where(meta), kwargs.get("constant_along"))

    @lark.v_args(meta=True)
    def reduce_stage(self, meta, items):
        return self._stage("reduce", meta, self._function(items[0], operator=True), items[1] if len(items) > 1 else None)

    @lark.v_args(meta=True)
    def scan_stage(self, meta, items):
        return self._stage("scan", meta, self._function(items[0], operator=True), items[1] if len(items) > 1 else None)

    @lark.v_args(meta=True)
    def shorthand_stage(self, meta, items):
        spec = SHORTHANDS[str(items[0])]
        return self._stage(spec.kind, meta, BUILTINS[spec.op], items[1] if len(items) > 1 else None, spec)

    @lark.v_args(meta=True)
    def library_stage(self, meta, items):
        """A pipeline of :mod:`tricomb.library` by name: ``var(axis=1, correction=0)``; arguments as its
        function's."""
        import inspect
        from .. import library
        name, arguments = str(items[0]), (items[1] if len(items) > 1 else None) or []
        fn = getattr(library, name)
        allowed = list(inspect.signature(fn).parameters)
        kwargs = {}
        for name_token, value in arguments:
            key = str(name_token)
            if key not in allowed or key in kwargs:
                problem = "is given twice" if key in kwargs else f"is not an argument of {name}"
                problem += " (torch's dim is axis here)" if key == "dim" else ""
                raise ParseError(f"{key!r} {problem}; {name} takes {', '.join(allowed)}", self._where(name_token))
            kwargs[key] = value
        try:
            built = fn(**kwargs)
            where = self._where(meta)  # its stages' errors at call time point at the text, not at library.py
            return type(built)(dataclasses.replace(built.ir, stages=tuple(
                dataclasses.replace(stage, location=where) for stage in built.ir.stages)))
        except TricombError as exc:  # located at the call inside this parser: point at the text instead
            raise self._at_argument(type(exc)(exc.message, self._where(meta)), self._where(meta), arguments) \
                from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise ParseError(f"{name}: {exc}", self._where(meta)) from None

    @lark.v_args(meta=True)
    def attach_stage(self, meta, items):
        from .. import api
        return api.build_attach(items[0], self._where(meta))

    def pipeline(self, items):
        result = items[0]
        for stage in items[1:]:
            result = result >> stage
        return result

    def start(self, items):
        return items[-1].with_parameters(tuple(self.declared.values()))


def parse(text: str, env: dict | None = None, *, source: str = "<pipeline>"):
    """Parse DSL ``text`` into a :class:`~tricomb.api.Pipeline`.

    ``env`` maps names to scalar functions (builtins, Python functions, ``@triton.jit`` functions); they take
    precedence over builtins. Raises :class:`ParseError` (line, column, caret, what was expected) and
    :class:`UnknownNameError` (with did-you-mean suggestions).
    """
    if not isinstance(text, str):
        raise ArgumentError(f"tc.parse takes DSL text (a str), got {type(text).__name__}", caller_location())
    if env is not None and not isinstance(env, collections.abc.Mapping):
        raise ArgumentError(f"tc.parse's env must be a dict of names to functions, got {type(env).__name__}; "
                           "pass env={'name': fn}", caller_location())
    bad = [k for k in (env or {}) if not isinstance(k, str)]
    if bad:
        raise ArgumentError(f"env keys must be names (str); got {bad!r}", caller_location())
    try:
        tree = _parser().parse(text)
        return _Build(text, dict(env or {}), source).transform(tree)
    except lark.exceptions.UnexpectedInput as exc:
        raise _syntax_error(text, exc, source) from None
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, TricombError):
            raise exc.orig_exc from None
        raise ParseError(f"{type(exc.orig_exc).__name__}: {exc.orig_exc}", _visit_location(text, source, exc.obj)) \
            from None
    except RecursionError:
        raise ParseError("the text nests too deeply for the parser (Python's recursion limit); split long "
                         "expressions, or build the pipeline in Python", Location(source, 1, 1)) from None


def _visit_location(text: str, source: str, obj) -> Location:
    """Where the tree node or token ``obj`` starts in ``text``."""
    meta = getattr(obj, "meta", None)
    line = getattr(obj, "line", None) or getattr(meta, "line", None) or 1
    column = getattr(obj, "column", None) or getattr(meta, "column", None) or 1
    return _location(text, source, line, column)
