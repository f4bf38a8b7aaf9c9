-- The realm key-value table: the simplest kernel state, used by the demo
-- workload now and by tenant procedures later. One row per (realm, key).
-- p_key leads the primary key: it is the distribution column (Citus
-- create_distributed_table(.., 'p_key'), CockroachDB/YugabyteDB key prefix).
CREATE TABLE kv (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BYTEA   NOT NULL,
    version    BIGINT  NOT NULL,
    updated_us BIGINT  NOT NULL,
    PRIMARY KEY (p_key, realm, key)
);
