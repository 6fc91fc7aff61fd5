"""JSON-compatible values, their canonical text, and how an overlay applies to base data.

The merge rule: an overlay that is a table (dict) applied to base data that is a table
merges key by key, recursively; any other overlay replaces what it lands on (a list
replaces a list whole, a number replaces a table). The overlay ``None`` (JSON ``null``)
is no overlay at all: the base as shipped, which is every data key's original revision.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

__all__ = ["MAX_DEPTH", "apply_overlay", "canonical_json", "check_json", "content_hash"]

MAX_DEPTH = 64
"""The deepest nesting of lists and tables an overlay may have."""


def check_json(value: Any, where: str = "payload", depth: int = 0) -> None:
    """Check that ``value`` is made only of what JSON holds and survives a round trip.

    ``None``, booleans, ints, finite floats, strings, lists, and dicts with string keys;
    nothing else (no tuples, sets, bytes or objects, no NaN or infinity).

    Raises:
        ValueError: naming where in the value the problem is.
    """
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value!r} is not a finite number")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            check_json(item, f"{where}.{k}", depth + 1)
        return
    raise ValueError(f"{where}: a {type(value).__name__} is not JSON-compatible")


def canonical_json(value: Any) -> str:
    """The one text of a JSON-compatible value: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def content_hash(text: str) -> str:
    """SHA-256 of the text's UTF-8, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def apply_overlay(base: Any, overlay: Any) -> Any:
    """The effective value: ``base`` with ``overlay`` applied (see the module's merge rule).

    Neither argument is changed; the result shares no mutable part with them.
    """
    if overlay is None:
        return copy.deepcopy(base)
    return _merge(base, overlay)


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = {k: _merge(v, overlay[k]) if k in overlay else copy.deepcopy(v)
                  for k, v in base.items()}
        for k, v in overlay.items():
            if k not in base:
                merged[k] = copy.deepcopy(v)
        return merged
    return copy.deepcopy(overlay)
