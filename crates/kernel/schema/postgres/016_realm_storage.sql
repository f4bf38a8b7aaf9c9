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
ALTER TABLE realm ADD COLUMN quota_storage_mb BIGINT;
ALTER TABLE realm ADD COLUMN quota_mailbox_mb BIGINT;
ALTER TABLE realm ADD COLUMN quota_procedures BIGINT;
ALTER TABLE realm ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN tenant_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN mailbox_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN procedures BIGINT NOT NULL DEFAULT 0;

-- One trigger function per metered table; an UPDATE takes the old row's
-- share off and adds the new one's.
CREATE FUNCTION tabos_meter_kv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET stored_bytes = stored_bytes - (length(OLD.key) + length(OLD.value))
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET stored_bytes = stored_bytes + (length(NEW.key) + length(NEW.value))
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER kv_meter AFTER INSERT OR DELETE OR UPDATE OF key, value ON kv
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_kv();

CREATE FUNCTION tabos_meter_name() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET stored_bytes = stored_bytes - (length(OLD.path) + length(OLD.data))
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET stored_bytes = stored_bytes + (length(NEW.path) + length(NEW.data))
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER name_meter AFTER INSERT OR DELETE OR UPDATE OF path, data ON name_entry
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_name();

CREATE FUNCTION tabos_meter_file() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET stored_bytes = stored_bytes - (OLD.f_size)
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET stored_bytes = stored_bytes + (NEW.f_size)
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER file_meter AFTER INSERT OR DELETE OR UPDATE OF f_size ON directory
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_file();

CREATE FUNCTION tabos_meter_message_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET stored_bytes = stored_bytes - (length(OLD.payload))
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET stored_bytes = stored_bytes + (length(NEW.payload))
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER message_log_meter AFTER INSERT OR DELETE OR UPDATE OF payload ON message_log
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_message_log();

CREATE FUNCTION tabos_meter_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET mailbox_bytes = mailbox_bytes - (length(OLD.payload))
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_mailbox_mb IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET mailbox_bytes = mailbox_bytes + (length(NEW.payload))
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_mailbox_mb IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER message_meter AFTER INSERT OR DELETE OR UPDATE OF payload ON message
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_message();

CREATE FUNCTION tabos_meter_procedure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE realm SET stored_bytes = stored_bytes - (length(OLD.code))
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_storage_mb IS NOT NULL;
    UPDATE realm SET procedures = procedures - 1
     WHERE p_key = OLD.p_key AND realm = OLD.realm AND quota_procedures IS NOT NULL;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE realm SET stored_bytes = stored_bytes + (length(NEW.code))
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_storage_mb IS NOT NULL;
    UPDATE realm SET procedures = procedures + 1
     WHERE p_key = NEW.p_key AND realm = NEW.realm AND quota_procedures IS NOT NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER procedure_meter AFTER INSERT OR DELETE OR UPDATE OF code ON procedure
  FOR EACH ROW EXECUTE FUNCTION tabos_meter_procedure();

-- PostgreSQL's length() of bytea is its bytes, of text its characters, as
-- SQLite's length() is.
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
         + (SELECT CAST(coalesce(sum(f_size), 0) AS BIGINT) FROM directory x WHERE x.realm = r.realm)
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
