-- The realm key-value table: the simplest kernel state, used by the demo
-- workload now and by tenant procedures later. One row per (realm, key).
CREATE TABLE kv (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    version    INTEGER NOT NULL,
    updated_us INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, key)
) WITHOUT ROWID;
