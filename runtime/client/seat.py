"""Where a device's parts work: one space, through one client, as one peer, on one clock.

Owns `Seat`, the one handle `runtime.device` gives every part that talks to its space
(election and heartbeat, takeover, reconciler, health pass, firing and execute, recorder,
subscriptions, chat-watch's link), so each part's constructor names only what is its own
after it. A run by hand (`runtime.fire.manual`) sits as `cli@<host>`. Holds no behaviour: it
must not call the space nor read the clock itself.
"""

from __future__ import annotations

from typing import NamedTuple

from core.clock import Clock
from runtime.client.api import SpaceClient
from triggers.records import PeerId


class Seat(NamedTuple):
    """This device in its space (unpacks as `client, space, peer, clock`)."""

    client: SpaceClient
    space: str
    peer: PeerId
    clock: Clock
