-- schedules_write.sql: change stored schedules all or nothing (functions/control.sql).
--
-- Inputs: %(ns)s; %(ops)s, %(names)s (text[]), %(definitions)s (bytea[]).
-- Replies: one row, (reply jsonb {status, detail, first, last}).
SELECT @schema@.schedules_write(%(ns)s, %(ops)s::text[], %(names)s::text[],
  %(definitions)s::bytea[])
