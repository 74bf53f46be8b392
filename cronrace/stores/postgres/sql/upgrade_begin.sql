-- upgrade_begin.sql: the start of `cronrace db upgrade` (and of `cronrace db sql`'s script).
--
-- Inputs: <schema> (substituted); <lock>, a number naming this schema's upgrade lock.
-- Replies: none.
--
-- Run inside the upgrade's one transaction: the lock makes concurrent upgrades (two nodes
-- deployed at once) wait for each other; the one that comes second finds nothing to do.
SELECT pg_advisory_xact_lock(@lock@);
CREATE SCHEMA IF NOT EXISTS @schema@;
CREATE TABLE IF NOT EXISTS @schema@.schema_version (
  singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  version      integer NOT NULL,
  functions    text NOT NULL,
  upgraded_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
