-- The host's network (issue 34, item 2): a native proc gets a network
-- namespace of its own, with loopback only, unless its realm's operator
-- allows the realm the host's network (`realm.host_network`). A proc's row
-- records what its realm allowed when it was spawned (`proc.host_network`).
ALTER TABLE realm ADD COLUMN host_network INTEGER NOT NULL DEFAULT 0;
ALTER TABLE proc ADD COLUMN host_network INTEGER NOT NULL DEFAULT 0;
