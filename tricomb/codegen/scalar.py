"""Emitting scalar functions as straight-line Triton code, one SSA temporary per operation.

Every value carries torch's dtype for it, found by running the op's torch reference on meta tensors (torch
decides promotion, weak Python scalars and 0-d tensors), and is computed in that dtype's *compute type*:
float32 for float16, bfloat16 and float32; every other dtype itself (int1 for bool). Operands are
converted to the compute type of the result before each op (of their common type, for comparisons), so
``exp`` of an integer is a float op and integer arithmetic wraps in torch's result dtype, as torch's does. The same emitter
serves map and zip_with bodies, combine functions for reduce/scan, and epilogues after a reduction; identical
subexpressions are emitted once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import DTypeError
from ..pipeline.evaluate import constant_dtype, promoted_dtype, weak_call
from ..pipeline.scalars import CARRIERS
from ..scalar.builtins import OPS
from ..scalar.dtypes import NARROW_INTEGERS, compute_dtype, held_dtype
from ..scalar.ir import Call, Const, Function, JitCall, fold
from ..scalar.literals import number_literal
from .writer import Names, Writer

_TL_DTYPES = {
    torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.float32: "tl.float32",
    torch.float64: "tl.float64", torch.int8: "tl.int8", torch.int16: "tl.int16", torch.int32: "tl.int32",
    torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
_LOGICAL = ("logical_and", "logical_or")  # compare each operand with zero in its own dtype


def tl_dtype(dtype: torch.dtype) -> str:
    """The ``tl`` spelling of a torch dtype."""
    return _TL_DTYPES[dtype]


@dataclass(frozen=True)
class Value:
    """An emitted value: its source text, torch's dtype for it, and whether it is 0-d (which changes torch's
    promotion: a 0-d tensor does not widen a dimensioned one of the same kind)."""

    text: str
    dtype: torch.dtype
    zero_dim: bool = False
    weak: bool = False  # a runtime scalar: promotes as a Python number of its kind, held in ``dtype``

    def meta(self) -> torch.Tensor | bool | int | float:
        if self.weak:
            return _WEAK_SAMPLES[self.dtype]
        return torch.empty(() if self.zero_dim else (1,), dtype=self.dtype, device="meta")

    def sample(self) -> torch.Tensor | bool | int | float:
        """A one-element CPU tensor like this value: torch's CPU kernels refuse the dtypes an op does not
        support (``abs`` of bool, ``softplus`` of int), which meta tensors let through. A Python number of its
        kind for a runtime scalar."""
        if self.weak:
            return _WEAK_SAMPLES[self.dtype]
        return torch.ones(() if self.zero_dim else (1,), dtype=self.dtype)


# a runtime scalar's kernel value: the dtype it is held in (exactly: the launch passes a float's double, an int's
# int64), and a number of its kind, which torch promotes as it promotes the Python number given
_WEAK_SAMPLES = {dtype: kind(1) for kind, dtype in CARRIERS.items()}
# the device helper rebuilding each kind from the words the launch passes (codegen.host._scalar_words)
_WEAK_DECODERS = {bool: "({0} != 0)", int: "tc_int_of_words({0}_hi, {0}_lo)", float: "tc_float_of_words({0}_hi, {0}_lo)"}


def runtime_parameter(index: int) -> str:
    """The kernel parameter (the stem of the two, for an int or a float) of runtime scalar ``index``."""
    return f"scalar{index}"


def render_const(value) -> str:
    """A plain Python number as Triton source: :func:`~tricomb.codegen.writer.number_literal`, which refuses
    anything but an exact ``bool``, ``int`` or ``float``."""
    return number_literal(value)


@dataclass
class ScalarContext:
    """What scalar emission needs from the module: names, and the jit functions copied in."""

    names: Names
    jit_names: dict[int, str]  # id(python function of a user @triton.jit function) -> emitted name
    # runtime scalar index -> the kernel expression reading it, held as its kind is (where the kernel does not take
    # it as words: a foreach kernel's per-tensor scalars)
    runtime_reads: dict[int, str] = field(default_factory=dict)


def _torch_dtype(expr: Call | JitCall, operands: list) -> torch.dtype:
    metas = [o.meta() if isinstance(o, Value) else o for o in operands]
    if isinstance(expr, JitCall):
        return promoted_dtype([m if isinstance(m, torch.Tensor) else torch.tensor(m) for m in metas])
    exact = any(isinstance(o, Value) and not o.dtype.is_floating_point for o in operands)
    samples = [(o.sample() if exact else o.meta()) if isinstance(o, Value) else o for o in operands]
    if not any(isinstance(m, torch.Tensor) for m in samples):
        samples[0] = torch.tensor(samples[0])
    return OPS[expr.op].torch(*samples).dtype


_HALF = (torch.float16, torch.bfloat16)


def to_storage(ctx: "ScalarContext", text: str, dtype: torch.dtype, source: torch.dtype = torch.float32) -> str:
    """The expression ``text``, held in ``source``'s compute type, converted to ``dtype``. To float16 and
    bfloat16 it goes through float32, as torch's does (c10's Half and BFloat16 are built from a float); bfloat16
    through :data:`tc_to_bf16`, which rounds to nearest even under Triton's interpreter too (its own conversion
    truncates)."""
    if dtype in _HALF and compute_dtype(source) != torch.float32:
        text = f"{text}.to(tl.float32)"
    if dtype == torch.bfloat16:
        return f"tc_to_bf16({text})"
    return f"{text}.to({tl_dtype(dtype)})"


def from_storage(ctx: "ScalarContext", text: str, dtype: torch.dtype) -> str:
    """The expression ``text``, of storage dtype ``dtype``, in the dtype it is held in (:func:`held_dtype`):
    bfloat16 through :data:`tc_from_bf16`, exact under Triton's interpreter too (its own conversion garbles
    subnormals)."""
    held = held_dtype(dtype)
    if held == dtype:
        return text
    if dtype == torch.bfloat16:
        return f"tc_from_bf16({text})"
    return f"{text}.to({tl_dtype(held)})"


def _operand(ctx: "ScalarContext", value, dtype: torch.dtype, fill_shape: str | None) -> str:
    """``value`` converted to torch's dtype ``dtype`` for the op, held in its compute type: a constant as a
    literal, or, with ``fill_shape``, as a tile of that shape (for helpers, which apply tensor methods to their
    arguments). A tensor value converted to float16 or bfloat16 is rounded to it first, as torch rounds an int32
    meeting a float16 tensor (2049 becomes 2048) before computing in float32."""
    target = arith_dtype(dtype)
    if isinstance(value, Value) and value.weak:
        return _weak_operand(ctx, value, dtype, target, fill_shape)
    if not isinstance(value, Value):
        literal = render_const(float(value) if target.is_floating_point and not isinstance(value, bool)
                               else _wrapped(value, dtype))
        if target.is_floating_point and value == 0 and math.copysign(1.0, value) < 0:
            return _negative_zero(fill_shape or "[1]", target)
        return f"tl.full({fill_shape}, {literal}, {tl_dtype(target)})" if fill_shape else literal
    text = value.text
    if dtype in _HALF and value.dtype != dtype:
        return from_storage(ctx, to_storage(ctx, text, dtype, value.dtype), dtype)
    held = held_dtype(value.dtype)
    if dtype in _WIDER and value.dtype != dtype:
        # to the op's dtype first, wrapping as torch converts (int16 128 -> int8 -128)
        text, held = to_integer(ctx, text, value.dtype, dtype), held_dtype(dtype)
    if held == target:
        return text
    return f"{text}.to({tl_dtype(target)})"  # (then widening an integer is exact)


def _weak_operand(ctx: "ScalarContext", value: Value, dtype: torch.dtype, target: torch.dtype,
                  fill_shape: str | None) -> str:
    """A runtime scalar as an operand of torch dtype ``dtype``, held in ``target``: converted as torch converts a
    Python number (as a constant is, :func:`_operand`): an int wrapped into a narrower integer dtype, a float
    rounded once to a float32 or half operand's compute type, not to the half type itself."""
    text = value.text
    if dtype in _WIDER and value.dtype == torch.int64:
        text = to_integer(ctx, text, torch.int64, dtype)
    text = f"{text}.to({tl_dtype(target)})"
    if not fill_shape:
        return text
    if not target.is_floating_point:
        return f"({text} + tl.full({fill_shape}, 0, {tl_dtype(target)}))"
    return f"({text} + {_negative_zero(fill_shape, target)})"  # (x + -0.0 is x for every x, -0.0 included)


def _negative_zero(shape: str, target: torch.dtype) -> str:
    """A tile of -0.0 in the compute dtype ``target`` (float32 or float64), built from its bits: Triton's constants
    and constant folding lose the sign of zero."""
    bits, ints = (-2**63, "tl.int64") if target == torch.float64 else (-2**31, "tl.int32")
    return f"tl.full({shape}, {bits}, {ints}).to({tl_dtype(target)}, bitcast=True)"


def _jit_argument(text: str, dtype: torch.dtype) -> str:
    """An operand of a user ``@triton.jit`` function, ``text`` (held for an op of torch dtype ``dtype``), in the
    dtype the function computes on: integers and bools in ``dtype`` itself, as Triton computes on them (int8 and
    int32 wrap in their own width), floats in their compute dtype (half types in float32: Triton's interpreter
    computes them wrongly)."""
    target = compute_dtype(dtype)
    return text if arith_dtype(dtype) == target else f"({text}).to({tl_dtype(target)})"


# Integer ops of these torch dtypes are computed one size up, where they cannot overflow, and wrapped back with
# bitwise arithmetic (see _wrap): overflow in the narrow type itself is undefined to LLVM.
_WIDER = {torch.int8: torch.int32, torch.int16: torch.int32, torch.uint8: torch.int32, torch.int32: torch.int64}


def arith_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype an op whose torch dtype is ``dtype`` computes in: a wider integer for the narrow ones, else the
    compute dtype."""
    return _WIDER.get(dtype, compute_dtype(dtype))


def _wrap(ctx: "ScalarContext", text: str, dtype: torch.dtype, computed_in: torch.dtype) -> str:
    """``text``, computed in the wider integer ``computed_in``, wrapped into ``dtype``'s range as two's complement
    arithmetic wraps and held in ``held_dtype(dtype)``: int32 with bitwise arithmetic (then an exact conversion);
    int8, int16 and uint8 with the helper ``tc_wrap`` (see :mod:`tricomb.scalar.dtypes` for why)."""
    bits = torch.iinfo(dtype).bits
    if dtype in NARROW_INTEGERS:
        low = text if computed_in == torch.int32 else f"({text}).to(tl.int32)"  # (keeps the low bits)
        return f"tc_wrap({low}, {bits}, {dtype.is_signed})"
    half = 2 ** (bits - 1)
    return f"(((({text}) + {half}) & {2**bits - 1}) - {half}).to({tl_dtype(held_dtype(dtype))})"


def to_integer(ctx: "ScalarContext", text: str, source: torch.dtype, dtype: torch.dtype) -> str:
    """``text``, a value of torch dtype ``source`` held in ``held_dtype(source)``, converted to the integer or bool
    ``dtype`` as torch converts (wrapping; a float is truncated through int64 first) and held in
    ``held_dtype(dtype)``. A narrow integer is wrapped with bitwise arithmetic in the wider type, never by a
    conversion to the narrow type (see :mod:`tricomb.scalar.dtypes`)."""
    if dtype not in NARROW_INTEGERS or source == torch.bool:
        return f"{text}.to({tl_dtype(held_dtype(dtype))})"
    if source.is_floating_point:
        return _wrap(ctx, f"{text}.to(tl.int64)", dtype, torch.int64)
    return _wrap(ctx, text, dtype, held_dtype(source))


def _wrapped(value, target: torch.dtype):
    """An integer constant meeting an integer tensor, wrapped into the tensor's dtype as torch converts weak
    scalars (``uint8 - -1`` is ``uint8 - 255``, ``int8 + 200`` is ``int8 + -56``); Triton refuses such constants."""
    if isinstance(value, bool) or not isinstance(value, int) or target == torch.bool or target.is_floating_point:
        return value
    info = torch.iinfo(target)
    return (value - info.min) % (info.max - info.min + 1) + info.min


def _weak_targets(expr: Call, operands: list, result: torch.dtype) -> list[torch.dtype | None]:
    """The dtype each operand of an op of runtime scalars and constants alone is converted to: the 64-bit
    type Python computes it in (:func:`~tricomb.pipeline.evaluate.weak_call`)."""
    if expr.op in _LOGICAL:
        return [None if isinstance(o, Value) else torch.float64 for o in operands]
    if expr.op == "where":
        return [torch.bool, result, result]
    if expr.op in _COMPARISONS or result == torch.bool:
        kinds = {type(o.meta() if isinstance(o, Value) else o) for o in operands}
        common = torch.float64 if float in kinds else torch.int64 if int in kinds else torch.bool
        return [torch.int32 if common == torch.bool and expr.op not in _COMPARISONS else common] * len(operands)
    return [result] * len(operands)


def _targets(expr: Call | JitCall, operands: list, result: torch.dtype) -> list[torch.dtype | None]:
    """torch's dtype each operand is converted to before the op (None: leave as is)."""
    if isinstance(expr, Call) and expr.op in _COMPARISONS:
        metas = [o.meta() if isinstance(o, Value) else o for o in operands]
        common = torch.result_type(*metas) if isinstance(metas[0], torch.Tensor) else \
            torch.result_type(metas[1], metas[0])
        return [common] * len(operands)
    if isinstance(expr, Call) and expr.op in _LOGICAL:
        return [None if isinstance(o, Value) else torch.float64 for o in operands]
    if isinstance(expr, Call) and expr.op == "where":
        return [torch.bool] + [result] * 2
    if result == torch.bool:
        # bool arithmetic (True + True is True in torch) is done in int32, then converted back: != 0
        return [torch.int32] * len(operands)
    return [result] * len(operands)


def emit_function(w: Writer, ctx: ScalarContext, fn: Function, args: list[Value], fill_shape: str) -> list[Value]:
    """Emit ``fn`` applied to ``args``; return one :class:`Value` per output.

    A constant output is widened to a tile with ``tl.full(fill_shape, value, dtype)``. Raises
    :class:`DTypeError` when torch rejects an op for these dtypes (``where`` with a float condition, say).
    """
    outputs = fold(fn, args, lambda expr, operands: _emit_call(w, ctx, expr, operands, fn, fill_shape))
    results = []
    for v in outputs:
        if isinstance(v, Value) and v.weak:  # a runtime scalar returned as it is: typed as a constant would be
            dtype = constant_dtype(v.meta(), [a.dtype for a in args if not a.weak], all(a.zero_dim for a in args))
            v = Value(f"({_operand(ctx, v, compute_dtype(dtype), fill_shape)}).to({tl_dtype(held_dtype(dtype))})",
                      dtype, False)
        elif not isinstance(v, Value):
            dtype = constant_dtype(v, [a.dtype for a in args if not a.weak], all(a.zero_dim for a in args))
            v = Value(f"tl.full({fill_shape}, {_operand(ctx, v, compute_dtype(dtype), None)}, "
                      f"{tl_dtype(held_dtype(dtype))})", dtype, False)
        results.append(v)
    return results


def _emit_call(w: Writer, ctx: ScalarContext, expr: Call | JitCall, operands: list, fn: Function,
               fill_shape: str) -> Value:
    spec = OPS[expr.op] if isinstance(expr, Call) else None
    if spec is not None and spec.runtime is not None:
        result = ctx.names.fresh("t")
        read = ctx.runtime_reads.get(operands[0]) or _WEAK_DECODERS[spec.runtime].format(runtime_parameter(operands[0]))
        w.line(f"{result} = {read}")
        return Value(result, CARRIERS[spec.runtime], True, weak=True)
    weak = isinstance(expr, Call) and any(isinstance(o, Value) and o.weak for o in operands) and \
        all(not isinstance(o, Value) or o.weak for o in operands)
    try:
        dtype = weak_call(expr.op, [o.meta() if isinstance(o, Value) else o for o in operands]).value if weak else \
            _torch_dtype(expr, operands)
        dtype = CARRIERS[type(dtype)] if weak else dtype
    except (RuntimeError, TypeError) as exc:
        name = expr.op if isinstance(expr, Call) else expr.fn.name
        kinds = ", ".join(("runtime " + type(o.meta()).__name__ if o.weak else str(o.dtype)[6:]) if isinstance(o, Value)
                          else type(o).__name__ for o in operands)
        raise DTypeError(f"{name} cannot take ({kinds}) in function {fn.name!r}: torch says: {exc}",
                         fn.location) from None
    if spec is not None and (spec.leaf or spec.converts_to):
        result = ctx.names.fresh("t")
        w.line(f"{result} = {_internal(ctx, spec, operands[0], dtype)}")
        return Value(result, dtype, isinstance(operands[0], Value) and operands[0].zero_dim and not spec.leaf)
    helper_call = isinstance(expr, JitCall) or bool(spec.helpers)
    no_tensor = not any(isinstance(o, Value) for o in operands[-2:])
    targets = _weak_targets(expr, operands, dtype) if weak else _targets(expr, operands, dtype)
    texts = [o.text if isinstance(o, Value) and t is None else
             _operand(ctx, o, t, fill_shape if helper_call or no_tensor else None)
             for o, t in zip(operands, targets)]
    if isinstance(expr, JitCall):
        texts = [_jit_argument(text, t) for text, t in zip(texts, targets)]
    if isinstance(expr, Call) and expr.op == "pow" and not dtype.is_floating_point:
        raise DTypeError(f"pow of integers is not supported yet in function {fn.name!r}; make one operand a "
                         "float (x * 1.0)", fn.location)
    result = ctx.names.fresh("t")
    rendered = _render(ctx, expr, texts, dtype)
    if dtype in _WIDER:
        rendered = _wrap(ctx, rendered, dtype, arith_dtype(dtype))
    elif not dtype.is_floating_point:
        rendered = f"({rendered}).to({tl_dtype(held_dtype(dtype))})"
    w.line(f"{result} = {rendered}")
    zero_dim = all(o.zero_dim for o in operands if isinstance(o, Value))
    return Value(result, dtype, zero_dim, weak)


def _internal(ctx: ScalarContext, spec, operand, dtype: torch.dtype) -> str:
    """An internal row of the op table: a leaf (the kernel variable it names, held as ``dtype`` is), or a
    conversion of ``operand`` to ``dtype`` as torch's ``Tensor.to`` converts (a float to an integer truncated and
    wrapped, to float16 or bfloat16 rounded), held in its compute type."""
    if spec.leaf:  # (tl.cast: the compiler passes an int argument equal to 1, such as K, as a Python int)
        return f"tl.cast({spec.leaf.format(operand)}, {tl_dtype(held_dtype(dtype))})"
    source, text = operand.dtype, operand.text  # (the expand pass converts stream fields, never constants)
    if source == dtype:
        return text
    if not dtype.is_floating_point:
        return to_integer(ctx, text, source, dtype)
    return from_storage(ctx, to_storage(ctx, text, dtype, source), dtype)


def _render(ctx: ScalarContext, expr: Call | JitCall, operands: list[str], dtype: torch.dtype) -> str:
    if isinstance(expr, JitCall):  # its result is taken in its arguments' promoted dtype (the guide says so)
        taken = arith_dtype(dtype) if dtype in _WIDER else held_dtype(dtype)  # (wrapped to dtype after)
        return f"{ctx.jit_names[id(expr.fn.fn.fn)]}({', '.join(operands)}).to({tl_dtype(taken)})"
    spec = OPS[expr.op]
    if spec.integer is not None and not dtype.is_floating_point:
        return spec.integer.format(*operands)
    special = spec.by_number(expr.args[-1].value, dtype) if spec.by_number is not None and \
        isinstance(expr.args[-1], Const) else None  # torch's kernel for a Python number there
    return (special or spec.triton).format(*operands)
