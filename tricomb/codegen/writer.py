"""An indent-aware code writer and a generator of fresh names."""
from __future__ import annotations

from contextlib import contextmanager


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
        """Add one line (or several, split on newlines); an empty text adds a blank line."""
        if comment:
            text = f"{text}  # {comment}" if text else f"# {comment}"
        for part in text.split("\n"):
            self._lines.append(self._indent * self._depth + part if part else "")

    def lines(self, texts) -> None:
        for text in texts:
            self.line(text)

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

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
