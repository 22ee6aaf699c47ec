"""Which records changed since the health pass last looked: their ids, gathered from the parts.

Owns one set of trigger ids that the reconciler adds to (a record arrived, changed, was
stamped or went) and the ticker adds to (an armed entry's next fire moved, or it was
disarmed), and that the health pass takes whole at the start of a pass. So a pass judges
what changed and nothing else, and a device at rest with 100,000 records judges none
(SPEC "Reconcile, registry, health pass"). Must not judge nor decide anything: no clock,
no I/O.
"""

from __future__ import annotations

from triggers.records import TriggerId


class Touched(set[TriggerId]):
    """Ids added by the parts that change records or fires (`add`, `update`: the set's own,
    100,000 of them at a start); `take()` empties it."""

    def take(self) -> set[TriggerId]:
        """Every id added since the last `take`."""
        ids = set(self)
        self.clear()
        return ids
