-- Times as times (issue 38, item 2): `ps` gives spawned_at, started_at and
-- exited_at (timestamptz) beside the µs columns, so that `WHERE exited_at
-- > now() - interval '1 hour'` reads the same on both backends.
CREATE OR REPLACE VIEW ps AS
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
       to_timestamp(p.spawn_us / 1000000.0) AS spawned_at,
       to_timestamp(p.start_us / 1000000.0) AS started_at,
       to_timestamp(p.exit_us / 1000000.0) AS exited_at
FROM proc p;
