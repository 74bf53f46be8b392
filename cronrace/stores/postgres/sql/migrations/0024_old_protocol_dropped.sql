-- 0024_old_protocol_dropped.sql: version 24 of the schema: the watermark protocol is gone.
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none. Idempotent (IF EXISTS).
--
-- The agents decide under the dense cursor (decide(), renew_lease(), end_run(s): version
-- 23) and no longer call the watermark's functions: acquire() and its batch, renew(),
-- release() and its batch, lease_garbled(). They are dropped, and with them the columns
-- only they read or wrote: the watermark (every job's cursor was seeded from it by version
-- 23), the passed ticks and ranges, and the list of triggers decided (a trigger is now
-- outstanding until its decision removes it). hold_fence is new: during a wipe hold, the
-- highest fence a run granted before the loss can hold (such a run may write its lease
-- back; a grant made during the hold may not, so it never takes the lease from one).
DO $drop$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN
    SELECT p.oid::regprocedure FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.oid = '@schema@'::regnamespace
      AND p.proname IN ('acquire', 'acquire_many', 'renew', 'release', 'release_many',
                        'lease_garbled')
  LOOP
    EXECUTE 'DROP FUNCTION ' || f;
  END LOOP;
END
$drop$;
ALTER TABLE @schema@.jobs
  ADD COLUMN IF NOT EXISTS hold_fence bigint NOT NULL DEFAULT 0,
  DROP COLUMN IF EXISTS watermark,
  DROP COLUMN IF EXISTS passed,
  DROP COLUMN IF EXISTS passed_ranges,
  DROP COLUMN IF EXISTS triggers;
