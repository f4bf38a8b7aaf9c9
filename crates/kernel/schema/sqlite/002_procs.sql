-- Realms, workers and procs (kernel::realms, kernel::sched, kernel::procs).
-- Everything of a realm lives on the realm's partition, so spawning,
-- scheduling and exiting are each one single-partition transaction.

CREATE TABLE realm (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    scheduler  TEXT    NOT NULL CHECK (scheduler IN ('fifo', 'locality', 'least_loaded')),
    next_seq   INTEGER NOT NULL DEFAULT 1,      -- order of spawns and events in the realm
    created_us INTEGER NOT NULL,
    PRIMARY KEY (p_key, realm)
) WITHOUT ROWID;

-- A worker is a set of core slots of one node, serving one realm.
CREATE TABLE worker (
    p_key           INTEGER NOT NULL,
    realm           TEXT    NOT NULL,
    worker_id       TEXT    NOT NULL,
    node_id         TEXT    NOT NULL,
    cores           INTEGER NOT NULL CHECK (cores > 0),
    mem_mb          INTEGER NOT NULL CHECK (mem_mb >= 0),
    unused_capacity INTEGER NOT NULL CHECK (unused_capacity >= 0 AND unused_capacity <= cores),
    unused_mem_mb   INTEGER NOT NULL CHECK (unused_mem_mb >= 0 AND unused_mem_mb <= mem_mb),
    heartbeat_us    INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('up', 'down')),
    PRIMARY KEY (p_key, realm, worker_id)
) WITHOUT ROWID;

CREATE TABLE proc (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    pid         TEXT    NOT NULL,
    seq         INTEGER NOT NULL,            -- spawn order within the realm (FIFO)
    parent_pid  TEXT,
    kind        TEXT    NOT NULL CHECK (kind IN ('native', 'wasm', 'js')),
    class       TEXT    NOT NULL CHECK (class IN ('LC', 'BE')),
    program     TEXT    NOT NULL,
    args        TEXT    NOT NULL,            -- JSON array of strings
    env         TEXT    NOT NULL,            -- JSON object of strings
    cores       INTEGER NOT NULL CHECK (cores > 0),
    mem_mb      INTEGER NOT NULL CHECK (mem_mb >= 0),
    home_node   TEXT,                        -- locality hint for the locality scheduler
    restartable INTEGER NOT NULL DEFAULT 0,
    state       TEXT    NOT NULL CHECK (state IN ('spawned', 'claimed', 'running', 'exited', 'evicted', 'failed')),
    worker_id   TEXT,                        -- NULL while deferred
    evict_requested INTEGER NOT NULL DEFAULT 0,
    spawn_us    INTEGER NOT NULL,
    claim_us    INTEGER,
    start_us    INTEGER,
    exit_us     INTEGER,
    exit_status INTEGER,
    error       TEXT,
    PRIMARY KEY (p_key, realm, pid)
) WITHOUT ROWID;

CREATE INDEX proc_deferred ON proc (p_key, realm, seq) WHERE worker_id IS NULL AND state = 'spawned';
CREATE INDEX proc_by_worker ON proc (p_key, realm, worker_id, state);

-- Provenance: one row per lifecycle event of a proc.
CREATE TABLE proc_event (
    p_key   INTEGER NOT NULL,
    realm   TEXT    NOT NULL,
    pid     TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    at_us   INTEGER NOT NULL,
    event   TEXT    NOT NULL,
    detail  TEXT,
    PRIMARY KEY (p_key, realm, pid, seq)
) WITHOUT ROWID;

-- What `tabos ps` shows.
CREATE VIEW ps AS
SELECT realm, pid, parent_pid, kind, class, state, worker_id, cores, program,
       spawn_us, start_us, exit_us, exit_status, error
FROM proc;
