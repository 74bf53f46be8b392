-- watermarks.sql: each job's watermark and fence counter.
--
-- Inputs: %(ns)s, %(jobs)s (text[]).
-- Replies: (job, watermark, fence) for each job that has a row.
SELECT job, watermark, fence FROM @schema@.jobs WHERE ns = %(ns)s AND job = ANY (%(jobs)s::text[])
