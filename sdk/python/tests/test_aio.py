"""The asyncio client (tabos.aio) against a real node, over TCP and over
the node's local socket."""

from __future__ import annotations

import asyncio

import pytest

import tabos
import tabos.aio


def test_the_asyncio_client_does_what_the_client_does(node) -> None:
    addr = node.socket if node.way == "local" else node.addr

    async def main() -> None:
        async with tabos.aio.Client(addr, node.token) as c:
            assert (await c.whoami())["role"] == "operator"
            # Procs: spawned, waited for and read, several at once.
            pids = await asyncio.gather(
                *(c.spawn("sh", "-c", f"echo aio {i}", pid=f"aio-{node.way}-{i}") for i in range(3))
            )
            done = await asyncio.gather(*(c.wait(p) for p in pids))
            assert [s.exit_status for s in done] == [0, 0, 0]
            assert all(s.state is tabos.ProcState.EXITED for s in done)
            assert await c.logs(pids[1]) == b"aio 1\n"
            pieces = [p async for p in c.follow_logs(pids[2])]
            assert b"".join(pieces) == b"aio 2\n"
            assert any(r["pid"] == pids[0] for r in await c.ps(state="exited"))
            # Messages: a stream that wakes as they arrive.
            box = f"aio-box-{node.way}"
            await c.create_mailbox(box)
            await c.send(box, b"three")
            assert [m.payload for m in await c.recv(box, max=5, timeout=5)] == [b"three"]
            got: list = []

            async def take() -> None:
                # Closed when left: an open stream would take what comes next.
                stream = c.messages(box)
                try:
                    async for m in stream:
                        got.append(m.payload)
                        if len(got) == 2:
                            return
                finally:
                    await stream.aclose()

            taker = asyncio.create_task(take())
            assert await c.send(box, b"one") > 0
            await c.send(box, "two")
            await asyncio.wait_for(taker, 30)
            assert got == [b"one", b"two"]
            await c.remove_mailbox(box)
            # SQL and a stored procedure.
            rows = await c.sql("SELECT pid FROM ps WHERE pid = $1", pids[0])
            assert rows == [{"pid": pids[0]}]
            name = f"aio_hello_{node.way}"
            with tabos.Client(addr, node.token) as sync:
                sync.procedures.install(name, b"function main(a) { return 'hi ' + a; }")
            assert (await c.call(name, "there")).result == b"hi there"
            # Refusals are the same typed errors.
            with pytest.raises(tabos.NotFound):
                await c.wait("aio-nope")
            with pytest.raises(tabos.InvalidArgument):
                await c.spawn("true", kind="cobol")
            with pytest.raises(tabos.NotFound):
                await c.workflow("aio-no-workflow")

    asyncio.run(main())


def test_an_operator_manages_realms_from_asyncio(node) -> None:
    """Realms from the asyncio client as from the synchronous one: create,
    show, set, a refused setting changing nothing, clear, remove; a tenant
    sees its own realm only and may change none."""
    addr = node.socket if node.way == "local" else node.addr
    name = f"aiorealm{node.way}"

    async def main() -> None:
        async with tabos.aio.Client(addr, node.token) as c:
            made = await c.create_realm(name, scheduler="locality")
            assert made["token"].startswith("tabos_") and made["id"]
            r = await c.set_realm(name, procs=5, retention_s=60, provenance="all")
            assert (r["quota_procs"], r["retention_s"], r["provenance"], r["scheduler"]) == (5, 60, "all", "locality")
            with pytest.raises(tabos.InvalidArgument):
                await c.set_realm(name, provenance="sometimes")
            with pytest.raises(TypeError):
                await c.set_realm(name, colour="blue")
            assert (await c.realm(name))["provenance"] == "all", "a refused setting changes nothing"
            async with tabos.aio.Client(addr, made["token"]) as tenant:
                assert [x["realm"] for x in await tenant.realms()] == [name]
                with pytest.raises(tabos.PermissionDenied):
                    await tenant.set_realm(name, procs=100)
                with pytest.raises(tabos.NotFound):
                    await tenant.realm("default")
            r = await c.set_realm(name, clear=["procs", "retention"])
            assert (r["quota_procs"], r["retention_s"]) == (None, None)
            assert await c.remove_realm(name) > 0
            with pytest.raises(tabos.NotFound):
                await c.realm(name)

    asyncio.run(main())


def test_files_from_asyncio(node) -> None:
    """The realm's files from the asyncio client: a directory tree made,
    a file larger than one 4 MiB read written and read back whole, listed,
    statted, renamed and removed; a named pipe read while another task
    writes it; a watch that sees a change; the synchronous client sees the
    same files, and a missing one is NotFound."""
    addr = node.socket if node.way == "local" else node.addr
    top = f"/aio-files-{node.way}"
    data = bytes(range(256)) * (5 * 4096 + 7)  # 5 MiB and a bit: two reads

    async def main() -> None:
        async with tabos.aio.Client(addr, node.token) as c:
            await c.fs.mkdir(f"{top}/a/b", parents=True)
            with pytest.raises(tabos.AlreadyExists):
                await c.fs.mkdir(f"{top}/a")
            await c.fs.write_bytes(f"{top}/a/b/big", data)
            assert await c.fs.read_bytes(f"{top}/a/b/big") == data
            await c.fs.write_bytes(f"{top}/a/b/big", b"short now")
            assert await c.fs.read_bytes(f"{top}/a/b/big") == b"short now", "write_bytes replaces"
            st = await c.fs.stat(f"{top}/a/b/big")
            assert (st.type, st.size) == ("file", 9)
            await c.fs.rename(f"{top}/a/b/big", f"{top}/a/small")
            assert [e.path for e in await c.fs.ls(f"{top}/a")] == [f"{top}/a/b", f"{top}/a/small"]
            with tabos.Client(addr, node.token) as sync:
                assert sync.fs.read_bytes(f"{top}/a/small") == b"short now"

            # A named pipe: the reader waits for the writer's bytes and EOF.
            await c.fs.mkfifo(f"{top}/p")
            reader = asyncio.create_task(c.fs.read_bytes(f"{top}/p"))
            await asyncio.sleep(0.3)
            assert not reader.done(), "the reader waits for a writer"
            await c.fs.write_bytes(f"{top}/p", b"through the pipe")
            assert await asyncio.wait_for(reader, 30) == b"through the pipe"

            # A watch sees a change made after it started.
            watch = c.fs.watch()
            assert (await watch.__anext__()).kind == "watching"
            await c.fs.write_bytes(f"{top}/seen", b"x")
            change = await asyncio.wait_for(watch.__anext__(), 30)
            assert change.kind in ("name", "data"), change
            await watch.aclose()

            for p in [f"{top}/seen", f"{top}/p", f"{top}/a/small", f"{top}/a/b", f"{top}/a", top]:
                await c.fs.remove(p)
            with pytest.raises(tabos.NotFound):
                await c.fs.stat(top)
            with pytest.raises(tabos.NotFound):
                await c.fs.read_bytes(f"{top}/nope")

    asyncio.run(main())
