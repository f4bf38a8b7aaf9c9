-- Credentials (kernel::auth, issue 17): bearer tokens, kept only as the
-- SHA-256 of the token. A credential acts for one realm with one role
-- (an operator's for every realm: realm = ''); a proc's also names its
-- pid. A realm's credentials are on the realm's partition, operators' on
-- partition 0.
CREATE TABLE credential (
    p_key      BIGINT NOT NULL,
    id         TEXT    NOT NULL,            -- public: `tabos token list`, `revoke`
    token_hash TEXT    NOT NULL,            -- hex SHA-256 of the whole token
    realm      TEXT    NOT NULL,
    user_name  TEXT    NOT NULL,
    role       TEXT    NOT NULL CHECK (role IN ('operator', 'admin', 'member', 'reader')),
    pid        TEXT,
    created_us BIGINT NOT NULL,
    expires_us BIGINT,
    revoked_us BIGINT,
    note       TEXT    NOT NULL DEFAULT '',
    CHECK ((role = 'operator') = (realm = '')),
    PRIMARY KEY (p_key, id)
);

CREATE UNIQUE INDEX credential_hash ON credential (p_key, token_hash);
CREATE INDEX credential_by_realm ON credential (p_key, realm, pid);

-- The user a proc acts for: its spawner's (kernel::procs).
ALTER TABLE proc ADD COLUMN user_name TEXT NOT NULL DEFAULT 'root';
