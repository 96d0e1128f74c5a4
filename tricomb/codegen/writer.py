"""An indent-aware code writer, a generator of fresh names, and the two ways a value enters the source.

Only tricomb writes code. A value that comes from the user reaches the emitted module in one of two ways, each
through one function: a number as a literal (:func:`~tricomb.scalar.literals.number_literal`, exactly a
``bool``, ``int`` or ``float``, whose repr is Python's own), and text (function names, pipeline text,
identities as written) inside a comment or a docstring (:func:`escape_text`, which leaves nothing that could
end either). The :class:`Writer` applies
:func:`escape_text` to every comment and docstring line itself, so no caller can forget it.
"""
from __future__ import annotations

from contextlib import contextmanager


def escape_text(text: str) -> str:
    """``text`` made safe inside a ``#`` comment and inside a ``\"\"\"`` docstring: printable ASCII stays as it
    is, except the backslash and the double quote, which get a backslash; every other character (line breaks of
    any kind, NUL, form feed, tabs, non-ASCII letters, bidirectional controls) becomes its ``\\x``, ``\\u`` or
    ``\\U`` escape. The result is one line of printable ASCII with no ``\"`` left bare, so it ends neither the
    comment nor the docstring, and a docstring holding it reads back as ``text``."""
    return "".join(ch if " " <= ch <= "~" and ch not in '\\"' else _escape_char(ch) for ch in str.__str__(text))


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if ch in '\\"':
        return "\\" + ch
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class Names:
    """Hands out names that do not clash: ``fresh("t")`` gives ``t0``, ``t1``, ...; ``claim`` reserves one."""

    def __init__(self, taken: set[str] | None = None):
        self.taken: set[str] = set(taken or ())
        self._counters: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        n = self._counters.get(base, 0)
        while f"{base}{n}" in self.taken:
            n += 1
        self._counters[base] = n + 1
        name = f"{base}{n}"
        self.taken.add(name)
        return name

    def claim(self, name: str) -> str:
        if name in self.taken:
            raise ValueError(f"internal error: name {name!r} is already taken")
        self.taken.add(name)
        return name


class Writer:
    """Collects lines of Python source at the current indentation.

    >>> w = Writer()
    >>> with w.block("def f(x):"):
    ...     w.line("return x")
    >>> print(w.text(), end="")
    def f(x):
        return x
    """

    def __init__(self, indent: str = "    "):
        self._lines: list[str] = []
        self._depth = 0
        self._indent = indent

    def line(self, text: str = "", comment: str | None = None) -> None:
        """Add one line of code (or several, split on newlines), with ``comment`` after it (escaped: see
        :func:`escape_text`); an empty text adds a blank line (or a comment line)."""
        for part in text.split("\n"):
            self._lines.append(self._indent * self._depth + part if part else "")
        if comment:
            if text:
                self._lines[-1] += f"  # {escape_text(comment)}"
            else:
                self._lines[-1] = self._indent * self._depth + f"# {escape_text(comment)}"

    def lines(self, texts) -> None:
        for text in texts:
            self.line(text)

    def comment(self, text: str) -> None:
        """A comment line; ``text`` is escaped (:func:`escape_text`), so it cannot end the comment."""
        self.line(comment=text)

    def docstring(self, lines: list[str]) -> None:
        """A triple-quoted docstring of ``lines``, each escaped (:func:`escape_text`): one line per entry, blank
        entries blank."""
        texts = [escape_text(line) for line in lines]
        if len(texts) == 1:
            self.line(f'"""{texts[0]}"""')
            return
        self.line(f'"""{texts[0]}')
        self.lines(texts[1:])
        self.line('"""')

    @contextmanager
    def block(self, header: str):
        """A header line ending in ``:`` and an indented body."""
        self.line(header)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def raw(self, text: str) -> None:
        """Add a block of already-formatted source, re-indented to the current depth."""
        for part in text.strip("\n").split("\n"):
            self.line(part)

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
