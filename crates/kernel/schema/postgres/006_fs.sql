-- The filesystem in tables (kernel::fs; DBOS section 4.4, Figure 9).
-- Metadata and localized files' blocks live on the realm's partition (a
-- realm's users share it: see ARCHITECTURE.md); parallel files' blocks are
-- spread over partitions by block number.

-- Partitions of the database and where they are served.
CREATE TABLE fs_map (
    p_key        BIGINT  NOT NULL,
    partition_id BIGINT  NOT NULL,
    host_name    TEXT    NOT NULL,
    host_id      TEXT    NOT NULL,
    PRIMARY KEY (p_key, partition_id)
);

-- Users (the paper's User table; `user` is reserved in PostgreSQL).
CREATE TABLE fs_user (
    p_key          BIGINT  NOT NULL,
    realm          TEXT    NOT NULL,
    user_name      TEXT    NOT NULL,
    home_partition BIGINT  NOT NULL,
    current_path   TEXT    NOT NULL,
    PRIMARY KEY (p_key, realm, user_name)
);

-- One row per file or directory, by fully qualified name. The root '/' is
-- implicit, owned by the realm's administrator, mode 0777.
CREATE TABLE directory (
    p_key        BIGINT  NOT NULL,
    realm        TEXT    NOT NULL,
    d_name       TEXT    NOT NULL,            -- '/a/b', never '/'
    parent       TEXT    NOT NULL,
    content_type TEXT    NOT NULL CHECK (content_type IN ('dir', 'file')),
    user_name    TEXT    NOT NULL,            -- owner
    mode         BIGINT  NOT NULL,            -- permission bits, 0..0o777
    f_size       BIGINT  NOT NULL,            -- bytes; 0 for a directory
    layout       TEXT    NOT NULL CHECK (layout IN ('local', 'parallel')),
    block_size   BIGINT  NOT NULL,
    ctime_us     BIGINT  NOT NULL,
    mtime_us     BIGINT  NOT NULL,
    PRIMARY KEY (p_key, realm, d_name)
);
CREATE INDEX directory_children ON directory (p_key, realm, parent, d_name);

-- Blocks of localized files; a block never written (a hole) has no row.
CREATE TABLE localized_file (
    p_key    BIGINT  NOT NULL,
    realm    TEXT    NOT NULL,
    f_name   TEXT    NOT NULL,
    block_no BIGINT  NOT NULL,
    f_owner  TEXT    NOT NULL,
    bytes    BYTEA   NOT NULL,
    PRIMARY KEY (p_key, realm, f_name, block_no)
);

-- Blocks of parallel files, each on the partition of its block number.
CREATE TABLE parallel_file (
    p_key    BIGINT  NOT NULL,
    realm    TEXT    NOT NULL,
    f_name   TEXT    NOT NULL,
    block_no BIGINT  NOT NULL,
    f_owner  TEXT    NOT NULL,
    bytes    BYTEA   NOT NULL,
    PRIMARY KEY (p_key, realm, f_name, block_no)
);
