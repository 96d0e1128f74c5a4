"""``tc.foreach``'s call path: an elementwise pipeline over lists of tensors, one launch per group of them.

The positions ``t`` of the lists are grouped as torch groups a foreach op's tensors: by device and by the dtypes
of the tensors at ``t`` (``torch.optim``'s ``_group_tensors_by_device_and_dtype``). Each group is one launch of a
foreach kernel (:mod:`tricomb.codegen.foreach`), whose module is kept per signature (the pipeline with its
numbers read as runtime scalars, the dtypes, which inputs are given once for all and which numbers per tensor)
and whose table is kept per set of tensors (addresses and sizes): a training loop's second step on the same
parameters copies nothing to the device and launches once per group.

A position whose tensors are not contiguous is run as a single call of the pipeline (correct, and one launch
of its own), as torch's foreach ops fall back to a loop where their fast path does not apply.
"""
from __future__ import annotations

import gc
import operator
import weakref
from dataclasses import dataclass
from typing import Sequence

import torch
from torch.types import Number

from .. import compiler
from ..codegen.foreach import ForeachKernel
from ..codegen.module import emit_module
from ..errors import (AliasError, ArgumentError, ArityError, DeviceError, DTypeError, ShapeError, UnsupportedError,
                      caller_location)
from ..lower.bind import SUPPORTED_DTYPES, byte_range, overlap, same_elements
from ..pipeline.evaluate import evaluate_fields, runtime_values
from ..pipeline.ir import Map, PipelineIR, ZipWith
from ..pipeline.scalars import KIND_NAMES, is_number, number_kind, plain_scalar
from ..scalar.literals import number_key
from ..serial import SERIAL
from .launch import PipelineCache, quiet
from .loader import load_module
from .lru import LRU

LIST, SHARED, SCALAR, PER_TENSOR = "list", "shared", "scalar", "per tensor"


def check_elementwise(pipeline: PipelineIR, where) -> None:
    """Raise UnsupportedError unless every stage of ``pipeline`` is a map or a zip_with."""
    for i, stage in enumerate(pipeline.stages):
        if not isinstance(stage, (Map, ZipWith)):
            raise UnsupportedError(f"tc.foreach applies a pipeline of maps and zip_withs; stage {i} is a "
                                   f"{type(stage).__name__.lower()}. Call the pipeline on each tensor", where)


@dataclass(frozen=True)
class _Call:
    """A foreach call's arguments, classified: each argument's role (``LIST`` of tensors, ``SHARED`` 0-d tensor,
    ``SCALAR`` number, ``PER_TENSOR`` list of numbers), the count of positions, and ``out``'s lists."""

    arguments: tuple
    roles: tuple[str, ...]
    n: int
    outs: tuple[list, ...] | None


def _role(value, i: int) -> str:
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ShapeError(f"argument {i} is one tensor of shape {tuple(value.shape)}; a tensor given once for "
                             "every position must be 0-d (a learning rate on the device). Pass a list of tensors, "
                             "one per position", caller_location())
        return SHARED
    if is_number(value) or isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return SCALAR  # (checked when it becomes a kernel's argument)
    if isinstance(value, (list, tuple)):
        if all(isinstance(t, torch.Tensor) for t in value):
            return LIST
        if value and all(is_number(v) for v in value):
            return PER_TENSOR
    if isinstance(value, (list, tuple)):
        bad = next(j for j, v in enumerate(value) if not isinstance(v, torch.Tensor))
        raise ArgumentError(f"argument {i} holds {type(value[bad]).__name__} at position {bad} among tensors; give "
                            "a tensor at every position (leave a parameter with no gradient out of every list, as "
                            "torch's optimizers skip it)", caller_location())
    raise ArgumentError(f"argument {i} is a {type(value).__name__}; give a list of tensors (one per position), a "
                        "number or a 0-d tensor (one for all), or a list of numbers (one per position)",
                        caller_location())


def classify(arguments: tuple, out, num_inputs: int, width: int) -> _Call:
    """The call's arguments classified and checked: the count, the lists' lengths, ``out``'s form. Raises
    ArityError, ArgumentError or ShapeError naming the argument."""
    if len(arguments) != num_inputs:
        raise ArityError(f"the pipeline takes {num_inputs} inputs, so foreach takes {num_inputs} arguments (a list "
                         f"of tensors, or a number, per input); got {len(arguments)}", caller_location())
    roles = tuple(_role(a, i) for i, a in enumerate(arguments))
    lengths = {i: len(a) for i, (a, r) in enumerate(zip(arguments, roles)) if r in (LIST, PER_TENSOR)}
    if roles.count(LIST) == 0:
        raise ArgumentError("foreach needs at least one list of tensors among its arguments (numbers and 0-d "
                            "tensors are shared by every position)", caller_location())
    n = lengths[roles.index(LIST)]
    for i, length in lengths.items():
        if length != n:
            raise ShapeError(f"argument {i} holds {length} items but argument {roles.index(LIST)} holds {n}; give "
                             "every list one item per position", caller_location())
    outs = None
    if out is not None:
        outs = tuple(out) if width > 1 else (out,)
        if width > 1 and (not isinstance(out, (tuple, list)) or len(out) != width):
            raise ArgumentError(f"the result has {width} fields, so out= must be a tuple of {width} lists of tensors",
                                caller_location())
        for k, o in enumerate(outs):
            if not isinstance(o, (list, tuple)) or len(o) != n or not all(isinstance(t, torch.Tensor) for t in o):
                raise ArgumentError(f"out{'' if width == 1 else f'[{k}]'} must be a list of {n} tensors, one per "
                                    "position", caller_location())
    return _Call(tuple(arguments), roles, n, outs)


class ForeachRunner:
    """What a ``tc.foreach`` keeps between calls: the pipeline's forms (:class:`~.launch.PipelineCache`), the
    modules per group signature, and the prepared launches (their tables) per set of tensors."""

    def __init__(self, pipeline: PipelineIR, named: int = 0):
        self.cache = PipelineCache(pipeline, named)
        self.modules: LRU = LRU(64)
        self.prepared: LRU = LRU(16)
        self.calls: LRU = LRU(16)  # a call's tensors (signature) -> its launches, for calls into out= lists

    def __call__(self, arguments: tuple, out, named: tuple = ()):
        """The pipeline over ``arguments`` (see :func:`classify`), ``named``: the values of the runtime scalars the
        pipeline names. Returns the result lists (``out``'s, when given).

        A call into ``out=`` whose tensors are those of an earlier one (:func:`_signature`: the same addresses,
        dtypes and sizes, contiguous) takes that call's launches again: none of the checks, grouping or table
        building is repeated (AdamW over 1000 small tensors: O2 in bench/optimizer.py)."""
        signature = _signature(arguments, out) if out is not None and not torch.is_grad_enabled() else None
        found = self.calls.get(signature) if signature is not None else None
        if found is not None:
            numbers, launches = found
            _keep_if_captured(launches)
            scalars = (*named, *(plain_scalar(arguments[i], f"argument {i}") if scalar else 0 for i, scalar in numbers))
            for launch, shared in launches:
                launch(*(arguments[i] for i in shared), *scalars)
            torch.autograd.graph.increment_version(found_outs(out, self.cache.pipeline.width))
            return out
        call = classify(arguments, out, self.cache.pipeline.num_inputs, self.cache.pipeline.width)
        if torch.is_grad_enabled() and any(t.requires_grad for t in _tensors(call)):
            raise UnsupportedError("tc.foreach records no autograd history; call it under torch.no_grad(), as "
                                   "optimizer steps are", caller_location())
        form = self.cache.form(_representative(call, 0))
        # per tensor: (runtime scalar index, argument) of each list of numbers
        per_tensor = tuple((len(named) + j, i) for j, i in enumerate(form.numbers) if call.roles[i] == PER_TENSOR)
        numbers = tuple((i, call.roles[i] == SCALAR) for i in form.numbers)
        scalars = (*named, *(plain_scalar(arguments[i], f"argument {i}") if scalar else 0 for i, scalar in numbers))
        width = self.cache.pipeline.width
        results = [list(o) for o in call.outs] if call.outs is not None else [[None] * call.n for _ in range(width)]
        launches = []
        shared = tuple(i for i, r in enumerate(call.roles) if r == SHARED)
        if call.outs is not None:
            _check_no_crossing([a for a, r in zip(arguments, call.roles) if r == LIST] + list(call.outs),
                               len(call.outs))
        steps = []  # every group's launch made and checked before any runs: a refused call writes nothing
        for key, positions in self._groups(call).items():
            if key is None:
                self._check_single_calls(call, positions)
                steps.append((None, positions))
                signature = None  # (not kept: these positions take the full path each call)
                continue
            steps.append((self._group_launch(self.cache.form(_representative(call, positions[0])), call, key,
                                             positions, per_tensor, results), positions))
        for launch, positions in steps:
            if launch is None:
                self._single_calls(call, positions, results, named)
                continue
            launch(*(arguments[i] for i in shared), *scalars)
            launches.append((launch, shared))
        if call.outs is None:
            return results[0] if width == 1 else tuple(results)
        torch.autograd.graph.increment_version([t for o in call.outs for t in o])
        if signature is not None:
            self.calls[signature] = (numbers, launches)
        return out

    def _groups(self, call: _Call) -> dict:
        """Positions by (device, the dtypes of the lists' tensors there, of out='s, the kinds of the numbers given
        per position there), in order; a position whose tensors are not contiguous (or differ in shape) by
        itself, under the key None. (A list of numbers may mix kinds, as ``[1, 0.5]``: torch promotes each with
        its tensors, so each kind is a kernel of its own.)"""
        lists = [a for a, r in zip(call.arguments, call.roles) if r == LIST] + list(call.outs or ())
        numbers = [a for a, r in zip(call.arguments, call.roles) if r == PER_TENSOR]
        groups: dict = {}
        devices = {a.device for a, r in zip(call.arguments, call.roles) if r == SHARED}
        for i, (a, r) in enumerate(zip(call.arguments, call.roles)):
            if r == SHARED and (a.is_neg() or a.is_conj()):
                raise DTypeError(f"argument {i} has a lazy negation or conjugation bit, which foreach's loads would "
                                 "not honour; pass a plain tensor (.resolve_neg())", caller_location())
        for t in range(call.n):
            tensors = [ts[t] for ts in lists]
            first = tensors[0]
            if any(x.device != first.device for x in tensors) or devices - {first.device}:
                found = sorted({str(x.device) for x in tensors} | {str(d) for d in devices})
                raise DeviceError(f"the tensors of position {t} (and those given once for all) are on {', '.join(found)}; "
                                  "move them to one device", caller_location())
            if any(x.is_neg() or x.is_conj() for x in tensors):
                raise DTypeError(f"a tensor of position {t} has a lazy negation or conjugation bit, which foreach's "
                                 "loads and stores would not honour; pass a plain tensor (.resolve_neg())",
                                 caller_location())
            fast = all(x.is_contiguous() and x.shape == first.shape for x in tensors)
            kinds = tuple(type(plain_scalar(a[t], "a number")) for a in numbers)
            key = (first.device, tuple(x.dtype for x in tensors), kinds) if fast else None
            groups.setdefault(key, []).append(t)
        return groups

    def _group_launch(self, form, call: _Call, key, positions: list[int], per_tensor: tuple, results: list):
        """The launch over the group's ``positions``: a function of the shared tensors and the runtime scalars.
        Allocates the results' tensors when ``out=`` is not given (into ``results``)."""
        lists = [[a[t] for t in positions] for a, r in zip(call.arguments, call.roles) if r == LIST]
        shared = [a for a, r in zip(call.arguments, call.roles) if r == SHARED]
        module, dtypes = self._module(form, call, key, tuple(k for k, _ in per_tensor))
        if call.outs is None:
            outs = [[torch.empty_like(x, dtype=dtype) for x in lists[0]] for dtype in dtypes]
            for k, fields in enumerate(outs):
                for t, field in zip(positions, fields):
                    results[k][t] = field
        else:
            outs = [[o[t] for t in positions] for o in call.outs]
            _check_out_dtypes(key[1][len(lists):], dtypes)
        values = [[call.arguments[i][t] for t in positions] for _, i in per_tensor]
        prepared = self._prepared(module, lists, outs, values, shared, call.outs is not None)
        return _on_device(prepared, lists[0][0].device) if lists[0][0].is_cuda else quiet(prepared)

    def _check_single_calls(self, call: _Call, positions: list[int]) -> None:
        """Bind each position the foreach kernel does not take, as its call will: its errors come before any
        launch."""
        for t in positions:
            inputs, out = _position_call(call, t)
            form = self.cache.form(inputs)
            tensors, _ = form.split(inputs)
            compiler.lower(form.ir, tensors, out, until="check_dtypes")

    def _single_calls(self, call: _Call, positions: list[int], results: list, named: tuple) -> None:
        """Positions the foreach kernel does not take (strided tensors, shapes that differ): each a call of the
        pipeline."""
        from .launch import run
        for t in positions:
            inputs, out = _position_call(call, t)
            got = run(self.cache.pipeline, self.cache, inputs, out, scalars=named)
            for k, field in enumerate(got if isinstance(got, tuple) else (got,)):
                results[k][t] = field

    def _module(self, form, call: _Call, key, per_tensor: tuple[int, ...]) -> tuple:
        """The foreach module for a group's signature, and its output dtypes."""
        device, dtypes, _ = key
        listed = [i for i in form.tensors if call.roles[i] == LIST]
        shared = frozenset(f"in{j}" for j, i in enumerate(form.tensors) if call.roles[i] == SHARED)
        shared_dtypes = tuple(call.arguments[i].dtype for i in form.tensors if call.roles[i] == SHARED)
        signature = (form.ir, device, dtypes[:len(listed)], shared, per_tensor, shared_dtypes, torch.get_default_dtype())
        found = self.modules.get(signature)
        if found is None:
            for dtype in dtypes + shared_dtypes:
                if dtype not in SUPPORTED_DTYPES:
                    raise DTypeError(f"a tensor of dtype {str(dtype)[6:]}: foreach takes "
                                     f"{', '.join(str(d)[6:] for d in SUPPORTED_DTYPES)}", caller_location())
            for i in form.tensors:
                if call.roles[i] == SHARED and call.arguments[i].device != device:
                    raise DeviceError(f"argument {i} is on {call.arguments[i].device} but the lists' tensors on "
                                      f"{device}; move it there", caller_location())
            dtype_of = dict(zip(listed, dtypes))
            reps = tuple(torch.empty(2, dtype=dtype_of[i], device=device) if call.roles[i] == LIST else
                         torch.empty((), dtype=call.arguments[i].dtype, device=device) for i in form.tensors)
            with SERIAL:
                plan = compiler.lower(form.ir, reps, until="fuse").plan
                source = emit_module(plan, ForeachKernel(plan, shared, per_tensor))
                module = load_module(source, interpret=device.type == "cpu")
            found = self.modules[signature] = (module, tuple(s.dtype for s in plan.outputs))
        return found

    def _prepared(self, module, lists: list[list], outs: list[list], values: list, shared: list, keep: bool):
        """The module's launch over the input ``lists`` and the ``outs`` lists (its table), kept per set of tensors
        when ``keep`` (the outputs are the caller's, so the same next time); their memory is checked when the
        table is made (the same addresses, sizes and dtypes give the same answer)."""
        tables = lists + outs
        key = (id(module), tuple((t.data_ptr(), t.numel()) for ts in tables for t in ts),
               tuple(tuple(map(number_key, v)) for v in values), tuple((s.data_ptr(), s.dtype) for s in shared))
        prepared = self.prepared.get(key) if keep else None
        if prepared is None:
            if _capturing(tables[0][0]):
                raise UnsupportedError("tc.foreach copies its table of the tensors' addresses to the device on its "
                                       "first call with them, which a CUDA graph capture does not allow: call it "
                                       "once with the same tensors and out= lists before capturing (a warm-up)",
                                       caller_location())
            if keep:
                _check_outs(outs, lists, shared)
            prepared = module.prepare(tables, values)
            if keep:
                self.prepared[key] = prepared
        _keep_if_captured([(prepared, ())])
        return prepared


# Launches a CUDA graph captured: a replay reads their tables, so they live as long as the process.
_CAPTURED: list = []


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _keep_if_captured(launches) -> None:
    """Keep ``launches`` (with their device tables) for good when a CUDA graph is capturing them."""
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        _CAPTURED.extend(launch for launch, _ in launches)


def _on_device(prepared, device: torch.device):
    """``prepared`` launched with ``device`` current: Triton launches on the current device and its stream."""
    index = device.index

    def run(*arguments):
        if torch.cuda.current_device() == index:
            return prepared(*arguments)
        with torch.cuda.device(index):
            return prepared(*arguments)
    run.tables = getattr(prepared, "tables", None)
    return run


def _tensors(call: _Call) -> list[torch.Tensor]:
    """Every tensor of a call: the lists', the shared ones, out='s."""
    lists = [t for a, r in zip(call.arguments, call.roles) if r == LIST for t in a]
    shared = [a for a, r in zip(call.arguments, call.roles) if r == SHARED]
    return lists + shared + [t for o in call.outs or () for t in o]


def found_outs(out, width: int) -> list[torch.Tensor]:
    """Every tensor of a call's ``out=`` lists (one list, or a tuple of ``width`` lists)."""
    return [t for o in (out if width > 1 else (out,)) for t in o]


def _position_call(call: _Call, t: int) -> tuple:
    """The inputs and ``out=`` of position ``t`` as a call of the pipeline of its own."""
    inputs = tuple(a[t] if r in (LIST, PER_TENSOR) else a for a, r in zip(call.arguments, call.roles))
    out = None if call.outs is None else call.outs[0][t] if len(call.outs) == 1 else tuple(o[t] for o in call.outs)
    return inputs, out


def _representative(call: _Call, t: int) -> tuple:
    """The inputs of position ``t``: what decides the form (the kinds of its numbers)."""
    return tuple(a[t] if r == PER_TENSOR or r == LIST and call.n else torch.empty(0) if r == LIST else a
                 for a, r in zip(call.arguments, call.roles))


_ADDRESS, _NUMEL, _DIM = torch.Tensor.data_ptr, torch.Tensor.numel, torch.Tensor.dim
_CONTIGUOUS, _NEGATED = torch.Tensor.is_contiguous, torch.Tensor.is_neg
_DTYPE = operator.attrgetter("dtype")


def _signature(arguments: tuple, out) -> tuple | None:
    """What makes a call into ``out=`` the same as an earlier one, or None where it cannot be (a strided tensor,
    something not a tensor where one is expected): per list of tensors its addresses, dtypes and shapes, and the
    first one's device; per list of numbers its values and their types; a shared tensor's address and dtype; a
    number's type; torch's default dtype. Computed by C-level maps over the lists (bench/optimizer.py's O2 times a
    step over 1000 tensors)."""
    lists = [a for a in arguments if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
    lists += [out] if isinstance(out, (list, tuple)) and out and isinstance(out[0], torch.Tensor) else list(out)
    collecting = gc.isenabled()
    gc.disable()  # (the shapes are thousands of new tuples: each few hundred would start a collection)
    try:
        if not lists or not all(all(map(_CONTIGUOUS, ts)) for ts in lists):
            return None
        # the shapes by their sizes and ranks, and a hash of them all: kept, thousands of torch.Size objects would
        # make every later collection of the process walk them (AdamW over 1000 tensors on this project's CPU,
        # launches stubbed: 5.6 against 3.1 ms a step)
        read: dict = {}  # (an out= list that is an input list, as an optimizer's, is read once)
        for ts in lists:
            if id(ts) not in read:
                read[id(ts)] = (tuple(map(_ADDRESS, ts)), tuple(map(_DTYPE, ts)), tuple(map(_NUMEL, ts)),
                                tuple(map(_DIM, ts)), hash(tuple([t.shape for t in ts])))
        tensors = tuple(read[id(ts)] for ts in lists)
        others = tuple((a.data_ptr(), a.dtype, a.device, a.dim(), a.is_neg()) if isinstance(a, torch.Tensor) else
                       tuple(map(number_key, a)) if isinstance(a, (list, tuple)) and a and
                       not isinstance(a[0], torch.Tensor) else type(a) for a in arguments)
        negated = any(any(map(_NEGATED, ts)) for ts in lists)  # (a lazy negation: refused by the full path)
        form = isinstance(out[0], torch.Tensor)  # (one list, or a tuple of lists: the full path checks which fits)
        return (tensors, lists[0][0].device, others, len(arguments), torch.get_default_dtype(), negated, form,
                type(out))
    except (TypeError, AttributeError, RuntimeError, IndexError):
        return None
    finally:
        if collecting:
            gc.enable()


def _check_out_dtypes(given: tuple, dtypes: tuple) -> None:
    """``out=``'s lists hold the result fields' dtypes (DTypeError naming the field otherwise)."""
    for k, (o, dtype) in enumerate(zip(given, dtypes)):
        if o != dtype:
            raise DTypeError(f"out[{k}] holds {str(o)[6:]} tensors where the result is {str(dtype)[6:]}; allocate "
                             f"them with dtype={dtype}", caller_location())


def _check_outs(outs: list[list], lists: list[list], shared: list) -> None:
    """``out=``'s tensors at each position: each written in place over an input it is exactly, or sharing no
    memory with one (AliasError)."""
    for k, tensors in enumerate(outs):
        for j, o in enumerate(tensors):
            for i, ts in enumerate(lists):
                if overlap(o, ts[j]) and not same_elements(o, ts[j]):
                    raise AliasError(f"out[{k}][{j}] and the tensor of input list {i} there overlap but are not the "
                                     "same elements; write in place over the input itself, or into memory of its own",
                                     caller_location())
            for s in shared:
                if overlap(o, s):
                    raise AliasError(f"out[{k}][{j}] overlaps a tensor given once for every position, which every "
                                     "program reads; pass that value in memory of its own", caller_location())


def _check_no_crossing(lists: list[list], outputs: int) -> None:
    """No tensor written (of the last ``outputs`` lists) overlaps a tensor of another position, or another
    written one at its own (each program reads and writes one position's tensors, so writing over another's
    could race with its reads): AliasError otherwise. Inputs may share memory (one tensor read at two positions).
    The spans are swept in order of their starts, keeping those still open: for tensors of their own memory, or
    views of one flat buffer, a few."""
    first_output = len(lists) - outputs
    spans = sorted((*byte_range(t), j, k >= first_output, k, t.is_contiguous()) for k, ts in enumerate(lists)
                   for j, t in enumerate(ts) if t.numel())
    open_spans: list = []
    for start, stop, j, written, k, dense in spans:
        open_spans = [s for s in open_spans if s[1] > start]
        for _, _, other, other_written, other_list, other_dense in open_spans:
            # (two strided tensors' spans may interleave without a shared element, W[:, :2] and W[:, 2:]: their
            # positions are calls of their own, one after the other, as torch's foreach ops run such tensors)
            if not (dense or other_dense):
                continue
            if (written or other_written) and (other != j or written and other_written and other_list != k):
                raise AliasError(f"a tensor at position {j} overlaps one at position {other}, and one of them is "
                                 "written: foreach writes each result into memory no other tensor of the call "
                                 "holds, but the input it is", caller_location())
        open_spans.append((start, stop, j, written, k, dense))


# --- the registered operators: what torch.compile records for a foreach call -----------------------------------

_CODES = {LIST: 0, SHARED: 1, SCALAR: 2, PER_TENSOR: 3}
_ROLES = {code: role for role, code in _CODES.items()}
# key -> runner, while its Foreach lives
_RUNNERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def key_function(runner: ForeachRunner):
    """A function of no argument naming ``runner`` for the operators (a digest of its pipeline's IR), entering it in
    the table; torch.compile calls it while tracing and takes the result as a constant."""
    from .operator import _constant_to_dynamo, _digest

    @_constant_to_dynamo
    def key() -> str:
        name = "f" + _digest(runner.cache.pipeline)
        _RUNNERS.setdefault(name, runner)
        return name
    return key


def _flattened(call: _Call) -> tuple[list, list, list]:
    """A call's arguments as the operators take them: the tensors, the numbers, and the layout (a role code and
    a count per argument)."""
    tensors, numbers, layout = [], [], []
    for a, r in zip(call.arguments, call.roles):
        items = list(a) if r in (LIST, PER_TENSOR) else [a]
        (numbers if r in (SCALAR, PER_TENSOR) else tensors).extend(items)
        layout += [_CODES[r], len(items)]
    return tensors, numbers, layout


def _unflattened(tensors: list, numbers: list, layout: list) -> tuple:
    arguments, t, s = [], 0, 0
    for code, count in zip(layout[::2], layout[1::2]):
        role = _ROLES[code]
        if role in (SCALAR, PER_TENSOR):
            items, s = list(numbers[s:s + count]), s + count
        else:
            items, t = list(tensors[t:t + count]), t + count
        arguments.append(items if role in (LIST, PER_TENSOR) else items[0])
    return tuple(arguments)


def traced_call(key, runner: ForeachRunner, arguments: tuple, out, named: tuple):
    """The call torch.compile records: ``tricomb::foreach`` (new results) or ``tricomb::foreach_`` (into ``out``)."""
    call = classify(arguments, out, runner.cache.pipeline.num_inputs, runner.cache.pipeline.width)
    tensors, numbers, layout = _flattened(call)
    if out is None:
        flat = torch.ops.tricomb.foreach(key(), tensors, [*named, *numbers], [len(named), *layout])
        width = runner.cache.pipeline.width
        fields = [list(flat[k * call.n:(k + 1) * call.n]) for k in range(width)]
        return fields[0] if width == 1 else tuple(fields)
    torch.ops.tricomb.foreach_(key(), tensors, [*named, *numbers], [len(named), *layout],
                               [t for o in call.outs for t in o])
    return out


def _call_from(key: str, tensors, numbers, layout):
    runner = _RUNNERS.get(key)
    if runner is None:
        raise KeyError(f"tricomb::foreach: no foreach {key!r} in this process (keep the tc.foreach alive while its "
                       "graphs run)")
    named = len(layout) and layout[0]
    return runner, _unflattened(tensors, numbers[named:], layout[1:]), tuple(numbers[:named])


@torch.library.custom_op("tricomb::foreach", mutates_args=())
def _foreach(key: str, tensors: list[torch.Tensor], numbers: Sequence[Number], layout: list[int]) -> list[torch.Tensor]:
    runner, arguments, named = _call_from(key, tensors, numbers, layout)
    result = runner(arguments, None, named)
    return [t for field in (result if isinstance(result, tuple) else (result,)) for t in field]


@_foreach.register_fake
def _foreach_fake(key, tensors, numbers, layout):
    runner, arguments, named = _call_from(key, tensors, numbers, layout)
    call = classify(arguments, None, runner.cache.pipeline.num_inputs, runner.cache.pipeline.width)
    fields = [[] for _ in range(runner.cache.pipeline.width)]
    for t in range(call.n):
        position = [a[t] if r == LIST else a if r == SHARED else _stand_in(a[t] if r == PER_TENSOR else a)
                    for a, r in zip(call.arguments, call.roles)]
        metas = [torch.empty_like(x, device="meta") if isinstance(x, torch.Tensor) else x for x in position]
        form = runner.cache.form(tuple(position))
        tensors_at, values = form.split(tuple(metas), tuple(_stand_in(v) for v in named))
        with runtime_values(values):
            results = evaluate_fields(form.ir, list(tensors_at))
        for k, r in enumerate(results):
            fields[k].append(torch.empty(r.shape, dtype=r.dtype, device=position[0].device
                                         if isinstance(position[0], torch.Tensor) else tensors[0].device))
    return [t for field in fields for t in field]


def _stand_in(number):
    """A number of ``number``'s kind (a tracer's symbol's too): what dtypes depend on."""
    return KIND_NAMES[number_kind(number, 0)](1)


@torch.library.custom_op("tricomb::foreach_", mutates_args=("outs",))
def _foreach_into(key: str, tensors: list[torch.Tensor], numbers: Sequence[Number], layout: list[int],
                  outs: list[torch.Tensor]) -> None:
    runner, arguments, named = _call_from(key, tensors, numbers, layout)
    width = runner.cache.pipeline.width
    n = len(outs) // width
    fields = [list(outs[k * n:(k + 1) * n]) for k in range(width)]
    runner(arguments, fields[0] if width == 1 else tuple(fields), named)


@_foreach_into.register_fake
def _foreach_into_fake(key, tensors, numbers, layout, outs):
    return None
