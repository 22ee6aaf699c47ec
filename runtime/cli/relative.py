"""An instant as people read it beside a table's other columns: `in 3m`, `12s ago`, `now`.

Owns `relative(text, now)`: the distance from `now` to an RFC 3339 instant in its largest
whole unit (s, m, h under 48, then d); `-` for none or for text that is no instant. The
JSON forms keep the RFC 3339 UTC instant; this is for the tables only. Pure: `now` is given.
"""

from __future__ import annotations

from datetime import datetime

_UNITS = ((172_800, 86_400, "d"), (3_600, 3_600, "h"), (60, 60, "m"), (0, 1, "s"))


def relative(text: object, now: datetime) -> str:
    if not isinstance(text, str) or not text:
        return "-"
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return "-"
    if at.tzinfo is None:
        return "-"
    seconds = (at - now).total_seconds()
    size = abs(seconds)
    if size < 1:
        return "now"
    _, unit, name = next(u for u in _UNITS if size >= u[0])
    amount = f"{int(size // unit)}{name}"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"
