-- Where a file's data lives besides localized_file (kernel::fs::files):
-- parallel files' blocks spread over partitions, and large files' data in
-- blockio segments with the extent map here.

-- A stable id for files whose blocks are not keyed by path (parallel files
-- and files in segments), so a rename touches only the directory row.
ALTER TABLE directory ADD COLUMN f_id TEXT NOT NULL DEFAULT '';
-- Bumped by every change of a file's data or size: a multi-step write
-- commits only if no other change came between its steps.
ALTER TABLE directory ADD COLUMN f_version BIGINT NOT NULL DEFAULT 0;
-- 1: the data is in blockio segments (fs_extent), not in block rows.
ALTER TABLE directory ADD COLUMN in_segments BIGINT NOT NULL DEFAULT 0;

-- A file's extents, in file order: bytes [file_offset, file_offset + bytes)
-- are the first bytes of segment `segment` on block store `store_id`.
CREATE TABLE fs_extent (
    p_key       BIGINT NOT NULL,
    realm       TEXT    NOT NULL,
    f_id        TEXT    NOT NULL,
    ext_no      BIGINT NOT NULL,
    file_offset BIGINT NOT NULL,
    bytes       BIGINT NOT NULL,
    store_id    TEXT    NOT NULL,
    segment     TEXT    NOT NULL,
    PRIMARY KEY (p_key, realm, f_id, ext_no)
);

-- Storage a committed change let go of (a removed file's segments or
-- parallel blocks), given back after the commit; what a crash leaves here
-- is given back when a node starts.
CREATE TABLE fs_reclaim (
    p_key    BIGINT NOT NULL,
    realm    TEXT    NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('segment', 'parallel')),
    what     TEXT    NOT NULL,            -- segment name, or parallel file id
    store_id TEXT    NOT NULL,            -- block store of a segment; '' for parallel
    PRIMARY KEY (p_key, realm, kind, what)
);
