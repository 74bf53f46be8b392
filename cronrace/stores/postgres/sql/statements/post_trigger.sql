-- post_trigger.sql: a manual trigger, outstanding and announced (functions/decide.sql).
--
-- Inputs: %(ns)s, %(job)s, %(id)s.
-- Replies: one row, (the control notice's id text).
SELECT @schema@.post_trigger(%(ns)s, %(job)s, %(id)s)
