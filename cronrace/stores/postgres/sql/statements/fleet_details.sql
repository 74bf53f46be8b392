-- fleet_details.sql: the published details of some nodes.
--
-- Inputs: %(ns)s, %(nodes)s (text[]).
-- Replies: (node, details bytea) for each node that has a row.
SELECT node, details FROM @schema@.fleet WHERE ns = %(ns)s AND node = ANY (%(nodes)s::text[])
