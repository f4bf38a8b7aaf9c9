-- Storage quotas per realm (kernel::realms, issue 17, item 4): bytes
-- stored, bytes queued in mailboxes, procedures installed. NULL is no quota.
--
-- A realm with a quota keeps a running counter, moved by the triggers below
-- in the transaction of the change itself; the module making the change
-- checks the counter against the quota before it commits
-- (kernel::realms::metered), so a change that would pass a quota never
-- commits. A realm without a quota keeps no counter (the triggers' UPDATE
-- matches no row): nothing is paid on its writes, and on PostgreSQL
-- concurrent writers of one realm do not meet on its row. Setting a quota
-- recounts from the tables (kernel::realms::set_quota_tx).
--
-- Stored bytes: keys and values of kv, paths and data of names, the size
-- of files (whatever holds their data: block rows, block-store segments,
-- parallel blocks on other partitions — a sparse file counts its size),
-- delivered messages kept in message_log, procedures' code, and the
-- realm's tenant tables (measured after each procedure call that wrote
-- one, kernel::procedures).
ALTER TABLE realm ADD COLUMN quota_storage_mb INTEGER;
ALTER TABLE realm ADD COLUMN quota_mailbox_mb INTEGER;
ALTER TABLE realm ADD COLUMN quota_procedures INTEGER;
ALTER TABLE realm ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN tenant_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN mailbox_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN procedures INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER kv_meter_ins AFTER INSERT ON kv BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.key) + length(NEW.value)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER kv_meter_upd AFTER UPDATE OF value ON kv BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.value) - length(OLD.value)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER kv_meter_del AFTER DELETE ON kv BEGIN
  UPDATE realm SET stored_bytes = stored_bytes - length(OLD.key) - length(OLD.value)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
END;

CREATE TRIGGER name_meter_ins AFTER INSERT ON name_entry BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.path) + length(NEW.data)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER name_meter_upd AFTER UPDATE OF path, data ON name_entry BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.path) + length(NEW.data)
                                  - length(OLD.path) - length(OLD.data)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER name_meter_del AFTER DELETE ON name_entry BEGIN
  UPDATE realm SET stored_bytes = stored_bytes - length(OLD.path) - length(OLD.data)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
END;

CREATE TRIGGER file_meter_ins AFTER INSERT ON directory BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + NEW.f_size
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER file_meter_upd AFTER UPDATE OF f_size ON directory BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + NEW.f_size - OLD.f_size
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER file_meter_del AFTER DELETE ON directory BEGIN
  UPDATE realm SET stored_bytes = stored_bytes - OLD.f_size
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
END;

CREATE TRIGGER message_log_meter_ins AFTER INSERT ON message_log BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.payload)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER message_log_meter_del AFTER DELETE ON message_log BEGIN
  UPDATE realm SET stored_bytes = stored_bytes - length(OLD.payload)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
END;

CREATE TRIGGER message_meter_ins AFTER INSERT ON message BEGIN
  UPDATE realm SET mailbox_bytes = mailbox_bytes + length(NEW.payload)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_mailbox_mb IS NOT NULL;
END;
CREATE TRIGGER message_meter_del AFTER DELETE ON message BEGIN
  UPDATE realm SET mailbox_bytes = mailbox_bytes - length(OLD.payload)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_mailbox_mb IS NOT NULL;
END;

CREATE TRIGGER procedure_meter_ins AFTER INSERT ON procedure BEGIN
  UPDATE realm SET procedures = procedures + 1
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_procedures IS NOT NULL;
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.code)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER procedure_meter_upd AFTER UPDATE OF code ON procedure BEGIN
  UPDATE realm SET stored_bytes = stored_bytes + length(NEW.code) - length(OLD.code)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
END;
CREATE TRIGGER procedure_meter_del AFTER DELETE ON procedure BEGIN
  UPDATE realm SET procedures = procedures - 1
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_procedures IS NOT NULL;
  UPDATE realm SET stored_bytes = stored_bytes - length(OLD.code)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
END;

-- What each realm uses now, against its quotas. Storage of a realm with no
-- storage quota is summed from the tables (its tenant tables are then not
-- measured and count 0); with a quota it is the counter.
DROP VIEW realm_usage;
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
       r.quota_mem_mb,
       CASE WHEN r.quota_storage_mb IS NOT NULL THEN r.stored_bytes + r.tenant_bytes ELSE
         (SELECT coalesce(sum(length(key) + length(value)), 0) FROM kv x WHERE x.realm = r.realm)
         + (SELECT coalesce(sum(length(path) + length(data)), 0) FROM name_entry x WHERE x.realm = r.realm)
         + (SELECT coalesce(sum(f_size), 0) FROM directory x WHERE x.realm = r.realm)
         + (SELECT coalesce(sum(length(payload)), 0) FROM message_log x WHERE x.realm = r.realm)
         + (SELECT coalesce(sum(length(code)), 0) FROM procedure x WHERE x.realm = r.realm)
       END AS stored_bytes,
       r.quota_storage_mb,
       CASE WHEN r.quota_mailbox_mb IS NOT NULL THEN r.mailbox_bytes ELSE
         (SELECT coalesce(sum(length(payload)), 0) FROM message x WHERE x.realm = r.realm)
       END AS mailbox_bytes,
       r.quota_mailbox_mb,
       CASE WHEN r.quota_procedures IS NOT NULL THEN r.procedures ELSE
         (SELECT count(*) FROM procedure x WHERE x.realm = r.realm)
       END AS procedures,
       r.quota_procedures
FROM realm r;
