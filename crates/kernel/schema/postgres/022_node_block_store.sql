-- Which node holds which block store (issue 19, item 1; kernel::nodes): a
-- file's extents name their block store; a request for that file's data
-- is forwarded to the node whose block_store it is ('' for none).
ALTER TABLE node ADD COLUMN block_store TEXT NOT NULL DEFAULT '';
