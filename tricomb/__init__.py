"""tricomb: compose map, zip_with, reduce and scan into pipelines; each compiles to one fused Triton kernel.

    import tricomb as tc
    pipe = tc.map(tc.softplus) >> tc.reduce(tc.add)
    y = pipe(x)                      # x: a CUDA tensor, or a CPU tensor run by Triton's interpreter
    print(pipe.source(x))            # the emitted, self-contained Triton module
    pipe = tc.parse("map softplus | sum")
"""
from ._version import __version__
from .api import (Foreach, Pipeline, Plan, all, any, attach, fanout, foreach, argmax, argmin, cummax, cummin, cumprod, cumsum, map, max, mean, min, nanmean, nansum, prod, reduce, scan,
                  sum, vjp, zip_with)
from .dsl.parser import parse
from . import library
from .pipeline.operators import Laws, check_laws
from .errors import (AliasError, ArgumentError, ArityError, AxisError, DeviceError, DTypeError, InlineError, Location, ParseError, StageError,
                     ShapeError, TraceError, TricombError, UnknownNameError, UnsupportedError, LawError, CacheWarning)
from .scalar.trace import BUILTINS as _BUILTINS

globals().update(_BUILTINS)  # tc.exp, tc.add, tc.where, ...: one public name per row of the op table

__all__ = ["Pipeline", "Plan", "Foreach", "foreach", "map", "zip_with", "reduce", "scan", "attach", "fanout", "sum", "prod", "max", "min", "mean", "nanmean", "nansum", "argmax", "argmin", "any", "all", "cumsum",
           "cumprod", "cummax", "cummin", "vjp", "parse", "check_laws", "Laws", "TricombError", "ParseError", "UnknownNameError", "ArityError",
           "TraceError", "InlineError", "ShapeError", "AxisError", "DTypeError", "DeviceError", "UnsupportedError",
           "StageError", "LawError", "CacheWarning", "ArgumentError", "AliasError", "library",
           "Location", "__version__"] + sorted(_BUILTINS)


def __getattr__(name: str):
    """``tc.sofplus``: an AttributeError that names the closest public names."""
    import difflib
    close = difflib.get_close_matches(name, __all__, n=3, cutoff=0.7)
    hint = f"; did you mean {' or '.join('tc.' + c for c in close)}?" if close else \
        "; the builtins are listed in docs/builtins.md"
    raise AttributeError(f"module 'tricomb' has no attribute {name!r}{hint}")
