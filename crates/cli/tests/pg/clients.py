"""PostgreSQL clients tabos did not write, against its front door (issue 38,
item 4): SQLAlchemy's inspector and pandas through an engine, psycopg's
named (server-side) cursors and COPY. Run by crates/cli/tests/cli.rs on
both backends; prints "ok" when every check held.

Arguments: host port realm credential.
"""

import sys

import pandas as pd
import psycopg
import sqlalchemy as sa

host, port, realm, token = sys.argv[1:5]

engine = sa.create_engine(
    sa.engine.URL.create(
        "postgresql+psycopg",
        username=realm,
        password=token,
        host=host,
        port=int(port),
        database="tabos",
    ),
    connect_args={"connect_timeout": 10},
)

# The inspector: relations, their columns (types, NOT NULL, no internal
# p_key) and primary keys.
insp = sa.inspect(engine)
tables, views = insp.get_table_names(), insp.get_view_names()
assert "proc" in tables and "credential" not in tables, tables
assert "ps" in views, views
columns = {c["name"]: c for c in insp.get_columns("proc")}
assert {"pid", "state", "exit_status", "realm"} <= columns.keys(), columns.keys()
assert "p_key" not in columns, "an internal column is shown"
assert columns["pid"]["nullable"] is False, columns["pid"]
assert columns["exit_status"]["nullable"] is True, columns["exit_status"]
assert isinstance(columns["exit_status"]["type"], sa.BigInteger), columns["exit_status"]
assert isinstance(columns["pid"]["type"], sa.Text), columns["pid"]
pk = insp.get_pk_constraint("proc")
assert pk["constrained_columns"] == ["realm", "pid"], pk
assert pk["name"] == "proc_pkey", pk
ps = {c["name"]: c for c in insp.get_columns("ps")}
assert {"pid", "state", "spawned_at", "exited_at"} <= ps.keys(), ps.keys()
assert isinstance(ps["spawned_at"]["type"], sa.TIMESTAMP), ps["spawned_at"]
assert ps["spawned_at"]["type"].timezone, ps["spawned_at"]

# pandas through the engine.
with engine.connect() as conn:
    df = pd.read_sql(sa.text("SELECT pid, state, exit_status FROM proc ORDER BY pid"), conn)
assert list(df.columns) == ["pid", "state", "exit_status"], df.columns
assert df["pid"].tolist() == ["a1"], df
assert df["exit_status"].tolist() == [0], df
with engine.connect() as conn:
    recent = pd.read_sql(
        sa.text("SELECT count(*) AS n FROM ps WHERE exited_at > now() - interval '1 hour'"), conn
    )
assert recent["n"].tolist() == [1], recent

c = psycopg.connect(
    host=host, port=port, user=realm, password=token, dbname="tabos", connect_timeout=10
)

# Times come as timestamptz, in text and in binary.
import datetime

for binary in (False, True):
    with c.cursor(binary=binary) as cur:
        spawned, exited = cur.execute(
            "SELECT spawned_at, exited_at FROM ps WHERE pid = 'a1'"
        ).fetchone()
        assert isinstance(spawned, datetime.datetime), (binary, spawned)
        assert spawned.utcoffset() == datetime.timedelta(0), (binary, spawned)
        assert spawned <= exited, (binary, spawned, exited)
        assert cur.description[0].type_code == 1184, cur.description
c.rollback()

# Grafana's PostgreSQL data source, its SQL replayed as it sends it: the
# table picker, the column picker, and a time-series panel whose
# $__timeFilter and $__timeGroup macros Grafana has expanded.
SEARCH_PATH = """(
  SELECT
    CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
  FROM
    generate_series(
      array_lower(string_to_array(current_setting('search_path'),','),1),
      array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
  )"""
GRAFANA_TABLES = f"""SELECT
    CASE WHEN
          quote_ident(table_schema) IN {SEARCH_PATH}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache')
    ORDER BY CASE WHEN
          quote_ident(table_schema) IN {SEARCH_PATH} THEN 0 ELSE 1 END, 1"""
GRAFANA_COLUMNS = f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('ps'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('ps'))[1]
          AND quote_ident(table_name) = (parse_ident('ps'))[2]
        ELSE quote_ident(table_name) = 'ps'
          AND
          quote_ident(table_schema) IN {SEARCH_PATH}
      END"""
with psycopg.connect(
    host=host, port=port, user=realm, password=token, dbname="tabos", connect_timeout=10,
    autocommit=True,
) as g:
    picked = [r[0] for r in g.execute(GRAFANA_TABLES)]
    assert "proc" in picked and "ps" in picked and "credential" not in picked, picked
    picked = dict(g.execute(GRAFANA_COLUMNS).fetchall())
    assert picked.get("pid") == "text", picked
    assert picked.get("spawned_at") == "timestamp with time zone", picked
    panel = g.execute(
        "SELECT floor(extract(epoch from spawned_at)/60)*60 AS \"time\", count(*) AS spawns "
        "FROM ps WHERE spawned_at BETWEEN '2020-01-01T00:00:00Z' AND '2100-01-01T00:00:00Z' "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert len(panel) == 1 and panel[0][1] == 1, panel

# A named cursor: DECLARE, FETCH in batches, CLOSE — inside a transaction.
with c.transaction():
    with c.cursor(name="procs") as cur:
        cur.itersize = 1
        cur.execute(
            "SELECT pid, exit_status, exit_status = 0 AS ok FROM proc WHERE pid LIKE %s",
            ("a%",),
        )
        assert [d.name for d in cur.description] == ["pid", "exit_status", "ok"], cur.description
        assert cur.fetchone() == ("a1", 0, True)
        assert cur.fetchone() is None
    # Closed with its cursor object; a FETCH from it now is an error.
    try:
        with c.transaction():
            c.execute("FETCH 1 FROM procs")
        sys.exit("a closed cursor was fetched")
    except psycopg.Error as e:
        assert e.sqlstate == "34000", (e.sqlstate, str(e))
# The same through plain SQL, and MOVE.
with c.transaction():
    c.execute("DECLARE n NO SCROLL CURSOR FOR SELECT x FROM generate_series(1, 5) AS g(x)")
    assert c.execute("MOVE 2 FROM n").rowcount == 2
    assert c.execute("FETCH FORWARD 2 FROM n").fetchall() == [(3,), (4,)]
    assert c.execute("FETCH ALL FROM n").fetchall() == [(5,)]
    assert c.execute("FETCH NEXT FROM n").fetchall() == []
    try:
        with c.transaction():
            c.execute("FETCH PRIOR FROM n")
        sys.exit("a backward fetch was accepted")
    except psycopg.Error as e:
        assert e.sqlstate == "55000", (e.sqlstate, str(e))
# The transaction's end closed it.
try:
    with c.transaction():
        c.execute("FETCH 1 FROM n")
    sys.exit("a cursor outlived its transaction")
except psycopg.Error as e:
    assert e.sqlstate == "34000", (e.sqlstate, str(e))

# COPY (query) TO STDOUT, CSV with a header and text, and what it refuses.
c.autocommit = True
with c.cursor() as cur:
    with cur.copy(
        "COPY (SELECT pid, state, exit_status, exit_status = 0 AS ok, NULL AS none, "
        "'a,b' AS comma FROM proc ORDER BY pid) TO STDOUT WITH (FORMAT csv, HEADER)"
    ) as copy:
        csv = b"".join(bytes(b) for b in copy).decode()
    assert csv == 'pid,state,exit_status,ok,none,comma\na1,exited,0,t,,"a,b"\n', repr(csv)
    with cur.copy(
        "COPY (SELECT pid, 'back\\slash' AS b, NULL AS n FROM proc) TO STDOUT"
    ) as copy:
        rows = list(copy.rows())
    assert rows == [("a1", "back\\slash", None)], rows
    with cur.copy("COPY proc (pid, state) TO STDOUT") as copy:
        rows = list(copy.rows())
    assert rows == [("a1", "exited")], rows
    for bad, code in [
        ("COPY proc FROM STDIN", "25006"),
        ("COPY proc TO '/tmp/tabos-copy-escape'", "42501"),
        ("COPY (SELECT * FROM credential) TO STDOUT", "42501"),
    ]:
        try:
            with cur.copy(bad) as copy:
                for _ in copy:
                    pass
            sys.exit(f"{bad} was accepted")
        except psycopg.Error as e:
            assert e.sqlstate == code, (bad, e.sqlstate, str(e))

# CancelRequest: the connection's key (BackendKeyData) stops its running
# statement; the connection carries on. The canceller repeats until the
# statement ends, since a request that comes while it is not yet running
# is (as in PostgreSQL) for nothing.
import threading

k = psycopg.connect(
    host=host, port=port, user=realm, password=token, dbname="tabos", connect_timeout=10,
    autocommit=True,
)
assert k.info.backend_pid > 0, k.info.backend_pid
done = threading.Event()


def keep_cancelling():
    while not done.wait(0.2):
        k.cancel_safe()


canceller = threading.Thread(target=keep_cancelling)
canceller.start()
try:
    k.execute(
        "SELECT count(*) FROM generate_series(1, 10000000) AS a(x), "
        "generate_series(1, 10000000) AS b(y)"
    )
    sys.exit("an endless statement was not cancelled")
except psycopg.errors.QueryCanceled as e:
    assert "user request" in str(e), str(e)
finally:
    done.set()
    canceller.join()
assert k.execute("SELECT 1").fetchone() == (1,)
print("ok")
