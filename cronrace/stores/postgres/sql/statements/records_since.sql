-- records_since.sql: a job's records written since an instant, oldest first.
--
-- Inputs: %(ns)s, %(job)s, %(since_ms)s (database clock), %(limit)s.
-- Replies: (id, written_ms, record text).
SELECT id, written_ms, record::text FROM @schema@.runs
WHERE ns = %(ns)s AND job = %(job)s AND written_ms >= %(since_ms)s
ORDER BY id LIMIT %(limit)s
