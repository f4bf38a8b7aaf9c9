//! Word count's reduce: as the combiner (sum.rs), and the output as
//! `tabos mr wordcount` writes it — `WORD<TAB>COUNT` lines, a backslash
//! in a word written as two (the only byte of a word its text format
//! escapes: words hold no tab, newline or carriage return).

use std::io::{BufWriter, Write};

#[path = "sum.rs"]
#[allow(dead_code)]
mod sum;

fn main() -> std::io::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    sum::fold(|word, n| {
        for &b in word {
            if b == b'\\' {
                out.write_all(b"\\\\")?;
            } else {
                out.write_all(&[b])?;
            }
        }
        writeln!(out, "\t{n}")
    })?;
    out.flush()
}
