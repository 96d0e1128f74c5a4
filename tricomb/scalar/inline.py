"""Copying user ``@triton.jit`` functions into the emitted module, at the ``ast`` level.

For each function: parse its source, find the names it reads from outside (globals and closure cells),
resolve each to the object it names, and rewrite the reference: ``triton.language`` becomes ``tl``, another
``@triton.jit`` function is copied too (recursively) under its emitted name, and a constant becomes a
module-level ``tl.constexpr``. Anything else cannot live in a self-contained module and raises
:class:`~tricomb.errors.InlineError`. The emitted module therefore never imports the user's module, which is
what makes functions defined in ``__main__`` scripts work.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from dataclasses import dataclass, field

from ..errors import InlineError, Location, UnsupportedError
from .ir import JitRef


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


def _local_names(node: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in node.args.args + node.args.posonlyargs + node.args.kwonlyargs}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
    return names


def _free_value(py_fn, name: str):
    """The object ``name`` refers to inside ``py_fn`` (closure cell, global, or Python builtin)."""
    code = py_fn.__code__
    if py_fn.__closure__ and name in code.co_freevars:
        return True, py_fn.__closure__[code.co_freevars.index(name)].cell_contents
    if name in py_fn.__globals__:
        return True, py_fn.__globals__[name]
    if hasattr(builtins, name):
        return False, None  # leave Python builtins (range, min, float, ...) as they are
    raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {name!r}, which is not defined",
                      _location(py_fn))


def _is_triton_module(obj) -> bool:
    return isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] == "triton"


class _Copier:
    """Copies jit functions into one module's namespace; ``taken`` holds names already used there."""

    def __init__(self, taken: set[str]):
        self.taken = taken
        self.code = InlinedCode()
        self._constants: dict[tuple[str, object], str] = {}
        self._locals: set[str] = set()  # the locals of the function being rewritten
        self._copying: list[int] = []  # the functions being copied, each called by the one before it
        self._path: list[str] = []  # their names

    def fresh(self, base: str) -> str:
        """A module-level name for ``base``, used by nothing in the module nor as a local of the function being
        copied."""
        name, i = base, 1
        while name in self.taken or name in self._locals:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def copy(self, jit_fn, top_level: bool = False) -> str:
        py_fn = _python_fn(jit_fn)
        if id(py_fn) in self._copying:
            chain = " -> ".join(self._path[self._copying.index(id(py_fn)):] + [py_fn.__name__])
            raise InlineError(f"@triton.jit function {py_fn.__name__!r} calls itself ({chain}); Triton inlines "
                              "every call, so the recursion would never end. Write it as a loop or a formula",
                              _location(py_fn))
        if id(py_fn) in self.code.names:
            return self.code.names[id(py_fn)]
        name = self.fresh(f"user_{py_fn.__name__}")  # user_: no clash with kernel locals, helpers, combines
        self.code.names[id(py_fn)] = name
        node = _parse(py_fn)
        check_elementwise(node, py_fn)
        self._copying.append(id(py_fn))
        self._path.append(py_fn.__name__)
        try:
            self._rewrite(node, name, py_fn, top_level)
        finally:
            self._path.pop()
            self._copying.pop()
        return name

    def _own_locals(self, node: ast.FunctionDef, py_fn) -> set[str]:
        """Rename the locals and parameters of ``node`` that a name of the module already took (user_K for the
        global K, say), and return its locals: the module names generated while it is rewritten avoid them."""
        local = _local_names(node)
        clashes = {n: n for n in local if n in self.taken}
        for old in clashes:
            new, i = f"{old}_local", 1
            while new in self.taken or new in local:
                new, i = f"{old}_local{i}", i + 1
            clashes[old] = new
        if clashes:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in clashes:
                    sub.id = clashes[sub.id]
                elif isinstance(sub, ast.arg) and sub.arg in clashes:
                    sub.arg = clashes[sub.arg]
        return _local_names(node)

    def _rewrite(self, node: ast.FunctionDef, name: str, py_fn, top_level: bool) -> None:
        if top_level and any(isinstance(r.value, ast.Tuple) for r in ast.walk(node) if isinstance(r, ast.Return)):
            raise UnsupportedError(f"@triton.jit function {py_fn.__name__!r} returns a tuple, which tricomb cannot "
                                   "take apart; a @triton.jit function stands for one value. Return the fields "
                                   "from a Python def or lambda instead (it may call @triton.jit functions for "
                                   "each)", _location(py_fn))
        node.name = name
        outer, self._locals = self._locals, self._own_locals(node, py_fn)
        try:
            _Rewriter(self, py_fn, self._locals).visit(node)
        finally:
            self._locals = outer
        ast.fix_missing_locations(node)
        self.code.definitions.append("@triton.jit\n" + ast.unparse(node) + "\n")

    def library(self, dotted: str, jit_fn) -> str:
        """A module-level name for Triton's library function ``jit_fn``.

        Those functions were decorated when triton was imported, so under an interpreter switched on later they
        cannot be called from interpreted code; the module re-decorates the same Python function then.
        """
        key = (dotted, id(jit_fn))
        if key not in self._constants:
            name = self.fresh("tl_" + dotted.split(".")[-1])
            self._constants[key] = name
            if not self._constants.get("core"):
                # Interpreting a library function patches triton.language.core without undoing it; with the
                # module visible here, the interpreter patches it per launch and restores it afterwards.
                self._constants["core"] = "tl_core"
                self.code.constants.append("# Interpreting Triton's own functions patches triton.language.core; seen from this\n"
                                           "# module, the interpreter also restores it after each launch.\n"
                                           "tl_core = tl.core")
            self.code.constants.append(f"{name} = triton.jit({dotted}.fn) if triton.knobs.runtime.interpret "
                                       f"else {dotted}  # Triton's own {dotted}")
        return self._constants[key]

    def reference(self, py_fn, dotted: str, value) -> ast.expr | None:
        """The expression that replaces a reference to ``value``, or None to keep it as written."""
        from .trace import is_jit_function
        from triton.language import constexpr
        import triton.language as tl
        if value is tl:
            return ast.Name("tl", ast.Load())
        if _is_triton_module(value):
            if value.__name__ == "triton":
                return ast.Name("triton", ast.Load())
            alias = self.fresh(value.__name__.split(".")[-1])
            self.code.imports.append(f"import {value.__name__} as {alias}")
            return ast.Name(alias, ast.Load())
        if _is_library_jit(value):  # Triton's own, imported by name (from triton.language import sigmoid as sg)
            path = f"{value.fn.__module__}.{value.fn.__name__}"
            return ast.Name(self.library(path, value), ast.Load())
        if is_jit_function(value):
            return ast.Name(self.copy(value), ast.Load())
        if isinstance(value, constexpr):
            value = value.value
        if isinstance(value, (bool, int, float)):
            return ast.Name(self._constant(dotted, value), ast.Load())
        if isinstance(value, types.ModuleType):
            return None  # resolved attribute by attribute in _Rewriter.visit_Attribute
        raise InlineError(f"@triton.jit function {py_fn.__name__!r} uses {dotted!r}, a {type(value).__name__}, "
                          "which cannot be copied into a self-contained kernel module; make it a tl.constexpr "
                          "number, a @triton.jit function, or an argument", _location(py_fn))

    def _constant(self, dotted: str, value) -> str:
        key = (dotted, value)
        if key not in self._constants:
            name = self.fresh("user_" + dotted.replace(".", "_"))
            self._constants[key] = name
            self.code.constants.append(f"{name} = tl.constexpr({value!r})")
        return self._constants[key]


class _Rewriter(ast.NodeTransformer):
    def __init__(self, copier: _Copier, py_fn, local: set[str]):
        self.copier, self.py_fn, self.local = copier, py_fn, local

    def visit_Name(self, node: ast.Name):
        if not isinstance(node.ctx, ast.Load) or node.id in self.local:
            return node
        found, value = _free_value(self.py_fn, node.id)
        if not found:
            return node
        if isinstance(value, types.ModuleType) and not _is_triton_module(value):
            raise InlineError(f"@triton.jit function {self.py_fn.__name__!r} uses module {node.id!r} "
                              f"({value.__name__}) other than through its @triton.jit functions or constants; "
                              "only triton modules can be used inside a kernel", _location(self.py_fn))
        replacement = self.copier.reference(self.py_fn, node.id, value)
        return ast.copy_location(replacement, node) if replacement is not None else node

    def visit_Attribute(self, node: ast.Attribute):
        chain = _dotted(node)
        if chain is None or chain[0] in self.local:
            return self.generic_visit(node)
        found, base = _free_value(self.py_fn, chain[0])
        if found and _is_triton_module(base):
            library = _resolve_chain(base, chain[1:])
            if library is None:
                raise InlineError(f"@triton.jit function {self.py_fn.__name__!r} uses {'.'.join(chain)}, which "
                                  f"{base.__name__} does not have", _location(self.py_fn))
            if library is not None and _is_library_jit(library):
                return ast.copy_location(ast.Name(self.copier.library(".".join(chain), library), ast.Load()), node)
            return self.generic_visit(node)
        if not found or not isinstance(base, types.ModuleType):
            return self.generic_visit(node)
        value = base
        for part in chain[1:]:
            value = getattr(value, part)
            if not isinstance(value, types.ModuleType):
                break
        replacement = self.copier.reference(self.py_fn, ".".join(chain), value)
        return ast.copy_location(replacement, node) if replacement is not None else node


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
        chain = _dotted(func)
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


def check_elementwise(node: ast.FunctionDef, py_fn) -> None:
    """Refuse what a ``@triton.jit`` element function cannot do (each rule above): branch on its values, or loop
    by them (the values are a block, and Triton's interpreter would take one branch for all of it), pass them to
    Python's ``min``, ``max``, ``bool``, ... (which see the block), call Triton's block functions (``tl.sum``
    would fold the block, not the element), raise, or return nothing. Raises :class:`InlineError` at the
    offending line."""
    values = _local_names(node)
    for sub in ast.walk(node):
        for rule in _ELEMENTWISE_RULES:
            problem = rule(sub, values, py_fn)
            if problem is not None:
                raise InlineError(f"@triton.jit function {py_fn.__name__!r} {problem}", _line(py_fn, sub))
    if not any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(node)):
        raise InlineError(f"@triton.jit function {py_fn.__name__!r} returns nothing; return its result",
                          _location(py_fn))


def _line(py_fn, node: ast.AST) -> Location:
    """Where ``node`` of ``py_fn``'s parsed source (which starts at its first decorator) is in its file."""
    start = _location(py_fn)
    return Location(start.file, start.line + getattr(node, "lineno", 1) - 1)


def _resolve_chain(value, parts: list[str]):
    for part in parts:
        value = getattr(value, part, None)
    return value


def _is_library_jit(value) -> bool:
    """A ``@triton.jit`` function of Triton's own library (``tl.sigmoid``, ``tl.sum``, ...)."""
    from .trace import is_jit_function
    return is_jit_function(value) and getattr(value.fn, "__module__", "").startswith("triton.language")


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def inline_jit_functions(refs: list[JitRef], taken: set[str]) -> InlinedCode:
    """Copy the functions ``refs`` (and every ``@triton.jit`` function they call) into one module.

    ``taken`` is the set of names the module already uses; it is extended with every name added.
    ``InlinedCode.names`` maps ``id(ref.fn.fn)`` to the emitted name of each function.
    Raises :class:`InlineError` when a function's source is unavailable or it reads a value that cannot be
    copied.
    """
    copier = _Copier(taken)
    for ref in refs:
        copier.copy(ref.fn, top_level=True)
    return copier.code
