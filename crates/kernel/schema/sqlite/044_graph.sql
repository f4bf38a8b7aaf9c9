-- Task graphs (issue 43, item 1; kernel::graphs): DBOS's "collection of
-- short running tasks assembled into a graph ... stored in the DBMS".
-- Every row is on its realm's partition, so a task's run, its output and
-- the readiness of the tasks after it commit in one transaction.

-- A graph: who submitted it (its tasks act for that user), its status
-- ('running', then 'success', 'error' or 'cancelled'), the task whose
-- output is its own (none: an empty output), whether it is held open (a
-- client adds tasks until it closes it: it does not end before), and —
-- a child graph, which a dynamic task made — the task of its parent graph
-- that waits for it.
CREATE TABLE graph (
    p_key        INTEGER NOT NULL,
    realm        TEXT    NOT NULL,
    graph_id     TEXT    NOT NULL,
    user_name    TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('running', 'success', 'error', 'cancelled')),
    result_task  TEXT,
    held         INTEGER NOT NULL DEFAULT 0,
    output       BLOB,
    error        TEXT,
    parent_graph TEXT,
    parent_task  TEXT,
    depth        INTEGER NOT NULL DEFAULT 0,
    created_us   INTEGER NOT NULL,
    ended_us     INTEGER,
    PRIMARY KEY (p_key, realm, graph_id)
);
CREATE INDEX graph_by_status ON graph (p_key, realm, status, created_us);

-- A task: a stored procedure to call, a workflow to run or a proc to
-- spawn (kind, target: the procedure, the function, the program; a proc's
-- argv and proc_kind, 'native' or 'wasm'),
-- its arguments (a JSON array in which {"$task": id} stands for that
-- task's output), how many of the tasks it takes are not done
-- (deps_left), and its state: 'waiting' (for them), 'ready', 'running'
-- (claimed by node_id, or — child set — waiting for its child graph,
-- workflow or proc), then 'success' with output, 'error' or 'cancelled' (node_id
-- then says which node ran it).
CREATE TABLE graph_task (
    p_key        INTEGER NOT NULL,
    realm        TEXT    NOT NULL,
    graph_id     TEXT    NOT NULL,
    task         TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('procedure', 'workflow', 'proc')),
    target       TEXT    NOT NULL,
    args         BLOB    NOT NULL,
    dynamic      INTEGER NOT NULL DEFAULT 0,
    queue        TEXT,
    app_version  TEXT,
    argv         TEXT,
    proc_kind    TEXT,
    status       TEXT    NOT NULL CHECK (status IN ('waiting', 'ready', 'running', 'success', 'error', 'cancelled')),
    deps_left    INTEGER NOT NULL CHECK (deps_left >= 0),
    attempts     INTEGER NOT NULL DEFAULT 0,
    attempts_max INTEGER NOT NULL CHECK (attempts_max >= 1),
    node_id      TEXT,
    child        TEXT,
    output       BLOB,
    error        TEXT,
    seq          INTEGER NOT NULL,
    created_us   INTEGER NOT NULL,
    started_us   INTEGER,
    ended_us     INTEGER,
    PRIMARY KEY (p_key, realm, graph_id, task)
);
-- The scheduler's scan (ready tasks of a partition, realm by realm, in
-- order), a node's claims (given back when it is lost), a graph's
-- unfinished tasks.
CREATE INDEX graph_task_ready ON graph_task (p_key, status, realm, created_us, seq);
CREATE INDEX graph_task_by_node ON graph_task (p_key, node_id);
CREATE INDEX graph_task_by_status ON graph_task (p_key, realm, graph_id, status);

-- An edge: task dst takes task src's output.
CREATE TABLE graph_edge (
    p_key    INTEGER NOT NULL,
    realm    TEXT    NOT NULL,
    graph_id TEXT    NOT NULL,
    src      TEXT    NOT NULL,
    dst      TEXT    NOT NULL,
    PRIMARY KEY (p_key, realm, graph_id, src, dst)
);

INSERT INTO tenant_view (name) VALUES ('graph'), ('graph_task'), ('graph_edge');
