//! The jobs computed directly, in one process over whole files: the
//! reference the tests hold the MapReduce results to. Deliberately
//! written without the split reader, the mappers or the combiner.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::job::{find, Kind, WORD_BYTES_MAX};
use crate::split::plan;
use crate::{io, Result};

/// The job's output over `inputs`, by key.
pub fn run(kind: &Kind, inputs: &[PathBuf]) -> Result<BTreeMap<Vec<u8>, u64>> {
    // One split per non-empty file.
    let files: Vec<PathBuf> = plan(inputs, u64::MAX)?
        .into_iter()
        .map(|s| s.path)
        .collect();
    let mut out = BTreeMap::new();
    for f in files {
        let data = std::fs::read(&f).map_err(io(&f))?;
        match kind {
            Kind::WordCount => {
                for w in data
                    .split(|b| b.is_ascii_whitespace())
                    .filter(|w| !w.is_empty())
                {
                    for piece in w.chunks(WORD_BYTES_MAX) {
                        *out.entry(piece.to_vec()).or_insert(0) += 1;
                    }
                }
            }
            Kind::Grep { pattern } => {
                let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
                if data.last() == Some(&b'\n') {
                    lines.pop();
                }
                let n = lines.iter().filter(|l| find(l, pattern)).count() as u64;
                if n > 0 {
                    out.insert(f.as_os_str().as_encoded_bytes().to_vec(), n);
                }
            }
        }
    }
    Ok(out)
}
