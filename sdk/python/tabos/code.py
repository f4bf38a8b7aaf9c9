"""Code that travels with the request: a file or directory of the caller's,
put into its realm's files under ``/code/<hash>/`` and named by its content
hash, which a spawn names (``Client.spawn(..., code=hash)`` or
``upload=path``); the node that runs the proc copies it, checks the hash and
shows it to the proc read-only as its working directory.

The hash is the SHA-256 of a manifest — one line per regular file, sorted by
path (bytewise): ``"<x|f> <sha256 hex> <path>\\n"`` (``x`` when any execute
bit is set) — the same as the Rust client's (``tabos_client::code``), so a
tree has one hash whichever client uploads it. Symbolic links and other
special files are refused, not followed.
"""

from __future__ import annotations

import hashlib
import os
import stat as statmod
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from . import errors
from ._proto import tabos_pb2 as pb

if TYPE_CHECKING:
    from .client import Client

CODE_DIR = "/code"
CODE_FILES_MAX = 10_000
CODE_BYTES_MAX = 1 << 30
CODE_PATH_BYTES_MAX = 1024
_CHUNK = 4 << 20


@dataclass(frozen=True)
class Entry:
    """One file of a tree."""

    path: str
    executable: bool
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """A tree's files, sorted by path, and its content hash."""

    entries: Tuple[Entry, ...]
    hash: str

    @property
    def dir(self) -> str:
        return f"{CODE_DIR}/{self.hash}"


def _hash_file(path: str) -> Tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 16)
            if not b:
                break
            h.update(b)
            size += len(b)
    return h.hexdigest(), size


def manifest(root: str) -> Manifest:
    """The manifest of the file or directory at ``root``."""
    entries: List[Entry] = []
    total = 0

    def add(path: str, rel: str, st: os.stat_result) -> None:
        nonlocal total
        if len(rel.encode()) > CODE_PATH_BYTES_MAX or any(ord(c) < 32 or ord(c) == 127 for c in rel):
            raise errors.InvalidArgument(f"{path!r}: a file's name must have no control character")
        if len(entries) >= CODE_FILES_MAX:
            raise errors.InvalidArgument(f"more than {CODE_FILES_MAX} files")
        sha, size = _hash_file(path)
        total += size
        if total > CODE_BYTES_MAX:
            raise errors.InvalidArgument(f"more than {CODE_BYTES_MAX} bytes")
        entries.append(Entry(rel, bool(st.st_mode & 0o111), size, sha))

    st = os.stat(root)
    if statmod.S_ISREG(st.st_mode):
        add(root, os.path.basename(root), st)
    elif statmod.S_ISDIR(st.st_mode):
        todo = [(root, "")]
        while todo:
            d, prefix = todo.pop()
            with os.scandir(d) as it:
                for e in it:
                    rel = f"{prefix}/{e.name}" if prefix else e.name
                    est = os.lstat(e.path)
                    if statmod.S_ISDIR(est.st_mode):
                        todo.append((e.path, rel))
                    elif statmod.S_ISREG(est.st_mode):
                        add(e.path, rel, est)
                    else:
                        raise errors.InvalidArgument(
                            f"{e.path}: only regular files and directories are uploaded"
                        )
    else:
        raise errors.InvalidArgument(f"{root}: only regular files and directories are uploaded")
    entries.sort(key=lambda e: e.path.encode())
    h = hashlib.sha256()
    for f in entries:
        h.update(f"{'x' if f.executable else 'f'} {f.sha256} {f.path}\n".encode())
    return Manifest(tuple(entries), h.hexdigest())


def upload(c: "Client", local: str, *, realm: str = "") -> Manifest:
    """Puts ``local`` into the realm's files as uploaded code (not again if
    a tree of its hash is there) and returns its manifest."""
    m = manifest(local)
    fs = c._fs

    def call(method, req):  # type: ignore[no-untyped-def]
        return c._call(method, req)

    try:
        call(fs.Stat, pb.FsPathRequest(realm=realm, path=m.dir))
        return m
    except errors.NotFound:
        pass
    # Every user of the realm uploads into /code; the sticky bit keeps each
    # one's trees theirs to remove (as /tmp does).
    try:
        call(fs.Stat, pb.FsPathRequest(realm=realm, path=CODE_DIR))
    except errors.NotFound:
        try:
            call(fs.Mkdir, pb.FsCreateRequest(realm=realm, path=CODE_DIR, mode=0o1777))
        except errors.AlreadyExists:
            pass
        except errors.PermissionDenied as denied:
            raise errors.PermissionDenied(
                f"the realm has no {CODE_DIR} yet, and this user may not make it: a realm admin "
                f"makes it (tabos fs mkdir --mode 1777 {CODE_DIR}), or uploads first"
            ) from denied
    staging = f"{CODE_DIR}/.upload-{uuid.uuid4().hex[:16]}"
    call(fs.Mkdir, pb.FsCreateRequest(realm=realm, path=staging, mode=0o755))
    single = os.path.isfile(local)
    made = set()
    for e in m.entries:
        at = staging
        for d in e.path.split("/")[:-1]:
            at = f"{at}/{d}"
            if at not in made:
                made.add(at)
                call(fs.Mkdir, pb.FsCreateRequest(realm=realm, path=at, mode=0o755))
        path = f"{staging}/{e.path}"
        call(fs.Create, pb.FsCreateRequest(realm=realm, path=path, mode=0o755 if e.executable else 0o644))
        src = local if single else os.path.join(local, *e.path.split("/"))
        h = hashlib.sha256()
        offset = 0
        with open(src, "rb") as f:
            while True:
                b = f.read(_CHUNK)
                if not b:
                    break
                h.update(b)
                call(fs.Write, pb.FsWriteRequest(realm=realm, path=path, offset=offset, data=b))
                offset += len(b)
        if h.hexdigest() != e.sha256 or offset != e.size:
            raise errors.InvalidArgument(f"{src}: changed while it was uploaded")
    named: Dict[str, Any] = {"from": staging}
    try:
        call(fs.Rename, pb.FsRenameRequest(realm=realm, to=m.dir, **named))
    except errors.TabosError:
        # Another upload of the same tree got there first: the same files.
        call(fs.Stat, pb.FsPathRequest(realm=realm, path=m.dir))
    return m
