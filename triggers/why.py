"""Why a slot fired or did not, from history facts alone: the question and the answer.

Owns `locate` (which slot and fire key a question names, from the record's revisions)
and `explain` (the answer of SPEC "History and `why`": verdict, reason, detail, the
checks in order, the run, a remedy), running `triggers.whychain.Chain` over `Facts` the
space read (`space.recall`). Must not read the clock or do I/O: `now` is a fact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from core.vocab import iso, key_instant
from triggers import facts as f
from triggers import slots
from triggers.facts import record_at
from triggers.records import EventTrigger, Salvaged, load
from triggers.whychain import Chain, Check, Fail, Located
from triggers.whywords import REMEDY, Reason, Verdict, verdict_of


class Explanation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    trigger: str
    at: str
    slot: str | None
    key: str | None
    verdict: Verdict
    reason: Reason
    detail: str
    checks: list[Check]
    run: dict[str, Any] | None = None
    remedy: str | None = None


def kind_at(revisions: list[f.Revision], at: datetime) -> str | None:
    record = record_at(revisions, at)
    kind = None if record is None else record.get("kind")
    return kind if isinstance(kind, str) else None


def locate(revisions: list[f.Revision], at: datetime, *, exact: bool) -> Located:
    """The slot of a cron or once record at `at` (`exact`: `at` was asked for itself, not
    "the last due slot"). An event record's slot is its message (`locate_message`)."""
    record = record_at(revisions, at)
    if record is None:
        return Located(asked=slots.Asked.NONE, slot=None, key=None)
    loaded = load(record)
    if isinstance(loaded, Salvaged | EventTrigger):
        return Located(asked=slots.Asked.NONE, slot=None, key=None, record=record)
    found = slots.slot_at(loaded.spec, at, exact=exact)
    key = None if found.slot is None else key_instant(found.slot)
    return Located(asked=found.asked, slot=found.slot, key=key, detail=found.detail, record=record)


def locate_message(
    revisions: list[f.Revision], at: datetime, message: f.MessageFact | None
) -> Located:
    """An event record's slot: the message asked about (or the last before `at`)."""
    record = record_at(revisions, at)
    if message is None:
        detail = "no message of its chat was accepted at or before this instant"
        return Located(asked=slots.Asked.NONE, slot=None, key=None, detail=detail, record=record)
    if message.agent is not None and not message.agent.startswith("trigger:"):
        detail = f"{message.message_id} is the agent's own message ({message.agent}): never a fire"
        return Located(
            asked=slots.Asked.NOT_A_SLOT,
            slot=message.accepted,
            key=message.message_id,
            detail=detail,
            record=record,
        )
    return Located(
        asked=slots.Asked.SLOT, slot=message.accepted, key=message.message_id, record=record
    )


def explain(trigger: str, at: datetime, where: Located, facts: f.Facts) -> Explanation:
    """The answer for the slot `where` names, from `facts`."""
    chain = Chain(where, facts)
    try:
        chain.run()
    except Fail as fail:
        detail = fail.detail + _refused(chain.step, facts)
        checks = [*chain.checks, Check(chain.step, False, detail)]
        verdict = fail.verdict or verdict_of(fail.reason)
        return _answer(trigger, at, where, (verdict, fail.reason, detail), checks, chain)
    reason, detail = chain.outcome
    said = (verdict_of(reason), reason, detail)
    return _answer(trigger, at, where, said, chain.checks, chain)


def _refused(step: str, facts: f.Facts) -> str:
    """A refused claim the chain did not reach (an earlier check failed) is still told."""
    if step in ("claim", "run") or not facts.refusals:
        return ""
    r = facts.refusals[-1]
    return f"; a claim of it was refused too: {r.peer} at term {r.term}, {r.code}"


def _answer(
    trigger: str,
    at: datetime,
    where: Located,
    said: tuple[Verdict, Reason, str],
    checks: list[Check],
    chain: Chain,
) -> Explanation:
    verdict, reason, detail = said
    remedy = REMEDY.get(reason) if verdict is not Verdict.PENDING else None
    return Explanation(
        trigger=trigger,
        at=iso(at),
        slot=None if where.slot is None else iso(where.slot),
        key=where.key,
        verdict=verdict,
        reason=reason,
        detail=detail,
        checks=checks,
        run=chain.run_doc(),
        remedy=None if remedy is None else remedy.replace("{id}", trigger),
    )
