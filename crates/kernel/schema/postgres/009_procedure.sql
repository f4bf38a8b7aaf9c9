-- Stored procedures (issue 7): tenant code called by name inside one
-- transaction on its realm's partition. code_hash (the sandbox's content
-- hash, as text) keys compiled code and contexts, so a reinstall never
-- meets the old context.
CREATE TABLE procedure (
    p_key        INTEGER NOT NULL,
    realm        TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    language     TEXT    NOT NULL CHECK (language IN ('wasm', 'js')),
    code         BYTEA   NOT NULL,
    code_hash    TEXT    NOT NULL,
    memory_bytes BIGINT  NOT NULL,
    timeout_ms   BIGINT  NOT NULL,
    installed_us BIGINT  NOT NULL,
    PRIMARY KEY (p_key, realm, name)
);
