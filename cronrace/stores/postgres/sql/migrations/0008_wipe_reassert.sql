-- 0008_wipe_reassert.sql: version 8 of the schema; a wipe costs a heartbeat, not a lease.
--
-- Inputs: <schema>, substituted before the file is sent. Applied once, by `cronrace db
--   upgrade`, inside its one transaction.
-- Replies: none.
--
-- jobs.lease_held: the lease was granted during the wipe hold and its run has not started;
--   a run alive since before the wipe that re-asserts its lease takes it back (renew).
-- nodes.asserted_epoch: the epoch for which the node re-asserted its runs' leases (after a
--   wipe); new runs wait until every node that may run has said so (fleet/heartbeat.py).
-- renew and heartbeat take new arguments: their old forms are dropped (the functions
--   that follow create the new ones).
ALTER TABLE @schema@.jobs ADD COLUMN IF NOT EXISTS lease_held boolean NOT NULL DEFAULT false;
ALTER TABLE @schema@.nodes ADD COLUMN IF NOT EXISTS asserted_epoch text NOT NULL DEFAULT '';
DROP FUNCTION IF EXISTS @schema@.renew(text, text, bigint, bigint);
DROP FUNCTION IF EXISTS @schema@.heartbeat(
  text, text, bigint, bigint, text, boolean, bigint, boolean, bigint);
