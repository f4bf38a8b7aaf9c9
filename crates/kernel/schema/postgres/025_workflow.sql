-- Durable workflows (issue 22; kernel::workflows): DBOS's task graphs kept
-- in the database. Every row is on its realm's partition, so a step's
-- record and a stored procedure's effects commit in one transaction.

-- A workflow: its function's name, the application version that may run
-- it, its input and, once finished, its outcome. status: 'enqueued' (in a
-- queue, not started), 'pending' (started: run by `executor`, or by
-- nobody when executor IS NULL, which any executor of its version may
-- take), 'success', 'error', 'cancelled'.
CREATE TABLE workflow (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    app_version TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('enqueued', 'pending', 'success', 'error', 'cancelled')),
    queue       TEXT,
    priority    BIGINT NOT NULL DEFAULT 0,
    input       BYTEA    NOT NULL,
    output      BYTEA,
    error       TEXT,
    executor    TEXT,
    node_id     TEXT,
    attempts    BIGINT NOT NULL DEFAULT 0,
    user_name   TEXT    NOT NULL,
    forked_from TEXT,
    created_us  BIGINT NOT NULL,
    started_us  BIGINT,
    updated_us  BIGINT NOT NULL,
    ended_us    BIGINT,
    PRIMARY KEY (p_key, realm, workflow_id)
);
CREATE INDEX workflow_queued ON workflow (p_key, realm, queue, status, priority, created_us);
CREATE INDEX workflow_by_status ON workflow (p_key, realm, status, created_us);
CREATE INDEX workflow_by_executor ON workflow (p_key, realm, executor);

-- A step's record: 'running' while an attempt is under way, then its
-- outcome ('success' with output, 'error' with error), never changed after.
CREATE TABLE workflow_step (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    step        BIGINT NOT NULL CHECK (step >= 1),
    name        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('function', 'procedure', 'proc', 'sleep', 'send', 'recv', 'set_event', 'get_event')),
    status      TEXT    NOT NULL CHECK (status IN ('running', 'success', 'error')),
    output      BYTEA,
    error       TEXT,
    attempts    BIGINT NOT NULL,
    started_us  BIGINT NOT NULL,
    ended_us    BIGINT,
    PRIMARY KEY (p_key, realm, workflow_id, step)
);

-- Messages to a workflow, by topic, taken in seq order by its recv steps.
CREATE TABLE workflow_message (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    topic       TEXT    NOT NULL,
    seq         BIGINT NOT NULL,
    sender      TEXT    NOT NULL,
    payload     BYTEA    NOT NULL,
    sent_us     BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm, workflow_id, topic, seq)
);

-- Events a workflow published (key -> latest value).
CREATE TABLE workflow_event (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    workflow_id TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    value       BYTEA    NOT NULL,
    set_us      BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm, workflow_id, key)
);

-- The processes running workflows: their version, the functions they can
-- run (space-separated), the node they reach, and their lease.
CREATE TABLE workflow_executor (
    p_key          INTEGER NOT NULL,
    realm          TEXT    NOT NULL,
    executor       TEXT    NOT NULL,
    app_version    TEXT    NOT NULL,
    functions      TEXT    NOT NULL,
    node_id        TEXT    NOT NULL,
    lease_until_us BIGINT NOT NULL,
    started_us     BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm, executor)
);

-- A queue's limits (NULL: none), changeable while it runs.
CREATE TABLE workflow_queue (
    p_key            INTEGER NOT NULL,
    realm            TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    concurrency      BIGINT,
    node_concurrency BIGINT,
    rate_limit       BIGINT,
    rate_period_ms   BIGINT,
    updated_us       BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm, queue)
);

-- Cron schedules: each firing enqueues workflow `name` with the id
-- 'sched-<schedule>-<fire time>' (so a firing happens once).
CREATE TABLE workflow_schedule (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    schedule    TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    cron        TEXT    NOT NULL,
    app_version TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    next_us     BIGINT NOT NULL,
    PRIMARY KEY (p_key, realm, schedule)
);

INSERT INTO tenant_view (name) VALUES
    ('workflow'),
    ('workflow_step'),
    ('workflow_message'),
    ('workflow_event'),
    ('workflow_executor'),
    ('workflow_queue'),
    ('workflow_schedule');
