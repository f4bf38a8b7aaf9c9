-- Per-realm quotas (kernel::realms, issue 17): live procs, their cores and
-- memory; NULL is no quota. Checked by the spawn that would pass them, in
-- its own transaction.
ALTER TABLE realm ADD COLUMN quota_procs BIGINT;
ALTER TABLE realm ADD COLUMN quota_cores BIGINT;
ALTER TABLE realm ADD COLUMN quota_mem_mb BIGINT;

-- What each realm uses now, against its quotas.
CREATE VIEW realm_usage AS
SELECT r.realm,
       (SELECT count(*) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS live_procs,
       r.quota_procs,
       (SELECT coalesce(sum(p.cores), 0) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS cores,
       r.quota_cores,
       (SELECT coalesce(sum(p.mem_mb), 0) FROM proc p
         WHERE p.realm = r.realm AND p.state IN ('spawned', 'claimed', 'running')) AS mem_mb,
       r.quota_mem_mb
FROM realm r;
