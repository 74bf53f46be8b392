-- job_states.sql: what the database knows of each job (operator reads).
--
-- Inputs: %(ns)s, %(jobs)s (text[]).
-- Replies: one row per job that has a row: (job, cursor, fence, lease_owner,
--   lease_fence, lease_tick, lease_started_ms, lease_left_ms, paused, skipped_overlap,
--   skipped_paused, missed, queued, abandoned, spec). lease_left_ms is the lease's time
--   left (NULL: no live lease).
SELECT job, cursor_tick, fence, lease_owner, lease_fence, lease_tick, lease_started_ms,
  CASE WHEN lease_fence IS NOT NULL AND lease_expires_us > t.now_us
       THEN (lease_expires_us - t.now_us) / 1000 END,
  paused, skipped_overlap, skipped_paused, missed, queued, abandoned, spec
FROM @schema@.jobs, (SELECT @schema@.now_us() AS now_us) t
WHERE ns = %(ns)s AND job = ANY (%(jobs)s::text[])
