"""A trigger addressed as a person does: by its id or by its name (SPEC "CLI conventions").

Owns `resolve`: an id the space has is itself; otherwise the name of exactly one record;
an unknown one is refused (exit 1) with the closest names and ids ("did you mean"), an
ambiguous one (two records written under one name before names were unique) with the
ids that have it. Must not change anything in the space.
"""

from __future__ import annotations

import difflib

from runtime.cli.common import Target
from runtime.cli.talk import Failure
from runtime.client.api import ApiError, SpaceClient


async def resolve(client: SpaceClient, where: Target, ref: str) -> str:
    """The id of the trigger `ref` names (its id or its name)."""
    try:
        return str((await client.trigger_get(where.space, ref))["id"])
    except ApiError as exc:
        if exc.code != "unknown_trigger":
            raise
    listed = (await client.triggers(where.space))["triggers"]
    named = [str(t["id"]) for t in listed if t.get("name") == ref]
    if len(named) == 1:
        return named[0]
    if named:
        raise Failure(
            "ambiguous_trigger",
            f"{len(named)} triggers are named {ref!r}: {', '.join(named)}; give the id",
        )
    words = [str(t.get("name") or "") for t in listed] + [str(t["id"]) for t in listed]
    close = difflib.get_close_matches(ref, [w for w in words if w], n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise Failure("unknown_trigger", f"no trigger {ref!r} in space {where.space!r}{hint}")


async def id_if_named(client: SpaceClient, where: Target, ref: str) -> str:
    """The id of the one trigger named `ref`, else `ref` itself (an id, perhaps of a trigger
    deleted since: its runs remain)."""
    listed = (await client.triggers(where.space))["triggers"]
    named = [str(t["id"]) for t in listed if t.get("name") == ref and t.get("id") != ref]
    return named[0] if len(named) == 1 else ref


async def names(client: SpaceClient, where: Target) -> dict[str, str]:
    """The name of each named trigger of the space, by id (a table shows it for the id)."""
    listed = (await client.triggers(where.space))["triggers"]
    return {str(t["id"]): t["name"] for t in listed if isinstance(t.get("name"), str)}
