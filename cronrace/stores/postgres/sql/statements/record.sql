-- record.sql: append run records that release no lease (functions/fleet.sql).
--
-- Inputs: %(ns)s; %(jobs)s, %(records)s (JSON texts), %(missed)s (ticks to add to the
--   job's missed counter, 0: none), sorted by job; %(history)s.
-- Replies: none.
SELECT @schema@.record_runs(%(ns)s, %(jobs)s::text[], %(records)s::jsonb[],
  %(missed)s::bigint[], %(history)s)
