"""Request bodies in, a JSON value or one 400 line out (``cmpnn_dist/serve/body.py``), no server.

The bracket scan that limits nesting is checked against the depth of the parsed value (a
recursive walk) on random JSON full of brackets, quotes and escapes inside strings; every
hostile body is a :class:`RequestError` 400 with a line saying why, never another exception.
The same bodies against a running server: ``tests/integration/test_serve.py``.
"""

from __future__ import annotations

import json
import random

import pytest

from cmpnn_dist.serve.body import MAX_DEPTH, nesting_depth, parse_body
from cmpnn_dist.serve.engine import RequestError


def depth_of(value: object) -> int:
    """The reference: nesting depth of a parsed JSON value (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def random_value(rng: random.Random, depth: int) -> object:
    tricky = ['"', "\\", "[", "]", "{", "}", "\\u005b", "é", " ", "a"]
    kind = rng.randrange(5 if depth > 0 else 3)
    if kind == 0:
        return "".join(rng.choice(tricky) for _ in range(rng.randrange(8)))
    if kind == 1:
        return rng.choice([0, -3, 1.5, True, None])
    if kind == 2:
        return rng.randrange(10**6)
    if kind == 3:
        return [random_value(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {
        str(random_value(rng, 0)): random_value(rng, depth - 1) for _ in range(rng.randrange(4))
    }


def test_the_bracket_scan_agrees_with_the_parsed_depth():
    rng = random.Random(0)
    for _ in range(400):
        value = random_value(rng, rng.randrange(1, 9))
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            data = text.encode()
            assert nesting_depth(data, stop_above=100) == depth_of(json.loads(data)), text


def bad(body: bytes) -> str:
    with pytest.raises(RequestError) as caught:
        parse_body(body)
    assert caught.value.status == 400 and "\n" not in caught.value.message
    return caught.value.message


@pytest.mark.parametrize(
    "body, words",
    [
        (b"[" * 4000 + b"]" * 4000, f"nests deeper than {MAX_DEPTH} levels"),  # 8 KB, a 500 once
        (b'{"a":' * 4000 + b"1" + b"}" * 4000, f"nests deeper than {MAX_DEPTH} levels"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nests deeper"),
        (b'{"head": "A::1", "k": ' + b"9" * 5000 + b"}", "not JSON: Exceeds the limit"),
        (b'{"head": NaN}', "not JSON: NaN is not JSON"),
        (b'{"head": -Infinity}', "not JSON: -Infinity is not JSON"),
        (b'{"head": "\\ud800", "relation": "t0"}', "not Unicode text (\\ud800)"),
        (b'{"\\udfff": 1}', "not Unicode text (\\udfff)"),
        (b'{"head": "\xed\xa0\x80"}', "not Unicode text (\\ud800)"),  # a surrogate's bytes
        (b'{"head": "\xff"}', "not JSON: 'utf-8' codec can't decode byte 0xff"),
        (b"", "not JSON: Expecting value"),
        (b'{"head": "A::1"', "not JSON: Expecting ',' delimiter"),
        (b"[" * 3000, f"nests deeper than {MAX_DEPTH} levels"),
    ],
)
def test_hostile_bodies_are_one_400_line(body, words):
    assert words in bad(body)


def test_what_parses_is_the_json_value():
    assert parse_body(b'{"head": "A::1", "relation": "t0", "k": 3}') == {
        "head": "A::1",
        "relation": "t0",
        "k": 3,
    }
    nested = [[[["x"]]]] * 3
    assert parse_body(json.dumps(nested).encode()) == nested
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert depth_of(parse_body(deepest.encode())) == MAX_DEPTH
    brackets = {"head": "[" * 5000 + '\\"{' * 100}  # brackets and quotes in a string: depth 1
    assert parse_body(json.dumps(brackets).encode()) == brackets
