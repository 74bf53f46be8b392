-- 0006_fleet_log.sql: the fleet's change log, version 6 of the schema (fleet.sql).
--
-- Inputs: <schema>, the schema's quoted name, substituted before the file is sent.
--   Applied once, by `cronrace db upgrade`, inside its one transaction.
-- Replies: none. Idempotent (IF NOT EXISTS): `cronrace db sql` may be run on any version.
--
-- A heartbeat reads only what changed since its last read: the nodes that joined, left or
-- published a new fingerprint, one row each in `fleet_log`. Its `seq` is taken from the
-- namespace's counter in `fleet_seq` under that row's lock, so numbers are given in commit
-- order and without holes: a reader that saw number n committed sees every row up to n.
-- The heartbeat and the exchange take new arguments; their old signatures are dropped
-- (the functions are created again, with the new ones, right after the migrations).

CREATE TABLE IF NOT EXISTS @schema@.fleet_seq (
  ns   text   PRIMARY KEY,
  seq  bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS @schema@.fleet_log (
  ns     text   NOT NULL,
  seq    bigint NOT NULL,
  node   text   NOT NULL,
  kind   text   NOT NULL,
  value  text   NOT NULL DEFAULT '',
  PRIMARY KEY (ns, seq)
);

DROP FUNCTION IF EXISTS @schema@.heartbeat(text, text, bigint, bigint, text, boolean);
DROP FUNCTION IF EXISTS @schema@.fleet_exchange(text, text, text, bytea, bigint);
