-- fenced_set.sql: a handler's write, refused for a lower fence (functions/control.sql).
--
-- Inputs: %(ns)s, %(key)s, %(value)s (bytes), %(fence)s, %(ttl_ms)s.
-- Replies: one row, (written boolean).
SELECT @schema@.fenced_set(%(ns)s, %(key)s, %(value)s, %(fence)s, %(ttl_ms)s)
