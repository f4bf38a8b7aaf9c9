-- The proc a graph acts for (issue 43, item 2): the one whose credential
-- submitted it, if any. Its procedure tasks act for that proc, so their
-- file reads and writes, sends and receipts are its provenance
-- (`proc_event`), as the proc's own calls would be; a child graph acts for
-- its parent's. NULL for a graph submitted by a client acting for no proc.
ALTER TABLE graph ADD COLUMN pid TEXT;
