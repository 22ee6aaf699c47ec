"""The store seam: what the database decides, behind one interface with two implementations.

Owns the `Store` protocol and its answers for the parts SPEC "Beyond one machine" says the
database decides: the lease and its term by the store's clock, fire claims fenced by the
lease, records written by compare-and-set, and the gapless, commit-ordered `seq` of the
change feed and of each chat.
`sqlite.SqliteStore` is the embedded default (today's tables and code);
`postgres.PostgresStore` runs on asyncpg and decides by PostgreSQL's `now()`. Must not
know HTTP or devices.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import msgspec
from aiohttp import web

if TYPE_CHECKING:  # `leases` and `chats` serve their routes through this seam
    from core.chatwire import Message, MessageEdit, MessageIn
    from core.peerwire import HeartbeatIn
    from core.wire import FireIn, RunIn, Space, TurnIn
    from space.appstate import RunRetention
    from space.change_log import Change
    from space.chat_store import Chat
    from space.history import Author
    from space.leases import Lease
    from space.programs import Publication
    from space.recall import SlotHistory, TriggerHistory
    from space.scrape import Scrape
    from space.store.logwire import Kept, LogQuery, Poster, RunPosted, RunsPosted
    from space.token_store import Principal
    from triggers import facts

Record: TypeAlias = "dict[str, Any]"  # a trigger record as stored (`trigger_store.Record`)
LeaseStep: TypeAlias = "Callable[[Lease, datetime], Lease]"  # `leases.Conflict` refuses
BackfillSlots: TypeAlias = "Callable[[Record, datetime], list[str]]"  # `Refusal` refuses
BackfillStamp: TypeAlias = "Callable[[list[str], datetime], Record | None]"


class LeaseChange(msgspec.Struct, frozen=True):
    """The lease before a change, after it (None: refused) and the store's `now` it ran at."""

    old: Lease
    new: Lease | None
    now: datetime


class ClaimIn(msgspec.Struct, frozen=True, kw_only=True):
    """A fire claim: `floating` ones are fenced by the lease (`peer` must hold it at `term`)."""

    space: str
    trigger_id: str
    key: str
    term: int
    peer: str
    floating: bool
    claim_id: str = ""


class Claimed(msgspec.Struct, frozen=True):
    claimed_at: str  # RFC 3339; a resent claim (same `claim_id`) answers its first instant


class Taken(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    term: int
    claimed_at: str


class Stale(msgspec.Struct, frozen=True):
    """Refused by the fence: the lease as it is, and the store's `now` that judged it."""

    lease: Lease
    now: datetime


class Store(Protocol):
    async def lease(self, space: str) -> tuple[Lease, datetime]:
        """The space's lease and the store's `now`."""
        ...

    async def change_lease(self, space: str, step: LeaseStep) -> LeaseChange:
        """Apply `step` to the lease under a lock, with the history of terms, all or nothing."""
        ...

    async def claim(self, claim: ClaimIn) -> Claimed | Taken | Stale: ...

    async def claim_fire(self, space: str, fire: FireIn, margin: float) -> dict[str, Any]:
        """Fence, claim and (with `run`) mint its run's token in one transaction, by the
        store's clock; a refusal is kept in the claim ledger, then raised (`Refusal`)."""
        ...

    async def claim_list(
        self, space: str, batch: list[FireIn], margin: float
    ) -> list[dict[str, Any]]:
        """Each claim of `batch` as `claim_fire`, in one transaction: one result each."""
        ...

    async def fires_page(self, space: str, trigger: str | None, limit: int) -> list[dict[str, Any]]:
        """The latest `limit` claims (of `trigger`), oldest first, as the API shows them."""
        ...

    async def append_change(self, change: Change) -> int:
        """Append to the change feed in a transaction of its own; its `seq`."""
        ...

    async def changes_since(
        self, space: str, since: int, limit: int, omit: str = ""
    ) -> list[dict[str, Any]]:
        """Up to `limit` changes after `since`; a stamp marked with writer `omit` only as
        `{"seq", "omitted": True}` (a stream steps over it)."""
        ...

    async def record_row(self, space: str, tid: str) -> tuple[int, str] | None:
        """The stored `(rev, body)`, None if none (`trigger_store.parsed`/`flagged` read it)."""
        ...

    async def latest_seq(self, space: str) -> int:
        """The change feed's last `seq` (0: none yet)."""
        ...

    async def records_page(
        self, space: str, after: str, limit: int, *, stored: bool
    ) -> tuple[list[Record | msgspec.Raw], str | None]:
        """Up to `limit` (-1: all) records by id after `after`, and the next page's `after`."""
        ...

    async def create_record(self, space: str, body: Record, by: Author) -> Record:
        """A new record under a fresh id, with its change and revision, by the store's clock."""
        ...

    async def create_reserved_record(
        self, space: str, tid: str, body: Record, by: Author
    ) -> tuple[Record, bool]:
        """Create-if-absent for a reserved id: the record, and whether this call made it."""
        ...

    async def patch_record(
        self, space: str, tid: str, changes: Record, if_match: int | None, by: Author
    ) -> Record:
        """Compare-and-set: `if_match` not the stored rev is `Refusal` 409 `rev_mismatch`."""
        ...

    async def ask_run(self, space: str, tid: str, if_match: int | None, by: Author) -> Record:
        """A run asked by hand (`runAsked`, key `manual:<now>`): a write with its revision."""
        ...

    async def stamp_record(
        self, space: str, tid: str, stamps: Record, if_match: int | None, who: Principal | None
    ) -> tuple[Record, bool]:
        """Runtime stamps (rev kept), refused to a device `who` that does not answer for the
        record (`duties.stamp_target`) in the same transaction; whether they changed it."""
        ...

    async def delete_record(
        self, space: str, tid: str, if_match: int | None, by: Author
    ) -> None: ...

    async def create_chat(self, space: str, name: str) -> Chat: ...

    async def add_message(
        self, space: str, object_id: str, msg: MessageIn
    ) -> tuple[Message, bytes]:
        """Append with the chat's next `seq` at the store's clock; `UnknownChat` if none."""
        ...

    async def messages_since(self, object_id: str, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` messages with `seq > after`, oldest first, as `(seq, json)`."""
        ...

    async def mint_token(self, who: Principal) -> str:
        """A new token for `who` at the store's clock; only its hash is kept."""
        ...

    async def lookup_token(self, token: str) -> Principal:
        """Who `token` is by the store's clock: `TokenError` if unknown, revoked or expired."""
        ...

    async def list_tokens(self, *, everything: bool = False) -> list[dict[str, Any]]:
        """Tokens without their secrets, oldest first (`token_store.entry`, unix instants)."""
        ...

    async def revoke_token(self, tid: str) -> dict[str, Any] | None:
        """Revoke by public id; its entry now, None if none; `LastAdminToken` refuses."""
        ...

    async def rotate_admin(self, path: Path | None) -> str:
        """A new admin token, every other revoked, `path` rewritten before the commit."""
        ...

    async def ensure_admin_token(self, path: Path) -> None:
        """Accept the admin token file at `path`, or mint one into it (`TokenFileError`)."""
        ...

    async def mint_run_token(
        self, space: str, trigger_id: str, run_id: str, ttl: float, peer: str | None
    ) -> tuple[str, datetime]:
        """A run token living `ttl` seconds by the store's clock (expired ones pruned);
        the token and its expiry."""
        ...

    async def end_run_tokens(self, space: str, run_ids: list[str], peer: str | None = None) -> int:
        """Revoke the run tokens of `run_ids` (with `peer`: of its fires only); how many."""
        ...

    async def fire_claim(self, space: str, trigger_id: str, key: str) -> tuple[str, int] | None:
        """Who claimed `(trigger_id, key)` and at which term (None: nobody)."""
        ...

    async def heartbeat(
        self, space: str, peer: str, beat: HeartbeatIn, window: float
    ) -> tuple[dict[str, Any], datetime]:
        """A heartbeat at the store's clock (`devices.beaten`) with the history it writes
        (its window, the feed it applied, its clock's offset); the device's row, and that
        instant."""
        ...

    async def devices(self, space: str) -> tuple[list[dict[str, Any]], datetime]:
        """The devices' rows by peer, and the store's `now` that judges them live."""
        ...

    async def last_seen(self, space: str, peer: str, window: float) -> tuple[bool, str | None]:
        """Whether `peer` is live by the store's clock, and when it was last seen."""
        ...

    async def publish_program(self, pub: Publication) -> tuple[dict[str, Any], bool]:
        """The program as stored (created at the store's clock), and whether this call
        published it: an existing `name@vN` is answered untouched; `programs.not_for_others`
        refuses (403) a device's first publication of another device's pinned program."""
        ...

    async def program(self, space: str, name: str, version: int) -> dict[str, Any] | None:
        """The stored row of `name@v{version}` (with its source), None if none."""
        ...

    async def programs(self, space: str) -> list[dict[str, Any]]:
        """The stored rows by name and version."""
        ...

    # --- history: why, forget, backfill; the scrape's reads (issue 22, pghistory) ---
    async def trigger_history(self, space: str, tid: str) -> TriggerHistory: ...

    async def slot_history(
        self, space: str, tid: str, key: str, slot: float, bridge: float
    ) -> SlotHistory:
        """The facts around the slot `slot` (unix) of the fire `key`, in one unit of work."""
        ...

    async def chat_message(
        self, object_id: str, at: float, message_id: str | None
    ) -> facts.MessageFact | None: ...

    async def chat_streams(
        self, space: str, object_id: str, at: float
    ) -> list[facts.Subscription]: ...

    async def chat_turn(
        self, space: str, object_id: str, message_id: str, accepted: float
    ) -> dict[str, Any] | None: ...

    async def done_at(self, space: str, tid: str, max_runs: int) -> datetime | None: ...

    async def prune_history(self, days: float, claims_days: float) -> int:
        """One batch forgotten past `days` (claims: `claims_days`) by the store's clock;
        how many rows went (0: nothing is left to forget)."""
        ...

    async def backfill(
        self, space: str, tid: str, slots: BackfillSlots, stamp: BackfillStamp
    ) -> tuple[list[str], int]:
        """In one transaction at the store's clock: the keys `slots` picks from the record,
        those never claimed stamped as `stamp` makes them (None: no stamp); those keys and
        how many of them were claimed already."""
        ...

    async def scrape(self) -> Scrape: ...

    async def messages_accepted(self, message_ids: list[str]) -> dict[str, str | None]: ...

    async def stream_began(self, space: str, peer: str, object_id: str, resumed: bool) -> int:
        """A device's stream of a chat went live (`resumed`: from a `Last-Event-ID`), in the
        history at the store's clock (`why`: who was subscribed when); its row."""
        ...

    async def stream_ended(self, row: int) -> None: ...

    # --- runs, turns and idempotency keys (space.runs, space.turns, space.idempotency) ---

    async def post_run(self, space: str, run: RunIn, by: Poster) -> RunPosted:
        """A run with its trigger's stamps, all or nothing, its tokens ended, its rollup,
        outcome and prunes, in one transaction by the store's clock; posted again, 200."""
        ...

    async def post_runs(self, space: str, runs: list[RunIn], by: Poster) -> RunsPosted:
        """Each run written or refused on its own, each trigger's stamps once (a device's
        marked `by.writer`), in one transaction: one result per run."""
        ...

    async def runs_page(self, space: str, query: LogQuery) -> list[dict[str, Any]]: ...

    async def run_body(self, space: str, run_id: str) -> dict[str, Any] | None: ...

    async def rollups(self, space: str, trigger: str | None) -> list[dict[str, Any]]:
        """Per-trigger counts by status (`runs.rollups`), by trigger id."""
        ...

    async def post_turn(self, space: str, turn: TurnIn, keep: RunRetention) -> bool:
        """Write a turn once and prune its chat's; False if this very turn was there."""
        ...

    async def turns_page(self, space: str, query: LogQuery) -> list[dict[str, Any]]: ...

    async def kept_answer(self, owner: str, key: str, digest: str) -> Kept | None:
        """The answer kept under the key, or None: the key is this caller's to answer (on
        PostgreSQL reserved for it; one being answered on another server is waited for)."""
        ...

    async def keep_answer(self, owner: str, key: str, kept: Kept) -> None: ...

    async def drop_key(self, owner: str, key: str) -> None:
        """Free a key reserved by `kept_answer` whose answer is not kept."""
        ...

    # --- chats, spaces and state (issue 22: `pg_chats`, `pg_spaces`; `sqlite_chats`)

    async def chats(self, space: str) -> list[Chat]: ...

    async def chat_seq(self, space: str, object_id: str) -> int:
        """The chat's latest `seq` (0: none yet); `UnknownChat` if not in `space`."""
        ...

    async def edit_message(
        self, object_id: str, message_id: str, edit: MessageEdit
    ) -> tuple[Message, bytes]:
        """`chat_store.edited` under the message's lock; `UnknownChat` if no such message."""
        ...

    async def latest_messages(
        self, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]: ...

    async def resume_gap(
        self, object_id: str, after: int, upto: int, window: float
    ) -> tuple[tuple[int, int, int] | None, float]:
        """`(first, last, count)` in `(after, upto]` older than `window` s by the store's
        clock (None: none), and that instant (unix) for `replay`."""
        ...

    async def replay(
        self, object_id: str, after: int, upto: int, since: float, limit: int
    ) -> list[tuple[int, str]]: ...

    async def create_space(self, space: str, name: str) -> Space:
        """With its general chat, all or nothing; `Refusal` 409 `space_exists`."""
        ...

    async def spaces(self, only: str | None = None) -> list[Space]: ...

    async def space_exists(self, space: str) -> bool: ...

    async def identify(self, token: str, space: str) -> tuple[Principal, bool]:
        """`lookup_token`, and whether `space` exists, in one call."""
        ...

    async def state(self, space: str, trigger_id: str, key: str) -> tuple[str, str] | None: ...

    async def put_state(self, space: str, trigger_id: str, key: str, value: str) -> str:
        """Replace the value (last write wins); its `updatedAt` by the store's clock."""
        ...

    async def close(self) -> None: ...


STORE = web.AppKey("store", Store)
