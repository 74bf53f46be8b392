-- nodes.sql: the live nodes, on the database clock.
--
-- Inputs: %(ns)s.
-- Replies: (node, expires_ms) for every node whose heartbeat has not expired.
SELECT node, expires_ms FROM @schema@.nodes
WHERE ns = %(ns)s AND expires_ms >= @schema@.now_us() / 1000
