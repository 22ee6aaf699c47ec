"""Bearer tokens on both stores of the seam: minted, looked up, listed, revoked, rotated, run
tokens dying by the store's clock; a token minted through one server is accepted by another
on the same database (`other_store`)."""

from __future__ import annotations

import asyncio
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from waiting import eventually

from core.wire import FireIn, RunAsk
from space import leases, token_store
from space.history import Author
from space.store import Store
from space.token_store import LastAdminToken, Principal, Role, TokenError, TokenFileError

SPACE = "home"
DEVICE = Principal(role=Role.DEVICE, peer="box", space=SPACE)


async def _refused(store: Store, token: str) -> str:
    with pytest.raises(TokenError) as caught:
        await store.lookup_token(token)
    return caught.value.code


async def test_a_device_token_minted_on_one_server_is_accepted_by_another(
    store: Store, other_store: Store
) -> None:
    token = await store.mint_token(DEVICE)
    assert token.startswith("btd_")
    who = await other_store.lookup_token(token)
    assert (who.role, who.peer, who.space) == (Role.DEVICE, "box", SPACE)
    assert who.id == token_store.token_id(token)
    assert await _refused(other_store, token + "x") == "unauthorized"
    listed = [t for t in await store.list_tokens() if t["id"] == who.id]
    assert len(listed) == 1 and listed[0]["state"] == "live"
    assert listed[0]["lastUsedAt"] is not None  # the lookup on the other server noted it
    assert listed[0]["createdAt"] <= listed[0]["lastUsedAt"]


async def test_a_token_revoked_on_one_server_is_refused_by_another(
    store: Store, other_store: Store
) -> None:
    token = await store.mint_token(DEVICE)
    tid = token_store.token_id(token)
    await other_store.lookup_token(token)
    revoked = await other_store.revoke_token(tid)
    assert revoked is not None and revoked["state"] == "revoked" and revoked["revokedAt"]
    assert await _refused(store, token) == "token_revoked"
    again = await store.revoke_token(tid)
    assert again is not None and again["revokedAt"] == revoked["revokedAt"]  # the first instant
    assert tid not in {t["id"] for t in await store.list_tokens()}
    assert tid in {t["id"] for t in await store.list_tokens(everything=True)}
    assert await store.revoke_token("0" * 16) is None
    assert await store.revoke_token("not-an-id") is None


async def test_of_concurrent_revocations_of_every_admin_token_one_is_refused(
    store: Store, other_store: Store
) -> None:
    for _ in range(10):
        await store.mint_token(Principal(role=Role.ADMIN))
    admins = [t["id"] for t in await store.list_tokens() if t["role"] == "admin"]
    assert len(admins) >= 10

    async def revoke(n: int, tid: str) -> bool:
        try:
            return await (store, other_store)[n % 2].revoke_token(tid) is not None
        except LastAdminToken:
            return False

    outcomes = await asyncio.gather(*(revoke(n, tid) for n, tid in enumerate(admins)))
    assert sorted(outcomes) == [False] + [True] * (len(admins) - 1)
    live = [t for t in await other_store.list_tokens() if t["role"] == "admin"]
    assert [t["id"] for t in live] == [admins[outcomes.index(False)]]


async def test_a_rotation_leaves_one_admin_token_and_rewrites_its_file(
    store: Store, other_store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "keys" / "admin.token"
    await store.ensure_admin_token(path)
    first = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    await other_store.ensure_admin_token(path)  # a second server accepts the file as it is
    assert path.read_text().strip() == first
    assert (await other_store.lookup_token(first)).role is Role.ADMIN
    rotated = await other_store.rotate_admin(path)
    assert path.read_text().strip() == rotated != first
    assert await _refused(store, first) == "token_revoked"
    live = [t["id"] for t in await store.list_tokens() if t["role"] == "admin"]
    assert live == [token_store.token_id(rotated)]
    path.write_text(first + "\n")  # an old copy put back
    with pytest.raises(TokenFileError, match="revoked or non-admin"):
        await store.ensure_admin_token(path)
    path.write_text(await store.mint_token(DEVICE) + "\n")
    with pytest.raises(TokenFileError, match="revoked or non-admin"):
        await other_store.ensure_admin_token(path)


async def test_a_run_token_dies_at_its_life_by_the_stores_clock_and_is_then_pruned(
    store: Store, other_store: Store
) -> None:
    short, expires = await store.mint_run_token(SPACE, "t1", "run_1", 0.5, "box")
    who = await other_store.lookup_token(short)
    assert (who.role, who.trigger_id, who.run_id, who.peer) == (Role.RUN, "t1", "run_1", "box")
    mine = [t for t in await store.list_tokens() if t["runId"] == "run_1"]
    assert mine[0]["expiresAt"] == pytest.approx(expires.timestamp(), abs=0.002)
    assert mine[0]["lastUsedAt"] is None  # a run token's uses are not noted

    async def expired() -> bool:
        try:
            await other_store.lookup_token(short)
        except TokenError as exc:
            return exc.code == "token_expired"
        return False

    await eventually(expired, what="the run token expiring by the store's clock")
    await other_store.mint_run_token(SPACE, "t1", "run_2", 60, None)  # prunes the expired
    assert "run_1" not in {t["runId"] for t in await store.list_tokens(everything=True)}


async def test_a_runs_tokens_end_with_it_and_a_device_ends_only_its_own(
    store: Store, other_store: Store
) -> None:
    box, _ = await store.mint_run_token(SPACE, "t1", "run_1", 60, "box")
    cart, _ = await store.mint_run_token(SPACE, "t1", "run_1", 60, "cart")
    other, _ = await store.mint_run_token(SPACE, "t1", "run_2", 60, "box")
    assert await other_store.end_run_tokens(SPACE, ["run_1"], "box") == 1
    assert await _refused(store, box) == "token_revoked"
    assert (await store.lookup_token(cart)).peer == "cart"
    assert await other_store.end_run_tokens(SPACE, ["run_1", "run_2", "run_9"]) == 2
    assert {await _refused(store, t) for t in (cart, other)} == {"token_revoked"}
    assert await store.end_run_tokens(SPACE, []) == 0
    assert await store.end_run_tokens("elsewhere", ["run_1"]) == 0


async def test_a_claims_run_token_is_accepted_by_another_server(
    store: Store, other_store: Store
) -> None:
    body = {"name": "tick", "kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "p@v1"}
    record = await store.create_record(SPACE, body, Author("admin"))
    step = lambda lease, now: leases.acquire(lease, "a", 0, now, timedelta(seconds=15))  # noqa: E731
    assert (await store.change_lease(SPACE, step)).new is not None
    fire = FireIn(
        triggerId=record["id"],
        key=record["activeSince"],
        term=1,
        peer="a",
        run=RunAsk(runId="run_7", ttlSeconds=30),
    )
    claimed = await store.claim_fire(SPACE, fire, 30.0)
    who = await other_store.lookup_token(claimed["token"])
    assert (who.role, who.space, who.trigger_id, who.run_id) == (
        Role.RUN,
        SPACE,
        record["id"],
        "run_7",
    )
    assert await other_store.fire_claim(SPACE, record["id"], fire.key) == ("a", 1)
    assert await other_store.fire_claim(SPACE, record["id"], "other") is None
