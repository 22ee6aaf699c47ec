"""The `tokens` table: bearer tokens stored as sha256, who each one is, and their ends.

Owns minting, looking up, listing, revoking and expiring tokens, the admin token
file (created 0600, rewritten on rotation) and the owner-only rule for token
files (`check_private`). A token's public `id` is the first 16 hex digits of its
hash: it names a token in listings and revocations without showing its secret.
A revoked row stays (so an old admin token file cannot bring its token back, and a
revoked token is told apart from an unknown one) until its expiry, if it has one;
expired rows are pruned when run tokens are minted. Must not know
routes, scopes or any other table.
"""

from __future__ import annotations

import enum
import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import msgspec
import sqlite_utils

from space.db import add_columns


class Role(enum.StrEnum):
    ADMIN = "admin"
    DEVICE = "device"
    RUN = "run"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    id: str = ""  # the token's public id (`token_id`), set on lookup
    peer: str | None = None
    space: str | None = None
    trigger_id: str | None = None
    run_id: str | None = None


class TokenError(LookupError):
    """The bearer token is unknown, revoked or expired; `code` is the wire error code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


class TokenFileError(ValueError):
    """A token file that cannot be used (empty, revoked, loose); the message is one line."""


class LastAdminToken(LookupError):
    """The only live admin token: it is rotated, never revoked."""


class LooseFile(TokenFileError):
    """A token file that group or others may access: refused, never read."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, role TEXT NOT NULL, peer TEXT, space TEXT,
  trigger_id TEXT, run_id TEXT, created_at REAL NOT NULL, expires_at REAL
);
"""
ADDED_COLUMNS = {"revoked_at": "REAL", "last_used_at": "REAL"}
INDEXES = """
CREATE INDEX IF NOT EXISTS tokens_by_run ON tokens (space, run_id);
CREATE INDEX IF NOT EXISTS tokens_by_expiry ON tokens (expires_at);
"""  # `prune` runs at every run token minted (with every claim that asks for one)
PREFIX = {Role.ADMIN: "bta_", Role.DEVICE: "btd_", Role.RUN: "btr_"}
ID_DIGITS = 16
LAST_USED_GRAIN = 60.0  # seconds: `last_used_at` is written at most this often per token


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    add_columns(db, "tokens", ADDED_COLUMNS)
    db.executescript(INDEXES)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_row(token: str, who: Principal) -> list[str | None]:
    """The stored columns of `token` for `who`, in the tokens table's order: its hash (never
    the token), role, peer, space, trigger and run."""
    return [token_hash(token), who.role.value, who.peer, who.space, who.trigger_id, who.run_id]


def token_id(token: str) -> str:
    """The public name of `token`: what listings show and revocations take."""
    return token_hash(token)[:ID_DIGITS]


def store_token(
    db: sqlite_utils.Database, token: str, who: Principal, now: float, expires_at: float | None
) -> None:
    db.execute(
        "INSERT OR IGNORE INTO tokens (hash, role, peer, space, trigger_id, run_id, created_at, "
        "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [*token_row(token, who), now, expires_at],
    )


def mint_token(
    db: sqlite_utils.Database, who: Principal, now: float, expires_at: float | None = None
) -> str:
    """A new token for `who`; only its hash is kept, so it is shown once."""
    token = new_token(who.role)
    store_token(db, token, who, now, expires_at)
    return token


def new_token(role: Role) -> str:
    """A fresh secret of `role` (either store keeps only its `token_hash`)."""
    return PREFIX[role] + secrets.token_urlsafe(32)


def lookup(db: sqlite_utils.Database, token: str, now: float) -> Principal:
    """Who `token` is; `TokenError` if it is unknown, revoked or expired."""
    rows = list(db.query("SELECT * FROM tokens WHERE hash = ?", [token_hash(token)]))
    who = judge(rows[0] if rows else None, now)
    if touched(rows[0], now):
        db.execute("UPDATE tokens SET last_used_at = ? WHERE hash = ?", [now, rows[0]["hash"]])
    return who


def judge(row: dict[str, Any] | None, now: float) -> Principal:
    """Who the stored `row` of a bearer token is at `now` (either store); `TokenError` if
    none, revoked or expired."""
    if row is None:
        raise TokenError("unauthorized", "unknown bearer token")
    if row["revoked_at"] is not None:
        raise TokenError("token_revoked", "the bearer token was revoked")
    if row["expires_at"] is not None and row["expires_at"] <= now:
        raise TokenError("token_expired", "the bearer token has expired")
    return Principal(
        role=Role(row["role"]),
        id=row["hash"][:ID_DIGITS],
        peer=row["peer"],
        space=row["space"],
        trigger_id=row["trigger_id"],
        run_id=row["run_id"],
    )


def touched(row: dict[str, Any], now: float) -> bool:
    """Whether a use at `now` is written to `last_used_at` (not for run tokens, at most
    once a `LAST_USED_GRAIN`)."""
    return bool(row["role"] != Role.RUN and (row["last_used_at"] or 0) + LAST_USED_GRAIN <= now)


def revoke(db: sqlite_utils.Database, tid: str, now: float) -> dict[str, Any] | None:
    """Revoke the token whose id is `tid`, unless it is the last live admin token
    (`LastAdminToken`); its listing entry now, or None if there is none. In the caller's
    transaction."""
    if not is_id(tid):
        return None
    found = listing(db, now, everything=True, id_=tid)
    if found and last_admin(found[0], live_admins(db)):
        raise LastAdminToken(tid)
    if not found:
        return None
    db.execute(
        "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE substr(hash, 1, ?) = ?",
        [now, ID_DIGITS, tid],
    )
    return listing(db, now, everything=True, id_=tid)[0]


def is_id(tid: str) -> bool:
    return len(tid) == ID_DIGITS and all(c in "0123456789abcdef" for c in tid)


def last_admin(found: dict[str, Any], live: int) -> bool:
    """Whether revoking the listed token `found` would leave no live admin token (of `live`)."""
    return bool(found["role"] == Role.ADMIN and found["state"] == "live" and live <= 1)


def revoke_run(
    db: sqlite_utils.Database, space: str, run_id: str, now: float, peer: str | None = None
) -> int:
    """End the run tokens of run `run_id` (its run is over); with `peer`, only those of
    that device's fires. How many there were."""
    return revoke_runs(db, space, [run_id], now, peer)


def revoke_runs(
    db: sqlite_utils.Database, space: str, run_ids: list[str], now: float, peer: str | None = None
) -> int:
    """End the run tokens of the runs `run_ids` (one statement; with `peer`, only those of
    that device's fires); how many there were."""
    if not run_ids:
        return 0
    marks = ", ".join("?" * len(run_ids))
    sql = (
        "UPDATE tokens SET revoked_at = ? WHERE role = 'run' AND space = ? "
        f"AND run_id IN ({marks}) AND revoked_at IS NULL"
    )
    params: list[object] = [now, space, *run_ids]
    if peer is not None:
        sql, params = sql + " AND peer = ?", [*params, peer]
    return db.execute(sql, params).rowcount


def revoke_admins(db: sqlite_utils.Database, now: float, keep: str) -> None:
    """Revoke every admin token but `keep` (a hash)."""
    db.execute(
        "UPDATE tokens SET revoked_at = ? WHERE role = 'admin' AND revoked_at IS NULL "
        "AND hash != ?",
        [now, keep],
    )


def live_admins(db: sqlite_utils.Database) -> int:
    row = db.execute(
        "SELECT COUNT(*) FROM tokens WHERE role = 'admin' AND revoked_at IS NULL"
    ).fetchone()
    return int(row[0])


def prune(db: sqlite_utils.Database, now: float) -> None:
    """Forget tokens past their expiry (revoked or not): they can never work again."""
    db.execute("DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ?", [now])


def listing(
    db: sqlite_utils.Database, now: float, *, everything: bool = False, id_: str | None = None
) -> list[dict[str, Any]]:
    """Tokens without their secrets, oldest first; live ones only unless `everything`."""
    sql, params = "SELECT * FROM tokens WHERE 1", []
    if id_ is not None:
        sql, params = sql + " AND substr(hash, 1, ?) = ?", [ID_DIGITS, id_]
    if not everything:
        sql += " AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
        params.append(now)
    rows = db.query(sql + " ORDER BY created_at, hash", params)
    return [entry(row, now) for row in rows]


def entry(row: dict[str, Any], now: float) -> dict[str, Any]:
    expired = row["expires_at"] is not None and row["expires_at"] <= now
    state = "revoked" if row["revoked_at"] is not None else "expired" if expired else "live"
    return {
        "id": row["hash"][:ID_DIGITS],
        "role": row["role"],
        "peer": row["peer"],
        "space": row["space"],
        "triggerId": row["trigger_id"],
        "runId": row["run_id"],
        "createdAt": row["created_at"],
        "expiresAt": row["expires_at"],
        "lastUsedAt": row["last_used_at"],
        "revokedAt": row["revoked_at"],
        "state": state,
    }


# --- files ---------------------------------------------------------------------------------


def check_private(path: Path) -> None:
    """Refuse a token file that group or others may access (`LooseFile`, one clear line)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise LooseFile(
            f"token file {path} is accessible by group or others (mode {mode:04o}); "
            f"run `chmod 600 {path}`"
        )


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` owner-only (0600), replacing it atomically; the directory is
    created 0700 if missing."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_private(path: Path) -> str:
    """The token in `path`, which must be owner-only and not empty."""
    check_private(path)
    token = path.read_text().strip()
    if not token:
        raise TokenFileError(f"token file {path} is empty")
    return token


def ensure_admin_token(db: sqlite_utils.Database, path: Path, now: float) -> None:
    """Create the admin token file (0600) at first start; accept an existing owner-only one.

    A file whose token was revoked (an old copy put back after a rotation) is refused."""
    if path.exists():
        token = read_private(path)
        store_token(db, token, Principal(role=Role.ADMIN), now, None)
        row = db.execute(
            "SELECT role, revoked_at FROM tokens WHERE hash = ?", [token_hash(token)]
        ).fetchone()
        if row[0] != Role.ADMIN or row[1] is not None:
            raise not_admin(path)
        return
    write_private(path, mint_token(db, Principal(role=Role.ADMIN), now) + "\n")


def not_admin(path: Path) -> TokenFileError:
    return TokenFileError(
        f"admin token file {path} holds a revoked or non-admin token; remove it to mint a new one"
    )


def rotate_admin(db: sqlite_utils.Database, path: Path | None, now: float) -> str:
    """A new admin token; every other admin token is revoked and `path` rewritten."""
    token = mint_token(db, Principal(role=Role.ADMIN), now)
    revoke_admins(db, now, keep=token_hash(token))
    if path is not None:
        write_private(path, token + "\n")
    return token


def mint_run(
    db: sqlite_utils.Database,
    space: str,
    trigger_id: str,
    run_id: str,
    now: float,
    expires: float,
    peer: str | None = None,
) -> str:
    """The one place a run token is made: scoped to `space`, `trigger_id` and `run_id`, dying
    at `expires` at the latest (and when its run is recorded, `revoke_run`); `peer`, the
    device whose fire it is (who may end it). Inside a transaction of the caller's."""
    prune(db, now)
    who = Principal(role=Role.RUN, space=space, trigger_id=trigger_id, run_id=run_id, peer=peer)
    return mint_token(db, who, now, expires)
