-- The triggers on pgrag's tables, as this release installs them (after the functions they call;
-- see sql/schema/tables.sql for how this file, the migrations and `pgrag db check` relate).

-- Access: a document's principals become its acl; chunks and vectors follow their document.
CREATE TRIGGER documents_acl BEFORE INSERT OR UPDATE OF principals, acl_id ON pgrag.documents
    FOR EACH ROW EXECUTE FUNCTION pgrag.documents_acl();
CREATE TRIGGER documents_acl_changed AFTER UPDATE OF principals, acl_id ON pgrag.documents
    FOR EACH ROW WHEN (OLD.acl_id IS DISTINCT FROM NEW.acl_id)
    EXECUTE FUNCTION pgrag.documents_acl_changed();
CREATE TRIGGER chunks_acl BEFORE INSERT OR UPDATE OF document_id, principals, acl_id
    ON pgrag.chunks FOR EACH ROW EXECUTE FUNCTION pgrag.chunks_acl();
CREATE TRIGGER chunks_acl_changed AFTER UPDATE OF document_id, principals, acl_id
    ON pgrag.chunks FOR EACH ROW WHEN (OLD.acl_id IS DISTINCT FROM NEW.acl_id)
    EXECUTE FUNCTION pgrag.chunks_acl_changed();
CREATE TRIGGER chunk_embeddings_acl
    BEFORE INSERT OR UPDATE OF chunk_id, acl_id, collection_id, model_id
    ON pgrag.chunk_embeddings FOR EACH ROW EXECUTE FUNCTION pgrag.chunk_embeddings_acl();

-- The BM25 keyword index follows every write of chunks (statement-level, transition tables).
CREATE TRIGGER chunks_keyword_insert AFTER INSERT ON pgrag.chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync();
CREATE TRIGGER chunks_keyword_update AFTER UPDATE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync();
CREATE TRIGGER chunks_keyword_delete AFTER DELETE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync();
CREATE TRIGGER chunks_keyword_truncate AFTER TRUNCATE ON pgrag.chunks
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_truncate();

-- Identical documents (sql/functions/dedup.sql). "Documents_hand_over" is named to sort before
-- the foreign keys' RI_ConstraintTrigger_a_*: PostgreSQL fires a table's triggers by name.
CREATE TRIGGER "Documents_hand_over" AFTER DELETE ON pgrag.documents
    FOR EACH ROW EXECUTE FUNCTION pgrag.documents_deleted();
CREATE TRIGGER documents_access_dedup AFTER UPDATE OF principals, acl_id ON pgrag.documents
    FOR EACH ROW WHEN (OLD.acl_id IS DISTINCT FROM NEW.acl_id)
    EXECUTE FUNCTION pgrag.documents_access_dedup();
CREATE TRIGGER documents_renamed AFTER UPDATE OF source, collection_id ON pgrag.documents
    FOR EACH ROW WHEN (OLD.source IS DISTINCT FROM NEW.source
                       OR OLD.collection_id IS DISTINCT FROM NEW.collection_id)
    EXECUTE FUNCTION pgrag.documents_renamed();

-- A collection's partition of pgrag.chunk_embeddings, and the vectors following their chunks
-- and models in place of foreign keys (sql/functions/partitions.sql).
CREATE TRIGGER collections_partition AFTER INSERT ON pgrag.collections
    FOR EACH ROW EXECUTE FUNCTION pgrag.collections_partition();
CREATE TRIGGER chunks_vectors_delete AFTER DELETE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.chunks_vectors_deleted();
CREATE TRIGGER chunks_vectors_move AFTER UPDATE OF collection_id ON pgrag.chunks
    FOR EACH ROW WHEN (OLD.collection_id IS DISTINCT FROM NEW.collection_id)
    EXECUTE FUNCTION pgrag.chunks_vectors_moved();
CREATE TRIGGER chunks_id_fixed BEFORE UPDATE OF id ON pgrag.chunks
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION pgrag.chunks_id_changing();
CREATE TRIGGER chunks_vectors_truncate AFTER TRUNCATE ON pgrag.chunks
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.chunks_vectors_truncated();
CREATE TRIGGER embedding_models_vectors BEFORE DELETE ON pgrag.embedding_models
    FOR EACH ROW EXECUTE FUNCTION pgrag.embedding_models_deleting();

-- Models per collection, and documents written with SQL (sql/functions/models.sql, sync.sql).
CREATE TRIGGER collections_model AFTER INSERT OR UPDATE OF model_id ON pgrag.collections
    FOR EACH ROW EXECUTE FUNCTION pgrag.collection_model_changed();
CREATE TRIGGER documents_body BEFORE INSERT OR UPDATE OF body ON pgrag.documents
    FOR EACH ROW WHEN (NEW.body IS NOT NULL)
    EXECUTE FUNCTION pgrag.documents_body();
CREATE TRIGGER documents_sync AFTER INSERT OR UPDATE OF body, title ON pgrag.documents
    FOR EACH ROW EXECUTE FUNCTION pgrag.documents_sync();
