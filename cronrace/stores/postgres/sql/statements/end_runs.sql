-- end_runs.sql: runs' records, then their leases handed on or released (functions/runs.sql).
--
-- Inputs: %(ns)s; %(requests)s, a JSON array of end_run()'s inputs, one per run.
-- Replies: one row per request, in input order: (i, reply jsonb).
SELECT i, reply FROM @schema@.end_runs(%(ns)s, %(requests)s::jsonb) ORDER BY i
