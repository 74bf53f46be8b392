-- 0001_tables.sql: cronrace's tables, version 1 of the schema (docs/design.md section 14).
--
-- Inputs: <schema>, the schema's quoted name (default "cronrace"), substituted before the
--   file is sent. Applied once, by `cronrace db upgrade`, inside its one transaction.
-- Replies: none. Idempotent (IF NOT EXISTS): `cronrace db sql` may be run on any version.
--
-- Every row carries its namespace (`ns`): fleets share a database as they share a Redis.
-- Times are integers on the database clock (clock_timestamp(), never now(), which is the
-- transaction's start): `_us` microseconds, `_ms` milliseconds since the Unix epoch, as
-- the Redis store's TIME. No table has a serial key where a conflicting insert would burn
-- sequence values (claims); records and notices use identity columns only for their order.

CREATE SCHEMA IF NOT EXISTS @schema@;

-- The per-tick race: one row per (job, tick) or per manual trigger (tick 0, its id).
-- Inserted with ON CONFLICT DO NOTHING: the one insert that lands wins. Once decided, the
-- row keeps its answer (`request_id`, `memo`) so that a retry after a lost reply gets the
-- same decision and fence.
CREATE TABLE IF NOT EXISTS @schema@.claims (
  ns          text   NOT NULL,
  job         text   NOT NULL,
  tick        bigint NOT NULL,
  trigger_id  text   NOT NULL DEFAULT '',
  owner       text   NOT NULL,
  expires_us  bigint NOT NULL,
  request_id  text,
  memo        jsonb,
  PRIMARY KEY (ns, job, tick, trigger_id)
);
-- Deleted in batches once expired and below the watermark (functions/lib.sql).
CREATE INDEX IF NOT EXISTS claims_expiry ON @schema@.claims (expires_us);

-- One row per job: the watermark, the fence counter, the running lease, the queued tick,
-- the pause flag, counters, the wipe hold and the published definition. Every decision,
-- renewal and release of a job locks this row: they are serialized per job, as a Lua
-- script is on its Redis slot.
CREATE TABLE IF NOT EXISTS @schema@.jobs (
  ns               text    NOT NULL,
  job              text    NOT NULL,
  watermark        bigint,
  fence            bigint,
  lease_owner      text,
  lease_fence      bigint,
  lease_tick       bigint,
  lease_started_ms bigint,
  lease_expires_us bigint,
  pending_tick     bigint,
  pending_trigger  text,
  paused           boolean NOT NULL DEFAULT false,
  run_fence        bigint,
  run_tick         bigint,
  run_owner        text,
  passed           bigint[] NOT NULL DEFAULT '{}',
  hold_until_us    bigint,
  skipped_overlap  bigint,
  skipped_paused   bigint,
  missed           bigint,
  queued           bigint,
  abandoned        bigint,
  registered       boolean NOT NULL DEFAULT false,
  spec             jsonb   NOT NULL DEFAULT '{}',
  PRIMARY KEY (ns, job)
);

-- Run records, newest kept: pruned per job to `history` as each is written.
CREATE TABLE IF NOT EXISTS @schema@.runs (
  ns          text   NOT NULL,
  job         text   NOT NULL,
  id          bigint GENERATED ALWAYS AS IDENTITY,
  written_ms  bigint NOT NULL,
  record      jsonb  NOT NULL,
  PRIMARY KEY (ns, job, id)
);

-- Live nodes: a row per node, its heartbeat's expiry; expired rows are deleted.
CREATE TABLE IF NOT EXISTS @schema@.nodes (
  ns          text   NOT NULL,
  node        text   NOT NULL,
  expires_ms  bigint NOT NULL,
  PRIMARY KEY (ns, node)
);

-- Written once per namespace; a node finding another value knows the data was lost.
CREATE TABLE IF NOT EXISTS @schema@.epochs (
  ns     text PRIMARY KEY,
  epoch  text NOT NULL
);

-- What each node runs (fleet/definitions.py): a short fingerprint written with every
-- heartbeat, and the details it hashes, written when they change.
CREATE TABLE IF NOT EXISTS @schema@.fleet (
  ns           text NOT NULL,
  node         text NOT NULL,
  fingerprint  text,
  details      bytea,
  PRIMARY KEY (ns, node)
);

-- Stored schedules: name -> definition (JSON), and one version per namespace that counts
-- the changes.
CREATE TABLE IF NOT EXISTS @schema@.schedules (
  ns          text  NOT NULL,
  name        text  NOT NULL,
  definition  bytea NOT NULL,
  PRIMARY KEY (ns, name)
);
CREATE TABLE IF NOT EXISTS @schema@.schedule_versions (
  ns       text   PRIMARY KEY,
  version  bigint NOT NULL
);

-- Control notices (manual triggers, stored-schedule changes), read by every node from
-- the position it took when it connected. Posted under a transaction-level lock
-- (functions/control.sql), so ids commit in order and a reader never skips one.
CREATE TABLE IF NOT EXISTS @schema@.control (
  ns         text   NOT NULL,
  id         bigint GENERATED ALWAYS AS IDENTITY,
  posted_ms  bigint NOT NULL,
  fields     jsonb  NOT NULL,
  PRIMARY KEY (ns, id)
);

-- Values written by handlers with a fence (RunContext.fenced_set): a lower fence is refused.
CREATE TABLE IF NOT EXISTS @schema@.fenced_values (
  ns          text   NOT NULL,
  key         text   NOT NULL,
  value       bytea  NOT NULL,
  fence       bigint NOT NULL,
  expires_us  bigint,
  PRIMARY KEY (ns, key)
);

-- Garbage found in a row (an operator's edit that makes no sense), moved here for
-- inspection and reported in an ERROR log; kept 7 days.
CREATE TABLE IF NOT EXISTS @schema@.quarantine (
  ns        text   NOT NULL,
  job       text   NOT NULL,
  kind      text   NOT NULL,
  value     text,
  moved_us  bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS quarantine_moved ON @schema@.quarantine (moved_us);
