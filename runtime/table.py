"""Aligned plain-text tables for the CLI's human output (`--json` is the machine form)."""

from __future__ import annotations

from collections.abc import Sequence


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Header and rows as lines, columns left-aligned to their widest cell."""
    cells = [[str(h).upper() for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
