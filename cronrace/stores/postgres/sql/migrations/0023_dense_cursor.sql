-- 0023_dense_cursor.sql: version 23 of the schema: the dense cursor (docs/design.md section 3).
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none. Idempotent (IF NOT EXISTS; the seeds only fill what is still empty).
--
-- What the reference protocol's state (cronrace/protocol/values.py, JobState) has that the
-- job's row lacked, beside the old columns (the old functions go on using those until the
-- agent is switched over to decide(), renew_lease() and end_run(), functions/decide.sql
-- and functions/runs.sql):
--   cursor_tick    every scheduled tick in (origin_tick, cursor_tick] was decided and its
--                  record written (NULL: no decision yet, or the row was lost)
--   origin_tick    the exclusive lower bound of the first decision since the job's state
--                  began (or was lost)
--   outstanding    the manual triggers posted and not decided yet, oldest first: a JSON
--                  array of [id, posted_ms]
--   lease_ticks    the ticks the lease's grant still has to run, the current one first
--                  (lease_tick stays its first, for the operator reads)
--   lease_trigger  the manual trigger the lease runs, if any
--   lease_reasserted  written back by its run after the database lost it (a wipe hold on)
--   run_ticks, run_trigger  the run mirror: the grant the lease belongs to, kept past its
--                  expiry so that the next decision records it abandoned, every tick
-- Every job's cursor is seeded from its watermark, the newest tick the old protocol
-- decided: the next decision covers the ticks after it. Its origin is the watermark too,
-- so I-cursor (every tick in (origin, cursor] decided and recorded) says nothing of the
-- ticks the old protocol decided. A running lease and its run keep their tick as their
-- ticks, so that the dense cursor's release and abandonment see them.
ALTER TABLE @schema@.jobs
  ADD COLUMN IF NOT EXISTS cursor_tick bigint,
  ADD COLUMN IF NOT EXISTS origin_tick bigint,
  ADD COLUMN IF NOT EXISTS outstanding jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN IF NOT EXISTS lease_ticks bigint[],
  ADD COLUMN IF NOT EXISTS lease_trigger text,
  ADD COLUMN IF NOT EXISTS lease_reasserted boolean NOT NULL DEFAULT false,
  ADD COLUMN IF NOT EXISTS run_ticks bigint[],
  ADD COLUMN IF NOT EXISTS run_trigger text;
-- (Only while the watermark is there: a script that applies every migration again finds it
-- dropped by version 24.)
DO $seed$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '@schema@.jobs'::regclass
             AND attname = 'watermark' AND NOT attisdropped) THEN
    EXECUTE 'UPDATE @schema@.jobs SET cursor_tick = watermark, origin_tick = watermark '
            'WHERE cursor_tick IS NULL AND watermark >= 0';
  END IF;
END
$seed$;
UPDATE @schema@.jobs SET lease_ticks = ARRAY[lease_tick]
WHERE lease_ticks IS NULL AND lease_tick IS NOT NULL;
UPDATE @schema@.jobs SET run_ticks = ARRAY[run_tick]
WHERE run_ticks IS NULL AND run_tick IS NOT NULL;
