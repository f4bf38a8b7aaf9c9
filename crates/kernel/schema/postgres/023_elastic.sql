-- Elastic realms (issue 19, item 2; kernel::alloc), all on partition 0:
-- σOS section 3.5's σMGR and RMGRs as rows.

-- An elastic realm's policy. Its cores are granted by the cluster manager
-- (σMGR) on elastic nodes, between min_cores and max_cores; want_cores is
-- what its realm manager (RMGR) last asked for, and why. A realm without a
-- row is static: every static node serves it with all its cores.
CREATE TABLE realm_alloc (
    p_key       INTEGER NOT NULL,
    realm       TEXT    NOT NULL,
    class       TEXT    NOT NULL CHECK (class IN ('LC', 'BE')),
    min_cores   BIGINT  NOT NULL CHECK (min_cores >= 0),
    max_cores   BIGINT  NOT NULL CHECK (max_cores > 0 AND max_cores >= min_cores),
    want_cores  BIGINT  NOT NULL DEFAULT 0 CHECK (want_cores >= 0),
    want_reason TEXT    NOT NULL DEFAULT '',
    want_us     BIGINT  NOT NULL DEFAULT 0,
    created_us  BIGINT  NOT NULL,
    PRIMARY KEY (p_key, realm)
);

-- Cores of an elastic node granted to an elastic realm (whole or partial
-- machines). Invariant, kept by the one σMGR that may write (fenced by its
-- lease's epoch): a node's grants add up to at most its cores.
CREATE TABLE core_grant (
    p_key    INTEGER NOT NULL,
    node_id  TEXT    NOT NULL,
    realm    TEXT    NOT NULL,
    cores    BIGINT  NOT NULL CHECK (cores > 0),
    since_us BIGINT  NOT NULL,
    PRIMARY KEY (p_key, node_id, realm)
);

-- Every decision of the managers, with its reason: an RMGR's change of
-- what its realm wants (node_id ''), a σMGR's change of a grant.
CREATE TABLE alloc_decision (
    p_key        INTEGER NOT NULL,
    seq          BIGINT  NOT NULL,
    at_us        BIGINT  NOT NULL,
    manager      TEXT    NOT NULL CHECK (manager IN ('smgr', 'rmgr')),
    realm        TEXT    NOT NULL,
    node_id      TEXT    NOT NULL,
    cores_before BIGINT  NOT NULL,
    cores_after  BIGINT  NOT NULL,
    reason       TEXT    NOT NULL,
    PRIMARY KEY (p_key, seq)
);
CREATE INDEX alloc_decision_by_realm ON alloc_decision (p_key, realm, seq);

-- Leases of the managers' leaders (σMGR: 'smgr'; a realm's RMGR:
-- 'rmgr/REALM'). A standby takes over once expires_us passes; each
-- takeover bumps the epoch, which fences the deposed leader's writes.
CREATE TABLE manager_lease (
    p_key      INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    epoch      BIGINT  NOT NULL,
    expires_us BIGINT  NOT NULL,
    PRIMARY KEY (p_key, name)
);

-- The allocation policy's parameters (kernel::alloc::Settings), changed
-- while running; a missing row is the default.
CREATE TABLE alloc_setting (
    p_key INTEGER NOT NULL,
    name  TEXT    NOT NULL,
    value BIGINT  NOT NULL,
    PRIMARY KEY (p_key, name)
);

-- Whether a node's cores are the σMGR's to grant (tabos up --elastic).
ALTER TABLE node ADD COLUMN elastic INTEGER NOT NULL DEFAULT 0 CHECK (elastic IN (0, 1));
