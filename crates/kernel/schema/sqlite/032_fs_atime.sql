-- Access times as utimensat sets them (issue 39, item 3): NULL until set,
-- and read as the modification time then. Reads do not move it (as on a
-- noatime mount): a read is no write to the database.
ALTER TABLE directory ADD COLUMN atime_us BIGINT;
