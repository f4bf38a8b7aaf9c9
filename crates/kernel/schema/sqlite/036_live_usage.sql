-- What running procs and nodes use now (issue 42, item 6; kernel::procs,
-- kernel::nodes; `tabos top`): each node measures its running native
-- procs' cgroups on a clock and writes the figures in one transaction per
-- realm; cpu_us is then the CPU time so far (at the end, the total, as
-- before), cpu_cores the cores used over the last interval, mem_bytes the
-- memory in use, usage_us when they were measured. A node's heartbeat
-- carries the memory it and its procs use.
ALTER TABLE proc ADD COLUMN cpu_cores REAL;
ALTER TABLE proc ADD COLUMN mem_bytes INTEGER;
ALTER TABLE proc ADD COLUMN usage_us INTEGER;
ALTER TABLE node ADD COLUMN mem_used_bytes INTEGER;
-- ps shows them, with the memory a proc asked for and its restarts (what
-- `ps -o wide` adds), after its earlier columns.
DROP VIEW ps;
CREATE VIEW ps AS
SELECT p.realm, p.pid, p.parent_pid, p.kind, p.class, p.state, p.worker_id, p.cores, p.program,
       p.spawn_us, p.start_us, p.exit_us, p.exit_status, p.error,
       CASE WHEN p.state = 'spawned' AND p.worker_id IS NULL THEN
         CASE
           WHEN NOT EXISTS (SELECT 1 FROM worker w
                             WHERE w.p_key = p.p_key AND w.realm = p.realm AND w.state = 'up')
             THEN 'no live worker in the realm'
           WHEN NOT EXISTS (SELECT 1 FROM worker w
                             WHERE w.p_key = p.p_key AND w.realm = p.realm AND w.state = 'up'
                               AND w.cores >= p.cores AND w.mem_mb >= p.mem_mb)
             THEN 'larger than every live worker'
           WHEN p.home_node IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM worker w
                                 WHERE w.p_key = p.p_key AND w.realm = p.realm AND w.state = 'up'
                                   AND w.node_id = p.home_node)
             THEN 'its home node has no live worker'
           ELSE 'waiting for free cores or memory'
         END
       END AS waiting,
       strftime('%Y-%m-%dT%H:%M:%S', p.spawn_us / 1000000, 'unixepoch') || printf('.%06dZ', p.spawn_us % 1000000) AS spawned_at,
       strftime('%Y-%m-%dT%H:%M:%S', p.start_us / 1000000, 'unixepoch') || printf('.%06dZ', p.start_us % 1000000) AS started_at,
       strftime('%Y-%m-%dT%H:%M:%S', p.exit_us / 1000000, 'unixepoch') || printf('.%06dZ', p.exit_us % 1000000) AS exited_at,
       p.mem_mb, p.restarts, p.cpu_us, p.peak_mem_bytes, p.cpu_cores, p.mem_bytes, p.usage_us
FROM proc p;
