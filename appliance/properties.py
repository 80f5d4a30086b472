"""Java `.properties` parsing: the file format of Kafka's `server.properties`.

Kafka operators hand us the same files they hand Kafka, so we read the format as Java does:
`key=value`, `key: value` or `key value`; `#` and `!` comment lines; a trailing backslash
continues a line; backslash escapes (`\\t`, `\\n`, `\\uXXXX`, and `\\` before any other
character stands for that character). Errors carry the file name and line number.
"""

from __future__ import annotations

import re

_SEPARATOR = re.compile(r"(?<!\\)(?:\s*[=:]\s*|\s+)")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A line of a properties file cannot be read."""


def _unescape(text: str, where: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"{where}: bad unicode escape \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _logical_lines(text: str):
    """Yield (line number, logical line) with continuations joined and comments dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending else raw.strip()
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd count of backslashes: the line continues
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse properties text into an ordered dict; a key given twice keeps the last value."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        match = _SEPARATOR.search(line)
        if match is None:
            key, value = line, ""
        else:
            key, value = line[: match.start()], line[match.end() :]
        key = _unescape(key, where)
        if not key:
            raise PropertiesError(f"{where}: a line has a value but no key: {line!r}")
        result[key] = _unescape(value, where)
    return result


def parse_override(text: str) -> tuple[str, str]:
    """Parse one `--override key=value` argument, as Kafka's start script accepts them."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise PropertiesError(f"--override expects key=value, got {text!r}")
    return key.strip(), value.strip()
