-- fleet_exchange.sql: publish this node's fingerprint, read the live nodes' or the changes
-- since a cursor (fleet.sql).
--
-- Inputs: %(ns)s, %(node)s, %(fingerprint)s, %(details)s (bytes or NULL), %(now_ms)s,
--   %(since)s (NULL: a full read), %(changed)s.
-- Replies: one row, (reply jsonb, see fleet_exchange() in fleet.sql).
SELECT @schema@.fleet_exchange(%(ns)s, %(node)s, %(fingerprint)s, %(details)s, %(now_ms)s,
                               %(since)s, %(changed)s)
