-- history.sql: the newest run records of some jobs, newest first.
--
-- Inputs: %(ns)s, %(jobs)s (text[]), %(limit)s (per job).
-- Replies: (job, id, written_ms, record text).
SELECT j.job, r.id, r.written_ms, r.record::text
FROM unnest(%(jobs)s::text[]) AS j (job)
CROSS JOIN LATERAL (
  SELECT id, written_ms, record FROM @schema@.runs
  WHERE ns = %(ns)s AND job = j.job ORDER BY id DESC LIMIT %(limit)s
) r
ORDER BY j.job, r.id DESC
