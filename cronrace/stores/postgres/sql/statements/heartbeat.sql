-- heartbeat.sql: the clock, the epoch, the live members; this node's expiry (fleet.sql).
--
-- Inputs: %(ns)s, %(node)s, %(now_ms)s, %(ttl_ms)s, %(epoch)s (a candidate), %(prune)s.
-- Replies: one row, (reply jsonb {server_us, epoch, members, pruned}).
SELECT @schema@.heartbeat(%(ns)s, %(node)s, %(now_ms)s, %(ttl_ms)s, %(epoch)s, %(prune)s)
