"""The registry holds exactly this device's runnable records; the diff sorts what changed."""

from typing import Any

import pytest

from triggers.diffing import reconcile, reconcile_changes, reconcile_one, responsible
from triggers.records import Loaded, PeerId, TriggerId, load
from triggers.registry import Deleted, Diff, Registry, SkipReason, apply

ME = PeerId("laptop")
OTHER = PeerId("box")

CRON: dict[str, Any] = {
    "id": "trg_c",
    "kind": "cron",
    "name": "digest",
    "program": "digest@v1",
    "args": {"space": "bao", "n": 1},
    "spec": {"expr": "*/5 * * * *", "tz": "Europe/Berlin"},
    "rev": 3,
    "updatedAt": "2026-11-01T10:00:00+00:00",
    "lastStatus": "ok",
}


def rec(**over: Any) -> Loaded:
    return load({**CRON, **over})


def armed_with(*records: Loaded, active: bool = True) -> Registry:
    return apply(Registry(), reconcile(Registry(), records, ME, active))


def ids(items: tuple) -> list[str]:
    return [a.record.id for a in items]


def test_empty_registry_adds_every_responsible_record():
    diff = reconcile(Registry(), [rec(), rec(id="trg_d")], ME, active=True)
    assert ids(diff.add) == ["trg_c", "trg_d"]
    assert (diff.remove, diff.rearm, diff.update, diff.skipped) == ((), (), (), ())


@pytest.mark.parametrize("same_object", [True, False])
def test_unchanged_record_is_a_noop(same_object):
    record = rec()
    registry = armed_with(record)
    again = record if same_object else rec()
    diff = reconcile(registry, [again], ME, active=True)
    assert diff == Diff()
    assert apply(registry, diff) is registry


@pytest.mark.parametrize(
    "stamp",
    [
        {"rev": 4},
        {"updatedAt": "2026-11-01T10:05:00+00:00"},
        {"lastStatus": "error", "lastStatusDetail": "boom"},
        {"lastRunAt": "2026-11-01T10:05:00+00:00"},
        {"nextFireAt": "2026-11-01T10:10:00+00:00"},
        {"breaker": {"open": True}, "rollup": {"runs": 9}},
        {"createdAt": "2026-10-01T00:00:00+00:00"},
    ],
)
def test_stamp_only_change_is_a_noop(stamp):
    registry = armed_with(rec())
    changed = rec(**{"rev": 9, **stamp})
    assert changed != registry[TriggerId("trg_c")].record
    diff = reconcile(registry, [changed], ME, active=True)
    assert reconcile_one(registry, changed, ME, active=True) == diff
    assert (diff.empty, ids(diff.refresh)) == (True, ["trg_c"])  # nothing to arm
    registry = apply(registry, diff)
    assert registry[TriggerId("trg_c")].record is changed  # the newest write is kept
    assert reconcile(registry, [rec(**{"rev": 9, **stamp})], ME, active=True) == Diff()


@pytest.mark.parametrize(
    "edit",
    [
        {"name": "daily digest"},
        {"args": {"space": "other", "n": 1}},
        {"args": {"space": "bao", "n": True}},  # equal in Python, not on the wire
        {"program": "digest@v2"},
        {"limits": {"timeoutSeconds": 5}},
    ],
)
def test_name_args_program_limits_edit_is_update_not_rearm(edit):
    registry = armed_with(rec())
    diff = reconcile(registry, [rec(**edit, rev=4)], ME, active=True)
    assert (ids(diff.update), diff.rearm, diff.add, diff.remove) == (["trg_c"], (), (), ())
    after = apply(registry, diff)
    assert after[TriggerId("trg_c")].record.rev == 4
    assert reconcile(after, [rec(**edit, rev=4)], ME, active=True) == Diff()


@pytest.mark.parametrize(
    ("edit", "active"),
    [
        ({"spec": {"expr": "*/10 * * * *", "tz": "Europe/Berlin"}}, True),
        ({"spec": {"expr": "*/5 * * * *", "tz": "UTC"}}, True),
        ({"spec": {"expr": "*/5 * * * *", "tz": "Europe/Berlin", "catchup": "latest"}}, True),
        ({"spec": {"expr": "*/5 * * * *", "tz": "Europe/Berlin", "graceSeconds": 30}}, True),
        ({"kind": "once", "spec": {"at": "2026-12-01T09:00:00+01:00"}}, True),
        ({"owner": ME}, True),  # floating → pinned here, still ours
    ],
)
def test_fire_relevant_edit_is_rearm(edit, active):
    registry = armed_with(rec(), active=active)
    diff = reconcile(registry, [rec(**edit, rev=4)], ME, active=active)
    assert (ids(diff.rearm), diff.update, diff.add, diff.remove) == (["trg_c"], (), (), ())
    assert apply(registry, diff)[TriggerId("trg_c")].record.rev == 4


def test_pause_removes_and_resume_adds():
    registry = armed_with(rec())
    paused = reconcile(registry, [rec(enabled=False, rev=4)], ME, active=True)
    assert (paused.remove, paused.add) == (("trg_c",), ())
    registry = apply(registry, paused)
    assert len(registry) == 0
    resumed = reconcile(registry, [rec(enabled=True, rev=5)], ME, active=True)
    assert ids(resumed.add) == ["trg_c"]


def test_floating_record_moves_with_the_election():
    standby = reconcile(Registry(), [rec()], ME, active=False)
    assert standby == Diff()
    registry = apply(Registry(), reconcile(Registry(), [rec()], ME, active=True))
    assert list(registry) == ["trg_c"]
    lost = reconcile(registry, [rec()], ME, active=False)
    assert lost.remove == ("trg_c",)


@pytest.mark.parametrize("active", [True, False])
def test_pinned_record_runs_only_on_its_owner_whatever_the_election(active):
    mine, theirs = rec(id="trg_mine", owner=ME), rec(id="trg_theirs", owner=OTHER)
    diff = reconcile(Registry(), [mine, theirs], ME, active=active)
    assert ids(diff.add) == ["trg_mine"]


def test_repin_away_removes_and_repin_here_adds():
    registry = armed_with(rec(owner=ME))
    away = reconcile_one(registry, rec(owner=OTHER, rev=4), ME, active=False)
    assert away.remove == ("trg_c",)
    here = reconcile_one(Registry(), rec(owner=ME, rev=5), ME, active=False)
    assert ids(here.add) == ["trg_c"]


@pytest.mark.parametrize(
    ("raw", "reason", "kind"),
    [
        ({**CRON, "kind": "webhook", "spec": {"url": "x"}}, SkipReason.UNKNOWN_KIND, "webhook"),
        ({**CRON, "spec": {"expr": "61 * * * *"}}, SkipReason.UNDECODABLE, "cron"),
        ({**CRON, "enabled": "yes"}, SkipReason.UNDECODABLE, "cron"),
        ({"id": "trg_c"}, SkipReason.UNDECODABLE, ""),
    ],
)
def test_salvaged_and_unknown_kinds_are_skipped_and_reported(raw, reason, kind):
    diff = reconcile(Registry(), [load(raw)], ME, active=True)
    assert (diff.add, diff.empty) == ((), True)
    [skip] = diff.skipped
    assert (skip.id, skip.kind, skip.reason) == ("trg_c", kind, reason)
    assert "trg_c" in skip.warning
    assert kind in skip.warning


def test_armed_record_that_stops_decoding_is_removed_and_reported():
    registry = armed_with(rec())
    diff = reconcile_one(registry, load({**CRON, "kind": "webhook"}), ME, active=True)
    assert diff.remove == ("trg_c",)
    assert [s.reason for s in diff.skipped] == [SkipReason.UNKNOWN_KIND]


def test_deletion_is_remove():
    registry = armed_with(rec(), rec(id="trg_d"))
    assert reconcile_one(registry, Deleted(id=TriggerId("trg_d")), ME, True).remove == ("trg_d",)
    assert reconcile(registry, [rec()], ME, active=True).remove == ("trg_d",)
    assert reconcile_one(registry, Deleted(id=TriggerId("trg_x")), ME, True) == Diff()


def test_feed_batch_keeps_the_last_entry_per_id():
    registry = armed_with(rec())
    gone_then_back = [Deleted(id=TriggerId("trg_c")), rec(name="renamed", rev=7)]
    assert ids(reconcile_changes(registry, gone_then_back, ME, True).update) == ["trg_c"]
    back_then_gone = [*reversed(gone_then_back)]
    assert reconcile_changes(registry, back_then_gone, ME, True).remove == ("trg_c",)
    new = [rec(id="trg_n", rev=1), rec(id="trg_n", rev=2, name="x")]
    diff = reconcile_changes(registry, new, ME, True)
    assert [(a.record.rev, a.record.name) for a in diff.add] == [(2, "x")]


def test_apply_then_reconcile_is_a_fixed_point():
    records = [rec(id=f"trg_{i}", owner=(ME if i % 3 else "")) for i in range(12)]
    registry = apply(Registry(), reconcile(Registry(), records, ME, active=True))
    assert len(registry) == 12
    assert reconcile(registry, records, ME, active=True) == Diff()
    registry = apply(registry, reconcile(registry, records, ME, active=False))
    assert sorted(registry) == sorted(f"trg_{i}" for i in range(12) if i % 3)


@pytest.mark.parametrize(
    ("over", "active", "expected"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"owner": ME}, False, True),
        ({"owner": OTHER}, True, False),
        ({"enabled": False}, True, False),
        ({"enabled": False, "owner": ME}, True, False),
        ({"kind": "webhook"}, True, False),
    ],
)
def test_responsible(over, active, expected):
    assert responsible(rec(**over), ME, active) is expected


def test_same_rev_and_updated_at_is_the_same_write():
    registry = armed_with(rec())
    # the space bumps rev and updatedAt on every write: the same pair is the same record
    assert reconcile(registry, [rec(name="not re-read")], ME, active=True) == Diff()


@pytest.mark.parametrize(
    ("armed", "new", "refresh"),
    [
        ({"rev": 0, "updatedAt": None}, {"rev": 0, "updatedAt": None}, []),  # a space without revs
        ({"updatedAt": None}, {"updatedAt": None}, []),  # nor times
        ({}, {"updatedAt": "2026-11-02T00:00:00+00:00"}, ["trg_c"]),  # re-created at the same rev
    ],
)
def test_without_a_trusted_version_records_compare_by_value(armed, new, refresh):
    registry = armed_with(rec(**armed))
    same = reconcile(registry, [rec(**new)], ME, active=True)
    assert (same.empty, ids(same.refresh)) == (True, refresh)
    diff = reconcile(registry, [rec(**new, name="renamed")], ME, active=True)
    assert ids(diff.update) == ["trg_c"]


def test_full_reconcile_takes_any_iterable_and_sums_itself_up():
    registry = armed_with(rec(), rec(id="trg_d"))
    listing = [rec(), load({**CRON, "id": "trg_x", "kind": "x"})]
    diff = reconcile(registry, (r for r in listing), ME, True)
    assert (diff.remove, len(diff.skipped)) == (("trg_d",), 1)
    assert diff.summary == "add 0, remove 1, rearm 0, update 0, skipped 1, refresh 0"


def test_a_record_whose_sorting_raises_is_skipped_alone():
    import msgspec

    odd = msgspec.structs.replace(rec(id="trg_odd"), args={"x": object()})  # built past `load`
    diff = reconcile(Registry(), [odd, rec(id="trg_ok")], ME, active=True)
    assert ids(diff.add) == ["trg_ok"]
    assert [(s.id, s.reason) for s in diff.skipped] == [("trg_odd", SkipReason.FAILED)]
    assert "cannot be armed" in diff.skipped[0].warning
    registry = armed_with(rec(id="trg_odd"), rec(id="trg_ok"))
    changed = msgspec.structs.replace(odd, rev=4)
    diff = reconcile_changes(registry, [changed], ME, active=True)
    assert diff.remove == ("trg_odd",) and diff.skipped[0].reason is SkipReason.FAILED
    assert set(apply(registry, diff)) == {"trg_ok"}


def test_a_run_stamped_elsewhere_refreshes_the_armed_record_though_rev_stays():
    registry = armed_with(rec())
    ran = rec(lastRunAt="2026-12-01T09:00:00Z", rollup={"runs": 1})
    diff = reconcile(registry, [ran], ME, active=True)
    assert diff.empty and ids(diff.refresh) == ["trg_c"]
    assert apply(registry, diff)["trg_c"].record.last_run_at is not None


def test_absorb_changes_the_registry_in_place_and_restamp_keeps_stamps_current():
    from triggers.registry import absorb, restamp

    registry = armed_with(rec())
    diff = reconcile_changes(registry, [rec(id="trg_d")], ME, active=True)
    assert absorb(registry, diff) is registry and set(registry) == {"trg_c", "trg_d"}
    stamped = rec(nextFireAt="2026-11-01T10:10:00+00:00", lastStatus="ok")
    assert restamp(registry, stamped) and registry[TriggerId("trg_c")].record is stamped
    assert not restamp(registry, rec(id="trg_absent"))
    assert reconcile(registry, [stamped, rec(id="trg_d")], ME, active=True) == Diff()


BACKFILL = {
    "id": "bf_1",
    "keys": ["2026-11-01T09:55:00.000Z"],
    "requestedAt": "2026-11-01T10:01:00Z",
}


@pytest.mark.parametrize("full", [True, False])
def test_a_backfill_request_at_the_same_rev_reaches_the_diff_from_a_listing_or_the_feed(full):
    """A backfill is stamped (rev and updatedAt unchanged): a full listing that carries it
    before the feed brought it is an update too, else the ticker never fires its slots
    (the takeover race: the listing's seq then drops the feed's change as old)."""
    registry = armed_with(rec())
    asked = rec(backfill=BACKFILL)
    diff = (
        reconcile(registry, [asked], ME, active=True)
        if full
        else reconcile_changes(registry, [asked], ME, active=True)
    )
    assert ids(diff.update) == ["trg_c"]
    registry = apply(registry, diff)
    assert registry[TriggerId("trg_c")].record.backfill is not None
    assert reconcile(registry, [rec(backfill=BACKFILL)], ME, active=True) == Diff()
