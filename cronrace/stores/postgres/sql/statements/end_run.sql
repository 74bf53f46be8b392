-- end_run.sql: a run's record, then its lease handed on or released (functions/runs.sql).
--
-- Inputs: %(ns)s, %(job)s, %(fence)s, %(owner)s, %(ttl_ms)s, %(record)s (RunRecord JSON
--   text, or NULL), %(hand_on)s, %(history)s.
-- Replies: one row, (reply jsonb {decision, fence, tick, trigger, hold_ms, records}).
SELECT @schema@.end_run(%(ns)s, %(job)s, %(fence)s, %(owner)s, %(ttl_ms)s,
  %(record)s::jsonb, %(hand_on)s, %(history)s)
