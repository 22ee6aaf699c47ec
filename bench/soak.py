"""Soak: three devices and a space under random kills, stops and freezes; then the invariants.

    python bench/soak.py [--seconds 600] [--seed N] [--json] [--faults]   # BATON_SOAK_LOG=INFO

`--faults` adds the faults that are not kills (bench/soakfaults.py): the space SIGKILLed 3×
on schedule, and a window each of disk full, 2 s latency and ±60 s skew on the holder.

Loopback only, bounded in time: one space, three devices, floating and pinned triggers and
chat-watch, random SIGKILL / SIGTERM / SIGSTOP of the processes and pauses, a quiet end; then
the space's SQLite file is checked: no duplicates, nothing lost, nothing replayed, nothing
before `activeSince`, no stale term, and the failover times. Exit 1 when an invariant
fails. The invariants in full are in docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from soakfaults import Clocks, Disk, Fault, Links, env_without_faketime  # noqa: E402

from core.vocab import NOT_RAN  # noqa: E402
from runtime.client.api import ApiError, SpaceClient  # noqa: E402

SPACE = "home"
LEASE = 3.0
PEERS = ("a", "b", "c")
PINNED_TO = "b"
QUICK = 'def main(args):\n    return {"ok": True}\n'
EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}
STARTUP = 3.0  # a spawned device is joined and armed no sooner than this
ARMED = 1.0  # after the space first lists a spawned device, it has armed its triggers
EDGE = 1.5  # seconds around an act where the harness cannot know what a process saw
HORIZON = 10.0  # a device up this long after an instant: a holder has fired or bridged it
FEED_EVERY, CHAT_EVERY = 0.5, 4.0


def now() -> float:
    return time.time()


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# --- what the harness did -----------------------------------------------------------------


@dataclass
class Life:
    """One device's (or the space's) processes: when each ran and when it was frozen."""

    runs: list[tuple[float, float]] = field(default_factory=list)  # [spawn, exit]
    cut: list[float] = field(default_factory=list)  # the instant each run was signalled
    joined: list[float] = field(default_factory=list)  # when the space first listed each run
    frozen: list[tuple[float, float]] = field(default_factory=list)

    def started(self, t: float, joined: float) -> None:
        self.runs.append((t, float("inf")))
        self.cut.append(float("inf"))
        self.joined.append(joined)

    def signalled(self, t: float) -> None:
        self.cut[-1] = t

    def ended(self, t: float) -> None:
        self.runs[-1] = (self.runs[-1][0], t)
        self.cut[-1] = min(self.cut[-1], t)

    def up_strictly(self, a: float, b: float, startup: float) -> bool:
        """Running, joined and not frozen over the whole of [a, b]. A device is taken as
        armed `startup` after its spawn or `ARMED` after the space first listed it, whichever
        is later (a loaded machine can take several seconds to start one)."""
        runs = zip(self.runs, self.cut, self.joined, strict=True)
        ran = any(max(s + startup, j + ARMED) <= a and b <= c for (s, _), c, j in runs)
        return ran and not any(f < b and a < t for f, t in self.frozen)

    def ran_at_all(self, a: float, b: float) -> bool:
        """A process ran (frozen or not) at some point of [a, b]."""
        return any(s <= b and a <= e for s, e in self.runs)


@dataclass
class Act:
    at: float
    what: str
    holder: bool  # it stopped the device holding the lease


class Harness:
    def __init__(self, tmp: Path, seed: int, faults: bool = False) -> None:
        self.tmp, self.rng = tmp, random.Random(seed)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.lives: dict[str, Life] = {p: Life() for p in (*PEERS, "space")}
        self.acts: list[Act] = []
        self.triggers: dict[str, str] = {}  # role → id
        self.api: SpaceClient | None = None
        self.chats: dict[str, str] = {}
        self.watchers: set[asyncio.Task[None]] = set()
        self.faults: list[Fault] = []
        self.acked: list[tuple[str, str]] = []  # (chat, message id) the space answered 201
        self.server_errors: list[str] = []  # answers ≥ 500 but 503 the harness itself got
        self.disk = Disk(tmp / "disk") if faults else None
        self.clocks = Clocks(tmp) if faults else None
        self.links = Links(self.port) if faults else None
        data = self.disk.path if self.disk and self.disk.refused is None else tmp
        self.db = data / "space.db"

    # -- processes

    async def spawn(self, name: str) -> None:
        if name == "space":
            args = [
                "space",
                "serve",
                "--db",
                str(self.db),
                "--port",
                str(self.port),
                "--lease-seconds",
                str(LEASE),
                "--live-seconds",
                str(2 * LEASE),
            ]
        else:
            token = self.tmp / f"{name}.token"
            url = await self.links.url(name) if self.links else self.url
            args = [
                "device",
                "--peer",
                name,
                "--url",
                url,
                "--token-file",
                str(token),
                "--space",
                SPACE,
                "--data",
                str(self.tmp / name),
                "--health-seconds",
                "2",
                "--workers",
                "1",
            ]
        log = (self.tmp / f"{name}.log").open("ab")
        env = {
            **env_without_faketime(),
            **(self.clocks.env(name) if self.clocks and name != "space" else {}),
            "BATON_LOG": os.environ.get("BATON_SOAK_LOG", "WARNING"),
            "PYTHONUNBUFFERED": "1",
        }
        self.procs[name] = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runtime.cli",
            *args,
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        if name == "space":
            self.lives[name].started(now(), joined=now())
            await self._until_listening()
        else:
            self.lives[name].started(now(), joined=float("inf"))
            self.watchers.add(asyncio.create_task(self._until_joined(name)))

    async def _until_joined(self, peer: str) -> None:
        """Note when the space first lists this run of `peer` (its `upSince` is after the
        spawn); until then nothing is expected of it. Polls while the process runs."""
        life, proc = self.lives[peer], self.procs[peer]
        spawned, run = life.runs[-1][0], len(life.runs) - 1
        while proc.returncode is None and self.api is not None:
            with contextlib.suppress(ApiError):
                for d in (await self.api.devices(SPACE)).devices:
                    if d.peer == peer and d.upSince.timestamp() >= spawned:
                        life.joined[run] = d.upSince.timestamp()
                        return
            await asyncio.sleep(0.1)

    async def _until_listening(self) -> None:
        deadline = now() + 20
        while now() < deadline:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise RuntimeError("the space did not start listening")

    def running(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.returncode is None

    async def signal(self, name: str, sig: signal.Signals) -> None:
        proc = self.procs[name]
        life = self.lives[name]
        if sig in (signal.SIGKILL, signal.SIGTERM):
            life.signalled(now())
            if any(t == float("inf") for _, t in life.frozen):
                proc.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
                self._thawed(name)
            proc.send_signal(sig)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            life.ended(now())
        elif sig is signal.SIGSTOP:
            proc.send_signal(sig)
            life.frozen.append((now(), float("inf")))
        else:
            proc.send_signal(signal.SIGCONT)
            self._thawed(name)

    def _thawed(self, name: str) -> None:
        life = self.lives[name]
        start, _ = life.frozen[-1]
        life.frozen[-1] = (start, now())

    # -- the space's content

    async def setup(self) -> None:
        await self.spawn("space")
        admin = (self.db.parent / "admin.token").read_text().strip()
        self.api = SpaceClient(self.url, admin)
        self.chats["general"] = (await self.api.space_create({"id": SPACE})).generalChat or ""
        self.chats["feed"] = (await self.api.chat_create(SPACE, {"name": "feed"}))["objectId"]
        await self.api.program_put(SPACE, "quick@v1", {"source": QUICK})
        for peer in PEERS:
            minted = await self.api.token_device({"peer": peer, "space": SPACE})
            token = self.tmp / f"{peer}.token"
            token.write_text(minted["token"] + "\n")
            token.chmod(0o600)
        for peer in PEERS:
            await self.spawn(peer)
        await self._until(lambda: self._lease_held(), 30, "a lease holder")
        for i in range(3):  # before the event trigger existed: these must never fire it
            await self.api.chat_send(SPACE, self.chats["feed"], {"text": f"early {i}"})
        self.triggers["cron"] = await self._create(EVERY_SECOND, "floating")
        self.triggers["pinned"] = await self._create(EVERY_SECOND, "pinned", owner=PINNED_TO)
        spec = {"dataset": "chat_messages", "objectId": self.chats["feed"]}
        event = {"kind": "event", "spec": spec, "program": "quick@v1"}
        self.triggers["event"] = await self._create(event, "feed")

    async def _create(self, body: dict[str, Any], name: str, **more: Any) -> str:
        assert self.api is not None
        return (await self.api.trigger_create(SPACE, {**body, "name": name, **more}))["id"]

    async def _lease_held(self) -> bool:
        assert self.api is not None
        return (await self.api.election(SPACE)).active is not None

    async def holder(self) -> str | None:
        assert self.api is not None
        try:
            return (await self.api.election(SPACE)).active
        except ApiError:
            return None

    async def _until(self, check: Any, seconds: float, what: str) -> None:
        deadline = now() + seconds
        while now() < deadline:
            try:
                if await check():
                    return
            except ApiError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"not within {seconds} s: {what}")

    # -- the load and the chaos

    async def generate(self) -> None:
        """A message to the feed every half second, one to the general chat every four."""
        assert self.api is not None
        n = 0
        while True:
            n += 1
            chats = ["feed"] + (["general"] if n % round(CHAT_EVERY / FEED_EVERY) == 0 else [])
            for chat in chats:
                try:
                    sent = await self.api.chat_send(SPACE, self.chats[chat], {"text": f"m{n}"})
                    self.acked.append((self.chats[chat], sent.message_id))
                except ApiError as exc:  # the space is down or full: no such message
                    if exc.status >= 500 and exc.status != 503:
                        self.server_errors.append(f"chat_send {exc.status} {exc}")
            await asyncio.sleep(FEED_EVERY)

    async def chaos(self, seconds: float) -> None:
        start = now()
        end, half = start + seconds, start + seconds / 2
        schedule = self._schedule(seconds) if self.disk else []
        while now() < end:
            await asyncio.sleep(self.rng.uniform(2.0, 6.0))
            if "later" not in self.triggers and now() > half:
                await self._guarded(self._create_later())
            if schedule and now() >= start + schedule[0][0] * seconds:
                _, what, length = schedule.pop(0)
                await self._guarded(self._inject(what, length))
            else:
                await self._guarded(self.act())

    @staticmethod
    def _schedule(seconds: float) -> list[tuple[float, str, float]]:
        """(fraction of the chaos, fault, seconds): three space kills and a window each."""
        length = min(60.0, seconds / 10)
        return [
            (0.15, "kill space", 0.0),
            (0.25, "disk full", length),
            (0.40, "kill space", 0.0),
            (0.50, "latency", length),
            (0.65, "skew", length),
            (0.80, "kill space", 0.0),
        ]

    async def _inject(self, what: str, seconds: float) -> None:
        """One scheduled fault, from a settled household (all up, none frozen), so that
        a lease change within its window is its own."""
        if what == "kill space":
            await self._space_blip()
            return
        await self.calm(2 * LEASE)
        holder = await self.holder() or PEERS[0]
        assert self.disk and self.clocks and self.links
        refused = {"disk full": self.disk.refused, "skew": self.clocks.refused}.get(what)
        fault = Fault(what if refused is None else f"{what} (not made: {refused})", now())
        fault.peer = None if what == "disk full" else holder
        self.faults.append(fault)
        if refused is not None:
            fault.ended = now()
            return
        if what == "disk full":
            self.disk.fill()
            await asyncio.sleep(seconds)
            self.disk.free()
        elif what == "latency":
            self.links.slow(holder, 2.0)
            await asyncio.sleep(seconds)
            self.links.slow(holder, 0.0)
        else:
            for offset in (60.0, -60.0):
                self.clocks.skew(holder, offset)
                await asyncio.sleep(seconds / 2)
            self.clocks.skew(holder, 0.0)
        fault.ended = now()

    async def _guarded(self, work: Any) -> None:
        with contextlib.suppress(ApiError):  # the space is down right now
            await work

    async def _create_later(self) -> None:
        self.triggers["later"] = await self._create(EVERY_SECOND, "created later")

    async def act(self) -> None:
        roll = self.rng.random()
        holder = await self.holder()
        if roll < 0.08 and not self.disk:  # with --faults the space dies on schedule only
            await self._space_blip()
        elif roll < 0.2:
            await self._pause()
        else:
            peer = self.rng.choice([p for p in PEERS if self.running(p)] or list(PEERS))
            what = self.rng.choice(["kill", "term", "stop"])
            if self.running(peer):
                self.acts.append(Act(now(), f"{what} {peer}", holder == peer))
                asyncio.get_running_loop().create_task(self._disrupt(peer, what))

    async def _disrupt(self, peer: str, what: str) -> None:
        if what == "stop":
            await self.signal(peer, signal.SIGSTOP)
            await asyncio.sleep(self.rng.uniform(0.5, 6.0))
            if self.running(peer):
                await self.signal(peer, signal.SIGCONT)
            return
        await self.signal(peer, signal.SIGKILL if what == "kill" else signal.SIGTERM)
        await asyncio.sleep(self.rng.uniform(0.0, 5.0))
        if not self.running(peer):
            await self.spawn(peer)

    async def _space_blip(self) -> None:
        self.acts.append(Act(now(), "kill space", False))
        await self.signal("space", signal.SIGKILL)
        await asyncio.sleep(self.rng.uniform(0.5, 2.5))
        await self.spawn("space")

    async def _pause(self) -> None:
        assert self.api is not None
        ids = [self.triggers["cron"], self.triggers["event"]]
        for tid in ids:
            await self.api.trigger_patch(SPACE, tid, {"enabled": False})
        await asyncio.sleep(self.rng.uniform(2.0, 5.0))
        for tid in ids:  # (the checker reads the pauses from the space's change feed)
            await self._resume(tid)

    async def _resume(self, tid: str) -> None:
        assert self.api is not None
        for _ in range(100):  # a pause left in place would silence the rest of the run
            try:
                await self.api.trigger_patch(SPACE, tid, {"enabled": True})
                return
            except ApiError:
                await asyncio.sleep(0.2)

    async def calm(self, seconds: float) -> None:
        """No chaos: every device runs, none is frozen; let takeovers and bridges finish."""
        for name in ("space", *PEERS):
            life = self.lives[name]
            if self.running(name) and life.frozen and life.frozen[-1][1] == float("inf"):
                await self.signal(name, signal.SIGCONT)
            if not self.running(name):
                await self.spawn(name)
        await asyncio.sleep(seconds)

    async def close(self) -> None:
        for watcher in self.watchers:
            watcher.cancel()
        await asyncio.gather(*self.watchers, return_exceptions=True)
        for name in (*PEERS, "space"):
            if self.running(name):
                await self.signal(name, signal.SIGTERM)
        if self.api is not None:
            await self.api.close()
        if self.links:
            await self.links.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the invariants -------------------------------------------------------------------------


class Check:
    """Reads the space's file and counts every breach of the rules."""

    def __init__(self, harness: Harness, checked_until: float) -> None:
        self.h, self.until = harness, checked_until
        db = sqlite3.connect(harness.db)
        self.claims = db.execute(
            "SELECT trigger_id, key, term, peer, claimed_at FROM fires WHERE space = ?", [SPACE]
        ).fetchall()
        self.runs = [json.loads(b) for (b,) in db.execute("SELECT body FROM runs")]
        self.turns = [json.loads(b) for (b,) in db.execute("SELECT body FROM agent_turns")]
        self.terms_began = [t for (t,) in db.execute("SELECT began FROM history_terms")]
        self.messages = [
            (obj, mid, ts, json.loads(body).get("agent"))
            for obj, mid, ts, body in db.execute(
                "SELECT object_id, message_id, created_ts, body FROM chat_messages"
            )
        ]
        self.created: dict[str, float] = {}
        self.pauses: dict[str, list[tuple[float, float]]] = {}
        for tid, op, body in db.execute(
            "SELECT trigger_id, op, body FROM changes WHERE space = ? ORDER BY seq", [SPACE]
        ):
            self._regime(tid, op, json.loads(body) if body else {})
        db.close()
        self._live: list[tuple[float, str, int]] | None = None
        self.found: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}

    def _regime(self, tid: str, op: str, record: dict[str, Any]) -> None:
        """Follow a record's writes in the space's change feed: when it was created, and each
        stretch from a pause to the `activeSince` of the resume that ended it."""
        if op == "create":
            self.created[tid] = stamp(record.get("activeSince") or record["createdAt"])
            return
        if op != "update":
            return
        pauses = self.pauses.setdefault(tid, [])
        open_pause = bool(pauses) and pauses[-1][1] == float("inf")
        if record.get("enabled") is False and not open_pause:
            pauses.append((stamp(record["updatedAt"]), float("inf")))
        elif record.get("enabled", True) and open_pause:
            pauses[-1] = (pauses[-1][0], stamp(record["activeSince"]))

    def breach(self, kind: str, example: str) -> None:
        self.found[kind] += 1
        self.examples.setdefault(kind, [])
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(example)

    def any_up_strictly(self, a: float, b: float, peers: tuple[str, ...] = PEERS) -> bool:
        return any(self.h.lives[p].up_strictly(a, b, STARTUP) for p in peers)

    def any_ran(self, a: float, b: float, peers: tuple[str, ...] = PEERS) -> bool:
        return any(self.h.lives[p].ran_at_all(a, b) for p in peers)

    def space_up(self, a: float, b: float) -> bool:
        """Up and able to write: a full disk is a space that cannot take a claim."""
        full = [f for f in self.h.faults if f.what == "disk full"]
        writes = not any(f.began - EDGE < b and a < f.ended + EDGE for f in full)
        return writes and self.h.lives["space"].up_strictly(a, b, 1.0)

    def paused(self, tid: str, t: float, edge: float) -> bool:
        """Within a paused stretch of the record (widened by `edge`, or narrowed if negative)."""
        return any(a - edge <= t <= b + edge for a, b in self.pauses.get(tid, []))

    def paused_first(self, tid: str, t: float) -> bool:
        """No holder was firing live at `t` (a takeover under way) and the record was paused
        within `HORIZON` after it: the bridge came too late, and by the rule `t` never fires
        (nothing of a paused record fires; the resume moves `activeSince` past it)."""
        if self.live_holder(t):
            return False
        return any(t < start <= t + HORIZON for start, _ in self.pauses.get(tid, []))

    def live_holder(self, t: float) -> bool:
        """One holder fired the floating crons live across `t`: the same (peer, term) claimed
        a slot on time before `t` and the next one on time after it, with no silence between
        (a holder that died just after `t`, or one that took over just before, does not count)."""
        if self._live is None:
            floating = {self.h.triggers[r] for r in ("cron", "later") if r in self.h.triggers}
            self._live = sorted(
                (stamp(claimed), peer, term)
                for tid, key, term, peer, claimed in self.claims
                if tid in floating and stamp(claimed) - stamp(key.replace("Z", "+00:00")) < 1.0
            )
        i = bisect.bisect_left(self._live, (t,))
        if i == 0 or i == len(self._live):
            return False
        (before, *holder_before), (after, *holder_after) = self._live[i - 1], self._live[i]
        return holder_before == holder_after and after - before <= 2 * EDGE

    def run(self) -> None:
        by_trigger: dict[str, dict[str, tuple[int, str, float]]] = {}
        for tid, key, term, peer, claimed in self.claims:
            by_trigger.setdefault(tid, {})[key] = (term, peer, stamp(claimed))
        self.duplicates()
        for role in ("cron", "later", "pinned"):
            if role in self.h.triggers:
                self.cron(role, by_trigger.get(self.h.triggers[role], {}))
        self.event(by_trigger.get(self.h.triggers["event"], {}))
        self.chat_watch()
        self.terms(by_trigger)
        self.early()
        self.acknowledged()
        self.server_errors()
        self.lease_changes()

    def early(self) -> None:
        """A cron claim the space took before its slot, by the space's own clock."""
        crons = {self.h.triggers[r] for r in ("cron", "later", "pinned") if r in self.h.triggers}
        for tid, key, _term, _peer, claimed in self.claims:
            if tid in crons and stamp(claimed) < stamp(key.replace("Z", "+00:00")) - 0.5:
                self.breach("early", f"{tid} {key} claimed at {claimed}")

    def acknowledged(self) -> None:
        stored = {(obj, mid) for obj, mid, _, _ in self.messages}
        for chat, mid in self.h.acked:
            if (chat, mid) not in stored:
                self.breach("acknowledged writes lost", f"message {mid} in {chat}")

    def server_errors(self) -> None:
        log = self.h.tmp / "space.log"
        text = log.read_text("utf-8", "replace")
        failed = re.findall(r"(?:GET|POST|PUT|PATCH|DELETE) \S+ failed", text)
        for what in [*failed, *self.h.server_errors]:
            self.breach("5xx", what)

    def lease_changes(self) -> None:
        """At most one new term per fault window (a kill of the holder is not in one)."""
        for f in self.h.faults:
            began = [t for t in self.terms_began if f.began <= t <= f.ended + 2 * LEASE + EDGE]
            self.found[f"lease changes in {f.what}"] = len(began)
            if len(began) > 1:
                self.breach("lease changes", f"{f.what}: {len(began)} new terms")

    def duplicates(self) -> None:
        keys = Counter((c[0], c[1]) for c in self.claims)
        ran = Counter((r["triggerId"], r["key"]) for r in self.runs if r["status"] not in NOT_RAN)
        answered = Counter(m for t in self.turns for m in t["messageIds"])
        for what, counts in (("claim", keys), ("run", ran), ("answer", answered)):
            for item, n in counts.items():
                if n > 1:
                    self.breach("duplicates", f"{what} {item} ×{n}")

    def cron(self, role: str, claims: dict[str, tuple[int, str, float]]) -> None:
        tid = self.h.triggers[role]
        since = self.created[tid]
        peers = (PINNED_TO,) if role == "pinned" else PEERS
        horizon = EDGE if role == "pinned" else HORIZON
        fired = {stamp(k.replace("Z", "+00:00")) for k in claims}
        for t in fired:
            if t < since:
                self.breach("before activeSince", f"{role} {t - since:+.1f} s")
            if self.paused(tid, t, -1.0):  # a slot due as the pause was written may fire
                self.breach("in paused time", f"{role} at {t:.0f}")
            if not self.any_ran(t - EDGE, t + EDGE, peers):
                self.breach("replayed downtime", f"{role} slot {_at(t)}")
        t = float(int(since) + 1)
        while t < self.until:
            expected = (
                self.any_up_strictly(t - EDGE, t + horizon, peers)
                and self.space_up(t - EDGE, t + horizon)
                and not self.paused(tid, t, EDGE)
                and not self.paused_first(tid, t)
            )
            if expected and t not in fired:
                self.breach("lost", f"{role} slot {_at(t)}")
            self.found[f"{role} slots checked"] += expected
            t += 1.0

    def event(self, claims: dict[str, tuple[int, str, float]]) -> None:
        tid = self.h.triggers["event"]
        since = self.created[tid]
        feed = [(mid, ts) for obj, mid, ts, _ in self.messages if obj == self.h.chats["feed"]]
        for mid, ts in feed:
            fired = mid in claims
            if fired and ts < since:
                self.breach("before activeSince", f"event message {_at(ts)}")
            if fired and self.paused(tid, ts, -0.001):
                self.breach("in paused time", f"event message {_at(ts)}")
            if fired and not self.any_ran(ts - EDGE, ts + EDGE):
                self.breach("replayed downtime", f"event message {_at(ts)}")
            expected = (
                ts >= since + EDGE
                and ts < self.until
                and self.any_up_strictly(ts - EDGE, ts + HORIZON)
                and self.space_up(ts, ts + HORIZON)
                and not self.paused(tid, ts, EDGE)
                and not self.paused_first(tid, ts)
            )
            self.found["messages checked"] += expected
            if expected and not fired:
                self.breach("lost", f"event message {_at(ts)}")

    def chat_watch(self) -> None:
        answered = {m for t in self.turns for m in t["messageIds"]}
        general = self.h.chats["general"]
        for obj, mid, ts, agent in self.messages:
            if obj != general or agent:
                continue
            if mid in answered and not self.any_ran(ts - EDGE, ts + EDGE):
                self.breach("replayed downtime", f"chat-watch answered {_at(ts)}")
            expected = (
                ts < self.until
                and self.any_up_strictly(ts - EDGE, ts + HORIZON)
                and self.space_up(ts, ts + HORIZON)
            )
            self.found["chat messages checked"] += expected
            if expected and mid not in answered:
                self.breach("lost", f"chat-watch message {_at(ts)}")

    def terms(self, by_trigger: dict[str, dict[str, tuple[int, str, float]]]) -> None:
        floating = [self.h.triggers[r] for r in ("cron", "later", "event") if r in self.h.triggers]
        for tid in [*floating, "chat-watch"]:
            highest = 0
            for term, _peer, _ in sorted(by_trigger.get(tid, {}).values(), key=lambda c: c[2]):
                if term < highest:
                    self.breach("stale term", f"{tid} claim at term {term} after {highest}")
                highest = max(highest, term)
        claims = {(c[0], c[1]): (c[2], c[3]) for c in self.claims}
        for r in self.runs:
            claim = claims.get((r["triggerId"], r["key"]))
            if r["status"] in NOT_RAN or r["triggerId"].startswith("manual:"):
                continue
            if claim != (r["term"], r["peer"]):
                self.breach("stale term", f"run {r['runId']} {r['peer']}@{r['term']} vs {claim}")

    def failovers(self) -> list[float]:
        floating = {self.h.triggers[r] for r in ("cron", "later", "event") if r in self.h.triggers}
        times = sorted(stamp(c[4]) for c in self.claims if c[0] in floating)
        out = []
        for act in self.h.acts:
            if act.holder and act.at < self.until:
                after = next((t for t in times if t > act.at), None)
                if after is not None:
                    out.append(after - act.at)
        return out


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3]


# --- running it -------------------------------------------------------------------------------


INVARIANTS = (
    "duplicates",
    "lost",
    "replayed downtime",
    "before activeSince",
    "in paused time",
    "stale term",
    "early",
    "acknowledged writes lost",
    "5xx",
    "lease changes",
)


async def soak(
    seconds: float, quiet: float, seed: int, tmp: Path, faults: bool = False
) -> dict[str, Any]:
    harness = Harness(tmp, seed, faults)
    started = now()
    try:
        try:
            await harness.setup()
            generator = asyncio.get_running_loop().create_task(harness.generate())
            await harness.chaos(max(0.0, seconds - quiet))
            calm_from = now()
            await harness.calm(quiet)
            generator.cancel()
        finally:
            await harness.close()
        check = Check(harness, checked_until=calm_from + quiet - HORIZON)
        check.run()
    finally:  # the database's tmpfs is unmounted whatever happened
        if harness.disk:
            harness.disk.close(keep=tmp)
    failover = check.failovers()
    acts = Counter(
        a.what.split()[0] + (" space" if "space" in a.what else "") for a in harness.acts
    )
    return {
        "seconds": round(now() - started, 1),
        "seed": seed,
        "acts": dict(acts),
        "holder acts": sum(a.holder for a in harness.acts),
        "checked": {k: v for k, v in check.found.items() if "checked" in k},
        "invariants": {k: check.found[k] for k in INVARIANTS},
        "examples": check.examples,
        "failover s": {
            "count": len(failover),
            "median": round(statistics.median(failover), 2) if failover else None,
            "max": round(max(failover), 2) if failover else None,
        },
        "pauses": sum(len(p) for p in check.pauses.values()),
        "faults": {
            f.what: {
                "seconds": round(f.ended - f.began, 1),
                "on": f.peer,
                "lease changes": check.found[f"lease changes in {f.what}"],
            }
            for f in harness.faults
        },
        "data": str(tmp),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="whole run (default 600)")
    parser.add_argument("--quiet", type=float, default=20.0, help="calm seconds at the end")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--faults", action="store_true", help="add disk, latency, skew faults")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    tmp = Path(tempfile.mkdtemp(prefix="baton-soak-"))
    result = asyncio.run(soak(args.seconds, args.quiet, seed, tmp, args.faults))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _table(result)
    breached = any(result["invariants"].values())
    if not args.keep and not breached:
        _remove(tmp)
    return 1 if breached else 0


def _table(result: dict[str, Any]) -> None:
    print(f"soak: {result['seconds']} s, seed {result['seed']}, acts {result['acts']}")
    print(f"  checked: {result['checked']}, pauses {result['pauses']}")
    for name, count in result["invariants"].items():
        print(f"  {name:<20} {count}")
        for example in result["examples"].get(name, []):
            print(f"      e.g. {example}")
    for what, fault in result["faults"].items():
        print(f"  fault {what}: {fault}")
    f = result["failover s"]
    print(f"  {'failover':<20} {f['count']} holder stops: median {f['median']} s, max {f['max']} s")
    print(f"  data: {result['data']}")


def _remove(tmp: Path) -> None:
    for path in sorted(tmp.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    sys.exit(main())
