-- Row-level security on pgrag's tables, as this release installs it (after the functions the
-- policies call; see sql/schema/tables.sql for how this file, the migrations and
-- `pgrag db check` relate). Who the session is: sql/functions/access.sql.
--
-- Every table that holds content, vectors or keyword statistics shows a session only the rows
-- of the access lists it may read. The two tests are InitPlans, each run at most once per
-- statement; the second only when the first is false.
ALTER TABLE pgrag.documents ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.documents
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
ALTER TABLE pgrag.chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.chunks
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
ALTER TABLE pgrag.chunk_embeddings ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.chunk_embeddings
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
ALTER TABLE pgrag.keyword_postings ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.keyword_postings
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
ALTER TABLE pgrag.keyword_df ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.keyword_df
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
ALTER TABLE pgrag.keyword_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.keyword_totals
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));

-- The access lists themselves: a restricted session sees the ones it is in, so it does not
-- learn other tenants' principal names either.
ALTER TABLE pgrag.acls ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.acls
    USING ((SELECT pgrag.unrestricted()) OR principals && (SELECT pgrag.session_principals()))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR principals && (SELECT pgrag.session_principals()));

-- The query log holds retrieved text. A restricted session sees its own role's entries that
-- were asked with principals it holds now (so one user of a pgrag_app does not read another's);
-- unrestricted sessions see all. A restricted session logs only into a collection it may read
-- some document of (pgrag.collection_visible), so it cannot fill another tenant's log past its
-- retention; it may not choose an entry's id, created_at or db_user (column privileges,
-- sql/functions/grants.sql), so nothing it writes looks older or newer than it is.
ALTER TABLE pgrag.queries ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.queries
    USING ((SELECT pgrag.unrestricted())
           OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())))
    WITH CHECK ((SELECT pgrag.unrestricted())
                OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())
                    AND pgrag.collection_visible(collection_id)));

-- A role sees the mappings that apply to it (the owner, who manages them, sees all: not forced,
-- since pgrag.session_principals itself reads this table).
ALTER TABLE pgrag.role_principals ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.role_principals
    USING (EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                    WHERE r.rolname = role_name
                      AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')));

-- Conversations: a session sees its caller's (pgrag.session_caller(), which a pgrag_app session
-- names per transaction and any other restricted role cannot choose). No restricted role is
-- granted the tables (they use the entry points of sql/functions/conversations.sql); this holds
-- for every role that is, pgrag_writer included.
ALTER TABLE pgrag.conversations ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.conversations
    USING (owner = (SELECT pgrag.session_caller()))
    WITH CHECK (owner = (SELECT pgrag.session_caller()));
ALTER TABLE pgrag.conversation_turns ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.conversation_turns
    USING (EXISTS (SELECT 1 FROM pgrag.conversations c
                    WHERE c.id = conversation_id AND c.owner = (SELECT pgrag.session_caller())))
    WITH CHECK (EXISTS (SELECT 1 FROM pgrag.conversations c
                         WHERE c.id = conversation_id AND c.owner = (SELECT pgrag.session_caller())));
