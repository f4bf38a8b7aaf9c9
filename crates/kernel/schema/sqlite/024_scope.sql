-- Scoped credentials (issue 20; kernel::auth::Scope): NULL for a
-- credential that may do all its role allows; otherwise the only mailboxes
-- it may send to and receive from, as space-separated `send:<address>` and
-- `recv:<address>` grants. A proc's scope, given at spawn, becomes its
-- credential's (σOS section 5.3: wwd runs without the realm's namespace).
ALTER TABLE credential ADD COLUMN scope TEXT;
ALTER TABLE proc ADD COLUMN scope TEXT;
