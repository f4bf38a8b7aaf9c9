-- A BE proc may declare 0 cores (a light proc that mostly waits: it counts
-- nothing against its worker's utilization target). SQLite cannot alter a
-- CHECK, so the proc table is rebuilt with the same columns, indexes and
-- view, and the new check.
DROP VIEW ps;

CREATE TABLE proc_v10 (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    pid         TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    parent_pid  TEXT,
    kind        TEXT    NOT NULL CHECK (kind IN ('native', 'wasm', 'js')),
    class       TEXT    NOT NULL CHECK (class IN ('LC', 'BE')),
    program     TEXT    NOT NULL,
    args        TEXT    NOT NULL,
    env         TEXT    NOT NULL,
    cores       INTEGER NOT NULL CHECK (cores > 0 OR (cores = 0 AND class = 'BE')),
    mem_mb      INTEGER NOT NULL CHECK (mem_mb >= 0),
    home_node   TEXT,
    restartable INTEGER NOT NULL DEFAULT 0,
    state       TEXT    NOT NULL CHECK (state IN ('spawned', 'claimed', 'running', 'exited', 'evicted', 'failed')),
    worker_id   TEXT,
    evict_requested INTEGER NOT NULL DEFAULT 0,
    spawn_us    INTEGER NOT NULL,
    claim_us    INTEGER,
    start_us    INTEGER,
    exit_us     INTEGER,
    exit_status INTEGER,
    error       TEXT,
    assign_us   INTEGER,
    PRIMARY KEY (p_key, realm, pid)
) WITHOUT ROWID;

INSERT INTO proc_v10 (p_key, realm, pid, seq, parent_pid, kind, class, program, args, env,
                      cores, mem_mb, home_node, restartable, state, worker_id, evict_requested,
                      spawn_us, claim_us, start_us, exit_us, exit_status, error, assign_us)
SELECT p_key, realm, pid, seq, parent_pid, kind, class, program, args, env,
       cores, mem_mb, home_node, restartable, state, worker_id, evict_requested,
       spawn_us, claim_us, start_us, exit_us, exit_status, error, assign_us
FROM proc;

DROP TABLE proc;
ALTER TABLE proc_v10 RENAME TO proc;

CREATE INDEX proc_deferred ON proc (p_key, realm, seq) WHERE worker_id IS NULL AND state = 'spawned';
CREATE INDEX proc_by_worker ON proc (p_key, realm, worker_id, state);
CREATE INDEX proc_unclaimed ON proc (p_key, realm, assign_us)
    WHERE state = 'spawned' AND worker_id IS NOT NULL;
CREATE INDEX proc_claimable ON proc (p_key, realm, worker_id, class, seq)
    WHERE state = 'spawned';

CREATE VIEW ps AS
SELECT realm, pid, parent_pid, kind, class, state, worker_id, cores, program,
       spawn_us, start_us, exit_us, exit_status, error
FROM proc;
