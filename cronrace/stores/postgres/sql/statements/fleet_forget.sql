-- fleet_forget.sql: delete the published rows of nodes that left.
--
-- Inputs: %(ns)s, %(nodes)s (text[]).
-- Replies: none.
DELETE FROM @schema@.fleet WHERE ns = %(ns)s AND node = ANY (%(nodes)s::text[])
