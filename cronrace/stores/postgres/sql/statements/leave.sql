-- leave.sql: remove this node from the live set and log that it left (graceful shutdown).
--
-- Inputs: %(ns)s, %(node)s.
-- Replies: one row (void).
SELECT @schema@.leave_fleet(%(ns)s, %(node)s)
