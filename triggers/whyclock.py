"""A device's clock as evidence in `why`: the offset to the space's it reported, in words.

Owns how the chain names the clock a device went by when it was up at a slot, claimed it
or was refused (SPEC "Sleep and clocks": a device fires by the space's clock, keeps its
offset, shows it in `why`, warns past 2 s). The offset is the one its heartbeats had
reported by then within the same window of heartbeats (`Facts.offsets`). Decides no
reason: `triggers.whychain` adds these to the details of its checks. Must not read the
clock or do I/O.
"""

from __future__ import annotations

from datetime import datetime

from core.vocab import CLOCK_WARN_S
from triggers import facts as f

WARN_MS = CLOCK_WARN_S * 1000


def reported(facts: f.Facts, peer: str, t: datetime) -> f.Offset | None:
    """The offset `peer` had reported by `t`, in its window of heartbeats covering `t`."""
    w = f.covering(facts.windows, t, facts.beat_seconds, peer)
    return None if w is None else f.offset_at(facts.offsets, t, peer, w.began)


def said(facts: f.Facts, peer: str, t: datetime) -> str:
    """`; box's clock was 1.3 s ahead of the space's …` at `t`, or '' when not reported."""
    o = reported(facts, peer, t)
    return "" if o is None else f"; {words(peer, o.ms)}"


def skewed(facts: f.Facts, peer: str, t: datetime) -> str:
    """The same, only for an offset past the warning: the clue to a miss or a late run."""
    o = reported(facts, peer, t)
    return "" if o is None or abs(o.ms) <= WARN_MS else f"; {words(peer, o.ms)}"


def words(peer: str, ms: float) -> str:
    """How far `peer`'s clock was off the space's (`ms`: the space's minus the device's)."""
    if abs(ms) < 1:
        return f"{peer}'s clock was in step with the space's"
    size = f"{abs(ms):.0f} ms" if abs(ms) < 1000 else f"{abs(ms) / 1000:.1f} s"
    side = "ahead of" if ms < 0 else "behind"
    text = f"{peer}'s clock was {size} {side} the space's"
    if abs(ms) > WARN_MS:
        text += f", past the {CLOCK_WARN_S:g} s warning (it fires by the space's clock)"
    return text
