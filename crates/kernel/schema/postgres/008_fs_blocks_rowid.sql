-- SQLite only (block tables as rowid tables, so a 2 KB block is not an
-- overflow page); PostgreSQL keeps its heap tables as they are.
SELECT 1;
