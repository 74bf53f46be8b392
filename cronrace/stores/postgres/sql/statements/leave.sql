-- leave.sql: remove this node from the live set (graceful shutdown).
--
-- Inputs: %(ns)s, %(node)s.
-- Replies: none.
DELETE FROM @schema@.nodes WHERE ns = %(ns)s AND node = %(node)s
