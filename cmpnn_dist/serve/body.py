"""A request body (bytes) -> its JSON value, or one :class:`RequestError` line (400).

Whatever the bytes, :func:`parse_body` either returns a JSON value the routes can check or
raises a 400: bytes that are not UTF-8 or not JSON, ``NaN`` / ``Infinity`` (not JSON), an
integer of more digits than Python converts, arrays and objects nested deeper than
:data:`MAX_DEPTH` (checked before parsing: Python's parser recurses once per level), and
strings that are not Unicode text (a lone surrogate such as ``"\\ud800"``, which no answer
could encode).  The size limit is the route's (:func:`cmpnn_dist.serve.app._read_json`).
"""

from __future__ import annotations

import json
from typing import Any

from cmpnn_dist.serve.engine import RequestError

MAX_DEPTH = 16  # every valid request is one object of scalars: depth 1


def nesting_depth(data: bytes, stop_above: int = MAX_DEPTH) -> int:
    """The deepest nesting of ``[`` / ``{`` in the JSON text ``data``, brackets inside strings
    not counted; the scan stops at the first level past ``stop_above`` (returns it)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # "
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_above:
                    return deepest
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_strings(value: Any) -> None:
    """Every string (object keys included) must encode as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start : exc.end].encode("unicode_escape").decode("ascii")
            raise RequestError(
                400, f"the request body holds a string that is not Unicode text ({bad})"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def parse_body(data: bytes) -> Any:
    """The JSON value of ``data`` (see the module docstring); :class:`RequestError` 400."""
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:  # else it cannot nest that deep
        if nesting_depth(data) > MAX_DEPTH:
            raise RequestError(400, f"the request body nests deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError...
        text = " ".join(str(exc).split())
        raise RequestError(400, f"the request body is not JSON: {text}") from None
    _check_strings(value)
    return value
