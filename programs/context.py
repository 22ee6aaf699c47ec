"""What a run knows about itself: handed to the worker and to `use()`.

Plain data, shared by the executor (which ships it to the worker process) and by
the capabilities `use()` returns (which talk to the space with its token).
"""

from __future__ import annotations

import msgspec


class RunContext(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    trigger_id: str
    program: str
    peer: str
    space: str
    url: str  # the space API's base URL, e.g. http://127.0.0.1:8377
    token: str  # the run token: scoped to this space and this trigger
    term: int = 0
    key: str = ""
