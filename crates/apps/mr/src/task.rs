//! The work of one mapper and one reducer, as functions of bytes: what
//! the mapper and reducer procs run between reading their inputs and
//! writing their outputs.

use crate::format;
use crate::job::{Combiner, Kind};
use crate::split::{read_lines, read_lines_in, read_owned, read_owned_in, Split};
use crate::Result;

/// Maps one split: its intermediate output, one encoded run per reducer.
pub fn map_split(kind: &Kind, split: &Split, reducers: usize) -> Result<Vec<Vec<u8>>> {
    map_task(kind, std::slice::from_ref(split), reducers)
}

/// Maps one task's splits: one encoded run per reducer, combined over
/// all of them.
pub fn map_task(kind: &Kind, splits: &[Split], reducers: usize) -> Result<Vec<Vec<u8>>> {
    let mut out = Combiner::new(reducers)?;
    for split in splits {
        let mut mapper = kind.mapper(&split.path);
        if kind.sees_lines() {
            read_lines(split, |piece, ends| mapper.piece(piece, ends, &mut out))?;
        } else {
            read_owned(split, |piece| mapper.piece(piece, false, &mut out))?;
            mapper.piece(&[], true, &mut out);
        }
    }
    Ok(out.into_encoded())
}

/// [`map_task`] over splits already fetched: each with its file's bytes
/// from [`crate::split::first_byte`] through its last line (splits of
/// files in tabos fs).
pub fn map_fetched(
    kind: &Kind,
    splits: &[(Split, Vec<u8>)],
    reducers: usize,
) -> Result<Vec<Vec<u8>>> {
    let mut out = Combiner::new(reducers)?;
    for (split, bytes) in splits {
        let mut mapper = kind.mapper(&split.path);
        if kind.sees_lines() {
            read_lines_in(bytes, split, |piece, ends| {
                mapper.piece(piece, ends, &mut out)
            })?;
        } else {
            read_owned_in(bytes, split, |piece| mapper.piece(piece, false, &mut out))?;
            mapper.piece(&[], true, &mut out);
        }
    }
    Ok(out.into_encoded())
}

/// Reduces one partition: checks the mappers' runs and merges them
/// (summing equal keys) into the partition's encoded output — the reducer
/// proc's k-way merge ([`format::merge_with`]).
pub fn reduce(runs: &[Vec<u8>]) -> Result<Vec<u8>> {
    for r in runs {
        format::check(r)?;
    }
    let runs: Vec<&[u8]> = runs.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    format::merge_with(&runs, |key, count| format::put(&mut out, key, count));
    Ok(out)
}
