-- renew.sql: extend a lease held with a fence (functions/lease.sql).
--
-- Inputs: %(ns)s, %(job)s, %(fence)s, %(ttl_ms)s, %(owner)s ('' never re-asserts),
--   %(tick)s, %(starting)s.
-- Replies: one row, (reply jsonb {answer, warnings}).
SELECT @schema@.renew(%(ns)s, %(job)s, %(fence)s, %(ttl_ms)s, %(owner)s, %(tick)s,
  %(starting)s)
