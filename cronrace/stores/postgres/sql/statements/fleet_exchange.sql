-- fleet_exchange.sql: publish this node's fingerprint, read the live nodes' (fleet.sql).
--
-- Inputs: %(ns)s, %(node)s, %(fingerprint)s, %(details)s (bytes or NULL), %(now_ms)s.
-- Replies: one row, (reply jsonb {fingerprints, dead, details_missing, schedules_version}).
SELECT @schema@.fleet_exchange(%(ns)s, %(node)s, %(fingerprint)s, %(details)s, %(now_ms)s)
