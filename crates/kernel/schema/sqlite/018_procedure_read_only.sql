-- Read-only procedures (issue 18, item 1): declared at install, they run on
-- a read connection of their partition (one snapshot, never queued behind
-- the partition's writes); a write in one fails the call. 0 or 1.
ALTER TABLE procedure ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0;
