-- Work stealing and LC/BE admission (σOS Figures 3-5 and 3-6).
-- assign_us: when the proc was placed on its current worker. A proc still
-- unclaimed steal_after past it may be taken by another worker's procd.
ALTER TABLE proc ADD COLUMN assign_us INTEGER;

CREATE INDEX proc_unclaimed ON proc (p_key, realm, assign_us)
    WHERE state = 'spawned' AND worker_id IS NOT NULL;

-- What a procd claims: its worker's spawned procs of one class, in spawn
-- order. (Without it SQLite's planner scans the realm's whole history.)
CREATE INDEX proc_claimable ON proc (p_key, realm, worker_id, class, seq)
    WHERE state = 'spawned';
