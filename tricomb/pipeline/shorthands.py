"""The stage shorthands (``sum``, ``cumsum``, ``any``, ...): one table read by the Python API (``tc.sum``), the
DSL (``| sum``) and the printer (which writes a stage back as its shorthand)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shorthand:
    """A named reduce or scan stage: ``kind`` ("reduce" or "scan") with builtin operator ``op``."""

    name: str
    kind: str
    op: str
    torch_name: str  # the torch function it matches
    mean: bool = False
    index: bool = False  # argmax/argmin: the chosen element's position; cummax/cummin: values and positions
    skip_nan: bool = False  # nansum: NaN elements count as the identity
    takes_dtype: bool = False  # as torch's function: sum, prod, mean, nansum, nanmean, cumsum and cumprod take dtype=

    @property
    def arguments(self) -> tuple[str, ...]:
        """The keyword arguments the stage takes, as torch's function does (a shorthand's operator is a builtin,
        whose identity is known: no ``identity=``)."""
        return (("axis", "keepdim") if self.kind == "reduce" else ("axis", "reverse", "exclusive")) + \
            (("dtype",) if self.takes_dtype else ())


SHORTHANDS: dict[str, Shorthand] = {s.name: s for s in [
    Shorthand("sum", "reduce", "add", "torch.sum", takes_dtype=True),
    Shorthand("prod", "reduce", "mul", "torch.prod", takes_dtype=True),
    Shorthand("max", "reduce", "maximum", "torch.amax"),
    Shorthand("min", "reduce", "minimum", "torch.amin"),
    Shorthand("mean", "reduce", "add", "torch.mean", mean=True, takes_dtype=True),
    Shorthand("nansum", "reduce", "add", "torch.nansum", skip_nan=True, takes_dtype=True),
    Shorthand("nanmean", "reduce", "add", "torch.nanmean", mean=True, skip_nan=True, takes_dtype=True),
    Shorthand("argmax", "reduce", "maximum", "torch.argmax", index=True),
    Shorthand("argmin", "reduce", "minimum", "torch.argmin", index=True),
    Shorthand("any", "reduce", "logical_or", "torch.any"),
    Shorthand("all", "reduce", "logical_and", "torch.all"),
    Shorthand("cumsum", "scan", "add", "torch.cumsum", takes_dtype=True),
    Shorthand("cumprod", "scan", "mul", "torch.cumprod", takes_dtype=True),
    Shorthand("cummax", "scan", "maximum", "torch.cummax", index=True),
    Shorthand("cummin", "scan", "minimum", "torch.cummin", index=True),
]}

# the shorthand a reduce or scan with this operator prints as (mean is printed from Reduce.mean)
BY_OPERATOR: dict[tuple[str, str], str] = {(s.kind, s.op): s.name for s in SHORTHANDS.values()
                                           if not (s.mean or s.index or s.skip_nan)}
# (kind, operator) -> the index shorthand: ("reduce", "maximum") -> argmax, ("scan", "maximum") -> cummax
INDEX_SHORTHANDS: dict[tuple[str, str], str] = {(s.kind, s.op): s.name for s in SHORTHANDS.values() if s.index}

# reduce names that are also accepted where an operator belongs: ``reduce sum`` means ``reduce add``
OPERATOR_ALIASES: dict[str, str] = {s.name: s.op for s in SHORTHANDS.values()
                                    if s.kind == "reduce" and not (s.mean or s.index or s.skip_nan)}
