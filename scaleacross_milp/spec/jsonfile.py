"""Reading the JSON files a user gives us and validating them against a contract, with every problem reported in
the user's words: the file it is in, the field's dotted path, one line per problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

ContractT = TypeVar("ContractT", bound=BaseModel)
_BINARY_PROBE_BYTES = 8192
"""A NUL byte among the first bytes marks binary data (what `git` and `grep` test too)."""


class InputError(ValueError):
    """A user-facing input problem: the message names the file and field."""


class FileProblems(InputError):
    """Problems in one file: `lines` holds one `field.path: message` per problem."""

    def __init__(self, source: Path, lines: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(lines))
        self.source, self.lines = source, lines


class _Object(dict):
    """A JSON object that remembers the first key it was given twice."""

    duplicate: str | None = None


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    for key, value in pairs:
        if key in obj and obj.duplicate is None:
            obj.duplicate = key
        obj[key] = value
    return obj


def _first_duplicate(value: Any, where: tuple = ()) -> tuple[tuple, str] | None:
    """(dotted path of the object, key) of the first key given twice, depth first."""
    if isinstance(value, _Object) and value.duplicate is not None:
        return where, value.duplicate
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        if (found := _first_duplicate(child, (*where, key))) is not None:
            return found
    return None


def _text(path: Path) -> str:
    """The file's UTF-8 text; InputError for an unreadable file, binary data or another encoding."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    if (nul := raw.find(b"\0", 0, _BINARY_PROBE_BYTES)) >= 0:
        raise InputError(f"{path}: binary data (a NUL byte at offset {nul}), not JSON text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); "
                         f"save it as UTF-8") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file; InputError names the file and what is wrong (encoding, syntax with line and column,
    nesting beyond Python's recursion limit, a key given twice with the dotted path of its object)."""
    text = _text(path)
    try:
        data = json.loads(text, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be an input file (arrays or objects inside one another "
                         f"thousands of levels deep)") from None
    if (found := _first_duplicate(data)) is not None:
        where, key = found
        prefix = ".".join(str(part) for part in where)
        raise InputError(f"{path}: {prefix + ': ' if prefix else ''}duplicate key '{key}'")
    return data


def _is_union_tag(part: str | int) -> bool:
    """Our discriminated unions name their tags `<like this>`; pydantic puts tags in error paths, we do not."""
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


def error_lines(exc: ValueError) -> list[str]:
    """One `field.path: message` line per pydantic error (a string where a number belongs says so); a plain
    ValueError is one line."""
    if not isinstance(exc, ValidationError):
        return [str(exc)]
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part)) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] in ("int_type", "float_type") and isinstance(error["input"], str):
            message += f", not the string '{error['input']}'"
        lines.append(f"{where}: {message}")
    return lines


def validate_json(contract: type[ContractT], data: Any, source: Path) -> ContractT:
    """`data` read from `source` as a `contract`, validated as JSON strictly: a number must be a JSON number
    (not a quoted string), a string a JSON string; FileProblems lists every problem."""
    try:
        return contract.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise FileProblems(source, error_lines(exc)) from None
