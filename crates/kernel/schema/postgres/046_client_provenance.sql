-- What a realm's provenance records (issue 43, item 2): 'procs' (the
-- default) — what procs do, as before; 'all' — also the file reads and
-- writes, sends and receipts of clients acting for no proc (a user's
-- shell, the SDKs, the mount outside a proc), in `proc_event` under
-- `@USER/CREDENTIAL` (`@` is never in a pid). Off by default: each such
-- file read then commits a write.
ALTER TABLE realm ADD COLUMN provenance TEXT NOT NULL DEFAULT 'procs';
