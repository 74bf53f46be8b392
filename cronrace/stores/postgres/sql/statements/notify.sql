-- notify.sql: send a notification on the control channel (the listener's probe, listen.py).
--
-- Inputs: %(payload)s, text.
-- Replies: one row (an empty value).
SELECT pg_notify('cronrace_control', %(payload)s)
