-- Host paths a native proc sees read-only (issue 17, item 5): the ones its
-- spawn asked for (`proc.host_paths`), each within a path its realm's
-- operator allows (`realm.host_paths`). Both JSON arrays of absolute paths.
ALTER TABLE proc ADD COLUMN host_paths TEXT NOT NULL DEFAULT '[]';
ALTER TABLE realm ADD COLUMN host_paths TEXT NOT NULL DEFAULT '[]';
