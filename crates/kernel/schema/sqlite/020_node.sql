-- The cluster's nodes (issue 19, item 1; kernel::nodes), on partition 0:
-- what each offers, where its API listens, and its lease. A node that
-- stopped cleanly is 'left'; one whose lease lapsed reads as lost (the
-- state is derived from heartbeat_us when read, so nothing has to sweep).
CREATE TABLE node (
    p_key        INTEGER NOT NULL,
    node_id      TEXT    NOT NULL,
    address      TEXT    NOT NULL,               -- host:port of its API ('' if none)
    cores        INTEGER  NOT NULL CHECK (cores > 0),
    mem_mb       INTEGER  NOT NULL CHECK (mem_mb >= 0),
    labels       TEXT    NOT NULL DEFAULT '{}',  -- JSON object of strings
    state        TEXT    NOT NULL CHECK (state IN ('up', 'left')),
    started_us   INTEGER  NOT NULL,
    heartbeat_us INTEGER  NOT NULL,
    left_us      INTEGER,
    busy_cores   REAL NOT NULL DEFAULT 0,    -- measured, last heartbeat
    PRIMARY KEY (p_key, node_id)
) WITHOUT ROWID;
