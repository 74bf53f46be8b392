-- heartbeat.sql: the clock, the epoch, the members (all, or the changes since a cursor);
-- this node's expiry (fleet.sql).
--
-- Inputs: %(ns)s, %(node)s, %(now_ms)s, %(ttl_ms)s, %(epoch)s (a candidate), %(prune)s,
--   %(since)s (NULL: a full read), %(joined)s, %(live_after_ms)s, %(asserted)s (the epoch
--   this node re-asserted its runs' leases for), %(read_asserted)s, %(recheck)s (members
--   read silent before, text[]).
-- Replies: one row, (reply jsonb, see heartbeat() in fleet.sql).
SELECT @schema@.heartbeat(%(ns)s, %(node)s, %(now_ms)s, %(ttl_ms)s, %(epoch)s, %(prune)s,
                          %(since)s, %(joined)s, %(live_after_ms)s, %(asserted)s,
                          %(read_asserted)s, %(recheck)s)
