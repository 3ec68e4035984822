"""`.properties` files read the way `java.util.Properties.load` reads them, as Kafka does.

The file is ISO-8859-1 text; characters beyond it are written as `\\uXXXX`. A key ends at the
first unescaped `=`, `:` or whitespace; lines starting with `#` or `!` are comments; a line
ending in an odd number of backslashes continues on the next one, whose leading whitespace is
dropped. Escapes: `\\t \\n \\r \\f \\uXXXX`, and a backslash before any other character keeps
that character (`\\=`, `\\:`, `\\ `, `\\\\`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from moldau.config import ConfigError

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NATURAL_LINES = re.compile(r"\r\n|\r|\n")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")


class PropertiesError(ConfigError):
    """A properties file cannot be read; the message names the file (and line)."""


def load_properties(path: str) -> dict[str, str]:
    """Every key and value of the file at `path`, in order; the last of a repeated key wins."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("iso-8859-1")
    except OSError as exc:
        raise PropertiesError(f"Cannot read {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for number, line in _logical_lines(text):
        try:
            key, value = _split(line)
        except ValueError as exc:
            raise PropertiesError(f"{path}:{number}: {exc}") from None
        values[key] = value
    return values


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of the first natural line, logical line) for each non-comment line."""
    pending: list[str] = []
    start = 0
    for number, natural in enumerate(_NATURAL_LINES.split(text), 1):
        stripped = natural.lstrip(_WHITESPACE)
        if not pending:
            if not stripped or stripped[0] in "#!":
                continue
            start = number
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2:
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        yield start, "".join(pending)
        pending = []
    if pending:  # a continuation on the last line: the file ends the logical line
        yield start, "".join(pending)


def _split(line: str) -> tuple[str, str]:
    """The unescaped key and value of one logical line."""
    index = 0
    while index < len(line) and line[index] not in _SEPARATORS + _WHITESPACE:
        index += 2 if line[index] == "\\" else 1
    key_end = min(index, len(line))
    index = key_end
    while index < len(line) and line[index] in _WHITESPACE:
        index += 1
    if index < len(line) and line[index] in _SEPARATORS:
        index += 1
        while index < len(line) and line[index] in _WHITESPACE:
            index += 1
    return _unescape(line[:key_end]), _unescape(line[index:])


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
            continue
        if index == len(text):
            break  # a lone backslash at the end of the file stands for nothing
        escaped = text[index]
        index += 1
        if escaped == "u":
            digits = text[index:index + 4]
            if not _HEX4.fullmatch(digits):
                raise ValueError(f"Malformed \\uxxxx encoding (\\u{digits})")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    # \uD83D\uDE00 is one character written as its UTF-16 surrogate pair, as in Java.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
