-- Node leases on the database's clock (issue 35, item 1). A node renews
-- its row once per heartbeat — the one write an idle node makes — with the
-- database's time: expires_us = that time + its own lease_us, recorded
-- with the lease so that nodes of different heartbeat periods are judged
-- each by its own. Its workers in every realm are up while it is; there
-- are no per-realm worker heartbeats any more.
--
-- The cluster's leader declares a node whose lease lapsed lost (lost_us),
-- counting only time when the leader itself reached the database, and
-- marks its workers down (nothing new is placed there); only once the
-- node has been silent past its grace_us (and a margin) are its procs
-- given back — restartable ones queued again, the others failed —
-- (given_back_us), because a node cut off from the database stops its
-- restartable procs itself after that same grace: a proc never runs twice.
-- A node that returns finds what was recorded and says in note what it did.
-- What was recorded is decided realm by realm, in each realm's own
-- transactions: a worker's given_back_us says its procs were given back
-- (the returning node stops what it still runs there and registers it
-- again); a worker down without it kept its procs (it is up again).
ALTER TABLE node ADD COLUMN lease_us INTEGER NOT NULL DEFAULT 3000000;
ALTER TABLE node ADD COLUMN expires_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE node ADD COLUMN grace_us INTEGER NOT NULL DEFAULT 60000000;
ALTER TABLE node ADD COLUMN lost_us INTEGER;
ALTER TABLE node ADD COLUMN given_back_us INTEGER;
ALTER TABLE node ADD COLUMN note TEXT NOT NULL DEFAULT '';
-- The leader's one scan per period: live nodes by expiry.
CREATE INDEX node_expiry ON node (p_key, expires_us) WHERE state = 'up';
ALTER TABLE worker ADD COLUMN given_back_us INTEGER;
-- A node's workers, found in each realm when it is lost.
CREATE INDEX worker_by_node ON worker (node_id, realm);
