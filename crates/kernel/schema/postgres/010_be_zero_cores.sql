-- A BE proc may declare 0 cores (a light proc that mostly waits: it counts
-- nothing against its worker's utilization target).
ALTER TABLE proc DROP CONSTRAINT proc_cores_check;
ALTER TABLE proc ADD CONSTRAINT proc_cores_check
    CHECK (cores > 0 OR (cores = 0 AND class = 'BE'));
