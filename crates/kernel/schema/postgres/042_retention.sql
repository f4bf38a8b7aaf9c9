-- Retention (issue 43, item 2; kernel::retention): how long a realm keeps
-- the record of what is over — ended procs with their events, logs and
-- spent credentials; the provenance events of any proc; delivered
-- messages kept in message_log. NULL: kept until pruned by hand. Every
-- node's retention reaper removes what is older, oldest first, a batch a
-- transaction; these indexes find the oldest without reading the rest.
ALTER TABLE realm ADD COLUMN retention_us BIGINT;
CREATE INDEX proc_event_by_age ON proc_event (p_key, realm, at_us);
CREATE INDEX message_log_by_age ON message_log (p_key, realm, recv_us);
