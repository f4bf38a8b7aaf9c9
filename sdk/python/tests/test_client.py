"""The SDK against a real node: every family of calls, their iterators and
their typed errors."""

from __future__ import annotations

import json
import os
import threading

import grpc
import pytest

import tabos


def test_procs_spawn_wait_logs_evict_ps(client: tabos.Client) -> None:
    pid = client.spawn("sh", "-c", "echo hello; echo oops >&2; exit 3", pid=tabos.unique_pid("t"))
    done = client.wait(pid)
    assert (done.state, done.exit_status) == ("exited", 3)
    assert done.state is tabos.ProcState.EXITED and done.state.ended
    assert client.logs(pid) == b"hello\n"
    assert client.logs(pid, "stderr") == b"oops\n"
    assert b"".join(client.follow_logs(pid)) == b"hello\n"  # ended: what was kept, then the end"
    lines = client.spawn("sh", "-c", "echo a; echo b; echo c", pid=tabos.unique_pid("t"))
    client.wait(lines)
    assert client.logs(lines, tail=2) == b"b\nc\n"
    assert b"".join(client.follow_logs(lines, tail=1)) == b"c\n"
    assert client.logs(lines, since_us=4102444800000000) == b""  # 2100-01-01
    sleeper = client.spawn("sleep", "600", proc_class="BE", cores=0)
    assert client.wait(sleeper, until="start").state == "running"
    client.evict(sleeper)
    assert client.wait(sleeper).state == "evicted"
    rows = client.ps()
    assert {pid, sleeper} <= {r["pid"] for r in rows}
    assert all(isinstance(r, dict) for r in rows)
    assert [r["pid"] for r in client.ps(state="evicted")] == [sleeper]
    with pytest.raises(tabos.NotFound):
        client.proc("no-such-proc")
    with pytest.raises(tabos.InvalidArgument):
        client.spawn("sleep", "1", cores=-1)
    with pytest.raises(tabos.InvalidArgument):
        client.wait(pid, until="soon")


def test_code_travels_with_the_spawn(node, client: tabos.Client, tmp_path) -> None:
    app = tmp_path / "app"
    (app / "lib").mkdir(parents=True)
    run = app / "run.sh"
    run.write_text("#!/bin/sh\necho \"in $(pwd)\"\ncat lib/words.txt\nexit 5\n")
    run.chmod(0o755)
    (app / "lib" / "words.txt").write_text("alpha\n")
    pid = client.spawn("./run.sh", upload=app, pid=tabos.unique_pid("code"))
    done = client.wait(pid)
    assert (done.state, done.exit_status) == ("exited", 5), done.error
    assert client.logs(pid) == b"in /code\nalpha\n"
    # The same hash as the Rust client's (the CLI's) for the same tree,
    # and the same content is not uploaded twice.
    h = client.upload_code(app)
    assert len(h) == 64 and h == tabos.code.manifest(str(app)).hash
    node.cli("spawn", "--upload", str(app), "--wait", "--", "true")
    listed = [s.path for s in client.fs.ls("/code")]
    assert listed == [f"/code/{h}"], listed
    again = client.spawn("sh", "run.sh", code=h)
    assert client.wait(again).exit_status == 5
    with pytest.raises(tabos.NotFound):
        client.spawn("./run.sh", code="0" * 64)
    with pytest.raises(tabos.InvalidArgument):
        client.spawn("./run.sh", code="not-a-hash")
    with pytest.raises(tabos.InvalidArgument):
        client.spawn("./run.sh", upload=app, code=h)


def test_restartable_procs_carry_their_restart_limit(client: tabos.Client) -> None:
    pid = client.spawn("true", pid=tabos.unique_pid("r"), restartable=True, max_restarts=2)
    client.wait(pid)
    rows = client.sql("SELECT restartable, max_restarts, restarts FROM proc WHERE pid = $1", pid)
    assert rows == [{"restartable": 1, "max_restarts": 2, "restarts": 0}]
    plain = client.spawn("true", pid=tabos.unique_pid("r"), restartable=True)
    client.wait(plain)
    rows = client.sql("SELECT max_restarts FROM proc WHERE pid = $1", plain)
    assert rows == [{"max_restarts": 10}]
    with pytest.raises(tabos.InvalidArgument):
        client.spawn("true", max_restarts=2)
    with pytest.raises(tabos.InvalidArgument):
        client.spawn("true", restartable=True, max_restarts=5000)


def test_messages_send_recv_and_stream(client: tabos.Client) -> None:
    client.create_mailbox("py-inbox", bytes_max=64)
    with pytest.raises(tabos.AlreadyExists):
        client.create_mailbox("py-inbox")
    assert client.send("py-inbox", "one", sender="alice") == 1
    assert client.send("py-inbox", b"two", message_id="m2") == 2
    assert client.send("py-inbox", b"two", message_id="m2") == 2  # the same message once
    got = client.recv("py-inbox", max=10)
    assert [(m.payload, m.sender) for m in got] == [(b"one", "alice"), (b"two", "")]
    assert client.recv("py-inbox", timeout=0.05) == []
    with pytest.raises(tabos.ResourceExhausted):
        client.send("py-inbox", b"x" * 100)
    # The stream: messages as they arrive, no polling.
    seen: list = []

    def take() -> None:
        for m in client.messages("py-inbox"):
            seen.append(m.payload)
            if len(seen) == 3:
                return

    t = threading.Thread(target=take)
    t.start()
    for p in (b"a", b"b", b"c"):
        client.send("py-inbox", p)
    t.join(timeout=30)
    assert seen == [b"a", b"b", b"c"]
    assert client.remove_mailbox("py-inbox") == 0
    with pytest.raises(tabos.NotFound):
        client.recv("py-inbox")


def test_names_versions_watch_and_election(node, client: tabos.Client) -> None:
    client.names.mkdir("/py/cfg")
    v1 = client.names.set("/py/cfg/db", "primary=a")
    assert client.names.get("/py/cfg/db").data == b"primary=a"
    client.names.set("/py/cfg/db", "primary=b", if_version=v1)
    # A stale version is a conflict (a FailedPrecondition by its code).
    with pytest.raises(tabos.Conflict) as stale:
        client.names.set("/py/cfg/db", "primary=c", if_version=v1)
    assert isinstance(stale.value, tabos.FailedPrecondition) and stale.value.reason == "CONFLICT"
    assert [e.path for e in client.names.ls("/py/cfg")] == ["/py/cfg/db"]
    events: list = []

    def watch() -> None:
        for e in client.names.watch("/py/cfg"):
            events.append(e.op)
            if e.op == "create":
                return

    t = threading.Thread(target=watch)
    t.start()
    # The watch's first event says it is watching; then the change.
    while not events:
        threading.Event().wait(0.01)
    client.names.set("/py/cfg/new", "x")
    t.join(timeout=30)
    assert events[0] == "watching" and events[-1] == "create"
    client.names.remove("/py/cfg/new")
    with pytest.raises(tabos.NotFound):
        client.names.get("/py/cfg/new")

    # Two campaigners: the second leads once the first's session ends.
    first, second = node.client(), node.client()
    s1 = first.names.session("one", ttl=10)
    e1 = first.names.election("/py/election")
    epoch1 = e1.campaign(s1, "one")
    assert e1.leader() == "one"
    won: list = []
    s2 = second.names.session("two", ttl=10)

    def campaign() -> None:
        won.append(second.names.election("/py/election").campaign(s2, "two"))

    t = threading.Thread(target=campaign)
    t.start()
    threading.Event().wait(0.2)
    assert won == [] and e1.leader() == "one"
    s1.close()
    t.join(timeout=30)
    assert won and won[0] > epoch1
    assert e1.leader() == "two"
    s2.close()
    first.close()
    second.close()


def test_file_changes_are_watched(client: tabos.Client) -> None:
    """``fs.watch`` tells a new file's name and then its write (by id), in
    commit order, after saying it watches."""
    w = client.fs.watch()
    assert next(w) == tabos.FileChange("watching", "")
    client.fs.write_bytes("/watched.txt", b"x")
    assert next(w) == tabos.FileChange("name", "/watched.txt")
    then = next(w)
    assert then.kind == "file" and then.what, then
    w.close()
    client.fs.remove("/watched.txt")


def test_files_are_file_like(client: tabos.Client) -> None:
    client.fs.mkdir("/py/data", parents=True)
    big = bytes(range(256)) * (40 * 1024 + 3)  # over two write chunks
    with client.fs.open("/py/data/big.bin", "wb") as f:
        f.write(big)
    assert client.fs.stat("/py/data/big.bin").size == len(big)
    with client.fs.open("/py/data/big.bin", "rb") as f:
        assert f.read() == big
        f.seek(1000)
        assert f.read(10) == big[1000:1010]
    with client.fs.open("/py/data/notes.txt", "w") as f:
        f.write("line 1\n")
    with client.fs.open("/py/data/notes.txt", "a") as f:
        f.write("line 2\n")
    with client.fs.open("/py/data/notes.txt") as f:
        assert f.readlines() == ["line 1\n", "line 2\n"]
    client.fs.rename("/py/data/notes.txt", "/py/data/n.txt")
    assert sorted(s.path for s in client.fs.ls("/py/data")) == ["/py/data/big.bin", "/py/data/n.txt"]
    client.fs.remove("/py/data/n.txt")
    with pytest.raises(tabos.NotFound):
        client.fs.open("/py/data/n.txt")
    with pytest.raises(tabos.NotEmpty) as e:
        client.fs.remove("/py/data")
    assert e.value.subject == "/py/data" and e.value.code == "FAILED_PRECONDITION"
    with pytest.raises(tabos.NotADirectory) as e:
        client.fs.mkdir("/py/data/big.bin/x")
    assert e.value.subject == "/py/data/big.bin"


def test_named_pipes(client: tabos.Client) -> None:
    """A FIFO by path: what is written is read once, in order, then EOF;
    another process's reader (a thread here) waits for the writer."""
    import threading

    client.fs.mkdir("/py", parents=True)
    st = client.fs.mkfifo("/py/pipe")
    assert st.type == "fifo" and st.size == 0
    got: list = []
    reader = threading.Thread(target=lambda: got.append(client.fs.read_bytes("/py/pipe")))
    reader.start()
    client.fs.write_bytes("/py/pipe", b"through the pipe")
    reader.join(60)
    assert not reader.is_alive() and got == [b"through the pipe"]
    assert client.fs.read_bytes("/py/pipe") == b"", "drained: EOF"
    client.fs.remove("/py/pipe")


def test_names_follow_symlinks(client: tabos.Client, node: Any) -> None:
    """A path through a symlink goes on at its target: a path on this node,
    or an endpoint that is a node of the cluster; any other endpoint comes
    back as Mounted; a loop ends after HOPS_MAX."""
    client.names.mkdir("/pyl/real")
    client.names.create("/pyl/real/f", b"here")
    client.names.create("/pyl/alias", b"/pyl/real", kind="symlink")
    client.names.create("/pyl/node", f"http://{node.addr}".encode(), kind="symlink")
    client.names.create("/pyl/away", b"10.0.0.7:7070", kind="symlink")
    assert client.names.get("/pyl/alias/f").data == b"here"
    assert client.names.get("/pyl/node/pyl/alias/f").path == "/pyl/real/f"
    client.names.set("/pyl/alias/g", b"via")
    assert [e.path for e in client.names.ls("/pyl/node/pyl/real")] == ["/pyl/real/f", "/pyl/real/g"]
    client.names.remove("/pyl/node/pyl/alias/g")
    with pytest.raises(tabos.Mounted) as e:
        client.names.get("/pyl/away/x")
    assert (e.value.target, e.value.rest) == ("10.0.0.7:7070", "/x")
    client.names.create("/pyl/a", b"/pyl/b", kind="symlink")
    client.names.create("/pyl/b", b"/pyl/a", kind="symlink")
    with pytest.raises(tabos.TooManyHops):
        client.names.get("/pyl/a/x")


class _Failed(grpc.RpcError):
    """A failed call as grpcio raises it, with a node's ErrorDetail."""

    def __init__(self, code: grpc.StatusCode, detail: bytes) -> None:
        self._code, self._detail = code, detail

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "words for people"

    def trailing_metadata(self) -> tuple:
        return (("grpc-status-details-bin", self._detail),)


def test_errors_are_typed_by_reason_and_carry_its_fields() -> None:
    from tabos._proto import tabos_pb2 as pb

    def failed(code: grpc.StatusCode, **fields) -> tabos.TabosError:
        return tabos.errors.from_rpc(_Failed(code, pb.ErrorDetail(**fields).SerializeToString()))

    e = failed(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        reason=pb.ERROR_REASON_OVER_QUOTA,
        over_quota=pb.OverQuotaDetail(quota="storage", used=3 << 20, limit=1 << 20),
    )
    assert isinstance(e, tabos.OverQuota) and isinstance(e, tabos.ResourceExhausted)
    assert (e.quota, e.used, e.limit, e.reason) == ("storage", 3 << 20, 1 << 20, "OVER_QUOTA")
    e = failed(
        grpc.StatusCode.ABORTED,
        reason=pb.ERROR_REASON_STALE_EPOCH,
        stale_epoch=pb.StaleEpochDetail(current=7, given=5),
    )
    assert isinstance(e, tabos.StaleEpoch) and (e.current, e.given) == (7, 5)
    e = failed(
        grpc.StatusCode.FAILED_PRECONDITION,
        reason=pb.ERROR_REASON_MOUNTED,
        subject="/svc/m",
        mounted=pb.MountedDetail(path="/svc/m", target="tcp:h:1", rest="a/b"),
    )
    assert isinstance(e, tabos.Mounted) and (e.path, e.target, e.rest) == ("/svc/m", "tcp:h:1", "a/b")
    # A reason this SDK does not know (a newer node's), or a detail that
    # does not parse: the code's class, never a crash.
    e = tabos.errors.from_rpc(_Failed(grpc.StatusCode.NOT_FOUND, pb.ErrorDetail(reason=999).SerializeToString()))
    assert type(e) is tabos.NotFound
    e = tabos.errors.from_rpc(_Failed(grpc.StatusCode.ABORTED, b"\xff\xff\xff"))
    assert type(e) is tabos.Aborted and e.reason == "CONTENDED"
    # A reason whose class does not fit the code is not trusted over it.
    e = failed(grpc.StatusCode.NOT_FOUND, reason=pb.ERROR_REASON_NOT_EMPTY)
    assert type(e) is tabos.NotFound


def test_sql_rows_are_dicts_and_scoped(node, client: tabos.Client) -> None:
    client.spawn("true", pid="sql-p1")
    client.wait("sql-p1")
    rows = client.sql("SELECT pid, state, exit_status FROM proc WHERE pid = $1", "sql-p1")
    assert rows == [{"pid": "sql-p1", "state": "exited", "exit_status": 0}]
    with pytest.raises(tabos.PermissionDenied):
        client.sql("DELETE FROM proc")
    with pytest.raises(tabos.InvalidArgument):
        client.sql("SELEC nonsense")
    # A realm's admin sees its own realm only, and no credentials.
    admin_token = node.cli("realm", "create", "pyrealm").strip().splitlines()[-1]
    with node.client(admin_token) as admin:
        assert admin.whoami()["realm"] == "pyrealm"
        assert admin.sql("SELECT count(*) AS n FROM proc WHERE pid = 'sql-p1'") == [{"n": 0}]
        with pytest.raises(tabos.PermissionDenied):
            admin.sql("SELECT * FROM credential")
        with pytest.raises(tabos.PermissionDenied):
            admin.sql("SELECT 1", realm="default")
    with pytest.raises(tabos.Unauthenticated):
        with node.client("tabos_0123456789abcdef_00") as bad:
            bad.status()


def test_status_shows_each_doors_limits_and_use(node, client: tabos.Client) -> None:
    doors = {d["door"]: d for d in client.status()["doors"]}
    assert set(doors) == {"api", "postgres", "dashboard"}
    grpc = doors["api"]
    assert grpc["open"] >= 1
    assert 0 < grpc["unauthenticated_max"] < grpc["connections_max"]
    assert grpc["by_realm"].get("", 0) >= 1, "this operator's connection is signed in"
    # A tenant sees its own realm's count, not the operators'.
    token = node.cli("realm", "create", "pydoors").strip().splitlines()[-1]
    with node.client(token) as tenant:
        status = tenant.status()
        seen = {d["door"]: d for d in status["doors"]}["api"]["by_realm"]
        assert seen == {"pydoors": 1}
        # What a realm holds open beyond its connections: its own only. The
        # call that signed the connection in is not counted; this one is.
        caps = {c["what"]: c for c in tenant.status()["realm_caps"]}
        assert set(caps) == {
            "API calls",
            "postgres LISTEN channels",
            "dashboard event streams",
            "dashboard sessions",
            "watches",
        }
        assert caps["API calls"]["per_realm_max"] == 2048
        assert caps["watches"]["per_realm_max"] == 64
        assert caps["watches"]["by_realm"] == {}
        assert caps["API calls"]["by_realm"] == {"pydoors": 1}
        assert caps["postgres LISTEN channels"]["by_realm"] == {}


def test_procedures_install_call_remove(client: tabos.Client) -> None:
    code = "function main(arg) { return 'hello ' + arg; }"
    info = client.procedures.install("py-hello", code)
    assert info.language == "js"
    assert client.procedures.call("py-hello", "world").result == b"hello world"
    assert "py-hello" in [p.name for p in client.procedures.list()]
    client.procedures.remove("py-hello")
    with pytest.raises(tabos.NotFound):
        client.procedures.call("py-hello", "x")
    with pytest.raises(tabos.InvalidArgument):
        client.procedures.install("py-bad", "function (", language="js")


def test_the_credentials_file_is_read_as_the_cli_does(node, tmp_path, monkeypatch) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({
        "current": "here",
        "contexts": {"here": {"addr": node.addr, "realm": "", "token": node.token}},
    }))
    monkeypatch.setenv("TABOS_CREDENTIALS", str(path))
    monkeypatch.delenv("TABOS_ADDR", raising=False)
    monkeypatch.delenv("TABOS_TOKEN", raising=False)
    with tabos.Client() as c:
        assert c.whoami()["role"] == "operator"
    with pytest.raises(tabos.NotFound):
        tabos.Client(context="elsewhere")
    monkeypatch.setenv("TABOS_CREDENTIALS", str(tmp_path / "none.json"))
    with pytest.raises(tabos.Unauthenticated):
        tabos.Client()


def test_mapreduce_through_the_tabos_binary(node, client: tabos.Client) -> None:
    import os

    os.environ.setdefault("TABOS_BIN", str(__import__("conftest").tabos_bin()))
    client.fs.mkdir("/py-mr/in", parents=True)
    client.fs.write_bytes("/py-mr/in/a.txt", b"tabos node tabos\nthe tabos\n")
    done = client.mr.run("wordcount", ["/py-mr/in"], in_fs=True, reducers=2, top=2)
    assert done["top"][0] == {"key": "tabos", "count": 3}, done
    job = done["job"]
    assert client.mr.status(job)["status"] == "done"
    assert job in [j["job"] for j in client.mr.jobs()]
    with pytest.raises(tabos.FailedPrecondition):
        client.mr.cancel(job)  # it has ended
    client.mr.remove(job)
    with pytest.raises(tabos.NotFound):
        client.mr.status(job)
    with pytest.raises(tabos.InvalidArgument):
        client.mr.run("sort", ["/x"])


def test_a_job_of_your_own_programs(node, client: tabos.Client) -> None:
    """The grep example's scripts, given by their paths, run as a user job
    over inputs in tabos fs; a program that fails fails the job, saying
    why."""
    import os
    from pathlib import Path

    os.environ.setdefault("TABOS_BIN", str(__import__("conftest").tabos_bin()))
    grep = Path(__file__).resolve().parents[3] / "examples" / "mr" / "grep"
    client.fs.mkdir("/py-mr-user/in", parents=True)
    client.fs.write_bytes("/py-mr-user/in/a.txt", b"a needle\nno\nneedle again\n")
    client.fs.write_bytes("/py-mr-user/in/b.txt", b"hay\n")
    client.fs.write_bytes("/py-mr-user/in/c.txt", b"one needle\n")
    done = client.mr.run_programs(
        ["/py-mr-user/in"],
        map=grep / "map.sh",
        reduce=grep / "sum.sh",
        combine=grep / "sum.sh",
        args=["needle"],
        in_fs=True,
        reducers=2,
    )
    lines = sorted(client.mr.output(done).decode().splitlines())
    assert lines == ["/py-mr-user/in/a.txt\t2", "/py-mr-user/in/c.txt\t1"], done
    assert client.mr.status(done["job"])["kind"] == "user"
    with pytest.raises(tabos.FailedPrecondition, match="exited with status 1"):
        client.mr.run_programs(
            ["/py-mr-user/in"], map="/bin/false", reduce=grep / "sum.sh", in_fs=True, reducers=1
        )
    with pytest.raises(tabos.InvalidArgument):
        client.mr.run_programs(["/x"], map="m", reduce="r", reducers=0)


def test_the_context_tabos_up_saves_reaches_the_node_over_its_socket(tmp_path, monkeypatch) -> None:
    """As the README's quick start has it: `tabos up` saves its operator
    credential as the current context, with the node's local socket as its
    address, and a Client with no arguments uses it."""
    import subprocess

    from conftest import tabos_bin

    creds = tmp_path / "credentials.json"
    proc = subprocess.Popen(
        [tabos_bin(), "up", "--data", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
         "--pg-listen", "none", "--http-listen", "none"],
        env=dict(os.environ, TABOS_CREDENTIALS=str(creds)),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("try:"):
                break
        saved = json.loads(creds.read_text())
        addr = saved["contexts"][saved["current"]]["addr"]
        assert addr.startswith("unix:"), saved
        monkeypatch.setenv("TABOS_CREDENTIALS", str(creds))
        for var in ("TABOS_ADDR", "TABOS_TOKEN", "TABOS_CONTEXT"):
            monkeypatch.delenv(var, raising=False)
        with tabos.Client() as c:
            assert c.addr == addr
            assert c.whoami()["role"] == "operator"
            rows = c.sql("SELECT count(*) AS n FROM schema_version")
            assert rows[0]["n"] > 20
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_backup_is_an_operators_and_restores(node, client: tabos.Client, tmp_path) -> None:
    dest = tmp_path / f"backup-{node.way}"
    b = client.backup(str(dest))
    assert b["dest"] == str(dest)
    assert b["partitions"] >= 1
    names = {f["name"] for f in b["files"]}
    assert {f"p{p}.db" for p in range(b["partitions"])} <= names
    assert (dest / "tabos-backup.json").exists()
    with pytest.raises(tabos.AlreadyExists):
        client.backup(str(dest))
    token = node.cli("realm", "create", f"pybackup{node.way}").strip().splitlines()[-1]
    with node.client(token) as tenant:
        with pytest.raises(tabos.PermissionDenied):
            tenant.backup(str(tmp_path / "theirs"))
    assert not (tmp_path / "theirs").exists()
    restored = tmp_path / f"restored-{node.way}"
    node.cli("restore", str(dest), "--data", str(restored))
    assert {p.name for p in restored.iterdir()} == names


def test_an_operator_manages_realms_and_their_provenance(node, client: tabos.Client) -> None:
    """Realms from Python as `tabos realm` has them: create, show, set
    (quotas, retention, provenance), clear, remove; a tenant sees its own
    and may change none."""
    made = client.create_realm("pyrealms", scheduler="least_loaded")
    assert made["token"].startswith("tabos_") and made["id"]
    r = client.realm("pyrealms")
    assert (r["scheduler"], r["provenance"], r["retention_s"], r["quota_procs"]) == (
        "least_loaded",
        "procs",
        None,
        None,
    )
    r = client.set_realm("pyrealms", procs=7, retention_s=3600, provenance="all")
    assert (r["quota_procs"], r["retention_s"], r["provenance"]) == (7, 3600, "all")
    assert r["quota_cores"] is None, "what is not given stays"
    shown = json.loads(node.cli("realm", "show", "pyrealms", "-o", "json"))
    assert shown["provenance"] == "all", shown
    # With "all", what the tenant's own client reads and writes is
    # recorded under its credential.
    with node.client(made["token"]) as tenant:
        tenant.fs.write_bytes("/p.txt", b"recorded")
        assert tenant.fs.read_bytes("/p.txt") == b"recorded"
        events = [
            row["event"]
            for row in tenant.sql("SELECT event FROM proc_event WHERE pid LIKE '@root/%' ORDER BY seq")
        ]
        assert "fs_write" in events and "fs_read" in events, events
        assert [x["realm"] for x in tenant.realms()] == ["pyrealms"]
        with pytest.raises(tabos.NotFound):
            tenant.realm("default")
        with pytest.raises(tabos.PermissionDenied):
            tenant.set_realm("pyrealms", procs=100)
    with pytest.raises(tabos.InvalidArgument):
        client.set_realm("pyrealms", provenance="sometimes")
    assert client.realm("pyrealms")["provenance"] == "all", "a refused setting changes nothing"
    r = client.set_realm("pyrealms", clear=["procs", "retention"], provenance="procs")
    assert (r["quota_procs"], r["retention_s"], r["provenance"]) == (None, None, "procs")
    assert client.remove_realm("pyrealms") > 0
    with pytest.raises(tabos.NotFound):
        client.realm("pyrealms")
