"""Drives the dashboard in headless Chromium over the DevTools protocol.

Run by the CLI test `the_dashboard_shows_a_spawned_proc_live` with the
node already up:

    drive.py URL TOKEN TABOS SCREENSHOT JOB

It signs in with TOKEN, opens the procs page, spawns a proc with the
`tabos` binary TABOS (its environment names the node), waits for that
proc's row to appear on the page without a reload, checks the other pages
load and that MapReduce job JOB (done) shows its phases and tasks, checks
the overview (the failures count and list, red; every plot's labelled
axes, gridlines, time ticks, size and hover), and saves screenshots to
SCREENSHOT and SCREENSHOT with -overview (and -graph) before .png. Every wait is bounded, and is
woken by the page (a MutationObserver), not by asking again and again.
Exits non-zero, saying why, on any failure.
"""

import base64
import json
import re
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket  # websocket-client

WAIT_S = 30


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium on PATH (Debian's chromium package)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """One tab, over its DevTools websocket."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=WAIT_S)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression):
        """The value of `expression` (awaited when it is a promise)."""
        r = self.call(
            "Runtime.evaluate",
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=WAIT_S * 1000,
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}…: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def wait_for(self, js_condition, what):
        """Waits until `js_condition` holds, woken by changes to the page."""
        ok = self.eval(
            f"""new Promise((resolve) => {{
              const check = () => {{ try {{ return !!({js_condition}); }} catch (e) {{ return false; }} }};
              if (check()) return resolve(true);
              const obs = new MutationObserver(() => {{ if (check()) {{ obs.disconnect(); resolve(true); }} }});
              obs.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});
              setTimeout(() => {{ obs.disconnect(); resolve(check()); }}, {WAIT_S * 1000});
            }})"""
        )
        if not ok:
            text = self.eval("document.body.innerText")
            sys.exit(f"timed out waiting for {what}; the page says:\n{text[:2000]}")


def main():
    url, token, tabos, screenshot, job = sys.argv[1:6]
    port = free_port()
    profile = tempfile.mkdtemp(prefix="tabos-chromium-")
    browser = subprocess.Popen(
        [
            chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            "--window-size=1400,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run(url, token, tabos, screenshot, job, port)
    finally:
        browser.kill()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


def devtools_targets(port):
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                return json.load(r)
        except OSError:
            # Chromium is starting: its DevTools port is not open yet.
            if time.monotonic() > deadline:
                sys.exit("chromium's DevTools port never opened")
            time.sleep(0.1)


def run(url, token, tabos, screenshot, job, port):
    pages = [t for t in devtools_targets(port) if t.get("type") == "page"]
    if not pages:
        sys.exit("chromium has no page")
    page = Page(pages[0]["webSocketDebuggerUrl"])
    page.call("Page.enable")
    page.call("Runtime.enable")
    page.call("Page.navigate", url=url)
    page.wait_for("document.querySelector('#sign-in') && !document.querySelector('#sign-in').hidden", "the sign-in form")

    # A wrong credential is refused, on the page.
    page.eval("document.querySelector('#token').value = 'tabos_not_a_credential'; document.querySelector('#sign-in-button').click(); true")
    page.wait_for("document.querySelector('#sign-in-error').textContent.length > 0", "the sign-in refusal")

    page.eval(f"document.querySelector('#token').value = {json.dumps(token)}; document.querySelector('#sign-in-button').click(); true")
    page.wait_for("!document.querySelector('#nav').hidden", "the signed-in page")
    # The overview: nodes, realms and the plots.
    page.wait_for("document.body.innerText.includes('Node CPU')", "the overview's plots")
    page.wait_for("document.querySelectorAll('#page table').length >= 2", "the nodes and realms tables")

    page.eval("location.hash = '#procs'; true")
    page.wait_for("document.querySelector('#procs') && document.querySelector('#live').classList.contains('on')", "the procs page, live")
    # Marks this page load: a reload would lose it.
    page.eval("window.__tabosLoad = 'the same load'; true")

    out = subprocess.run(
        [tabos, "spawn", "--", "/bin/sleep", "0.5"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    if out.returncode != 0:
        sys.exit(f"tabos spawn failed: {out.stderr}")
    pid = out.stdout.split()[0]
    page.wait_for(f"document.querySelector('#procs tr[data-key=\"{pid}\"]')", f"proc {pid} on the page")
    page.wait_for(
        f"document.querySelector('#procs tr[data-key=\"{pid}\"]').innerText.includes('exited')",
        f"proc {pid} shown as exited",
    )
    page.wait_for(f"document.querySelector('#timeline') && document.querySelector('#timeline').textContent.includes('{pid}')", "the proc on the timeline")
    # A proc that exited with status 3 is shown as a failure, with its
    # status, not in the colour of success with an empty reason.
    out = subprocess.run(
        [tabos, "spawn", "--", "/bin/sh", "-c", "exit 3"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    if out.returncode != 0:
        sys.exit(f"tabos spawn failed: {out.stderr}")
    bad = out.stdout.split()[0]
    page.wait_for(
        f"document.querySelector('#procs tr[data-key=\"{bad}\"]') && document.querySelector('#procs tr[data-key=\"{bad}\"]').innerText.includes('exited 3')",
        f"proc {bad} shown as exited 3",
    )
    page.wait_for(
        f"document.querySelector('#procs tr[data-key=\"{bad}\"] .state-failed') !== null && document.querySelector('#procs tr[data-key=\"{bad}\"]').innerText.includes('exit status 3')",
        f"proc {bad} shown as a failure with its reason",
    )
    # A proc's detail shows its output, live: a line written after the
    # detail is open appears without a reload.
    out = subprocess.run(
        [tabos, "spawn", "--", "/bin/sh", "-c", "echo first line; echo to stderr >&2; sleep 4; echo second line; sleep 120"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    if out.returncode != 0:
        sys.exit(f"tabos spawn failed: {out.stderr}")
    talker = out.stdout.split()[0]
    page.wait_for(f"document.querySelector('#procs tr[data-key=\"{talker}\"]')", f"proc {talker} on the page")
    page.eval(f"document.querySelector('#procs tr[data-key=\"{talker}\"]').click(); true")
    page.wait_for(
        "document.querySelector('pre.log-stdout') && document.querySelector('pre.log-stdout').textContent.includes('first line')",
        f"proc {talker}'s stdout in its detail",
    )
    page.wait_for(
        "document.querySelector('pre.log-stderr').textContent.includes('to stderr')",
        f"proc {talker}'s stderr in its detail",
    )
    page.wait_for(
        "document.querySelector('pre.log-stdout').textContent.includes('second line')",
        f"proc {talker}'s later output, live",
    )
    # A path's breadcrumb reads as a path.
    crumb = page.eval("crumbs('/a/b', () => {}).textContent")
    if crumb != "/a / b":
        sys.exit(f"the breadcrumb of /a/b reads {crumb!r}")
    if page.eval("window.__tabosLoad") != "the same load":
        sys.exit("the page was reloaded: the proc must appear without a reload")

    shot = page.call("Page.captureScreenshot", format="png")
    import base64
    with open(screenshot, "wb") as f:
        f.write(base64.b64decode(shot["data"]))

    # The other pages load and show their data.
    page.eval("location.hash = '#sql'; true")
    page.wait_for("document.querySelector('#sql-run')", "the SQL console")
    page.eval(f"document.querySelector('#sql-text').value = \"SELECT pid, state FROM proc WHERE pid = '{pid}'\"; document.querySelector('#sql-run').click(); true")
    page.wait_for(f"document.querySelector('#sql-out').innerText.includes('{pid}')", "the SQL console's answer")
    page.eval("document.querySelector('#sql-text').value = 'DELETE FROM proc'; document.querySelector('#sql-run').click(); true")
    page.wait_for("document.querySelector('#sql-out .error')", "the SQL console's refusal of a write")
    for view, marker in (
        ("mailboxes", "Mailboxes"),
        ("names", "Namespace"),
        ("files", "Files"),
        ("mr", "MapReduce jobs"),
        ("workflows", "Workflows"),
        ("graphs", "Task graphs"),
        ("overview", "Failures"),
    ):
        page.eval(f"location.hash = '#{view}'; true")
        page.wait_for(
            f"document.body.dataset.view === '{view}' && document.body.dataset.loaded !== ''",
            f"the {view} page to load",
        )
        if page.eval("document.body.dataset.loaded") != "ok" or page.eval("!!document.querySelector('#page .error')"):
            sys.exit(f"the {view} page failed: {page.eval('document.body.innerText')[:2000]}")
        page.wait_for(f"document.querySelector('#page h2').textContent.startsWith('{marker}')", f"the {view} page's heading")
    # A task graph: its row, then, picked, its tasks drawn (a box per
    # task, a line per edge) in the colours of their states.
    add = os.path.join(tempfile.mkdtemp(), "add.js")
    with open(add, "w") as f:
        f.write("function main(a) { return String(JSON.parse(a).reduce((x, y) => x + y, 0)); }")
    subprocess.run([tabos, "procedure", "install", "dash-add", add], check=True, capture_output=True, timeout=WAIT_S)
    spec = {"tasks": [{"id": "a", "procedure": "dash-add", "args": [1]},
                      {"id": "b", "procedure": "dash-add", "args": [2]},
                      {"id": "c", "procedure": "dash-add", "args": [{"$task": "a"}, {"$task": "b"}]}]}
    done = subprocess.run([tabos, "graph", "submit", "-", "--id", "dash-graph", "--wait"], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=WAIT_S)
    if done.stdout.strip() != "3":
        sys.exit(f"the graph gave {done.stdout!r} {done.stderr!r}")
    page.eval("location.hash = '#graphs'; true")
    page.wait_for("document.querySelector('#page tr[data-key=\"dash-graph\"]')", "the graph's row")
    page.eval("document.querySelector('#page tr[data-key=\"dash-graph\"]').click(); true")
    page.wait_for(
        "document.querySelectorAll('#dag rect.tl-exited').length === 3 && document.querySelectorAll('#dag line').length === 2",
        "the graph drawn: 3 tasks ended, 2 edges",
    )
    shot = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    with open(screenshot.replace(".png", "-graph.png"), "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    # The job: its row, then (the only job, so chosen) its phases and tasks.
    page.eval("location.hash = '#mr'; true")
    page.wait_for(f"document.querySelector('#page tr[data-key=\"{job}\"]')", f"job {job}'s row")
    page.wait_for(
        f"document.body.innerText.includes('Job {job}') && document.body.innerText.includes('4 of 4')",
        f"job {job}'s phases",
    )
    page.wait_for("document.body.innerText.includes('m0')", f"job {job}'s map task")
    # A job still marked running whose coordinator has ended is run by
    # nobody: shown failed, with the coordinator's end, not "running".
    dead = "jdeadcoord"
    for args in (
        ["put", "-p", f"/mr/{dead}/job", '{"kind":"wordcount","maps":2,"reducers":1}'],
        ["put", f"/mr/{dead}/status", "running"],
        ["spawn", "--pid", f"{dead}-coord-0", "--wait", "--", "/bin/sh", "-c", "exit 2"],
    ):
        subprocess.run([tabos, *args], capture_output=True, text=True, timeout=WAIT_S)
    page.wait_for(
        f"document.querySelector('#page tr[data-key=\"{dead}\"]') && "
        f"document.querySelector('#page tr[data-key=\"{dead}\"] .state-failed') !== null && "
        f"document.querySelector('#page tr[data-key=\"{dead}\"]').innerText.includes('coordinator {dead}-coord-0 ended (exit status 2)')",
        f"job {dead}, whose coordinator died, shown failed",
    )
    overview(page, bad)
    shot = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    with open(screenshot.replace(".png", "-overview.png"), "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(json.dumps({"pid": pid, "job": job, "screenshot": screenshot}))


def overview(page, bad):
    """The overview answers what is failing and why, and its plots read."""
    page.eval("location.hash = '#overview'; true")
    page.wait_for("document.body.dataset.view === 'overview' && document.body.dataset.loaded === 'ok'", "the overview")
    # The failures count (the exit 3 and the dead coordinator's exit 2 at
    # least), red, and the failed proc with its exit status and reason.
    page.wait_for("document.querySelector('#fail-count.bad') && Number(document.querySelector('#fail-count strong').textContent) >= 2", "the failures count, red")
    page.wait_for(
        f"document.querySelector('#failures tr[data-key=\"{bad}\"]') && "
        f"document.querySelector('#failures tr[data-key=\"{bad}\"] .state-failed') !== null && "
        f"document.querySelector('#failures tr[data-key=\"{bad}\"]').innerText.includes('exit status 3')",
        f"proc {bad} among the failures with its status",
    )
    # The failures over time: a point of at least one failure in a minute.
    page.wait_for(
        "state.samples.some((s) => s.realms.some((r) => r.failed > 0)) && "
        "document.querySelector('#plot-failures polyline') !== null",
        "the failures-over-time plot with a failure in it",
    )
    # Every plot: labelled axes, gridlines, readable ticks, large enough.
    # A node without a block store (the default on PostgreSQL) has no disk
    # plot, and the page says why instead.
    # An embedded node has one by default: there the plot must come.
    blocks = page.eval("document.querySelector('#who').textContent.includes('sqlite')")
    if not blocks:
        page.wait_for("document.querySelector('#plot-node-disk .none')", "why there is no block store plot")
    for plot in ("cpu", "node-memory", "node-disk", "realm-cores", "realm-procs", "realm-memory", "realm-storage", "failures"):
        if plot == "node-disk" and not blocks:
            continue
        sel = f"#plot-{plot} svg.plot"
        page.wait_for(f"document.querySelector('{sel}') && document.querySelector('{sel} polyline') && document.querySelector('{sel} polyline').getAttribute('points').length > 0", f"the {plot} plot with data")
        check = page.eval(f"""(() => {{
          const svg = document.querySelector('{sel}');
          const ys = [...svg.querySelectorAll('.y-tick')].map((t) => t.textContent);
          const xs = [...svg.querySelectorAll('.x-tick')].map((t) => t.textContent);
          return JSON.stringify({{
            grid: svg.querySelectorAll('.grid').length, ys, xs,
            ylabel: svg.querySelector('.y-label').textContent,
            xlabel: svg.querySelector('.x-label').textContent,
            width: svg.getBoundingClientRect().width,
          }});
        }})()""")
        c = json.loads(check)
        if c["grid"] < 3 or len(c["ys"]) < 2 or not all(c["ys"]):
            sys.exit(f"the {plot} plot lacks gridlines or y ticks: {c}")
        if not c["xs"] or not all(re.fullmatch(r"\d\d:\d\d:\d\d", x) for x in c["xs"]):
            sys.exit(f"the {plot} plot's time ticks do not read as times: {c}")
        if not c["ylabel"] or c["xlabel"] != "time (local)":
            sys.exit(f"the {plot} plot's axes are not labelled: {c}")
        if c["width"] < 400:
            sys.exit(f"the {plot} plot is too small to read: {c}")
    # Memory is plotted in bytes: its ticks say so.
    ticks = page.eval("[...document.querySelectorAll('#plot-node-memory .y-tick')].map((t) => t.textContent).join(' ')")
    if "iB" not in ticks:
        sys.exit(f"the memory plot's ticks have no unit: {ticks}")
    # Hover: the values at the pointer's time.
    tip = page.eval("""(() => {
      const area = document.querySelector('#plot-cpu .hover-area');
      const r = area.getBoundingClientRect();
      area.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + r.width * 0.9, clientY: r.top + r.height / 2, bubbles: true }));
      const g = document.querySelector('#plot-cpu .hover-tip');
      return g.getAttribute('visibility') + '|' + g.textContent;
    })()""")
    if not tip.startswith("visible|") or "cores" not in tip:
        sys.exit(f"hovering the CPU plot shows no value: {tip!r}")


if __name__ == "__main__":
    main()
