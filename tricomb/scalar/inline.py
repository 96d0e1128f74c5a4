"""Copying user ``@triton.jit`` functions into the emitted module, at the ``ast`` level.

For each function: parse its source and resolve every name in it by Python's own scoping rules
(:mod:`tricomb.scalar.scopes`): parameters of every kind, every assignment form, ``for``/``with``/
``except`` targets, ``:=``, imports, ``match`` captures, nested ``def``, ``lambda`` and ``class`` scopes,
comprehension scopes, ``global`` and ``nonlocal``. Only a name that is free in the function (a global, a
closure cell or a Python builtin) is resolved to the object it names, and its reference rewritten:
``triton.language`` becomes ``tl``, another ``@triton.jit`` function is copied too (recursively) under its
emitted name, and a number becomes a module-level ``tl.constexpr``. Anything else cannot live in a
self-contained module and raises :class:`~tricomb.errors.InlineError`. The emitted module therefore never
imports the user's module, which is what makes functions defined in ``__main__`` scripts work.

Hygiene: every function is parsed before any name is chosen, and each name the module gains is fresh with
respect to the module's names and to every name written in every copied function; a local (of any scope)
named like one of the two names the rewritten code reads that are not fresh (``tl``, ``triton``) is renamed,
its bindings and uses alike. Python builtins a function reads are added to the module's taken names, so that
nothing defines them there. A number is kept by its type and exact value (``1``, ``1.0`` and ``True`` differ,
so do ``0.0`` and ``-0.0``) and written by tricomb (``float("inf")``, never a user object's ``repr``).

:func:`globals_key` names what the functions read from outside themselves now, resolved the same way: the
kernel caches include it, so a changed global gives a new kernel, as it does in Triton.
"""
from __future__ import annotations

import ast
import builtins
import functools
import inspect
import sys
import textwrap
import types
import weakref
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from ..errors import InlineError, Location, UnsupportedError
from .ir import JitRef
from .literals import NotExact, number_key, number_literal, plain_number
from .scopes import Analysis, dotted, free_references

_MISSING = object()


@dataclass
class InlinedCode:
    """What copying produced: definitions in dependency order, and the emitted name of each function."""

    definitions: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # id(python function) -> emitted name


def _python_fn(jit_fn):
    return jit_fn.fn


def _location(py_fn) -> Location:
    return Location(py_fn.__code__.co_filename, py_fn.__code__.co_firstlineno)


def _line(py_fn, node: ast.AST) -> Location:
    """Where ``node`` of ``py_fn``'s parsed source (which starts at its first decorator) is in its file."""
    start = _location(py_fn)
    return Location(start.file, start.line + getattr(node, "lineno", 1) - 1)


def _parse(py_fn) -> ast.FunctionDef:
    try:
        source = textwrap.dedent(inspect.getsource(py_fn))
    except (OSError, TypeError) as exc:
        raise InlineError(f"the source of @triton.jit function {py_fn.__name__!r} is not available ({exc}); "
                          "define it in a .py file (Triton itself needs its source too)", _location(py_fn))
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):  # pragma: no cover - inspect returns the def
        raise InlineError(f"could not find the def of {py_fn.__name__!r} in its source", _location(py_fn))
    node.decorator_list = []
    return node


# --- What a free name stands for -----------------------------------------------------------------------------

def _free_value(py_fn, name: str, declared_global: bool = False):
    """The object ``name`` refers to inside ``py_fn`` (closure cell, global, or Python builtin): ``(True,
    value)``, or ``(False, None)`` for a Python builtin, left as written. Raises InlineError where it is
    defined nowhere."""
    code = py_fn.__code__
    if not declared_global and py_fn.__closure__ and name in code.co_freevars:
        try:
            return True, py_fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {name!r}, a variable of the function "
                              "around it that has no value yet; assign it before the first call",
                              _location(py_fn)) from None
    if name in py_fn.__globals__:
        return True, py_fn.__globals__[name]
    if hasattr(builtins, name):
        return False, None  # leave Python builtins (range, min, float, ...) as they are
    raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {name!r}, which is not defined",
                      _location(py_fn))


def _dotted_name(text) -> bool:
    return isinstance(text, str) and all(part.isidentifier() for part in text.split("."))


def _is_triton_module(obj) -> bool:
    """A triton module (its dotted name is written into the emitted imports, so it must be one)."""
    return isinstance(obj, types.ModuleType) and _dotted_name(obj.__name__) and obj.__name__.split(".")[0] == "triton"


@functools.cache
def _jit_types() -> tuple[type, ...]:
    """The classes of ``@triton.jit`` functions, compiled and interpreted (looked up once: the globals key reads
    them at every call of a pipeline)."""
    from triton.runtime.jit import JITFunction
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - older triton
        return (JITFunction,)
    return JITFunction, InterpretedFunction


@functools.cache
def _constexpr() -> type:
    from triton.language import constexpr
    return constexpr


def _is_jit(value) -> bool:
    return isinstance(value, _jit_types())


def _is_library_jit(value) -> bool:
    """A ``@triton.jit`` function of Triton's own library (``tl.sigmoid``, ``tl.sum``, ...)."""
    if not _is_jit(value):
        return False
    module = getattr(value.fn, "__module__", "")
    return _dotted_name(module) and _dotted_name(value.fn.__name__) and module.startswith("triton.language")


class _Target(NamedTuple):
    """What a free dotted name stands for: its first ``used`` names are replaced, by what ``kind`` says.

    ``"builtin"``: a Python builtin, kept as written; ``"module"``: a triton module (``value``); ``"library"``:
    Triton's own ``@triton.jit`` function; ``"jit"``: a user's, copied too; ``"number"``: a plain bool, int or
    float, a module-level ``tl.constexpr``."""

    kind: str
    value: object
    used: int


def _target(py_fn, chain: tuple[str, ...], declared_global: bool) -> _Target:
    """What the free dotted name ``chain`` of ``py_fn`` stands for now. Raises InlineError for a value that
    cannot be copied into a self-contained module (and for a name or attribute that does not exist)."""
    found, value = _free_value(py_fn, chain[0], declared_global)
    if not found:
        return _Target("builtin", None, 1)
    used = 1
    while isinstance(value, types.ModuleType) and not _is_triton_module(value) and used < len(chain):
        value, used = getattr(value, chain[used], _MISSING), used + 1
        if value is _MISSING:
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {'.'.join(chain[:used])}, which "
                              "does not exist", _location(py_fn))
    if _is_triton_module(value):
        return _triton_target(py_fn, chain, used, value)
    dotted = ".".join(chain[:used])
    if isinstance(value, types.ModuleType):
        raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses module {dotted!r} ({value.__name__}) "
                          "other than through its @triton.jit functions or constants; only triton modules can be "
                          "used inside a kernel", _location(py_fn))
    if _is_library_jit(value):  # Triton's own, imported by name (from triton.language import sigmoid as sg)
        return _Target("library", value, used)
    if _is_jit(value):
        return _Target("jit", value, used)
    number = _number(py_fn, dotted, value)
    if number is not None:
        return _Target("number", number, used)
    raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {dotted!r}, a {type(value).__name__}, "
                      "which cannot be copied into a self-contained kernel module; make it a tl.constexpr "
                      "number, a @triton.jit function, or an argument", _location(py_fn))


def _triton_target(py_fn, chain: tuple[str, ...], used: int, module) -> _Target:
    """``chain``, whose first ``used`` names are the triton module ``module``: Triton's own @triton.jit function
    where the chain reaches one, else the module (the rest of the chain kept as written)."""
    value = module
    for i in range(used, len(chain)):
        value = getattr(value, chain[i], _MISSING)
        if value is _MISSING:
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {'.'.join(chain[:i + 1])}, which "
                              f"{module.__name__} does not have", _location(py_fn))
        if _is_library_jit(value):
            return _Target("library", value, i + 1)
    return _Target("module", module, used)


def _number(py_fn, dotted: str, value) -> bool | int | float | None:
    """The plain bool, int or float that a global or closure cell holds: a ``tl.constexpr``'s value, a numpy
    scalar or an ``int``/``float`` subclass as the Python number it equals; None for anything else. Raises
    InlineError for a number that no Python float equals exactly (a numpy ``longdouble``)."""
    while isinstance(value, _constexpr()):
        value = value.value
    if type(value) in (bool, int, float):
        return value
    numpy = sys.modules.get("numpy")  # (a numpy scalar exists only once numpy is imported)
    numeric = (bool, int, float) + ((numpy.bool_, numpy.integer, numpy.floating) if numpy is not None else ())
    if not isinstance(value, numeric):
        return None
    try:
        return plain_number(value)
    except NotExact as exc:
        raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {dotted!r}: {exc}; make it a float (or "
                          "an int)", _location(py_fn)) from None


# --- Copying ---------------------------------------------------------------------------------------------------

@dataclass(eq=False)
class _Copy:
    """One user function being copied: its tree, its names resolved, what each free dotted name stands for
    (``(outermost node, names, target)``), and its emitted name."""

    py_fn: object
    node: ast.FunctionDef
    analysis: Analysis
    references: list[tuple[ast.expr, tuple[str, ...], _Target]]
    name: str = ""


def _refuse_outside_writes(py_fn, node: ast.FunctionDef, analysis: Analysis) -> None:
    """A kernel cannot change a Python variable outside it (a global, a closure cell, a module's attribute)."""
    for occurrence in analysis.occurrences:
        scope, declared = analysis.resolution(occurrence)
        if occurrence.binds and scope is None:
            kind = "a global" if declared else "a variable outside the function"
            verb = "deletes" if isinstance(getattr(occurrence.node, "ctx", None), ast.Del) else "assigns to"
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} {verb} {occurrence.name!r}, {kind}; a "
                              "kernel cannot change Python variables. Use a local name (and return the value)",
                              _line(py_fn, occurrence.node))
    for outer, chain, _ in free_references(node, analysis):
        if not isinstance(outer.ctx, ast.Load):
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} assigns to {'.'.join(chain)}; a kernel "
                              "cannot change Python variables. Use a local name (and return the value)",
                              _line(py_fn, outer))


class _Substitute(ast.NodeTransformer):
    """Puts each free reference's replacement (keyed by the id of the node it replaces) in place, and drops
    the global and nonlocal declarations of names that are no longer outside the function."""

    def __init__(self, replacements: dict[int, ast.expr], analysis: Analysis):
        self.replacements, self.analysis = replacements, analysis

    def visit(self, node):
        replacement = self.replacements.get(id(node))
        if replacement is not None:
            return ast.copy_location(replacement, node)
        return super().visit(node)

    def visit_Global(self, node: ast.Global):
        return ast.copy_location(ast.Pass(), node)  # each such name now reads a module-level name of its own

    def visit_Nonlocal(self, node: ast.Nonlocal):
        inner = [o for o in self.analysis.occurrences if o.node is node and self.analysis.resolution(o)[0]]
        if not inner:
            return ast.copy_location(ast.Pass(), node)
        node.names = [o.name for o in inner]
        return node


class _Copier:
    """Copies jit functions into one module's namespace; ``taken`` holds names already used there.

    All functions are found (parsed, checked, their free names resolved) before any name is chosen, so that
    each new module-level name avoids every name written in any of them (:meth:`fresh`)."""

    def __init__(self, taken: set[str]):
        self.taken = taken
        # the module-level names the rewritten code reads that are not fresh: a local named like one is renamed
        self.reserved = {"tl", "triton"}
        self.code = InlinedCode()
        self._copies: dict[int, _Copy] = {}  # id(python function) -> its copy
        self._found: list[_Copy] = []  # in the order found, callers first: names are given in this order
        self._done: list[_Copy] = []  # callees before their callers: the order of the definitions
        self._written: set[str] = set()  # every name written in a copied function (and every renamed local)
        self._numbers: dict[tuple, str] = {}
        self._library: dict[int, str] = {}
        self._modules: dict[str, str] = {}
        self._core: str | None = None

    def fresh(self, base: str) -> str:
        """A module-level name for ``base``, used by nothing in the module nor written in a copied function."""
        name, i = base, 1
        while name in self.taken or name in self._written:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def find(self, jit_fn, path: tuple = ()) -> _Copy:
        """Parse, check and resolve ``jit_fn`` and every user @triton.jit function it reads (``path``: the
        functions being found, each calling the next). Raises InlineError for what cannot be copied."""
        py_fn = _python_fn(jit_fn)
        if any(p is py_fn for p in path):
            start = next(i for i, p in enumerate(path) if p is py_fn)
            chain = " -> ".join([p.__name__ for p in path[start:]] + [py_fn.__name__])
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} calls itself ({chain}); Triton inlines "
                              "every call, so the recursion would never end. Write it as a loop or a formula",
                              _location(py_fn))
        if id(py_fn) in self._copies:
            return self._copies[id(py_fn)]
        node = _parse(py_fn)
        analysis = Analysis(node)
        check_elementwise(node, py_fn, analysis.values())
        _refuse_outside_writes(py_fn, node, analysis)
        free = list(free_references(node, analysis))
        _READS[py_fn] = (py_fn.__code__, _distinct_reads(free))
        copy = _Copy(py_fn, node, analysis, [(outer, chain, _target(py_fn, chain, declared))
                                             for outer, chain, declared in free])
        self._copies[id(py_fn)] = copy
        self._found.append(copy)
        self._written |= analysis.written()
        for _, _, target in copy.references:
            if target.kind == "jit":
                self.find(target.value, (*path, py_fn))
        self._done.append(copy)
        return copy

    def emit(self) -> InlinedCode:
        """Name every function found, then rewrite and write each, callees first."""
        for copy in self._found:
            # named after the def in its source, an identifier (its __name__ can be any string); user_: no clash
            # with kernel locals, helpers, combines
            copy.name = self.fresh(f"user_{copy.node.name}")
            self.code.names[id(copy.py_fn)] = copy.name
        for copy in self._done:
            self._write(copy)
        return self.code

    def _write(self, copy: _Copy) -> None:
        self._rename_locals(copy)
        replacements = {}
        for outer, chain, target in copy.references:
            if target.kind == "builtin":
                self.taken.add(chain[0])  # the module must define nothing of that name
                continue
            replaced = outer
            for _ in range(len(chain) - target.used):
                replaced = replaced.value
            replacements[id(replaced)] = ast.Name(self._name_for(chain, target), ast.Load())
        node = _Substitute(replacements, copy.analysis).visit(copy.node)
        node.name = copy.name
        ast.fix_missing_locations(node)
        self.code.definitions.append("@triton.jit\n" + ast.unparse(node) + "\n")

    def _rename_locals(self, copy: _Copy) -> None:
        """Rename each local of ``copy`` (of any of its scopes) named ``tl`` or ``triton``, which its rewritten code
        reads from the module, at its bindings and at every use of that binding. (Every other module-level name
        it reads is fresh: no local has it.)"""
        clashing = []
        for occurrence in copy.analysis.occurrences:
            scope, _ = copy.analysis.resolution(occurrence)
            if scope is not None and occurrence.name in self.reserved:
                clashing.append((occurrence, (id(scope), occurrence.name)))
        new: dict[tuple, str] = {}
        for occurrence, symbol in clashing:
            if symbol not in new:
                new[symbol] = self._fresh_local(symbol[1])
            if not occurrence.rename(new[symbol]):
                raise InlineError(f"@triton.jit function {copy.py_fn.__name__!r} imports {occurrence.node.name}, "
                                  f"which binds {symbol[1]!r}, a name the kernel module needs; write "
                                  f"import {occurrence.node.name} as another_name",
                                  _line(copy.py_fn, occurrence.node))

    def _fresh_local(self, base: str) -> str:
        name, i = f"{base}_local", 1
        while name in self.taken or name in self._written:
            name, i = f"{base}_local{i}", i + 1
        self._written.add(name)
        return name

    def _name_for(self, chain: tuple[str, ...], target: _Target) -> str:
        """The module-level name that stands for ``target``, the first ``target.used`` names of ``chain``."""
        if target.kind == "module":
            return self._module(target.value)
        if target.kind == "library":
            return self._library_function(target.value)
        if target.kind == "jit":
            return self._copies[id(_python_fn(target.value))].name
        return self._number(".".join(chain[:target.used]), target.value)

    def _module(self, module) -> str:
        import triton
        import triton.language as tl
        if module is tl:
            return "tl"
        if module is triton:
            return "triton"
        if module.__name__ not in self._modules:
            alias = self.fresh(module.__name__.split(".")[-1])
            self._modules[module.__name__] = alias
            self.code.imports.append(f"import {module.__name__} as {alias}")
        return self._modules[module.__name__]

    def _library_function(self, jit_fn) -> str:
        """A module-level name for Triton's library function ``jit_fn``.

        Those functions were decorated when triton was imported, so under an interpreter switched on later they
        cannot be called from interpreted code; the module re-decorates the same Python function then. It is
        named by its own module's path (never by the user's spelling, which names the user's imports).
        """
        if id(jit_fn) not in self._library:
            module = jit_fn.fn.__module__
            path = f"{module}.{jit_fn.fn.__name__}"
            if self._core is None:
                # Interpreting a library function patches triton.language.core without undoing it; with the
                # module visible here, the interpreter patches it per launch and restores it afterwards.
                self._core = self.fresh("tl_core")
                self.code.constants.append("# Interpreting Triton's own functions patches triton.language.core; seen from this\n"
                                           "# module, the interpreter also restores it after each launch.\n"
                                           f"{self._core} = tl.core")
            if module != "triton.language" and f"import {module}" not in self.code.imports:
                self.code.imports.append(f"import {module}")
            name = self.fresh("tl_" + jit_fn.fn.__name__)
            self._library[id(jit_fn)] = name
            self.code.constants.append(f"{name} = triton.jit({path}.fn) if triton.knobs.runtime.interpret "
                                       f"else {path}  # Triton's own {path}")
        return self._library[id(jit_fn)]

    def _number(self, dotted: str, number) -> str:
        """A module-level ``tl.constexpr`` holding ``number``, one per name and exact value."""
        key = (dotted, *number_key(number))
        if key not in self._numbers:
            name = self.fresh("user_" + dotted.replace(".", "_"))
            self._numbers[key] = name
            self.code.constants.append(f"{name} = tl.constexpr({number_literal(number)})")
        return self._numbers[key]


def _refuse_tuple_results(copy: _Copy) -> None:
    if any(isinstance(r.value, ast.Tuple) for r in ast.walk(copy.node) if isinstance(r, ast.Return)):
        py_fn = copy.py_fn
        raise UnsupportedError(f"@triton.jit function {py_fn.__name__!r} returns a tuple, which tricomb cannot "
                               "take apart; a @triton.jit function stands for one value. Return the fields "
                               "from a Python def or lambda instead (it may call @triton.jit functions for "
                               "each)", _location(py_fn))




# Triton functions that work on a whole block (reductions, scans, shapes, memory, program ids): an element
# function sees one block of elements at a time, so these would mix elements the pipeline keeps apart.
_BLOCK_FUNCTIONS = {"sum", "max", "min", "reduce", "associative_scan", "cumsum", "cumprod", "argmax", "argmin",
                    "xor_sum", "softmax", "dot", "dot_scaled", "sort", "flip", "histogram", "reshape", "view",
                    "trans", "permute", "expand_dims", "join", "split", "interleave", "arange", "load", "store",
                    "program_id", "num_programs", "gather", "topk", "zeros", "full", "broadcast_to", "ravel",
                    "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                    "atomic_xchg", "atomic_cas", "make_block_ptr", "advance", "make_tensor_descriptor"}


_PYTHON_ON_VALUES = {"min": "tl.minimum", "max": "tl.maximum", "sum": "+", "any": "|", "all": "&",
                     "round": "tl.math.rint (libdevice) or tl.floor(x + 0.5)", "bool": "x != 0",
                     "int": "x.to(tl.int64)", "float": "x.to(tl.float32)", "len": "nothing: a value has no length"}


def _reads(node: ast.AST, values: set[str]) -> bool:
    """Whether ``node`` reads one of the function's values (its parameters and locals)."""
    return any(isinstance(n, ast.Name) and n.id in values for n in ast.walk(node))


_BRANCHES = {ast.If: "if", ast.While: "while", ast.IfExp: "a conditional expression", ast.BoolOp: "and/or"}


def _branches(sub, values, py_fn) -> str | None:
    kind = "not" if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Not) else _BRANCHES.get(type(sub))
    test = getattr(sub, "test", sub)
    if kind is None or not _reads(test, values):
        return None
    return (f"uses {kind} on its values; it runs on a block of elements at once, so a branch cannot depend on one. "
            "Use tl.where(cond, a, b) (and &, |, ~ for and/or/not)")


def _chained_comparison(sub, values, py_fn) -> str | None:
    if not (isinstance(sub, ast.Compare) and len(sub.ops) > 1 and _reads(sub, values)):
        return None
    return ("chains comparisons on its values; Python makes a < x < b an `and`, which a block of elements cannot "
            "take. Write (a < x) & (x < b)")


def _loop_by_value(sub, values, py_fn) -> str | None:
    if not (isinstance(sub, ast.For) and _reads(sub.iter, values)):
        return None
    return ("loops a number of times that depends on its values; each element of the block would need its own "
            "count. Loop a fixed number of times and select with tl.where")


def _raises(sub, values, py_fn) -> str | None:
    return "raises; a kernel cannot. Return NaN (or a flag value) with tl.where instead" \
        if isinstance(sub, ast.Raise) else None


def _block_call(sub, values, py_fn) -> str | None:
    """A call of one of Triton's block functions: as a method of a value, by Triton's module, or imported."""
    if not isinstance(sub, ast.Call):
        return None
    func, called = sub.func, None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in values:
        called = f".{func.attr}() on a value" if func.attr in _BLOCK_FUNCTIONS else None
    elif isinstance(func, ast.Name) and func.id not in values:
        found, callee = _free_value(py_fn, func.id)
        if found and _is_library_jit(callee) and callee.fn.__name__ in _BLOCK_FUNCTIONS:
            called = f"{func.id} (Triton's {callee.fn.__name__})"
    else:
        chain = dotted(func)
        if chain and len(chain) >= 2 and chain[-1] in _BLOCK_FUNCTIONS and chain[0] not in values and \
                _is_triton_module(_free_value(py_fn, chain[0])[1]):
            called = ".".join(chain)
    if called is None:
        return None
    return (f"calls {called}, which works on a whole block; a scalar function maps one element to one result. "
            "Reduce or scan with a pipeline stage instead (tc.sum, tc.reduce)")


def _python_on_values(sub, values, py_fn) -> str | None:
    if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _PYTHON_ON_VALUES):
        return None
    name = sub.func.id
    if name in values or _free_value(py_fn, name)[0] or not any(_reads(a, values) for a in sub.args):
        return None  # (a name of the user's own, or nothing of the block passed)
    return (f"passes its values to Python's {name}(), which sees the whole block, not one element; write "
            f"{_PYTHON_ON_VALUES[name]}")


_ELEMENTWISE_RULES = (_branches, _chained_comparison, _loop_by_value, _raises, _block_call, _python_on_values)


def check_elementwise(node: ast.FunctionDef, py_fn, values: set[str] | None = None) -> None:
    """Refuse what a ``@triton.jit`` element function cannot do (each rule above): branch on its values, or loop
    by them (the values are a block, and Triton's interpreter would take one branch for all of it), pass them to
    Python's ``min``, ``max``, ``bool``, ... (which see the block), call Triton's block functions (``tl.sum``
    would fold the block, not the element), raise, or return nothing. ``values``: the names bound inside the
    function (found from ``node`` when not given). Raises :class:`InlineError` at the offending line."""
    if values is None:
        values = Analysis(node).values()
    for sub in ast.walk(node):
        for rule in _ELEMENTWISE_RULES:
            problem = rule(sub, values, py_fn)
            if problem is not None:
                raise InlineError(f"@triton.jit function {py_fn.__name__!r} {problem}", _line(py_fn, sub))
    if not any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(node)):
        raise InlineError(f"@triton.jit function {py_fn.__name__!r} returns nothing; return its result",
                          _location(py_fn))


def inline_jit_functions(refs: list[JitRef], taken: set[str]) -> InlinedCode:
    """Copy the functions ``refs`` (and every ``@triton.jit`` function they call) into one module.

    ``taken`` is the set of names the module already uses; it is extended with every name added (and with the
    Python builtins the functions read, which the module must leave undefined).
    ``InlinedCode.names`` maps ``id(ref.fn.fn)`` to the emitted name of each function.
    Raises :class:`InlineError` when a function's source is unavailable or it reads a value that cannot be
    copied, and :class:`UnsupportedError` for a function of ``refs`` that returns a tuple.
    """
    copier = _Copier(taken)
    for ref in refs:
        _refuse_tuple_results(copier.find(ref.fn))
    return copier.emit()


# --- The values the functions read, for the kernel caches ---------------------------------------------------

# python function -> (its code, what it reads from outside itself: (dotted names, declared global) each once)
_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _distinct_reads(free) -> tuple:
    return tuple(dict.fromkeys((chain, declared) for _, chain, declared in free))


def _reads_outside(py_fn) -> tuple:
    """What ``py_fn`` reads from outside itself (found once per code object)."""
    kept = _READS.get(py_fn)
    if kept is None or kept[0] is not py_fn.__code__:
        node = _parse(py_fn)
        kept = _READS[py_fn] = (py_fn.__code__, _distinct_reads(free_references(node, Analysis(node))))
    return kept[1]


class _Same:
    """Equal to another only for the same object; holds it, so that no other object takes its id meanwhile."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def globals_key(refs: Iterable[JitRef]) -> tuple:
    """A hashable key of what the user ``@triton.jit`` functions ``refs`` read from their globals and closure
    cells now, resolved as the inliner resolves them, recursively through the functions they call: numbers by
    type and exact value, functions and modules by identity. Equal keys mean the inliner copies the same
    module; a changed global (or one that can no longer be copied) gives another key. Never raises for what
    the inliner would refuse: that goes into the key, and copying raises it."""
    seen: dict[int, tuple] = {}
    return tuple(_function_key(ref.fn, seen) for ref in refs)


def _function_key(jit_fn, seen: dict[int, tuple]) -> tuple:
    py_fn = _python_fn(jit_fn)
    if id(py_fn) in seen:
        return seen[id(py_fn)]
    seen[id(py_fn)] = ("calls itself", _Same(py_fn))  # what a cycle reads (the inliner refuses it)
    try:
        reads = _reads_outside(py_fn)
    except (InlineError, SyntaxError) as exc:
        key = ("refused", str(exc))
    else:
        key = (_Same(jit_fn), _Same(py_fn.__code__),
               tuple(_read_key(py_fn, chain, declared, seen) for chain, declared in reads))
    seen[id(py_fn)] = key
    return key


def _read_key(py_fn, chain: tuple[str, ...], declared_global: bool, seen: dict[int, tuple]) -> tuple:
    try:
        target = _target(py_fn, chain, declared_global)
    except InlineError as exc:
        return ("refused", exc.message)
    if target.kind == "number":
        return ("number", *number_key(target.value))
    if target.kind == "jit":
        return ("jit", _function_key(target.value, seen))
    return (target.kind, target.used, _Same(target.value))
