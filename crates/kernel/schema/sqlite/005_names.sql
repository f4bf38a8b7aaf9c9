-- The namespace (kernel::names; σOS sections 3.6, 4.1-4.3).
-- One tree per realm, on the realm's partition. The root '/' is implicit.

CREATE TABLE name_entry (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    path        TEXT    NOT NULL,              -- '/a/b', never '/'
    parent      TEXT    NOT NULL,              -- '/' or '/a'
    kind        TEXT    NOT NULL CHECK (kind IN ('dir', 'file', 'symlink')),
    data        BLOB    NOT NULL,              -- a file's bytes, a symlink's target
    version     INTEGER NOT NULL,              -- 1 at creation, +1 per change (a dir: per child change)
    owner       TEXT    NOT NULL,
    mode        INTEGER NOT NULL,
    session     TEXT,                          -- set: ephemeral, removed with its session
    created_us  INTEGER NOT NULL,
    modified_us INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, path)
) WITHOUT ROWID;
CREATE INDEX name_children ON name_entry (p_key, realm, parent, path);
CREATE INDEX name_ephemeral ON name_entry (p_key, realm, session) WHERE session IS NOT NULL;

-- Sessions: a client's lease on its ephemeral entries.
CREATE TABLE name_session (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    session    TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    ttl_us     INTEGER NOT NULL CHECK (ttl_us > 0),
    expires_us INTEGER NOT NULL,
    created_us INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, session)
) WITHOUT ROWID;
CREATE INDEX name_session_expiry ON name_session (p_key, expires_us);

-- Fences: the highest epoch seen per fenced directory; requests carrying a
-- lower one are refused as stale.
CREATE TABLE name_fence (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    dir        TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    updated_us INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, dir)
) WITHOUT ROWID;
