-- IPC through tables (kernel::ipc; DBOS section 4.3).
-- A mailbox and its messages live on the receiver's partition, which is its
-- realm's (where its procs are), so a send, a receive and a multicast within
-- a realm are each one single-partition transaction.

-- A mailbox: a proc's (address 'proc/<pid>', made on first use while the
-- proc lives) or a named one (address '<name>', made by create_mailbox).
CREATE TABLE mailbox (
    p_key        INTEGER NOT NULL,
    realm        TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    next_seq     INTEGER NOT NULL DEFAULT 1,   -- the next message's seq
    queued       INTEGER NOT NULL DEFAULT 0 CHECK (queued >= 0),
    queued_bytes INTEGER NOT NULL DEFAULT 0 CHECK (queued_bytes >= 0),
    bytes_max    INTEGER NOT NULL CHECK (bytes_max > 0),   -- bound on queued_bytes
    log_delivered INTEGER NOT NULL DEFAULT 0,  -- move delivered messages to message_log
    created_us   INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, address)
) WITHOUT ROWID;

-- Messages not yet received. seq orders a mailbox's messages by commit of
-- their send, hence also every sender's messages in send order.
CREATE TABLE message (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    receiver   TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    sender     TEXT    NOT NULL,               -- '' for an anonymous client
    message_id TEXT,                           -- sender's idempotency key
    sent_us    INTEGER NOT NULL,
    payload    BLOB    NOT NULL,
    PRIMARY KEY (p_key, realm, receiver, seq)
);

-- message_ids seen per (receiver, sender) within the deduplication window.
CREATE TABLE message_dedup (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    receiver   TEXT    NOT NULL,
    sender     TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    sent_us    INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm, receiver, sender, message_id)
) WITHOUT ROWID;
CREATE INDEX message_dedup_age ON message_dedup (p_key, realm, receiver, sent_us);

-- Delivered messages of mailboxes with log_delivered = 1, for provenance queries.
CREATE TABLE message_log (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    receiver   TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    sender     TEXT    NOT NULL,
    message_id TEXT,
    sent_us    INTEGER NOT NULL,
    recv_us    INTEGER NOT NULL,
    payload    BLOB    NOT NULL,
    PRIMARY KEY (p_key, realm, receiver, seq)
);
