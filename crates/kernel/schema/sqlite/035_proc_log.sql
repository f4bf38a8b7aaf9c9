-- Procs' output kept in the cluster (issue 42, item 4; kernel::logs): in
-- chunks as their node read them, so that any node answers `tabos logs`,
-- also after the proc's node is gone. A proc's log_bytes is what its
-- chunks hold (counted against its realm's storage by proc_meter_upd);
-- proc_log_use is each realm's total, for its bound.
CREATE TABLE proc_log (
  p_key INTEGER NOT NULL,
  realm TEXT NOT NULL,
  pid TEXT NOT NULL,
  -- 1 stdout, 2 stderr (the API's LogStream).
  stream INTEGER NOT NULL,
  -- From 1 per proc and stream, in the order written.
  seq INTEGER NOT NULL,
  -- Where the chunk starts in everything the proc wrote to the stream.
  at_byte INTEGER NOT NULL,
  -- When its node read it, in microseconds since the epoch.
  at_us INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (p_key, realm, pid, stream, seq)
);
-- The realm's oldest chunks first, for its bound.
CREATE INDEX proc_log_by_age ON proc_log (p_key, realm, at_us);
-- Each stream's position: the next chunk's seq and where it starts, kept
-- when its chunks rotate out (a follower's position stays meaningful).
CREATE TABLE proc_log_stream (
  p_key INTEGER NOT NULL,
  realm TEXT NOT NULL,
  pid TEXT NOT NULL,
  stream INTEGER NOT NULL,
  next_seq INTEGER NOT NULL,
  end_byte INTEGER NOT NULL,
  PRIMARY KEY (p_key, realm, pid, stream)
);
CREATE TABLE proc_log_use (
  p_key INTEGER NOT NULL,
  realm TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  PRIMARY KEY (p_key, realm)
);
-- A proc's row gone (pruned, its realm removed): its chunks go with it.
CREATE TRIGGER proc_log_gone AFTER DELETE ON proc BEGIN
  DELETE FROM proc_log WHERE p_key = OLD.p_key AND realm = OLD.realm AND pid = OLD.pid;
  DELETE FROM proc_log_stream WHERE p_key = OLD.p_key AND realm = OLD.realm AND pid = OLD.pid;
  UPDATE proc_log_use SET bytes = bytes - OLD.log_bytes
   WHERE p_key = OLD.p_key AND realm = OLD.realm;
END;
-- What logs nodes kept as files before: gone with those files.
UPDATE proc SET log_bytes = 0 WHERE log_bytes <> 0;
-- A realm's procs' output is in what its SQL sees (tabos sql, psql).
INSERT INTO tenant_view (name) VALUES ('proc_log');
