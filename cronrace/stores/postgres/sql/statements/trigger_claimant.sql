-- trigger_claimant.sql: who claimed a manual trigger.
--
-- Inputs: %(ns)s, %(job)s, %(trigger_id)s.
-- Replies: (owner), no row while nobody has.
SELECT owner FROM @schema@.claims
WHERE ns = %(ns)s AND job = %(job)s AND tick = 0 AND trigger_id = %(trigger_id)s
