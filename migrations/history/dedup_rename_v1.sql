-- Keeping identical documents' links when an original is renamed (migration 0007).
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256).
--
-- A copy names its original by source (metadata.duplicate_of; sql/functions/dedup_v1.sql). An
-- application that renames a document with plain SQL (UPDATE pgrag.documents SET source = ...)
-- would leave its copies pointing at a name nothing holds, and a later delete of the original
-- would hand its chunks to no one. After such an UPDATE the copies follow the new name; a
-- document moved to another collection first hands its chunks to a copy that stays.
CREATE FUNCTION pgrag.documents_renamed_v1() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.collection_id <> OLD.collection_id THEN
        PERFORM pgrag.documents_hand_over_v1(OLD.id, OLD.collection_id, OLD.source);
    ELSE
        UPDATE pgrag.documents
           SET metadata = jsonb_set(metadata, '{duplicate_of}', to_jsonb(NEW.source))
         WHERE collection_id = OLD.collection_id
           AND metadata @> jsonb_build_object('duplicate_of', OLD.source)
           AND id <> NEW.id;
    END IF;
    RETURN NULL;
END
$fn$;
