-- cursors.sql: each job's cursor and fence counter.
--
-- Inputs: %(ns)s, %(jobs)s (text[]).
-- Replies: (job, cursor_tick, fence) for each job that has a row.
SELECT job, cursor_tick, fence FROM @schema@.jobs
WHERE ns = %(ns)s AND job = ANY (%(jobs)s::text[])
