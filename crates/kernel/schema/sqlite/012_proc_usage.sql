-- What a native proc used (kernel::procs::record_usage): its CPU time and
-- peak memory, read from its cgroups when it ended (NULL: not measured).
ALTER TABLE proc ADD COLUMN cpu_us INTEGER;
ALTER TABLE proc ADD COLUMN peak_mem_bytes INTEGER;
