-- post_control.sql: post a control notice (functions/control.sql).
--
-- Inputs: %(ns)s, %(fields)s (a JSON object text).
-- Replies: one row, (id text "<posted_ms>-<id>").
SELECT @schema@.post_control(%(ns)s, %(fields)s::jsonb)
