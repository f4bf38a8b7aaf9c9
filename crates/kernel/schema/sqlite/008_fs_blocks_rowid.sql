-- Block tables as rowid tables. A WITHOUT ROWID table is an index b-tree,
-- whose cells keep at most about 1 KB of a row on a 4 KB page: every 2 KB
-- block spilled to an overflow page, which SQLite reads past its page cache
-- with a system call of its own. In a rowid table a 2 KB block stays in
-- its leaf; the key is a unique index beside it.
CREATE TABLE localized_file_rows (
    p_key    INTEGER NOT NULL,
    realm    TEXT    NOT NULL,
    f_name   TEXT    NOT NULL,
    block_no INTEGER NOT NULL,
    f_owner  TEXT    NOT NULL,
    bytes    BLOB    NOT NULL,
    UNIQUE (p_key, realm, f_name, block_no)
);
INSERT INTO localized_file_rows SELECT p_key, realm, f_name, block_no, f_owner, bytes FROM localized_file;
DROP TABLE localized_file;
ALTER TABLE localized_file_rows RENAME TO localized_file;

CREATE TABLE parallel_file_rows (
    p_key    INTEGER NOT NULL,
    realm    TEXT    NOT NULL,
    f_name   TEXT    NOT NULL,
    block_no INTEGER NOT NULL,
    f_owner  TEXT    NOT NULL,
    bytes    BLOB    NOT NULL,
    UNIQUE (p_key, realm, f_name, block_no)
);
INSERT INTO parallel_file_rows SELECT p_key, realm, f_name, block_no, f_owner, bytes FROM parallel_file;
DROP TABLE parallel_file;
ALTER TABLE parallel_file_rows RENAME TO parallel_file;
