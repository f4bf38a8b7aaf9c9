-- Named pipes (issue 43, item 3; kernel::fs::fifo): see the SQLite
-- migration of the same number for what each table holds.
ALTER TABLE fs_inode DROP CONSTRAINT fs_inode_content_type_check;
ALTER TABLE fs_inode ADD CONSTRAINT fs_inode_content_type_check
    CHECK (content_type IN ('dir', 'file', 'symlink', 'fifo'));
CREATE TABLE fs_fifo (
    p_key        BIGINT NOT NULL,
    realm        TEXT   NOT NULL,
    f_id         TEXT   NOT NULL,
    reader_opens BIGINT NOT NULL DEFAULT 0, -- read ends ever opened
    writer_opens BIGINT NOT NULL DEFAULT 0, -- write ends ever opened
    next_seq     BIGINT NOT NULL DEFAULT 0, -- the next chunk's seq
    PRIMARY KEY (p_key, realm, f_id)
);
CREATE TABLE fs_fifo_data (
    p_key BIGINT NOT NULL,
    realm TEXT   NOT NULL,
    f_id  TEXT   NOT NULL,
    seq   BIGINT NOT NULL,
    data  BYTEA  NOT NULL,
    PRIMARY KEY (p_key, realm, f_id, seq)
);
ALTER TABLE fs_open ADD COLUMN fifo_mark BIGINT;
INSERT INTO tenant_view (name) VALUES ('fs_fifo');
