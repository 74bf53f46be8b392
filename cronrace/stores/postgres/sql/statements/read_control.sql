-- read_control.sql: the control notices after a position, oldest first.
--
-- Inputs: %(ns)s, %(after_id)s, %(limit)s.
-- Replies: (id, posted_ms, fields jsonb).
SELECT id, posted_ms, fields FROM @schema@.control
WHERE ns = %(ns)s AND id > %(after_id)s ORDER BY id LIMIT %(limit)s
