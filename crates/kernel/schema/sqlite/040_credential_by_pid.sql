-- A realm's credentials by pid, with whether each is revoked or expired in
-- the index itself: revoking a proc's credentials at its end (kernel::auth
-- ::REVOKE_PID: `... AND revoked_us IS NULL`) and counting a realm's live
-- ones (LIVE_COUNT) read columns the old index lacked, and SQLite's
-- planner, without statistics, then chose to scan the partition's every
-- credential over looking each row up from the index — a scan per proc
-- end, growing with every proc ever run (issue 40).
DROP INDEX credential_by_realm;
CREATE INDEX credential_by_realm ON credential (p_key, realm, pid, revoked_us, expires_us);
