//! Word count's map, for `tabos mr run` (compile: ./build.sh, to
//! wasm32-wasip1). Reads records `FILE<TAB>LINE`, counts the words of the
//! lines — maximal runs of bytes that are not ASCII whitespace, so any
//! encoding counts — and prints `WORD<TAB>COUNT` once per distinct word
//! (counting in the mapper, before anything is written, is what keeps a
//! word count's intermediate data small).

use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};

fn main() -> std::io::Result<()> {
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut stdin = std::io::stdin().lock();
    let mut record = Vec::new();
    loop {
        record.clear();
        if stdin.read_until(b'\n', &mut record)? == 0 {
            break;
        }
        let line = record.strip_suffix(b"\n").unwrap_or(&record);
        // The value: the line, after the key (its file).
        let line = match line.iter().position(|&b| b == b'\t') {
            Some(tab) => &line[tab + 1..],
            None => &[][..],
        };
        for word in line
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
        {
            match counts.get_mut(word) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(word.to_vec(), 1);
                }
            }
        }
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (word, n) in counts {
        out.write_all(&word)?;
        writeln!(out, "\t{n}")?;
    }
    out.flush()
}
