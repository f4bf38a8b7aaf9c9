-- A credential by its public id alone: how a node reads one it was told
-- changed (kernel::auth::load_one) and how `revoke` finds its realm. The
-- primary key (p_key, id) cannot serve that lookup, so each read scanned
-- every credential ever issued — one per native proc that ever ran — and a
-- node's proc rate fell as they accumulated (issue 40).
CREATE INDEX credential_by_id ON credential (id);
