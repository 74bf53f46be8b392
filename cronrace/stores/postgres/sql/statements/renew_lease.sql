-- renew_lease.sql: extend (or re-assert) a run's lease (functions/runs.sql).
--
-- Inputs: %(ns)s, %(job)s, %(fence)s, %(ttl_ms)s, %(owner)s ('' never re-asserts),
--   %(tick)s, %(starting)s, %(trigger)s ('' for a tick), %(history)s.
-- Replies: one row, (reply jsonb {answer, warnings}): answer 1 renewed, 2 re-asserted,
--   0 gone, -1 taken; warnings: garbage moved aside (scrub).
SELECT @schema@.renew_lease(%(ns)s, %(job)s, %(fence)s, %(ttl_ms)s, %(owner)s, %(tick)s,
  %(starting)s, %(trigger)s, %(history)s)
