"""Published programs on both stores of the seam: a `name@vN` is stored once, whichever
server publishes it, answered untouched after, read back by ref and listed, and a device
is refused the first publication of a program another device's pinned record runs."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from space.history import Author
from space.http import Refusal
from space.programs import Publication
from space.store import Store

SPACE = "home"
SOURCE = "async def run(ctx):\n    return {'ok': True}\n"


def _pub(name: str = "triage", version: int = 1, source: str = SOURCE, **kw: object) -> Publication:
    fields = {"space": SPACE, "name": name, "version": version, "source": source}
    digest = hashlib.sha256(source.encode()).hexdigest()
    return Publication(
        **{"sha256": digest, "any_tool": False, "publisher": "admin", **fields, **kw}
    )  # type: ignore[arg-type]


async def test_a_program_published_through_one_server_is_read_by_another(
    store: Store, other_store: Store
) -> None:
    row, created = await store.publish_program(_pub(any_tool=True, publisher="device:box"))
    assert created and row["sha256"] == hashlib.sha256(SOURCE.encode()).hexdigest()
    got = await other_store.program(SPACE, "triage", 1)
    assert got is not None and got["source"] == SOURCE and bool(got["any_tool"])
    assert got["publisher"] == "device:box" and got["created_at"] == row["created_at"]
    assert got["created_at"].endswith("Z") and len(got["created_at"]) == 24
    assert await other_store.program(SPACE, "triage", 2) is None
    assert await other_store.program("elsewhere", "triage", 1) is None


async def test_of_servers_publishing_one_ref_at_once_one_stores_it(
    store: Store, other_store: Store
) -> None:
    pubs = [_pub(source=SOURCE + f"# {n}\n") for n in range(10)]
    outcomes = await asyncio.gather(
        *((store, other_store)[n % 2].publish_program(p) for n, p in enumerate(pubs))
    )
    made = [row for row, created in outcomes if created]
    assert len(made) == 1
    assert {row["sha256"] for row, _ in outcomes} == {made[0]["sha256"]}  # others see its row
    again, created = await other_store.publish_program(pubs[0])
    assert not created and again == made[0]


async def test_programs_are_listed_by_name_and_version_without_other_spaces(
    store: Store, other_store: Store
) -> None:
    for name, version in (("zeta", 1), ("alpha", 2), ("alpha", 10), ("alpha", 1)):
        await (store, other_store)[version % 2].publish_program(_pub(name, version))
    await store.publish_program(_pub("beta", 1, space="elsewhere"))
    listed = await other_store.programs(SPACE)
    assert [(r["name"], r["version"]) for r in listed] == [
        ("alpha", 1),
        ("alpha", 2),
        ("alpha", 10),
        ("zeta", 1),
    ]
    assert await store.programs("nowhere") == []


async def test_a_device_may_not_be_first_to_publish_another_devices_pinned_program(
    store: Store, other_store: Store
) -> None:
    body = {"name": "lamp", "kind": "cron", "spec": {"expr": "0 8 * * *"}, "program": "lamp@v1"}
    await store.create_record(SPACE, {**body, "owner": "box"}, Author("admin"))
    with pytest.raises(Refusal) as refused:
        await other_store.publish_program(_pub("lamp", device="cart", publisher="device:cart"))
    assert refused.value.status == 403 and "pinned to 'box'" in refused.value.detail
    assert await store.program(SPACE, "lamp", 1) is None
    _, created = await other_store.publish_program(_pub("lamp", device="box"))
    assert created  # the owner may
    again, created = await store.publish_program(_pub("lamp", device="cart"))
    assert not created and again["publisher"] == "admin"  # published already: answered as is
