-- schedules_version.sql: the stored schedules' version.
--
-- Inputs: %(ns)s.
-- Replies: (version), no row when nothing was ever stored.
SELECT version FROM @schema@.schedule_versions WHERE ns = %(ns)s
