-- Named pipes (issue 43, item 3; kernel::fs::fifo). A FIFO is an entry of
-- the filesystem (fs_inode.content_type 'fifo', reached by path and open
-- handles like a file) whose bytes are a queue: `fs_fifo_data` holds the
-- chunks written and not yet read, in order, and the FIFO's f_size is how
-- many bytes they hold (so the realm's storage quota counts them, and a
-- full FIFO's writers wait). `fs_fifo` counts the opens of each end ever
-- made, and `fs_open.fifo_mark` keeps, per open handle, the count its
-- end-of-file or broken pipe is measured against: a reader sees EOF once
-- no writer is open and a writer has opened since the reader did.
--
-- SQLite cannot widen a CHECK in place: fs_inode is rebuilt, with the
-- views and triggers over it (as 033 defined them).
DROP VIEW realm_usage;
DROP VIEW realm_stored;
DROP TRIGGER fs_inode_meter_ins;
DROP TRIGGER fs_inode_meter_upd;
DROP TRIGGER fs_inode_meter_del;
CREATE TABLE fs_inode_fifo (
    p_key        INTEGER  NOT NULL,
    realm        TEXT    NOT NULL,
    f_id         TEXT    NOT NULL,
    content_type TEXT    NOT NULL CHECK (content_type IN ('dir', 'file', 'symlink', 'fifo')),
    user_name    TEXT    NOT NULL,            -- owner
    mode         INTEGER  NOT NULL,            -- permission bits and the sticky bit
    f_size       INTEGER  NOT NULL,            -- bytes; a symlink's: its target's length; a fifo's: buffered
    layout       TEXT    NOT NULL CHECK (layout IN ('local', 'parallel')),
    block_size   INTEGER  NOT NULL,
    ctime_us     INTEGER  NOT NULL,
    mtime_us     INTEGER  NOT NULL,
    atime_us     INTEGER,                      -- NULL: the modification time
    f_version    INTEGER  NOT NULL DEFAULT 0,
    in_segments  INTEGER  NOT NULL DEFAULT 0,
    nlink        INTEGER  NOT NULL CHECK (nlink >= 0), -- names; 0: kept while open
    target       TEXT,                        -- a symlink's target
    PRIMARY KEY (p_key, realm, f_id)
) WITHOUT ROWID;
INSERT INTO fs_inode_fifo (p_key, realm, f_id, content_type, user_name, mode, f_size, layout,
    block_size, ctime_us, mtime_us, atime_us, f_version, in_segments, nlink, target)
SELECT p_key, realm, f_id, content_type, user_name, mode, f_size, layout,
    block_size, ctime_us, mtime_us, atime_us, f_version, in_segments, nlink, target FROM fs_inode;
DROP TABLE fs_inode;
ALTER TABLE fs_inode_fifo RENAME TO fs_inode;
CREATE INDEX fs_inode_unlinked ON fs_inode (p_key, realm, f_id) WHERE nlink = 0;

CREATE TRIGGER fs_inode_meter_ins AFTER INSERT ON fs_inode BEGIN
  UPDATE realm SET file_bytes = file_bytes + (64 + NEW.f_size)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER fs_inode_meter_upd AFTER UPDATE OF f_size ON fs_inode BEGIN
  UPDATE realm SET file_bytes = file_bytes + NEW.f_size - OLD.f_size
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER fs_inode_meter_del AFTER DELETE ON fs_inode BEGIN
  UPDATE realm SET file_bytes = file_bytes - (64 + OLD.f_size)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;

CREATE VIEW realm_stored AS
SELECT r.p_key, r.realm,
       CAST((SELECT coalesce(sum(64 + octet_length(x.key) + octet_length(x.value)), 0) FROM kv x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS kv_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.path) + octet_length(x.data)), 0) FROM name_entry x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS name_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.d_name)), 0) FROM directory x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + x.f_size), 0) FROM fs_inode x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS file_bytes,
       CAST((SELECT coalesce(sum(octet_length(x.payload)), 0) FROM message x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS mailbox_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.receiver) + octet_length(x.sender) + coalesce(octet_length(x.message_id), 0) + octet_length(x.payload)), 0) FROM message_log x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS delivered_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.name) + octet_length(x.code) + octet_length(x.code_hash)), 0) FROM procedure x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS code_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.name) + octet_length(x.app_version) + coalesce(octet_length(x.queue), 0) + octet_length(x.input) + coalesce(octet_length(x.output), 0) + coalesce(octet_length(x.error), 0) + coalesce(octet_length(x.executor), 0) + coalesce(octet_length(x.node_id), 0) + octet_length(x.user_name) + coalesce(octet_length(x.forked_from), 0)), 0) FROM workflow x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.name) + octet_length(x.kind) + octet_length(x.status) + coalesce(octet_length(x.output), 0) + coalesce(octet_length(x.error), 0)), 0) FROM workflow_step x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.topic) + octet_length(x.sender) + octet_length(x.payload)), 0) FROM workflow_message x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.key) + octet_length(x.value)), 0) FROM workflow_event x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.executor) + octet_length(x.app_version) + octet_length(x.functions) + octet_length(x.node_id)), 0) FROM workflow_executor x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.queue)), 0) FROM workflow_queue x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.schedule) + octet_length(x.name) + octet_length(x.cron) + octet_length(x.app_version) + octet_length(x.queue)), 0) FROM workflow_schedule x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS workflow_bytes,
       CAST(0 AS INTEGER) AS tenant_bytes,
       CAST((SELECT coalesce(sum(x.log_bytes), 0) FROM proc x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS log_bytes
FROM realm r;

-- What each realm uses now, against its quotas: a metered realm's counters,
-- another's sums. stored_bytes is every class's.
CREATE VIEW realm_usage AS
SELECT r.realm,
       (SELECT count(*) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS live_procs,
       r.quota_procs,
       (SELECT coalesce(sum(p.cores), 0) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS cores,
       r.quota_cores,
       (SELECT coalesce(sum(p.mem_mb), 0) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS mem_mb,
       r.quota_mem_mb,
       CASE WHEN r.metered = 1 THEN r.kv_bytes ELSE s.kv_bytes END + CASE WHEN r.metered = 1 THEN r.name_bytes ELSE s.name_bytes END + CASE WHEN r.metered = 1 THEN r.file_bytes ELSE s.file_bytes END + CASE WHEN r.metered = 1 THEN r.mailbox_bytes ELSE s.mailbox_bytes END + CASE WHEN r.metered = 1 THEN r.delivered_bytes ELSE s.delivered_bytes END + CASE WHEN r.metered = 1 THEN r.code_bytes ELSE s.code_bytes END + CASE WHEN r.metered = 1 THEN r.workflow_bytes ELSE s.workflow_bytes END + CASE WHEN r.metered = 1 THEN r.tenant_bytes ELSE s.tenant_bytes END + CASE WHEN r.metered = 1 THEN r.log_bytes ELSE s.log_bytes END AS stored_bytes,
       r.quota_storage_mb,
       r.quota_mailbox_mb,
       CASE WHEN r.metered = 1 THEN r.procedures ELSE
         (SELECT count(*) FROM procedure x WHERE x.p_key = r.p_key AND x.realm = r.realm)
       END AS procedures,
       r.quota_procedures,
       CASE WHEN r.metered = 1 THEN r.kv_bytes ELSE s.kv_bytes END AS kv_bytes,
       CASE WHEN r.metered = 1 THEN r.name_bytes ELSE s.name_bytes END AS name_bytes,
       CASE WHEN r.metered = 1 THEN r.file_bytes ELSE s.file_bytes END AS file_bytes,
       CASE WHEN r.metered = 1 THEN r.mailbox_bytes ELSE s.mailbox_bytes END AS mailbox_bytes,
       CASE WHEN r.metered = 1 THEN r.delivered_bytes ELSE s.delivered_bytes END AS delivered_bytes,
       CASE WHEN r.metered = 1 THEN r.code_bytes ELSE s.code_bytes END AS code_bytes,
       CASE WHEN r.metered = 1 THEN r.workflow_bytes ELSE s.workflow_bytes END AS workflow_bytes,
       CASE WHEN r.metered = 1 THEN r.tenant_bytes ELSE s.tenant_bytes END AS tenant_bytes,
       CASE WHEN r.metered = 1 THEN r.log_bytes ELSE s.log_bytes END AS log_bytes
FROM realm r JOIN realm_stored s ON s.p_key = r.p_key AND s.realm = r.realm;

CREATE TABLE fs_fifo (
    p_key        INTEGER NOT NULL,
    realm        TEXT    NOT NULL,
    f_id         TEXT    NOT NULL,
    reader_opens INTEGER NOT NULL DEFAULT 0, -- read ends ever opened
    writer_opens INTEGER NOT NULL DEFAULT 0, -- write ends ever opened
    next_seq     INTEGER NOT NULL DEFAULT 0, -- the next chunk's seq
    PRIMARY KEY (p_key, realm, f_id)
) WITHOUT ROWID;
CREATE TABLE fs_fifo_data (
    p_key INTEGER NOT NULL,
    realm TEXT    NOT NULL,
    f_id  TEXT    NOT NULL,
    seq   INTEGER NOT NULL,
    data  BLOB    NOT NULL,
    PRIMARY KEY (p_key, realm, f_id, seq)
) WITHOUT ROWID;
ALTER TABLE fs_open ADD COLUMN fifo_mark INTEGER;
INSERT INTO tenant_view (name) VALUES ('fs_fifo');
