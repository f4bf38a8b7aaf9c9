-- Realms, workers and procs (kernel::realms, kernel::sched, kernel::procs).
-- p_key leads every primary key: it is the distribution column.
-- Everything of a realm lives on the realm's partition, so spawning,
-- scheduling and exiting are each one single-partition transaction.

CREATE TABLE realm (
    p_key      INTEGER NOT NULL,
    realm      TEXT    NOT NULL,
    scheduler  TEXT    NOT NULL CHECK (scheduler IN ('fifo', 'locality', 'least_loaded')),
    next_seq   BIGINT NOT NULL DEFAULT 1,      -- order of spawns and events in the realm
    created_us BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm)
);

-- A worker is a set of core slots of one node, serving one realm.
CREATE TABLE worker (
    p_key           INTEGER NOT NULL,
    realm           TEXT    NOT NULL,
    worker_id       TEXT    NOT NULL,
    node_id         TEXT    NOT NULL,
    cores           BIGINT NOT NULL CHECK (cores > 0),
    mem_mb          BIGINT NOT NULL CHECK (mem_mb >= 0),
    unused_capacity BIGINT NOT NULL CHECK (unused_capacity >= 0 AND unused_capacity <= cores),
    unused_mem_mb   BIGINT NOT NULL CHECK (unused_mem_mb >= 0 AND unused_mem_mb <= mem_mb),
    heartbeat_us    BIGINT NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('up', 'down')),
    PRIMARY KEY (p_key, realm, worker_id)
);

CREATE TABLE proc (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    pid         TEXT    NOT NULL,
    seq         BIGINT NOT NULL,            -- spawn order within the realm (FIFO)
    parent_pid  TEXT,
    kind        TEXT    NOT NULL CHECK (kind IN ('native', 'wasm', 'js')),
    class       TEXT    NOT NULL CHECK (class IN ('LC', 'BE')),
    program     TEXT    NOT NULL,
    args        TEXT    NOT NULL,            -- JSON array of strings
    env         TEXT    NOT NULL,            -- JSON object of strings
    cores       BIGINT NOT NULL CHECK (cores > 0),
    mem_mb      BIGINT NOT NULL CHECK (mem_mb >= 0),
    home_node   TEXT,                        -- locality hint for the locality scheduler
    restartable BIGINT NOT NULL DEFAULT 0,
    state       TEXT    NOT NULL CHECK (state IN ('spawned', 'claimed', 'running', 'exited', 'evicted', 'failed')),
    worker_id   TEXT,                        -- NULL while deferred
    evict_requested BIGINT NOT NULL DEFAULT 0,
    spawn_us    BIGINT NOT NULL,
    claim_us    BIGINT,
    start_us    BIGINT,
    exit_us     BIGINT,
    exit_status BIGINT,
    error       TEXT,
    PRIMARY KEY (p_key, realm, pid)
);

CREATE INDEX proc_deferred ON proc (p_key, realm, seq) WHERE worker_id IS NULL AND state = 'spawned';
CREATE INDEX proc_by_worker ON proc (p_key, realm, worker_id, state);

-- Provenance: one row per lifecycle event of a proc.
CREATE TABLE proc_event (
    p_key   INTEGER NOT NULL,
    realm   TEXT    NOT NULL,
    pid     TEXT    NOT NULL,
    seq     BIGINT NOT NULL,
    at_us   BIGINT NOT NULL,
    event   TEXT    NOT NULL,
    detail  TEXT,
    PRIMARY KEY (p_key, realm, pid, seq)
);

-- What `tabos ps` shows.
CREATE VIEW ps AS
SELECT realm, pid, parent_pid, kind, class, state, worker_id, cores, program,
       spawn_us, start_us, exit_us, exit_status, error
FROM proc;
