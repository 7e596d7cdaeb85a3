-- name: section_chunks
-- The chunks of each retrieved chunk's section (at most n each) that the session may read.
SELECT chunk_id, sibling_id, ordinal, content
  FROM pgrag.section_chunks_v1(%(ids)s, %(n)s);
