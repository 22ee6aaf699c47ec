"""The PostgreSQL store's schema: versioned migrations, applied by the server that opens it.

Owns the tables of the PostgreSQL store and `migrate`: the versions applied are rows of
`baton_schema`; a server applies the missing ones in order, in one transaction under an
advisory lock (several servers starting at once apply each once), and refuses a store
written by a newer build. Must not hold queries of the store's operations.
"""

from __future__ import annotations

import asyncpg

_LOCK = 0x6261746F6E  # "baton": the advisory lock that serializes migrations
_V1 = """
CREATE TABLE leases (space text PRIMARY KEY, active text, term bigint NOT NULL DEFAULT 0,
  expires_at timestamptz, want text);
CREATE TABLE history_terms (space text NOT NULL, term bigint NOT NULL, holder text NOT NULL,
  began timestamptz NOT NULL, ended timestamptz, how text, PRIMARY KEY (space, term));
CREATE TABLE fires (space text NOT NULL, trigger_id text NOT NULL, key text NOT NULL,
  term bigint NOT NULL, peer text NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now(),
  claim_id text NOT NULL DEFAULT '', PRIMARY KEY (space, trigger_id, key));
CREATE TABLE feeds (space text PRIMARY KEY, seq bigint NOT NULL);
CREATE TABLE changes (space text NOT NULL, seq bigint NOT NULL, trigger_id text NOT NULL,
  op text NOT NULL, rev bigint NOT NULL, body text, at text NOT NULL,
  PRIMARY KEY (space, seq));
CREATE TABLE chats (object_id text PRIMARY KEY, space text NOT NULL, name text NOT NULL,
  created_at text NOT NULL, last_seq bigint NOT NULL DEFAULT 0);
CREATE INDEX chats_by_space ON chats (space, created_at);
CREATE TABLE chat_messages (object_id text NOT NULL, seq bigint NOT NULL,
  message_id text NOT NULL UNIQUE, created_ts double precision NOT NULL, body text NOT NULL,
  PRIMARY KEY (object_id, seq));
"""
_V2 = """
CREATE TABLE trigger_ids (space text NOT NULL, id text NOT NULL, PRIMARY KEY (space, id));
CREATE TABLE triggers (space text NOT NULL, id text NOT NULL, rev bigint NOT NULL,
  body text NOT NULL, name text, PRIMARY KEY (space, id));
CREATE UNIQUE INDEX triggers_by_name ON triggers (space, name) WHERE name IS NOT NULL;
CREATE TABLE history_revisions (space text NOT NULL, trigger_id text NOT NULL,
  rev bigint NOT NULL, seq bigint NOT NULL, at double precision NOT NULL, op text NOT NULL,
  actor text NOT NULL, note text NOT NULL, changes text NOT NULL, record text,
  PRIMARY KEY (space, trigger_id, rev));
CREATE INDEX history_revisions_by_seq ON history_revisions (space, seq);
"""
_V3 = """
ALTER TABLE fires ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY;
CREATE INDEX fires_by_n ON fires (space, n);
CREATE TABLE history_refusals (space text NOT NULL, trigger_id text NOT NULL,
  key text NOT NULL, at double precision NOT NULL, peer text NOT NULL, term bigint NOT NULL,
  code text NOT NULL, detail text NOT NULL);
CREATE INDEX history_refusals_by_key ON history_refusals (space, trigger_id, key);
CREATE TABLE tokens (hash text PRIMARY KEY, role text NOT NULL, peer text, space text,
  trigger_id text, run_id text, created_at double precision NOT NULL,
  expires_at double precision, revoked_at double precision, last_used_at double precision);
CREATE INDEX tokens_by_run ON tokens (space, run_id);
CREATE INDEX tokens_by_expiry ON tokens (expires_at);
"""
_V4 = "ALTER TABLE changes ADD COLUMN writer text NOT NULL DEFAULT '';"  # a device's stamps
_V5 = """
CREATE TABLE devices (space text NOT NULL, peer text NOT NULL, name text NOT NULL,
  priority bigint NOT NULL, last_seen double precision NOT NULL,
  live_since double precision NOT NULL, status text NOT NULL DEFAULT '{}',
  instance text NOT NULL DEFAULT '', stopped boolean NOT NULL DEFAULT false,
  PRIMARY KEY (space, peer));
CREATE TABLE history_windows (space text NOT NULL, peer text NOT NULL,
  began double precision NOT NULL, last_seen double precision NOT NULL,
  stopped boolean NOT NULL DEFAULT false, slept double precision,
  applied_seq bigint NOT NULL DEFAULT 0, PRIMARY KEY (space, peer, began));
CREATE TABLE history_applied (space text NOT NULL, peer text NOT NULL,
  at double precision NOT NULL, seq bigint NOT NULL);
CREATE INDEX history_applied_by_peer ON history_applied (space, peer, at);
CREATE TABLE history_offsets (space text NOT NULL, peer text NOT NULL,
  at double precision NOT NULL, offset_ms double precision NOT NULL);
CREATE INDEX history_offsets_by_at ON history_offsets (space, at);
"""  # devices and what a heartbeat writes into history
_V6 = """
CREATE TABLE programs (space text NOT NULL, name text NOT NULL, version bigint NOT NULL,
  source text NOT NULL, sha256 text NOT NULL, any_tool boolean NOT NULL,
  created_at text NOT NULL, publisher text, PRIMARY KEY (space, name, version));
"""
_V8 = """
CREATE TABLE spaces (id text PRIMARY KEY, name text NOT NULL, general_chat text,
  created_at text NOT NULL);
CREATE TABLE state (space text NOT NULL, trigger_id text NOT NULL, key text NOT NULL,
  value text NOT NULL, updated_at text NOT NULL, PRIMARY KEY (space, trigger_id, key));
"""  # spaces (with their general chat, v1's `chats`) and programs' state
MIGRATIONS = (
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V8,
)  # version n is MIGRATIONS[n - 1]; append, never edit


class NewerStore(Exception):
    """The database was migrated by a newer build than this one."""


async def migrate(conn: asyncpg.Connection) -> int:
    """Apply the missing migrations; the version the store is at."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS baton_schema (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        have = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM baton_schema"))
        if have > len(MIGRATIONS):
            raise NewerStore(
                f"the database is at schema version {have}; this build knows {len(MIGRATIONS)}"
            )
        for version in range(have + 1, len(MIGRATIONS) + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO baton_schema (version) VALUES ($1)", version)
    return len(MIGRATIONS)
