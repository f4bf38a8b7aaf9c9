-- What a tenant's read-path SQL sees (issue 17): each OS-state table or
-- view named here, holding only the rows whose `realm` is the caller's.
-- The store builds its realm-scoped readers from this table (tabos_store::ReadScope::Realm); anything not
-- named — credentials, the partition map, the block reclaim queue, the
-- schema's own bookkeeping — is not there for a tenant at all. A migration
-- that adds an OS-state table adds its row here.
CREATE TABLE tenant_view (
    name TEXT NOT NULL PRIMARY KEY
);

INSERT INTO tenant_view (name) VALUES
    ('kv'),
    ('realm'),
    ('realm_usage'),
    ('worker'),
    ('proc'),
    ('proc_event'),
    ('ps'),
    ('mailbox'),
    ('message'),
    ('message_log'),
    ('name_entry'),
    ('name_session'),
    ('name_fence'),
    ('fs_user'),
    ('directory'),
    ('localized_file'),
    ('parallel_file'),
    ('fs_extent'),
    ('localized_file_rows'),
    ('parallel_file_rows'),
    ('procedure');
