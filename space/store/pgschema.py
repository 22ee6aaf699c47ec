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
_V7 = """
ALTER TABLE fires ADD COLUMN IF NOT EXISTS run_id text, ADD COLUMN IF NOT EXISTS status text,
  ADD COLUMN IF NOT EXISTS reason text, ADD COLUMN IF NOT EXISTS started_at double precision,
  ADD COLUMN IF NOT EXISTS late_ms double precision;
CREATE TABLE runs (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, space text NOT NULL,
  run_id text NOT NULL, trigger_id text NOT NULL, status text NOT NULL,
  started_at double precision NOT NULL, failure boolean NOT NULL, body text NOT NULL,
  UNIQUE (space, run_id));
CREATE INDEX runs_by_trigger ON runs (space, trigger_id, failure, started_at);
CREATE INDEX runs_by_time ON runs (space, started_at);
CREATE TABLE run_rollups (space text NOT NULL, trigger_id text NOT NULL, status text NOT NULL,
  count bigint NOT NULL, last_run_at text, PRIMARY KEY (space, trigger_id, status));
CREATE TABLE agent_turns (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  space text NOT NULL, turn_id text NOT NULL, object_id text NOT NULL,
  started_at double precision NOT NULL, failure boolean NOT NULL, body text NOT NULL,
  UNIQUE (space, turn_id));
CREATE INDEX agent_turns_by_chat ON agent_turns (space, object_id, failure, started_at);
CREATE INDEX agent_turns_by_time ON agent_turns (space, started_at);
CREATE TABLE idempotency (owner text NOT NULL, key text NOT NULL, digest text NOT NULL,
  status integer NOT NULL, content_type text NOT NULL, headers text NOT NULL,
  body bytea NOT NULL, at double precision NOT NULL, PRIMARY KEY (owner, key));
CREATE INDEX idempotency_at ON idempotency (at);
"""  # runs (their fire's outcome in `fires`), turns, idempotency keys (status 0: being answered)
_V8 = """
CREATE TABLE spaces (id text PRIMARY KEY, name text NOT NULL, general_chat text,
  created_at text NOT NULL);
CREATE TABLE state (space text NOT NULL, trigger_id text NOT NULL, key text NOT NULL,
  value text NOT NULL, updated_at text NOT NULL, PRIMARY KEY (space, trigger_id, key));
"""  # spaces (with their general chat, v1's `chats`) and programs' state
_V9 = """
CREATE INDEX IF NOT EXISTS fires_by_claimed_at ON fires (claimed_at);
CREATE TABLE IF NOT EXISTS history_subscriptions (id bigint GENERATED ALWAYS AS IDENTITY
  PRIMARY KEY, space text NOT NULL, peer text NOT NULL, object_id text NOT NULL,
  began double precision NOT NULL, ended double precision, resumed boolean NOT NULL);
CREATE INDEX IF NOT EXISTS history_subscriptions_by_chat ON history_subscriptions
  (space, object_id, began);
CREATE TABLE IF NOT EXISTS history_meta (name text PRIMARY KEY, value double precision NOT NULL);
INSERT INTO history_meta SELECT 'since', least(extract(epoch FROM now()),
  (SELECT min(at) FROM history_revisions), (SELECT min(began) FROM history_windows),
  (SELECT extract(epoch FROM min(began)) FROM history_terms)) ON CONFLICT DO NOTHING;
CREATE INDEX IF NOT EXISTS history_revisions_by_at ON history_revisions (at);
CREATE INDEX IF NOT EXISTS history_terms_by_ended ON history_terms (ended);
CREATE INDEX IF NOT EXISTS history_windows_by_last_seen ON history_windows (last_seen);
CREATE INDEX IF NOT EXISTS history_applied_by_at ON history_applied (at);
CREATE INDEX IF NOT EXISTS history_offsets_at ON history_offsets (at);
CREATE INDEX IF NOT EXISTS history_refusals_by_at ON history_refusals (at);
CREATE INDEX IF NOT EXISTS runs_by_trigger_time ON runs (space, trigger_id, started_at);
CREATE INDEX IF NOT EXISTS agent_turns_by_chat_time ON agent_turns (space, object_id, started_at);
"""  # history's other tables, the prune's indexes, why's reads of runs and turns by time
MIGRATIONS = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9)  # version n: MIGRATIONS[n - 1]


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
