-- schedules_read.sql: stored definitions (all, or some names) and their version.
--
-- Inputs: %(ns)s, %(names)s (text[], or NULL for every name).
-- Replies: (name, definition) rows; the first row is (NULL, version as text bytes) so
--   that the set and its version come from one snapshot.
SELECT NULL::text, convert_to(coalesce(
  (SELECT version FROM @schema@.schedule_versions WHERE ns = %(ns)s), 0)::text, 'UTF8')
UNION ALL
SELECT name, definition FROM @schema@.schedules
WHERE ns = %(ns)s AND (%(names)s::text[] IS NULL OR name = ANY (%(names)s::text[]))
