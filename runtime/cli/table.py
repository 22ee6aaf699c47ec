"""Aligned plain-text tables for the CLI's human output (`--json` is the machine form)."""

from __future__ import annotations

from collections.abc import Sequence


def align(rows: Sequence[Sequence[object]]) -> list[str]:
    """Rows as lines, columns left-aligned to their widest cell, trailing space trimmed."""
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A header line in capitals, then the rows, aligned together."""
    return align([[h.upper() for h in headers], *rows])
