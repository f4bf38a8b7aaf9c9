-- Every stored byte counted, by class (issue 36, item 4; kernel::realms).
--
-- Migration 016 kept one counter of stored bytes for a realm with a storage
-- quota. This one keeps a counter per class, so that `realm show` and
-- `realm_usage` say what the bytes are, a quota error names the class that
-- grew, and what 016 left out is counted too: workflows (their inputs,
-- outputs, errors, step records, messages, events, executors, queues and
-- schedules), mail still queued (it counts against the storage quota as
-- well as against the mailbox quota), and proc logs (the bytes a proc's
-- stdout and stderr hold on its node, recorded when it ends, kernel::procs).
--
-- A row costs its variable-length columns' bytes plus ROW = 64 bytes for
-- its fixed columns, its row header and its primary key's index entry —
-- so 100,000 empty enqueues count as 6.4 MB, not 0. Queued mail counts its
-- payload only: that is what the mailbox quota and a mailbox's bytes_max
-- measure. Logs count their bytes.
--
-- Counters are kept while the realm is `metered` (it has a storage,
-- mailbox or procedures quota); a realm without one pays nothing on its
-- writes, and realm_usage sums its tables instead (realm_stored). Setting
-- a first quota recounts from realm_stored (kernel::realms::set_quota_tx).

DROP TRIGGER kv_meter_ins;
DROP TRIGGER kv_meter_upd;
DROP TRIGGER kv_meter_del;
DROP TRIGGER name_meter_ins;
DROP TRIGGER name_meter_upd;
DROP TRIGGER name_meter_del;
DROP TRIGGER file_meter_ins;
DROP TRIGGER file_meter_upd;
DROP TRIGGER file_meter_del;
DROP TRIGGER message_log_meter_ins;
DROP TRIGGER message_log_meter_del;
DROP TRIGGER message_meter_ins;
DROP TRIGGER message_meter_del;
DROP TRIGGER procedure_meter_ins;
DROP TRIGGER procedure_meter_upd;
DROP TRIGGER procedure_meter_del;
DROP VIEW realm_usage;
ALTER TABLE realm DROP COLUMN stored_bytes;
ALTER TABLE realm ADD COLUMN metered INTEGER NOT NULL DEFAULT 0 CHECK (metered IN (0, 1));
ALTER TABLE realm ADD COLUMN kv_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN name_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN file_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN delivered_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN code_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN workflow_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE realm ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0;
-- Bytes a proc's logs held on its node when it ended (0 until then, and
-- once its node dropped them: kernel::procs::logs_dropped_tx).
ALTER TABLE proc ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER kv_meter_ins AFTER INSERT ON kv BEGIN
  UPDATE realm SET kv_bytes = kv_bytes + (64 + octet_length(NEW.key) + octet_length(NEW.value))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER kv_meter_upd AFTER UPDATE OF key, value ON kv BEGIN
  UPDATE realm SET kv_bytes = kv_bytes + (64 + octet_length(NEW.key) + octet_length(NEW.value)) - (64 + octet_length(OLD.key) + octet_length(OLD.value))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER kv_meter_del AFTER DELETE ON kv BEGIN
  UPDATE realm SET kv_bytes = kv_bytes - (64 + octet_length(OLD.key) + octet_length(OLD.value))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER name_entry_meter_ins AFTER INSERT ON name_entry BEGIN
  UPDATE realm SET name_bytes = name_bytes + (64 + octet_length(NEW.path) + octet_length(NEW.data))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER name_entry_meter_upd AFTER UPDATE OF path, data ON name_entry BEGIN
  UPDATE realm SET name_bytes = name_bytes + (64 + octet_length(NEW.path) + octet_length(NEW.data)) - (64 + octet_length(OLD.path) + octet_length(OLD.data))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER name_entry_meter_del AFTER DELETE ON name_entry BEGIN
  UPDATE realm SET name_bytes = name_bytes - (64 + octet_length(OLD.path) + octet_length(OLD.data))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER directory_meter_ins AFTER INSERT ON directory BEGIN
  UPDATE realm SET file_bytes = file_bytes + (64 + octet_length(NEW.d_name) + NEW.f_size)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER directory_meter_upd AFTER UPDATE OF d_name, f_size ON directory BEGIN
  UPDATE realm SET file_bytes = file_bytes + (64 + octet_length(NEW.d_name) + NEW.f_size) - (64 + octet_length(OLD.d_name) + OLD.f_size)
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER directory_meter_del AFTER DELETE ON directory BEGIN
  UPDATE realm SET file_bytes = file_bytes - (64 + octet_length(OLD.d_name) + OLD.f_size)
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER message_meter_ins AFTER INSERT ON message BEGIN
  UPDATE realm SET mailbox_bytes = mailbox_bytes + (octet_length(NEW.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER message_meter_upd AFTER UPDATE OF payload ON message BEGIN
  UPDATE realm SET mailbox_bytes = mailbox_bytes + (octet_length(NEW.payload)) - (octet_length(OLD.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER message_meter_del AFTER DELETE ON message BEGIN
  UPDATE realm SET mailbox_bytes = mailbox_bytes - (octet_length(OLD.payload))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER message_log_meter_ins AFTER INSERT ON message_log BEGIN
  UPDATE realm SET delivered_bytes = delivered_bytes + (64 + octet_length(NEW.receiver) + octet_length(NEW.sender) + coalesce(octet_length(NEW.message_id), 0) + octet_length(NEW.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER message_log_meter_upd AFTER UPDATE OF payload ON message_log BEGIN
  UPDATE realm SET delivered_bytes = delivered_bytes + (64 + octet_length(NEW.receiver) + octet_length(NEW.sender) + coalesce(octet_length(NEW.message_id), 0) + octet_length(NEW.payload)) - (64 + octet_length(OLD.receiver) + octet_length(OLD.sender) + coalesce(octet_length(OLD.message_id), 0) + octet_length(OLD.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER message_log_meter_del AFTER DELETE ON message_log BEGIN
  UPDATE realm SET delivered_bytes = delivered_bytes - (64 + octet_length(OLD.receiver) + octet_length(OLD.sender) + coalesce(octet_length(OLD.message_id), 0) + octet_length(OLD.payload))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER procedure_meter_ins AFTER INSERT ON procedure BEGIN
  UPDATE realm SET code_bytes = code_bytes + (64 + octet_length(NEW.name) + octet_length(NEW.code) + octet_length(NEW.code_hash))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
  UPDATE realm SET procedures = procedures + 1
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER procedure_meter_upd AFTER UPDATE OF code, code_hash ON procedure BEGIN
  UPDATE realm SET code_bytes = code_bytes + (64 + octet_length(NEW.name) + octet_length(NEW.code) + octet_length(NEW.code_hash)) - (64 + octet_length(OLD.name) + octet_length(OLD.code) + octet_length(OLD.code_hash))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER procedure_meter_del AFTER DELETE ON procedure BEGIN
  UPDATE realm SET code_bytes = code_bytes - (64 + octet_length(OLD.name) + octet_length(OLD.code) + octet_length(OLD.code_hash))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
  UPDATE realm SET procedures = procedures - 1
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_meter_ins AFTER INSERT ON workflow BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.name) + octet_length(NEW.app_version) + coalesce(octet_length(NEW.queue), 0) + octet_length(NEW.input) + coalesce(octet_length(NEW.output), 0) + coalesce(octet_length(NEW.error), 0) + coalesce(octet_length(NEW.executor), 0) + coalesce(octet_length(NEW.node_id), 0) + octet_length(NEW.user_name) + coalesce(octet_length(NEW.forked_from), 0))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_meter_upd AFTER UPDATE OF app_version, queue, input, output, error, executor, node_id ON workflow BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.name) + octet_length(NEW.app_version) + coalesce(octet_length(NEW.queue), 0) + octet_length(NEW.input) + coalesce(octet_length(NEW.output), 0) + coalesce(octet_length(NEW.error), 0) + coalesce(octet_length(NEW.executor), 0) + coalesce(octet_length(NEW.node_id), 0) + octet_length(NEW.user_name) + coalesce(octet_length(NEW.forked_from), 0)) - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.name) + octet_length(OLD.app_version) + coalesce(octet_length(OLD.queue), 0) + octet_length(OLD.input) + coalesce(octet_length(OLD.output), 0) + coalesce(octet_length(OLD.error), 0) + coalesce(octet_length(OLD.executor), 0) + coalesce(octet_length(OLD.node_id), 0) + octet_length(OLD.user_name) + coalesce(octet_length(OLD.forked_from), 0))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_meter_del AFTER DELETE ON workflow BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.name) + octet_length(OLD.app_version) + coalesce(octet_length(OLD.queue), 0) + octet_length(OLD.input) + coalesce(octet_length(OLD.output), 0) + coalesce(octet_length(OLD.error), 0) + coalesce(octet_length(OLD.executor), 0) + coalesce(octet_length(OLD.node_id), 0) + octet_length(OLD.user_name) + coalesce(octet_length(OLD.forked_from), 0))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_step_meter_ins AFTER INSERT ON workflow_step BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.name) + octet_length(NEW.kind) + octet_length(NEW.status) + coalesce(octet_length(NEW.output), 0) + coalesce(octet_length(NEW.error), 0))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_step_meter_upd AFTER UPDATE OF status, output, error ON workflow_step BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.name) + octet_length(NEW.kind) + octet_length(NEW.status) + coalesce(octet_length(NEW.output), 0) + coalesce(octet_length(NEW.error), 0)) - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.name) + octet_length(OLD.kind) + octet_length(OLD.status) + coalesce(octet_length(OLD.output), 0) + coalesce(octet_length(OLD.error), 0))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_step_meter_del AFTER DELETE ON workflow_step BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.name) + octet_length(OLD.kind) + octet_length(OLD.status) + coalesce(octet_length(OLD.output), 0) + coalesce(octet_length(OLD.error), 0))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_message_meter_ins AFTER INSERT ON workflow_message BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.topic) + octet_length(NEW.sender) + octet_length(NEW.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_message_meter_upd AFTER UPDATE OF payload ON workflow_message BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.topic) + octet_length(NEW.sender) + octet_length(NEW.payload)) - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.topic) + octet_length(OLD.sender) + octet_length(OLD.payload))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_message_meter_del AFTER DELETE ON workflow_message BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.topic) + octet_length(OLD.sender) + octet_length(OLD.payload))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_event_meter_ins AFTER INSERT ON workflow_event BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.key) + octet_length(NEW.value))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_event_meter_upd AFTER UPDATE OF value ON workflow_event BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.workflow_id) + octet_length(NEW.key) + octet_length(NEW.value)) - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.key) + octet_length(OLD.value))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_event_meter_del AFTER DELETE ON workflow_event BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.workflow_id) + octet_length(OLD.key) + octet_length(OLD.value))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_executor_meter_ins AFTER INSERT ON workflow_executor BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.executor) + octet_length(NEW.app_version) + octet_length(NEW.functions) + octet_length(NEW.node_id))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_executor_meter_upd AFTER UPDATE OF app_version, functions, node_id ON workflow_executor BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.executor) + octet_length(NEW.app_version) + octet_length(NEW.functions) + octet_length(NEW.node_id)) - (64 + octet_length(OLD.executor) + octet_length(OLD.app_version) + octet_length(OLD.functions) + octet_length(OLD.node_id))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_executor_meter_del AFTER DELETE ON workflow_executor BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.executor) + octet_length(OLD.app_version) + octet_length(OLD.functions) + octet_length(OLD.node_id))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_queue_meter_ins AFTER INSERT ON workflow_queue BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.queue))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_queue_meter_upd AFTER UPDATE OF queue ON workflow_queue BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.queue)) - (64 + octet_length(OLD.queue))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_queue_meter_del AFTER DELETE ON workflow_queue BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.queue))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
CREATE TRIGGER workflow_schedule_meter_ins AFTER INSERT ON workflow_schedule BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.schedule) + octet_length(NEW.name) + octet_length(NEW.cron) + octet_length(NEW.app_version) + octet_length(NEW.queue))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_schedule_meter_upd AFTER UPDATE OF name, cron, app_version, queue ON workflow_schedule BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes + (64 + octet_length(NEW.schedule) + octet_length(NEW.name) + octet_length(NEW.cron) + octet_length(NEW.app_version) + octet_length(NEW.queue)) - (64 + octet_length(OLD.schedule) + octet_length(OLD.name) + octet_length(OLD.cron) + octet_length(OLD.app_version) + octet_length(OLD.queue))
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER workflow_schedule_meter_del AFTER DELETE ON workflow_schedule BEGIN
  UPDATE realm SET workflow_bytes = workflow_bytes - (64 + octet_length(OLD.schedule) + octet_length(OLD.name) + octet_length(OLD.cron) + octet_length(OLD.app_version) + octet_length(OLD.queue))
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;
-- A proc's row is written at every step of its life: only a change of its
-- logs' bytes (0 when it is spawned) moves the counter.
CREATE TRIGGER proc_meter_upd AFTER UPDATE OF log_bytes ON proc
  WHEN NEW.log_bytes <> OLD.log_bytes BEGIN
  UPDATE realm SET log_bytes = log_bytes + NEW.log_bytes - OLD.log_bytes
   WHERE p_key = NEW.p_key AND realm = NEW.realm AND metered = 1;
END;
CREATE TRIGGER proc_meter_del AFTER DELETE ON proc
  WHEN OLD.log_bytes <> 0 BEGIN
  UPDATE realm SET log_bytes = log_bytes - OLD.log_bytes
   WHERE p_key = OLD.p_key AND realm = OLD.realm AND metered = 1;
END;

-- What each realm stores, by class, summed from the tables (tenant tables
-- are measured only for a metered realm: 0 here).
CREATE VIEW realm_stored AS
SELECT r.p_key, r.realm,
       CAST((SELECT coalesce(sum(64 + octet_length(x.key) + octet_length(x.value)), 0) FROM kv x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS kv_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.path) + octet_length(x.data)), 0) FROM name_entry x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS name_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.d_name) + x.f_size), 0) FROM directory x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS file_bytes,
       CAST((SELECT coalesce(sum(octet_length(x.payload)), 0) FROM message x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS mailbox_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.receiver) + octet_length(x.sender) + coalesce(octet_length(x.message_id), 0) + octet_length(x.payload)), 0) FROM message_log x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS delivered_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.name) + octet_length(x.code) + octet_length(x.code_hash)), 0) FROM procedure x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS code_bytes,
       CAST((SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.name) + octet_length(x.app_version) + coalesce(octet_length(x.queue), 0) + octet_length(x.input) + coalesce(octet_length(x.output), 0) + coalesce(octet_length(x.error), 0) + coalesce(octet_length(x.executor), 0) + coalesce(octet_length(x.node_id), 0) + octet_length(x.user_name) + coalesce(octet_length(x.forked_from), 0)), 0) FROM workflow x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.name) + octet_length(x.kind) + octet_length(x.status) + coalesce(octet_length(x.output), 0) + coalesce(octet_length(x.error), 0)), 0) FROM workflow_step x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.topic) + octet_length(x.sender) + octet_length(x.payload)), 0) FROM workflow_message x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.workflow_id) + octet_length(x.key) + octet_length(x.value)), 0) FROM workflow_event x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.executor) + octet_length(x.app_version) + octet_length(x.functions) + octet_length(x.node_id)), 0) FROM workflow_executor x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.queue)), 0) FROM workflow_queue x WHERE x.p_key = r.p_key AND x.realm = r.realm) + (SELECT coalesce(sum(64 + octet_length(x.schedule) + octet_length(x.name) + octet_length(x.cron) + octet_length(x.app_version) + octet_length(x.queue)), 0) FROM workflow_schedule x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS workflow_bytes,
       CAST(0 AS INTEGER) AS tenant_bytes,
       CAST((SELECT coalesce(sum(x.log_bytes), 0) FROM proc x WHERE x.p_key = r.p_key AND x.realm = r.realm) AS INTEGER) AS log_bytes
FROM realm r;

-- What each realm uses now, against its quotas: a metered realm's counters,
-- another's sums. stored_bytes is every class's.
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
       CASE WHEN r.metered = 1 THEN r.kv_bytes ELSE s.kv_bytes END + CASE WHEN r.metered = 1 THEN r.name_bytes ELSE s.name_bytes END + CASE WHEN r.metered = 1 THEN r.file_bytes ELSE s.file_bytes END + CASE WHEN r.metered = 1 THEN r.mailbox_bytes ELSE s.mailbox_bytes END + CASE WHEN r.metered = 1 THEN r.delivered_bytes ELSE s.delivered_bytes END + CASE WHEN r.metered = 1 THEN r.code_bytes ELSE s.code_bytes END + CASE WHEN r.metered = 1 THEN r.workflow_bytes ELSE s.workflow_bytes END + CASE WHEN r.metered = 1 THEN r.tenant_bytes ELSE s.tenant_bytes END + CASE WHEN r.metered = 1 THEN r.log_bytes ELSE s.log_bytes END AS stored_bytes,
       r.quota_storage_mb,
       r.quota_mailbox_mb,
       CASE WHEN r.metered = 1 THEN r.procedures ELSE
         (SELECT count(*) FROM procedure x WHERE x.p_key = r.p_key AND x.realm = r.realm)
       END AS procedures,
       r.quota_procedures,
       CASE WHEN r.metered = 1 THEN r.kv_bytes ELSE s.kv_bytes END AS kv_bytes,
       CASE WHEN r.metered = 1 THEN r.name_bytes ELSE s.name_bytes END AS name_bytes,
       CASE WHEN r.metered = 1 THEN r.file_bytes ELSE s.file_bytes END AS file_bytes,
       CASE WHEN r.metered = 1 THEN r.mailbox_bytes ELSE s.mailbox_bytes END AS mailbox_bytes,
       CASE WHEN r.metered = 1 THEN r.delivered_bytes ELSE s.delivered_bytes END AS delivered_bytes,
       CASE WHEN r.metered = 1 THEN r.code_bytes ELSE s.code_bytes END AS code_bytes,
       CASE WHEN r.metered = 1 THEN r.workflow_bytes ELSE s.workflow_bytes END AS workflow_bytes,
       CASE WHEN r.metered = 1 THEN r.tenant_bytes ELSE s.tenant_bytes END AS tenant_bytes,
       CASE WHEN r.metered = 1 THEN r.log_bytes ELSE s.log_bytes END AS log_bytes
FROM realm r JOIN realm_stored s ON s.p_key = r.p_key AND s.realm = r.realm;

-- A tenant's SQL sees its own row of it, as of realm_usage.
INSERT INTO tenant_view (name) VALUES ('realm_stored');

-- Realms with a quota now keep every class's counter.
UPDATE realm SET metered = 1
 WHERE quota_storage_mb IS NOT NULL OR quota_mailbox_mb IS NOT NULL OR quota_procedures IS NOT NULL;
UPDATE realm SET
  kv_bytes = (SELECT s.kv_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  name_bytes = (SELECT s.name_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  file_bytes = (SELECT s.file_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  mailbox_bytes = (SELECT s.mailbox_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  delivered_bytes = (SELECT s.delivered_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  code_bytes = (SELECT s.code_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  workflow_bytes = (SELECT s.workflow_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  log_bytes = (SELECT s.log_bytes FROM realm_stored s WHERE s.p_key = realm.p_key AND s.realm = realm.realm),
  procedures = (SELECT count(*) FROM procedure x WHERE x.p_key = realm.p_key AND x.realm = realm.realm)
 WHERE metered = 1;

