-- What the dashboard plots (issue 42, item 5): a node's heartbeat carries
-- the bytes in use in its block store (kernel::nodes), and procs are found
-- by when they ended, so that the failures of the last seconds are a
-- range read, not a scan of every proc ever kept.
ALTER TABLE node ADD COLUMN disk_used_bytes BIGINT;
CREATE INDEX proc_by_exit ON proc (exit_us);
