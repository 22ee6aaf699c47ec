"""What decoded records share instead of each holding a copy of its own.

Owns the few values that 100,000 stored records repeat (≈ 280 bytes a record, for
≈ 0.7 µs of its decoding): one `{}` for every record without `args` (never written to:
a run gets a copy), one string per distinct `program` and `owner` (`sys.intern`), and
for a record never edited one instant object for its `createdAt`, `updatedAt` and
`activeSince` (the same instant, read in the same zone object). Called from the
records' `__post_init__`, on frozen Structs (`force_setattr`). Pure: no clock, no I/O.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from msgspec.structs import force_setattr

NO_ARGS: dict[str, Any] = {}
"""The `args` of every record that has none: shared, so never written to."""


def share_fields(record: Any) -> None:
    """`args`, `program` and `owner` of `record` swapped for the shared ones."""
    if not record.args and record.args is not NO_ARGS:
        force_setattr(record, "args", NO_ARGS)
    if type(program := record.program) is str:  # (an input's is a checked, shared marker)
        force_setattr(record, "program", sys.intern(program))
    if (owner := record.owner) and type(owner) is str:
        force_setattr(record, "owner", sys.intern(owner))


def share_instants(record: Any) -> None:
    """`updatedAt` and `activeSince` swapped for `createdAt` when they are that instant."""
    if (created := record.created_at) is None:
        return
    if _same(record.updated_at, created):
        force_setattr(record, "updated_at", created)
    if _same(record.active_since, created):
        force_setattr(record, "active_since", created)


def _same(value: datetime | None, held: datetime) -> bool:
    """Another object for the instant `held` is, in the very same zone object (then the
    fields compare directly)."""
    return value is not held and value is not None and value.tzinfo is held.tzinfo and value == held
