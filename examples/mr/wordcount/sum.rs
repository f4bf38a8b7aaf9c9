//! Word count's combine: the counts of each word summed. Its input is
//! sorted by word, so equal words are neighbours; it prints `WORD<TAB>SUM`
//! records, which go on to the reducer.

use std::io::{BufRead, BufWriter, Write};

fn main() -> std::io::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    fold(|word, n| {
        out.write_all(word)?;
        writeln!(out, "\t{n}")
    })?;
    out.flush()
}

/// Calls `emit` with each word and its summed count, in input order.
pub fn fold(mut emit: impl FnMut(&[u8], u64) -> std::io::Result<()>) -> std::io::Result<()> {
    let mut stdin = std::io::stdin().lock();
    let (mut record, mut word, mut sum) = (Vec::new(), Vec::new(), None::<u64>);
    loop {
        record.clear();
        if stdin.read_until(b'\n', &mut record)? == 0 {
            break;
        }
        let line = record.strip_suffix(b"\n").unwrap_or(&record);
        let tab = line.iter().position(|&b| b == b'\t').unwrap_or(line.len());
        let (key, value) = (&line[..tab], line.get(tab + 1..).unwrap_or(&[]));
        let n: u64 = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not a count: {value:?}")))?;
        match sum {
            Some(s) if key == word.as_slice() => sum = Some(s + n),
            Some(s) => {
                emit(&word, s)?;
                word = key.to_vec();
                sum = Some(n);
            }
            None => {
                word = key.to_vec();
                sum = Some(n);
            }
        }
    }
    if let Some(s) = sum {
        emit(&word, s)?;
    }
    Ok(())
}
