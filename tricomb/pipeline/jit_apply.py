"""A user ``@triton.jit`` function applied by itself, element by element: its torch meaning (:mod:`.evaluate`).

The inliner (:mod:`tricomb.scalar.inline`) copies the function, every ``@triton.jit`` function it calls and the
numbers it reads into a module of their own, which is loaded with Triton's interpreter on for CPU tensors and
off for CUDA ones (Triton decides when ``@triton.jit`` decorates whether a function is interpreted). The fixed
kernel :func:`_elementwise` then loads each operand, calls the function and stores its result. None of
tricomb's kernel planning or code generation takes part, so the oracle of a pipeline that calls a user function
does not depend on the kernels it checks.

The numbers follow the kernel's rule for such a call: the operands arrive in their promoted dtype and are
computed in its compute dtype (:func:`~tricomb.scalar.dtypes.compute_dtype`: float16 and bfloat16 in float32,
integers and bools in their own dtype, as Triton computes on them); the result is stored in float32 for float16 and bfloat16 and in int64 for
integers, then converted by torch (which rounds to bfloat16 to nearest even, where the interpreter's own
conversion truncates, and wraps integers as the kernel does).
"""
import contextlib
import functools
import hashlib
import linecache
import types
import warnings

import numpy
import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.runtime.errors import InterpreterError
# Interpreting Triton's own functions (a tl.sigmoid the user's function calls) patches triton.language.core;
# with it visible from the launched kernel's module, the interpreter also restores it after each launch.
from triton.language import core as tl_core  # noqa: F401

from ..errors import UnsupportedError
from ..scalar.dtypes import compute_dtype
from ..scalar.inline import globals_key, inline_jit_functions
from ..scalar.ir import JitRef
from ..serial import SERIAL

_BLOCK = {"cpu": 2**16, "cuda": 1024}  # elements per program: the interpreter runs a whole tile as one numpy op


def _elementwise(out, operands, n, FN: tl.constexpr, ARITY: tl.constexpr, BLOCK: tl.constexpr):
    """``out[i] = FN(operands[i, 0], ..., operands[i, ARITY - 1])`` for ``i < n``; ``operands`` is ``(n,
    ARITY)``, contiguous, and ``FN``'s result is converted to ``out``'s element type."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    values = ()
    for k in tl.static_range(ARITY):
        values = values + (tl.load(operands + offsets * ARITY + k, mask=inside),)
    tl.store(out + offsets, FN(*values).to(out.dtype.element_ty), mask=inside)


@functools.cache
def _kernel(interpret: bool):
    """:func:`_elementwise` decorated with Triton's interpreter on or off."""
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        return triton.jit(_elementwise)


def _result_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernel stores a result of torch dtype ``dtype`` in, before torch converts it."""
    if dtype == torch.bool:
        return dtype
    return compute_dtype(dtype) if dtype.is_floating_point else torch.int64


@functools.lru_cache(maxsize=64)
def _load(globals_now: tuple, ref: JitRef, interpret: bool):
    """``ref``'s function, copied with everything it reads into a new module and loaded; ``globals_now``, its
    :func:`~tricomb.scalar.inline.globals_key`, keys the copy (a changed global is a new copy, as it is a new
    kernel). Raises InlineError for what cannot be copied (as building a stage does), UnsupportedError for a
    function returning a tuple."""
    code = inline_jit_functions([ref], {"triton", "tl"})
    lines = ["import triton", "import triton.language as tl", *code.imports, *code.constants, *code.definitions]
    source = "\n".join(lines) + "\n"
    # named by its text: Triton tells apart the functions a kernel is given by module and name
    name = f"tricomb_jit_{hashlib.sha256(source.encode()).hexdigest()[:32]}"
    path = f"<tricomb jit function {name}>"
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)  # what inspect shows Triton
    module = types.ModuleType(name)
    module.__file__ = path
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    return getattr(module, code.names[id(ref.fn.fn)])


def apply_jit(ref: JitRef, operands: list[torch.Tensor]) -> torch.Tensor:
    """The user function ``ref`` applied elementwise to ``operands``: tensors of one shape, dtype and device
    (CPU, through Triton's interpreter, or CUDA), its arguments in order. Returns a new tensor of that shape
    and dtype. Raises InlineError or UnsupportedError where the function cannot be copied."""
    first = operands[0]
    computed = compute_dtype(first.dtype)
    stacked = torch.stack([o.to(computed).reshape(-1) for o in operands], dim=-1).contiguous()
    out = torch.empty(first.numel(), dtype=_result_dtype(first.dtype), device=first.device)
    if first.numel():
        _launch(ref, stacked, out)
    return out.to(first.dtype).reshape(first.shape)


def _launch(ref: JitRef, stacked: torch.Tensor, out: torch.Tensor) -> None:
    interpret = stacked.device.type == "cpu"
    n, arity = stacked.shape
    block = min(triton.next_power_of_2(n), _BLOCK[stacked.device.type])
    with SERIAL, _quiet() if interpret else torch.cuda.device(stacked.device):
        fn = _load(globals_key([ref]), ref, interpret)
        try:
            # libdevice without flush-to-zero on CUDA, as tricomb's kernels are linked (codegen.host._compile_options)
            options = {} if interpret or torch.version.hip else {"enable_reflect_ftz": False}
            _kernel(interpret)[(triton.cdiv(n, block),)](out, stacked, n, FN=fn, ARITY=arity, BLOCK=block, **options)
        except (CompilationError, InterpreterError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise UnsupportedError(f"the torch reference could not run the @triton.jit function {ref.name!r} on "
                                   f"{str(stacked.dtype)[6:]} values ({type(exc).__name__}: {first}); the reference "
                                   "computes floats in float64, so a function that needs float32 bits (a bitcast) "
                                   "cannot be checked by it") from exc


@contextlib.contextmanager
def _quiet():
    """For the interpreter: masked-off lanes compute on whatever was loaded (log(0), 0/0), which nothing reads;
    Triton 3.6's interpreter calls int() on 1-element arrays, which numpy warns of (its result is right)."""
    with numpy.errstate(all="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Conversion of an array with ndim > 0 to a scalar", DeprecationWarning)
        yield
