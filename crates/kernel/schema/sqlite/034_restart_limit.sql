-- A restartable proc runs again at most max_restarts times (issue 41,
-- item 3; kernel::procs): each time its node is lost, or stops it while
-- cut off, restarts counts one more; past the limit it fails instead.
ALTER TABLE proc ADD COLUMN max_restarts INTEGER NOT NULL DEFAULT 10;
ALTER TABLE proc ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
