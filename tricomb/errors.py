"""The errors tricomb raises.

Every error is a :class:`TricombError`. Each subclass stands for one kind of mistake, and each message
says what is wrong and how to fix it. Errors about a pipeline stage carry the :class:`Location` where the
user built that stage (their file and line, or the line and column of DSL text), never a tricomb frame.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Location:
    """Where a stage or scalar function was written: a file and line, or a column in DSL text."""

    file: str
    line: int
    column: int | None = None
    source_line: str | None = field(default=None, compare=False)  # the line itself, for a caret under column

    def caret(self) -> str:
        """The source line and a caret under the column (empty without them); of a long line, the 100 characters
        around the column."""
        if self.source_line is None or self.column is None:
            return ""
        line, column = self.source_line, self.column
        start = max(0, min(column - 50, len(line) - 100))
        if start or len(line) > 100:
            line = ("..." if start else "") + line[start:start + 100] + ("..." if start + 100 < len(line) else "")
            column = column - start + (3 if start else 0)
        return f"\n    {line}\n    {' ' * (column - 1)}^"

    def __str__(self) -> str:
        col = f", column {self.column}" if self.column is not None else ""
        return f"{self.file}, line {self.line}{col}"


class TricombError(Exception):
    """Base class of every error tricomb raises on purpose."""

    def __init__(self, message: str, location: Location | None = None):
        self.message = message
        self.location = location
        where = f"{location}: " if location is not None else ""
        super().__init__(where + message + (location.caret() if location is not None else ""))


class ParseError(TricombError):
    """DSL text that does not follow the grammar, or names nothing known."""


class UnknownNameError(ParseError):
    """A DSL name that is neither a builtin nor in ``env``."""


class ArityError(TricombError):
    """A scalar function called with the wrong number of arguments, or a pipeline with the wrong inputs."""


class TraceError(TricombError):
    """A Python function could not be traced into a scalar expression."""


class InlineError(TricombError):
    """A user ``@triton.jit`` function could not be brought into the emitted module."""


class ShapeError(TricombError):
    """Input shapes that do not broadcast, or an output buffer of the wrong shape."""


class AxisError(TricombError):
    """An axis outside the input's rank, or repeated."""


class DTypeError(TricombError):
    """An input or output dtype tricomb does not handle, or that does not match."""


class DeviceError(TricombError):
    """Inputs on different devices, or on a device tricomb cannot run on (the CPU too, where Triton's interpreter
    cannot run beside the numpy installed)."""


class ArgumentError(TricombError, ValueError):
    """A stage's or library pipeline's argument of the wrong type or value (``keepdim=2``, ``ema(alpha=0)``,
    ``dim=``, ``identity=`` that is not numbers), or a call given keyword inputs. Also a ValueError."""


class AliasError(ArgumentError):
    """``out=`` sharing memory with an input, or two tensors of ``out=`` sharing memory."""


class StageError(TricombError):
    """A stage torch itself rejects for the given inputs (a max over an empty axis, a mean of bools, ...)."""


class UnsupportedError(TricombError):
    """A well-formed pipeline that this version of tricomb cannot run yet."""


class LawError(TricombError):
    """A reduce or scan operator that breaks a law the plan relies on (associativity)."""


class CacheWarning(UserWarning):
    """The disk cache could not be used as asked (untrusted, read-only, full) or held a damaged entry; tricomb
    goes on without it or rebuilds the entry, so results are unaffected (``docs/reliability.md``)."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_location() -> Location | None:
    """The innermost stack frame outside tricomb: where the user called into the public API (outside torch too,
    where torch calls the pipeline for the user: ``torch.vmap(pipe)(x)``; and outside lark, through which text
    builds)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        package = frame.f_globals.get("__name__", "").split(".")[0]
        if not path.startswith(_PACKAGE_DIR + os.sep) and package not in ("lark", "torch"):
            return Location(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None


def too_deeply_nested() -> UnsupportedError:
    """The error for a scalar function nested past Python's recursion limit (tricomb walks expressions
    recursively), located at the user's call; raised in place of the RecursionError."""
    return UnsupportedError("a scalar function of this pipeline nests too deeply for tricomb (past Python's "
                            "recursion limit, some hundreds of operations in one chain); split it across map "
                            "stages, or write it as a @triton.jit function", caller_location())
