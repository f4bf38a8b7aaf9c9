//! User jobs: map, combine and reduce as programs of the job's uploaded
//! code that speak records on stdin and stdout — Hadoop Streaming's
//! protocol, in bytes. A mapper or reducer proc runs the user's program
//! as a filter between reading its input and writing its output; the
//! coordinator, the retries, the reruns and the announcements are the
//! built-in jobs' ([`crate::procs`]).
//!
//! The record protocol (README.md, "MapReduce with your own code"):
//!
//! * A record is one line: its key up to the first tab, its value after
//!   it (a line without a tab is a key with an empty value). Bytes need
//!   not be UTF-8; a key holds no tab, neither holds a newline.
//! * A **map** program reads one record per input line — key: the input
//!   file's path, value: the line without its newline — and prints any
//!   number of records.
//! * Each record goes to reducer `fnv1a(key) mod reducers`. A **reduce**
//!   program reads its records sorted by key, and within a key by value,
//!   and prints its output: what it prints is its part file, as it is.
//! * A **combine** program, if the job has one, runs over each map task's
//!   records for one reducer, sorted the same way, and prints the records
//!   that replace them (a word count's partial sums).
//! * A program succeeds by ending with status 0. Any other status, a
//!   signal, a trap, printing more than [`OUTPUT_BYTES_MAX`] or a line
//!   longer than [`RECORD_BYTES_MAX`], or running past the job's time
//!   limit fails the task with that message and its last line on stderr;
//!   the coordinator runs the task again (at most
//!   [`ATTEMPTS_MAX`](crate::spec::ATTEMPTS_MAX) attempts).
//!
//! A program is a file of the job's uploaded code, which the task's proc
//! has read-only as its working directory (in its jail at `/code`): a
//! native program runs as a child process of the task (same jail, same
//! cgroup, its own process group, killed whole at the time limit); a wasm
//! module — a WASI command, `wasm32-wasip1` — runs in the task's sandbox
//! with the code as its preopened directory and nothing else.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::split::{read_lines, read_lines_in, Split};
use crate::{Error, Result};

/// Most bytes one run of a program may print on stdout: what a task holds
/// in memory before it sorts and writes.
pub const OUTPUT_BYTES_MAX: usize = 1 << 30;
/// Longest record (line) a program may print.
pub const RECORD_BYTES_MAX: usize = 16 << 20;
/// Longest path of a program in its code.
pub const PROGRAM_PATH_BYTES_MAX: usize = 1024;
/// Most arguments given to the programs, and the bytes of each.
pub const ARGS_MAX: usize = 64;
pub const ARG_BYTES_MAX: usize = 4096;
/// A program's time limit per run when the job names none, and the most
/// a job may give.
pub const TIME_LIMIT_DEFAULT: Duration = Duration::from_secs(600);
pub const TIME_LIMIT_MAX: Duration = Duration::from_secs(24 * 3600);
/// Bytes of a program's last stderr line kept for the task's failure.
const SAID_BYTES_MAX: usize = 1024;

/// How a program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgramKind {
    /// An executable (binary or `#!` script) run as a child process.
    Native,
    /// A WASI command module run in the sandbox.
    Wasm,
}

impl ProgramKind {
    /// What a file's first bytes say it is: the wasm magic, or native.
    pub fn of(head: &[u8]) -> ProgramKind {
        if head.starts_with(b"\0asm") {
            ProgramKind::Wasm
        } else {
            ProgramKind::Native
        }
    }
}

/// A program of the job's code: its path in the uploaded tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    pub path: String,
    pub kind: ProgramKind,
}

impl Program {
    /// Checks that the path stays inside the code: relative, no `..`.
    pub fn validate(&self) -> Result<()> {
        let p = Path::new(&self.path);
        let inside = !self.path.is_empty()
            && self.path.len() <= PROGRAM_PATH_BYTES_MAX
            && p.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
            && p.components().any(|c| matches!(c, Component::Normal(_)));
        if inside {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "a program is a relative path inside the job's code, without `..` \
                 (at most {PROGRAM_PATH_BYTES_MAX} bytes), not {:?}",
                self.path
            )))
        }
    }
}

/// The user's side of a job: its code and its programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserJob {
    /// The content hash of the uploaded tree the programs are files of
    /// (`tabos_client::code`): the tasks are spawned with it.
    pub code: String,
    pub map: Program,
    pub reduce: Program,
    #[serde(default)]
    pub combine: Option<Program>,
    /// Arguments every program is given (after its own name).
    #[serde(default)]
    pub args: Vec<String>,
    /// How long one run of a program may take.
    pub time_limit_ms: u64,
}

impl UserJob {
    pub fn validate(&self) -> Result<()> {
        let hex = self.code.len() == 64
            && self
                .code
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex {
            return Err(Error::Invalid(format!(
                "a job's code is a SHA-256 in hex, not {:?}",
                self.code
            )));
        }
        self.map.validate()?;
        self.reduce.validate()?;
        if let Some(c) = &self.combine {
            c.validate()?;
        }
        if self.args.len() > ARGS_MAX || self.args.iter().any(|a| a.len() > ARG_BYTES_MAX) {
            return Err(Error::Invalid(format!(
                "at most {ARGS_MAX} arguments of at most {ARG_BYTES_MAX} bytes each"
            )));
        }
        if self.time_limit_ms == 0 || self.time_limit_ms > TIME_LIMIT_MAX.as_millis() as u64 {
            return Err(Error::Invalid(format!(
                "a time limit is 1 ms..={} s",
                TIME_LIMIT_MAX.as_secs()
            )));
        }
        Ok(())
    }

    pub fn time_limit(&self) -> Duration {
        Duration::from_millis(self.time_limit_ms)
    }
}

/// A key and its value.
pub type Record = (Vec<u8>, Vec<u8>);

/// Appends `key<TAB>value<NL>`.
pub fn put_record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    debug_assert!(!key.contains(&b'\t') && !key.contains(&b'\n') && !value.contains(&b'\n'));
    out.extend_from_slice(key);
    out.push(b'\t');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// The records a program printed: one per line (a last line without its
/// newline counts).
pub fn parse_records(out: &[u8]) -> Result<Vec<Record>> {
    let body = out.strip_suffix(b"\n").unwrap_or(out);
    if body.is_empty() && out.len() <= 1 {
        return Ok(if out.is_empty() {
            Vec::new()
        } else {
            vec![(Vec::new(), Vec::new())]
        });
    }
    body.split(|&b| b == b'\n')
        .map(|line| {
            if line.len() > RECORD_BYTES_MAX {
                return Err(Error::Program(format!(
                    "a record of {} bytes is longer than {RECORD_BYTES_MAX}",
                    line.len()
                )));
            }
            Ok(match line.iter().position(|&b| b == b'\t') {
                Some(t) => (line[..t].to_vec(), line[t + 1..].to_vec()),
                None => (line.to_vec(), Vec::new()),
            })
        })
        .collect()
}

/// Records as a program's input: sorted by key, then value.
pub fn to_stream(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (k, v) in records {
        put_record(&mut out, k, v);
    }
    out
}

/// An intermediate run: records as `u32` little-endian lengths and bytes,
/// key then value, sorted.
pub fn encode_run(records: &[Record]) -> Vec<u8> {
    debug_assert!(records.windows(2).all(|w| w[0] <= w[1]));
    let mut out = Vec::with_capacity(records.iter().map(|(k, v)| k.len() + v.len() + 8).sum());
    for (k, v) in records {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// The records of an [`encode_run`] run, borrowed, in order; `Err` where
/// it is cut short.
fn run_records(mut bytes: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8])>> {
    fn take<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8]> {
        let bad = || Error::Corrupt("a user job's run is cut short".into());
        let len = bytes.get(..4).ok_or_else(bad)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let field = bytes.get(4..4 + len).ok_or_else(bad)?;
        *bytes = &bytes[4 + len..];
        Ok(field)
    }
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let record = take(&mut bytes).and_then(|k| Ok((k, take(&mut bytes)?)));
        if record.is_err() {
            bytes = &[];
        }
        Some(record)
    })
}

/// Checks a run: whole and sorted; its number of records.
pub fn check_run(bytes: &[u8]) -> Result<usize> {
    let mut last: Option<(&[u8], &[u8])> = None;
    let mut n = 0;
    for r in run_records(bytes) {
        let r = r?;
        if last.is_some_and(|l| l > r) {
            return Err(Error::Corrupt("a user job's run is not sorted".into()));
        }
        last = Some(r);
        n += 1;
    }
    Ok(n)
}

/// [`encode_run`]'s records back, checked: whole and sorted.
pub fn decode_run(bytes: &[u8]) -> Result<Vec<Record>> {
    check_run(bytes)?;
    run_records(bytes)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

/// Checked runs merged in order (key, then value) into a program's input:
/// a k-way merge over the runs' bytes, no record copied but into the
/// output.
pub fn merge_runs(runs: &[&[u8]]) -> Result<Vec<u8>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    for r in runs {
        check_run(r)?;
    }
    let mut iters: Vec<_> = runs.iter().map(|r| run_records(r)).collect();
    let mut heap = BinaryHeap::with_capacity(iters.len());
    for (i, it) in iters.iter_mut().enumerate() {
        if let Some(r) = it.next() {
            let (k, v) = r?;
            heap.push(Reverse((k, v, i)));
        }
    }
    let mut out = Vec::with_capacity(runs.iter().map(|r| r.len()).sum());
    while let Some(Reverse((k, v, i))) = heap.pop() {
        put_record(&mut out, k, v);
        if let Some(r) = iters[i].next() {
            let (k, v) = r?;
            heap.push(Reverse((k, v, i)));
        }
    }
    Ok(out)
}

/// An input file's path is the key of its lines' records: no tab, no
/// newline.
pub fn check_input_path(path: &Path) -> Result<()> {
    let key = path.as_os_str().as_encoded_bytes();
    if key.contains(&b'\t') || key.contains(&b'\n') {
        return Err(Error::Invalid(format!(
            "input {} has a tab or newline in its path: it cannot be a record's key",
            path.display()
        )));
    }
    Ok(())
}

/// A map task's input as records: per line it owns of each split, the
/// split's file and the line. `fetched` are the splits' bytes when the
/// inputs are in tabos fs; otherwise the splits are read from the files.
pub fn map_input(splits: &[Split], fetched: Option<&[Vec<u8>]>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, split) in splits.iter().enumerate() {
        // Checked at submission too; here again for a spec changed since.
        check_input_path(&split.path)?;
        let key = split.path.as_os_str().as_encoded_bytes();
        let mut at_start = true;
        let mut line = |piece: &[u8], ends: bool| {
            if at_start {
                out.extend_from_slice(key);
                out.push(b'\t');
            }
            out.extend_from_slice(piece);
            if ends {
                out.push(b'\n');
            }
            at_start = ends;
        };
        match fetched {
            Some(f) => read_lines_in(&f[i], split, &mut line)?,
            None => read_lines(split, &mut line)?,
        }
    }
    Ok(out)
}

/// Runs a user's programs for one task, in the task's working directory
/// (its code).
pub struct Runner {
    dir: PathBuf,
    args: Vec<String>,
    limit: Duration,
    sandbox: Option<tabos_sandbox::Sandbox>,
}

impl Runner {
    pub fn new(dir: PathBuf, job: &UserJob) -> Runner {
        Runner {
            dir,
            args: job.args.clone(),
            limit: job.time_limit(),
            sandbox: None,
        }
    }

    /// Runs `p` (as `role`: map, combine, reduce) with `input` on its
    /// stdin; what it printed on stdout.
    pub fn run(&mut self, role: &str, p: &Program, input: Vec<u8>) -> Result<Vec<u8>> {
        p.validate()?;
        let what = format!("{role} program {}", p.path);
        let ran = match p.kind {
            ProgramKind::Native => self.native(p, input),
            ProgramKind::Wasm => self.wasm(p, input),
        };
        ran.map_err(|why| Error::Program(format!("{what} {why}")))
    }

    fn native(&self, p: &Program, input: Vec<u8>) -> Result<Vec<u8>, String> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let mut child = Command::new(self.dir.join(&p.path))
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: the time limit kills whatever it started.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start: {e}"))?;
        let group = child.id() as libc::pid_t;
        let kill_group = move || {
            // SAFETY: kill(2) with a negative pid signals that process
            // group; it touches no memory of ours.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        };
        let mut stdin = child.stdin.take().expect("piped");
        // A program need not read all its input (EPIPE is its choice).
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let stderr = child.stderr.take().expect("piped");
        let said = Said::default();
        let tee = {
            let mut said = said.clone();
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut { stderr }, &mut said);
            })
        };
        let (done, hear) = mpsc::channel::<()>();
        let limit = self.limit;
        let watchdog = std::thread::spawn(move || {
            let late = matches!(
                hear.recv_timeout(limit),
                Err(mpsc::RecvTimeoutError::Timeout)
            );
            if late {
                kill_group();
            }
            late
        });
        let mut stdout = child.stdout.take().expect("piped");
        let mut out = Vec::new();
        let read = (&mut stdout)
            .take(OUTPUT_BYTES_MAX as u64 + 1)
            .read_to_end(&mut out);
        let too_much = out.len() > OUTPUT_BYTES_MAX;
        if too_much || read.is_err() {
            kill_group();
        }
        drop(stdout);
        let status = child
            .wait()
            .map_err(|e| format!("cannot be waited for: {e}"))?;
        drop(done);
        // A run that succeeded as its time ran out succeeded.
        let late = watchdog.join().unwrap_or(false) && !status.success();
        // Nothing it started outlives it (what is left of its group keeps
        // the group's id from being reused until this).
        kill_group();
        let _ = writer.join();
        let _ = tee.join();
        let said = said.last_line();
        let why = if late {
            Some(format!("ran past its time limit of {:?}", self.limit))
        } else if too_much {
            Some(format!("printed more than {OUTPUT_BYTES_MAX} bytes"))
        } else if let Err(e) = read {
            Some(format!("could not be read: {e}"))
        } else if !status.success() {
            use std::os::unix::process::ExitStatusExt;
            Some(match (status.code(), status.signal()) {
                (Some(n), _) => format!("exited with status {n}"),
                (None, Some(s)) => format!("was killed by signal {s}"),
                _ => format!("ended with {status}"),
            })
        } else {
            None
        };
        match why {
            None => Ok(out),
            Some(why) => Err(with_said(why, &said)),
        }
    }

    fn wasm(&mut self, p: &Program, input: Vec<u8>) -> Result<Vec<u8>, String> {
        if self.sandbox.is_none() {
            self.sandbox =
                Some(tabos_sandbox::Sandbox::new().map_err(|e| format!("has no sandbox: {e}"))?);
        }
        let sb = self.sandbox.as_ref().expect("made above");
        let program = sb
            .compile_file(&self.dir.join(&p.path))
            .map_err(|e| format!("cannot be loaded: {e}"))?;
        let stop = sb.stop_handle();
        let out = Output {
            bytes: Arc::default(),
            over: Arc::default(),
            stop: stop.clone(),
        };
        let said = Said::default();
        let spec = tabos_sandbox::RunSpec {
            args: std::iter::once(p.path.clone())
                .chain(self.args.iter().cloned())
                .collect(),
            env: Vec::new(),
            stdin: Some(Box::new(std::io::Cursor::new(input))),
            stdout: Box::new(out.clone()),
            stderr: Box::new(said.clone()),
            memory_bytes: tabos_sandbox::MEMORY_BYTES_MAX,
            host: None,
            preopen: Some(self.dir.clone()),
        };
        let (done, hear) = mpsc::channel::<()>();
        let (limit, stopper) = (self.limit, stop.clone());
        let watchdog = std::thread::spawn(move || {
            let late = matches!(
                hear.recv_timeout(limit),
                Err(mpsc::RecvTimeoutError::Timeout)
            );
            if late {
                stopper.stop();
            }
            late
        });
        let outcome = sb.run(&program, spec, &stop);
        drop(done);
        let late = watchdog.join().unwrap_or(false);
        let said = said.last_line();
        let over = *out.over.lock().unwrap_or_else(|e| e.into_inner());
        let why = match outcome {
            _ if over => format!("printed more than {OUTPUT_BYTES_MAX} bytes"),
            Err(e) => format!("could not run: {e}"),
            Ok(tabos_sandbox::Outcome::Exited(0)) => {
                let bytes =
                    std::mem::take(&mut *out.bytes.lock().unwrap_or_else(|e| e.into_inner()));
                return Ok(bytes);
            }
            Ok(tabos_sandbox::Outcome::Exited(n)) => format!("exited with status {n}"),
            Ok(tabos_sandbox::Outcome::Stopped) if late => {
                format!("ran past its time limit of {:?}", self.limit)
            }
            Ok(tabos_sandbox::Outcome::Stopped) => "was stopped".to_string(),
            Ok(tabos_sandbox::Outcome::Trapped(t)) => format!("failed: {t}"),
        };
        Err(with_said(why, &said))
    }
}

fn with_said(why: String, said: &str) -> String {
    if said.is_empty() {
        why
    } else {
        format!("{why}; its last words: {said}")
    }
}

/// A wasm program's stdout: bounded, and a run that overflows it is
/// stopped.
#[derive(Clone)]
struct Output {
    bytes: Arc<Mutex<Vec<u8>>>,
    over: Arc<Mutex<bool>>,
    stop: tabos_sandbox::StopHandle,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        if bytes.len() + buf.len() > OUTPUT_BYTES_MAX {
            *self.over.lock().unwrap_or_else(|e| e.into_inner()) = true;
            self.stop.stop();
            return Err(std::io::Error::other("output limit"));
        }
        bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A program's stderr: passed on to the task's own stderr (its log), and
/// its last line kept for the failure message.
#[derive(Clone, Default)]
struct Said {
    /// The current line and the last whole one.
    lines: Arc<Mutex<(Vec<u8>, Vec<u8>)>>,
}

impl Said {
    fn last_line(&self) -> String {
        let l = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let line = if l.0.is_empty() { &l.1 } else { &l.0 };
        String::from_utf8_lossy(line).trim().to_string()
    }
}

impl Write for Said {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        let mut l = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        for &b in buf {
            if b == b'\n' {
                if !l.0.is_empty() {
                    l.1 = std::mem::take(&mut l.0);
                }
            } else if l.0.len() < SAID_BYTES_MAX {
                l.0.push(b);
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Map task output: the map program over `input`, its records sent to
/// their reducers, sorted, combined if the job has a combiner — one
/// encoded run per reducer (empty: nothing for that reducer).
pub fn map(
    runner: &mut Runner,
    job: &UserJob,
    input: Vec<u8>,
    reducers: usize,
) -> Result<Vec<Vec<u8>>> {
    let out = runner.run("map", &job.map, input)?;
    let mut parts: Vec<Vec<Record>> = vec![Vec::new(); reducers];
    for (k, v) in parse_records(&out)? {
        parts[crate::job::partition(&k, reducers)].push((k, v));
    }
    drop(out);
    parts
        .into_iter()
        .map(|mut part| {
            part.sort_unstable();
            if let (Some(c), false) = (&job.combine, part.is_empty()) {
                let out = runner.run("combine", c, to_stream(&part))?;
                part = parse_records(&out)?;
                part.sort_unstable();
            }
            Ok(encode_run(&part))
        })
        .collect()
}

/// A reducer's output: its runs' records merged in order, through the
/// reduce program; what it printed.
pub fn reduce(runner: &mut Runner, job: &UserJob, runs: &[&[u8]]) -> Result<Vec<u8>> {
    let input = merge_runs(runs)?;
    runner.run("reduce", &job.reduce, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_lines_and_runs() {
        let recs = parse_records(b"a\t1\nb\nc\tx\ty\n\n").unwrap();
        assert_eq!(
            recs,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), vec![]),
                (b"c".to_vec(), b"x\ty".to_vec()),
                (vec![], vec![]),
            ]
        );
        assert_eq!(parse_records(b"").unwrap(), vec![]);
        assert_eq!(
            parse_records(b"k\tv").unwrap(),
            vec![(b"k".to_vec(), b"v".to_vec())]
        );
        let mut sorted = recs.clone();
        sorted.sort();
        assert_eq!(decode_run(&encode_run(&sorted)).unwrap(), sorted);
        assert_eq!(parse_records(&to_stream(&sorted)).unwrap(), sorted);
        let run = encode_run(&sorted);
        assert!(decode_run(&run[..run.len() - 1]).is_err());
        let (a, b) = (
            encode_run(&sorted[..2]),
            encode_run(&[(b"b".to_vec(), b"0".to_vec()), (b"z".to_vec(), vec![])]),
        );
        let merged = parse_records(&merge_runs(&[&a, &b]).unwrap()).unwrap();
        let mut want: Vec<Record> = sorted[..2].to_vec();
        want.extend([(b"b".to_vec(), b"0".to_vec()), (b"z".to_vec(), vec![])]);
        want.sort();
        assert_eq!(merged, want);
        assert!(merge_runs(&[&a, &run[..run.len() - 1]]).is_err());
        let unsorted = encode_run(&[(b"b".to_vec(), vec![])])
            .into_iter()
            .chain(encode_run(&[(b"a".to_vec(), vec![])]))
            .collect::<Vec<u8>>();
        assert!(decode_run(&unsorted).is_err());
    }

    #[test]
    fn programs_stay_inside_their_code() {
        for bad in ["", "/bin/sh", "../x", "a/../../x", "."] {
            let p = Program {
                path: bad.into(),
                kind: ProgramKind::Native,
            };
            assert!(p.validate().is_err(), "{bad:?}");
        }
        for good in ["map.sh", "./bin/map", "a/b.wasm"] {
            let p = Program {
                path: good.into(),
                kind: ProgramKind::Wasm,
            };
            assert!(p.validate().is_ok(), "{good:?}");
        }
    }
}
