"""A JSON object read from text a person or a process wrote (a flag, a command's stdout).

Owns the two ways such text fails: it is not JSON, or it is JSON but not an object.
The message says which; callers prefix where the text came from. Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any


def json_object(text: str | bytes) -> dict[str, Any]:
    """The object `text` holds; `ValueError` saying why when it holds none."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, got {type(value).__name__}")
    return value
