//! The columnar operators: scan-and-filter, hash join, hash aggregation,
//! distinct, sort, limit — each over vectors of at most [`CHUNK_ROWS`]
//! values at a time.
//!
//! A relation between operators is row ids, one list per FROM table
//! (late materialisation): a join adds a list, a filter shortens them
//! all, and a value is gathered from its column only when an expression
//! needs it. Texts travel as dictionary codes — compared, hashed and
//! grouped as integers — and become text only when compared by order or
//! returned. Semantics are SQLite's for everything the planner admits:
//! three-valued logic, NULLs first in ascending order, `sum` exact over
//! integers and compensated (Kahan–Babuška–Neumaier, as SQLite 3.43+)
//! over reals, `avg` a real.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};

use super::plan::{AggKind, CmpOp, ETy, JoinKind, PExpr, Plan, Scalar};
use super::table::{
    past, unsupported, Column, Data, Dict, FResult, Fail, TableSnap, ABSENT_CODE, CHUNK_ROWS,
    NO_ROW, NULL_CODE,
};
use crate::error::Result;
use crate::value::Value;

/// Most rows a join may produce (before its WHERE conditions): counted
/// as pairs are found, so a join on a key shared by most rows stops
/// here rather than filling memory.
pub const JOIN_ROWS_MAX: usize = 20_000_000;
/// Most groups one aggregation keeps.
pub const GROUPS_MAX: usize = 20_000_000;
/// Most rows gathered for sorting or DISTINCT.
pub const SORT_ROWS_MAX: usize = 10_000_000;

const UNSEEN: u32 = u32::MAX - 2;
/// A code whose field test has not been made yet.
const FIELD_UNSEEN: u8 = 3;

/// A vector of values: a batch's worth of one expression.
#[derive(Debug, Clone)]
pub enum Vector {
    Int(Vec<i64>, Option<Vec<bool>>),
    Real(Vec<f64>, Option<Vec<bool>>),
    /// Codes into dictionary `.1` of the query's [`Ctx`].
    Text(Vec<u32>, usize),
    /// 0 false, 1 true, 2 NULL.
    Bool(Vec<u8>),
    Const(Scalar, usize),
}

impl Vector {
    pub fn len(&self) -> usize {
        match self {
            Vector::Int(v, _) => v.len(),
            Vector::Real(v, _) => v.len(),
            Vector::Text(v, _) => v.len(),
            Vector::Bool(v) => v.len(),
            Vector::Const(_, n) => *n,
        }
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            Vector::Int(_, n) | Vector::Real(_, n) => n.as_ref().is_some_and(|n| n[i]),
            Vector::Text(c, _) => c[i] == NULL_CODE,
            Vector::Bool(b) => b[i] == 2,
            Vector::Const(s, _) => *s == Scalar::Null,
        }
    }

    /// Booleans as SQLite returns them: integers 0 and 1.
    fn booleans_as_ints(self) -> Vector {
        match self {
            Vector::Bool(b) => {
                let nulls: Vec<bool> = b.iter().map(|&x| x == 2).collect();
                let any = nulls.iter().any(|&n| n);
                Vector::Int(
                    b.iter().map(|&x| i64::from(x == 1)).collect(),
                    any.then_some(nulls),
                )
            }
            v => v,
        }
    }
}

/// A dictionary of the query: a table's, or one a function's results
/// are interned in as the query runs.
enum DictSlot {
    Table(Arc<Dict>),
    Local(Dict),
}

impl DictSlot {
    fn dict(&self) -> &Dict {
        match self {
            DictSlot::Table(d) => d,
            DictSlot::Local(d) => d,
        }
    }
}

/// Which rows of a table a batch covers.
#[derive(Clone, Copy)]
enum Sel<'a> {
    Range(usize, usize),
    Ids(&'a [u32]),
    None,
}

/// A batch: rows of each FROM table (aligned), or a range of the grouped
/// result.
struct Batch<'a> {
    sels: Vec<Sel<'a>>,
    mat: Option<(&'a [Vector], usize, usize)>,
    len: usize,
}

/// One query's state: its tables, its dictionaries, memos.
pub struct Ctx<'a> {
    slots: Vec<Arc<TableSnap>>,
    dicts: RefCell<Vec<DictSlot>>,
    /// split_part node → its output dictionary and memo.
    split: RefCell<HashMap<usize, SplitMemo>>,
    /// (from, to) dictionaries → code translation.
    translations: RefCell<HashMap<(usize, usize), Vec<u32>>>,
    /// `split_part(x, d, 1) = 'text'` node → its truth by x's code
    /// ([`FIELD_UNSEEN`] until looked at).
    field_tests: RefCell<HashMap<usize, Vec<u8>>>,
    check: &'a dyn Fn() -> Result<()>,
}

/// A function's output dictionary (its index in [`Ctx::dicts`]) and its
/// memo: input code → output code.
type SplitMemo = (usize, Memo);

/// Input code → output code of a function over texts: a vector indexed
/// by code for a dictionary of up to [`DENSE_MEMO_CODES_MAX`] codes (no
/// hashing), a hash map past it.
enum Memo {
    Dense(Vec<u32>),
    Sparse(HashMap<u32, u32>),
}

/// Largest dictionary whose memo is a vector (64 MiB of codes).
const DENSE_MEMO_CODES_MAX: usize = 16 << 20;

impl Memo {
    fn for_codes(n: usize) -> Memo {
        if n <= DENSE_MEMO_CODES_MAX {
            Memo::Dense(vec![UNSEEN; n])
        } else {
            Memo::Sparse(HashMap::new())
        }
    }

    fn get(&mut self, c: u32) -> Option<u32> {
        match self {
            Memo::Dense(v) => v.get(c as usize).copied().filter(|&o| o != UNSEEN),
            Memo::Sparse(m) => m.get(&c).copied(),
        }
    }

    fn put(&mut self, c: u32, o: u32) {
        match self {
            Memo::Dense(v) => {
                if c as usize >= v.len() {
                    // A local dictionary grew since: room for its codes.
                    v.resize(c as usize + 1, UNSEEN);
                }
                v[c as usize] = o;
            }
            Memo::Sparse(m) => {
                m.insert(c, o);
            }
        }
    }
}

/// A relation: row ids per FROM table, all the same length.
struct Rel {
    ids: Vec<Vec<u32>>,
    len: usize,
}

impl<'a> Ctx<'a> {
    pub fn new(slots: Vec<Arc<TableSnap>>, check: &'a dyn Fn() -> Result<()>) -> Ctx<'a> {
        let dicts = slots
            .iter()
            .map(|s| DictSlot::Table(s.dict.clone()))
            .collect();
        Ctx {
            slots,
            dicts: RefCell::new(dicts),
            split: RefCell::new(HashMap::new()),
            translations: RefCell::new(HashMap::new()),
            field_tests: RefCell::new(HashMap::new()),
            check,
        }
    }

    fn text(&self, dict: usize, code: u32) -> String {
        self.dicts.borrow()[dict].dict().get(code).to_string()
    }

    /// Code `code` of dictionary `from` in dictionary `to`
    /// ([`ABSENT_CODE`] if not there).
    fn translate(&self, from: usize, to: usize, codes: &[u32]) -> Vec<u32> {
        if from == to {
            return codes.to_vec();
        }
        let dicts = self.dicts.borrow();
        let (f, t) = (dicts[from].dict(), dicts[to].dict());
        let mut memos = self.translations.borrow_mut();
        let memo = memos
            .entry((from, to))
            .or_insert_with(|| vec![UNSEEN; f.len()]);
        if memo.len() < f.len() {
            memo.resize(f.len(), UNSEEN);
        }
        codes
            .iter()
            .map(|&c| {
                if c == NULL_CODE || c == ABSENT_CODE {
                    return c;
                }
                let m = &mut memo[c as usize];
                if *m == UNSEEN {
                    *m = t.code(f.get(c));
                }
                *m
            })
            .collect()
    }

    fn eval(&self, e: &PExpr, b: &Batch<'_>) -> FResult<Vector> {
        Ok(match e {
            PExpr::Col { slot, col } => {
                let snap = &self.slots[*slot];
                let Some(c) = snap.column(col) else {
                    return unsupported(format!("column {col} was not loaded"));
                };
                gather(c, b.sels[*slot], *slot)
            }
            PExpr::Mat(i) => {
                let (cols, start, end) = b.mat.expect("a grouped batch");
                slice(&cols[*i], start, end)
            }
            PExpr::Lit(s) => Vector::Const(s.clone(), b.len),
            PExpr::Cmp(op, l, r) => {
                if let Some(v) = self.field_test(e, *op, l, r, b)? {
                    return Ok(Vector::Bool(v));
                }
                let (l, r) = (self.eval(l, b)?, self.eval(r, b)?);
                Vector::Bool(self.compare(*op, &l, &r, b.len))
            }
            PExpr::And(xs) => {
                let mut acc = vec![1u8; b.len];
                for x in xs {
                    and3(&mut acc, truth(&self.eval(x, b)?, b.len));
                }
                Vector::Bool(acc)
            }
            PExpr::Or(xs) => {
                let mut acc = vec![0u8; b.len];
                for x in xs {
                    or3(&mut acc, self.truth_of(x, b)?);
                }
                Vector::Bool(acc)
            }
            PExpr::Not(x) => {
                let mut v = self.truth_of(x, b)?;
                not3(&mut v);
                Vector::Bool(v)
            }
            PExpr::IsNull(x, negated) => {
                let v = self.eval(x, b)?;
                Vector::Bool(
                    (0..b.len)
                        .map(|i| u8::from(v.is_null(i) != *negated))
                        .collect(),
                )
            }
            PExpr::InList(x, list, negated) => {
                // x = a OR x = b …, three-valued, with x gathered once.
                let xv = self.eval(x, b)?;
                let mut acc = vec![0u8; b.len];
                for item in list {
                    or3(
                        &mut acc,
                        self.compare(CmpOp::Eq, &xv, &self.eval(item, b)?, b.len),
                    );
                }
                if *negated {
                    not3(&mut acc);
                }
                Vector::Bool(acc)
            }
            PExpr::SplitPart(x, delim, n) => {
                let v = self.eval(x, b)?;
                self.split_part(e, v, delim, *n, b.len)?
            }
        })
    }

    fn split_part(
        &self,
        node: &PExpr,
        v: Vector,
        delim: &str,
        n: i64,
        len: usize,
    ) -> FResult<Vector> {
        let key = node as *const PExpr as usize;
        let (codes, from) = match v {
            Vector::Text(c, d) => (c, d),
            Vector::Const(Scalar::Null, n) => return Ok(Vector::Const(Scalar::Null, n)),
            Vector::Const(Scalar::Text(t), _) => {
                let out = crate::dialect::split_part(&t, delim, n)
                    .map_err(|e| Fail::Unsupported(super::table::Unsupported(e)))?;
                return Ok(Vector::Const(Scalar::Text(out), len));
            }
            _ => return unsupported("split_part of a non-text"),
        };
        let mut split = self.split.borrow_mut();
        let out_dict = match split.get(&key) {
            Some((d, _)) => *d,
            None => {
                let mut dicts = self.dicts.borrow_mut();
                let memo = Memo::for_codes(dicts[from].dict().len());
                dicts.push(DictSlot::Local(Dict::new()));
                let d = dicts.len() - 1;
                split.insert(key, (d, memo));
                d
            }
        };
        let memo = &mut split.get_mut(&key).expect("just put").1;
        let mut dicts = self.dicts.borrow_mut();
        let mut out = Vec::with_capacity(codes.len());
        let mut field = String::new();
        for c in codes {
            if c == NULL_CODE {
                out.push(NULL_CODE);
                continue;
            }
            let o = match memo.get(c) {
                Some(o) => o,
                None => {
                    let text = dicts[from].dict().get(c);
                    field.clear();
                    if n > 0 && !delim.is_empty() {
                        // The common case without the general function's
                        // vector of every field: PostgreSQL's field n, or
                        // "" past the end.
                        field.push_str(nth_field(text, delim, n as usize));
                    } else {
                        field.push_str(
                            &crate::dialect::split_part(text, delim, n)
                                .map_err(|e| Fail::Unsupported(super::table::Unsupported(e)))?,
                        );
                    }
                    let DictSlot::Local(d) = &mut dicts[out_dict] else {
                        unreachable!("split_part interns into a local dictionary")
                    };
                    let o = d.intern(&field);
                    memo.put(c, o);
                    o
                }
            };
            out.push(o);
        }
        Ok(Vector::Text(out, out_dict))
    }

    /// `split_part(x, d, 1) = 'text'` (or `<>`) without making the field:
    /// the provenance queries' "rows about this path" test, which would
    /// otherwise scan every nearly-unique detail to its delimiter and
    /// intern its field. Only the text's first `len(text) + len(d)` bytes
    /// are looked at ([`first_field_is`]), once per code. `None` when `e`
    /// is not of that shape or `x` is not coded text (the general path).
    fn field_test(
        &self,
        e: &PExpr,
        op: CmpOp,
        l: &PExpr,
        r: &PExpr,
        b: &Batch<'_>,
    ) -> FResult<Option<Vec<u8>>> {
        let (x, delim, want) = match (l, r) {
            (PExpr::SplitPart(x, d, 1), PExpr::Lit(Scalar::Text(s)))
            | (PExpr::Lit(Scalar::Text(s)), PExpr::SplitPart(x, d, 1))
                if !d.is_empty() && matches!(op, CmpOp::Eq | CmpOp::Ne) =>
            {
                (x, d, s)
            }
            _ => return Ok(None),
        };
        let Vector::Text(codes, from) = self.eval(x, b)? else {
            return Ok(None);
        };
        let dicts = self.dicts.borrow();
        let dict = dicts[from].dict();
        let mut tests = self.field_tests.borrow_mut();
        let memo = tests
            .entry(e as *const PExpr as usize)
            .or_insert_with(|| vec![FIELD_UNSEEN; dict.len()]);
        if memo.len() < dict.len() {
            // x is a local dictionary that grew since.
            memo.resize(dict.len(), FIELD_UNSEEN);
        }
        let (delim, want) = (delim.as_bytes(), want.as_bytes());
        let eq = u8::from(op == CmpOp::Eq);
        Ok(Some(
            codes
                .iter()
                .map(|&c| {
                    if c == NULL_CODE {
                        return 2;
                    }
                    let m = &mut memo[c as usize];
                    if *m == FIELD_UNSEEN {
                        *m = u8::from(first_field_is(dict.get(c).as_bytes(), delim, want));
                    }
                    if *m == 1 {
                        eq
                    } else {
                        1 - eq
                    }
                })
                .collect(),
        ))
    }

    fn truth_of(&self, e: &PExpr, b: &Batch<'_>) -> FResult<Vec<u8>> {
        Ok(truth(&self.eval(e, b)?, b.len))
    }

    /// `l op r`, three-valued.
    fn compare(&self, op: CmpOp, l: &Vector, r: &Vector, len: usize) -> Vec<u8> {
        let holds = |o: Ordering| -> u8 {
            u8::from(match op {
                CmpOp::Eq => o == Ordering::Equal,
                CmpOp::Ne => o != Ordering::Equal,
                CmpOp::Lt => o == Ordering::Less,
                CmpOp::Le => o != Ordering::Greater,
                CmpOp::Gt => o == Ordering::Greater,
                CmpOp::Ge => o != Ordering::Less,
            })
        };
        if matches!(l, Vector::Const(Scalar::Null, _))
            || matches!(r, Vector::Const(Scalar::Null, _))
        {
            return vec![2; len];
        }
        if let (Some(a), Some(b)) = (Num::of(l), Num::of(r)) {
            if let (Num::I(..) | Num::CI(_), Num::I(..) | Num::CI(_)) = (&a, &b) {
                return (0..len)
                    .map(|i| match (a.int(i), b.int(i)) {
                        (Some(x), Some(y)) => holds(x.cmp(&y)),
                        _ => 2,
                    })
                    .collect();
            }
            return (0..len)
                .map(|i| match (a.real(i), b.real(i)) {
                    (Some(x), Some(y)) => holds(x.partial_cmp(&y).unwrap_or(Ordering::Equal)),
                    _ => 2,
                })
                .collect();
        }
        // Texts. Equality as codes of one dictionary; order as texts.
        let equality = matches!(op, CmpOp::Eq | CmpOp::Ne);
        match (l, r) {
            (Vector::Text(a, da), Vector::Const(Scalar::Text(s), _))
            | (Vector::Const(Scalar::Text(s), _), Vector::Text(a, da)) => {
                if equality {
                    let code = self.dicts.borrow()[*da].dict().code(s);
                    codes_equal(a, std::iter::repeat(code), holds)
                } else {
                    let dicts = self.dicts.borrow();
                    let d = dicts[*da].dict();
                    let text_left = matches!(l, Vector::Text(..));
                    a.iter()
                        .map(|&c| {
                            if c == NULL_CODE {
                                return 2;
                            }
                            let o = d.get(c).cmp(s.as_str());
                            holds(if text_left { o } else { o.reverse() })
                        })
                        .collect()
                }
            }
            (Vector::Text(a, da), Vector::Text(b, db)) => {
                if equality {
                    codes_equal(a, self.translate(*db, *da, b), holds)
                } else {
                    let dicts = self.dicts.borrow();
                    let (fa, fb) = (dicts[*da].dict(), dicts[*db].dict());
                    a.iter()
                        .zip(b)
                        .map(|(&x, &y)| {
                            if x == NULL_CODE || y == NULL_CODE {
                                2
                            } else {
                                holds(fa.get(x).cmp(fb.get(y)))
                            }
                        })
                        .collect()
                }
            }
            (Vector::Const(Scalar::Text(x), _), Vector::Const(Scalar::Text(y), _)) => {
                vec![holds(x.cmp(y)); len]
            }
            _ => vec![2; len],
        }
    }

    /// Row ids of table `slot` passing `filters`.
    fn scan(&self, slot: usize, filters: &[PExpr], nslots: usize) -> FResult<Vec<u32>> {
        let rows = self.slots[slot].rows;
        let mut out = Vec::new();
        let mut start = 0;
        while start < rows {
            (self.check)()?;
            let end = (start + CHUNK_ROWS).min(rows);
            if filters.is_empty() {
                out.extend(start as u32..end as u32);
            } else {
                let mut keep: Option<Vec<u32>> = None;
                for f in filters {
                    let mut sels = vec![Sel::None; nslots];
                    sels[slot] = match &keep {
                        None => Sel::Range(start, end),
                        Some(ids) => Sel::Ids(ids),
                    };
                    let len = keep.as_ref().map_or(end - start, Vec::len);
                    let v = truth(
                        &self.eval(
                            f,
                            &Batch {
                                sels,
                                mat: None,
                                len,
                            },
                        )?,
                        len,
                    );
                    keep = Some(match &keep {
                        None => (start..end)
                            .zip(&v)
                            .filter(|(_, t)| **t == 1)
                            .map(|(i, _)| i as u32)
                            .collect(),
                        Some(ids) => ids
                            .iter()
                            .zip(&v)
                            .filter(|(_, t)| **t == 1)
                            .map(|(i, _)| *i)
                            .collect(),
                    });
                    if keep.as_ref().is_some_and(Vec::is_empty) {
                        break;
                    }
                }
                out.extend(keep.unwrap_or_default());
            }
            start = end;
        }
        Ok(out)
    }

    /// Batches `[start, end)` of a relation.
    fn batch<'b>(&self, rel: &'b Rel, start: usize, end: usize) -> Batch<'b> {
        Batch {
            sels: rel
                .ids
                .iter()
                .map(|ids| {
                    if ids.is_empty() {
                        Sel::None
                    } else {
                        Sel::Ids(&ids[start..end])
                    }
                })
                .collect(),
            mat: None,
            len: end - start,
        }
    }

    /// Keys of a batch, as hashable words; `None` for a row with a NULL
    /// key (which joins nothing). Texts are coded in `dicts[k]` when set
    /// (else it is set to the first batch's).
    fn keys(
        &self,
        exprs: &[PExpr],
        real: &[bool],
        dicts: &mut [Option<usize>],
        b: &Batch<'_>,
    ) -> FResult<Vec<Option<[u64; 4]>>> {
        let mut out: Vec<Option<[u64; 4]>> = vec![Some([0; 4]); b.len];
        for (k, e) in exprs.iter().enumerate() {
            let v = self.eval(e, b)?;
            let v = match v {
                Vector::Text(codes, d) => match dicts[k] {
                    None => {
                        dicts[k] = Some(d);
                        Vector::Text(codes, d)
                    }
                    Some(to) => Vector::Text(self.translate(d, to, &codes), to),
                },
                Vector::Const(Scalar::Text(s), n) => {
                    let to = match dicts[k] {
                        Some(to) => to,
                        None => {
                            let mut ds = self.dicts.borrow_mut();
                            let mut d = Dict::new();
                            d.intern(&s);
                            ds.push(DictSlot::Local(d));
                            dicts[k] = Some(ds.len() - 1);
                            ds.len() - 1
                        }
                    };
                    let code = self.dicts.borrow()[to].dict().code(&s);
                    Vector::Text(vec![code; n], to)
                }
                other => other,
            };
            for (i, slot) in out.iter_mut().enumerate() {
                let Some(key) = slot else { continue };
                match word(&v, i, real[k]) {
                    Some(w) => key[k] = w,
                    None => *slot = None,
                }
            }
        }
        Ok(out)
    }

    /// Joins `rel` with table `step.slot`'s rows `right`.
    fn join(&self, plan: &Plan, step: usize, rel: Rel, right: Vec<u32>) -> FResult<Rel> {
        let j = &plan.joins[step];
        let nslots = plan.slots.len();
        let real: Vec<bool> = j
            .keys
            .iter()
            .map(|(l, r)| {
                let t = |e: &PExpr| super::plan::slot_ty(&plan.slots, slot_of(e), col_of(e));
                let is_real = |e: &PExpr| {
                    matches!(e, PExpr::Col { .. }) && t(e) == Some(super::table::Ty::Real)
                        || matches!(e, PExpr::Lit(Scalar::Real(_)))
                };
                is_real(l) || is_real(r)
            })
            .collect();
        let lefts: Vec<PExpr> = j.keys.iter().map(|k| k.0.clone()).collect();
        let rights: Vec<PExpr> = j.keys.iter().map(|k| k.1.clone()).collect();
        let mut dicts: Vec<Option<usize>> = vec![None; j.keys.len()];
        // The hash table is built over the smaller side of an inner join
        // (a left join's right side always): its keys coded in its own
        // dictionaries; the other side probes, its texts translated.
        let build_left = j.kind == JoinKind::Inner && rel.len < right.len();
        let (build_len, probe_len) = if build_left {
            (rel.len, right.len())
        } else {
            (right.len(), rel.len)
        };
        let right_batch = |start: usize, end: usize| {
            let mut sels = vec![Sel::None; nslots];
            sels[j.slot] = Sel::Ids(&right[start..end]);
            Batch {
                sels,
                mat: None,
                len: end - start,
            }
        };
        let side = |left: bool, start: usize, end: usize| {
            if left {
                self.batch(&rel, start, end)
            } else {
                right_batch(start, end)
            }
        };
        let (build_keys, probe_keys) = if build_left {
            (&lefts, &rights)
        } else {
            (&rights, &lefts)
        };
        let mut table: HashMap<[u64; 4], u32> = HashMap::with_capacity(build_len);
        let mut next: Vec<u32> = vec![u32::MAX; build_len];
        let mut start = 0;
        while start < build_len {
            (self.check)()?;
            let end = (start + CHUNK_ROWS).min(build_len);
            let b = side(build_left, start, end);
            for (i, k) in self
                .keys(build_keys, &real, &mut dicts, &b)?
                .into_iter()
                .enumerate()
            {
                if let Some(k) = k {
                    let pos = (start + i) as u32;
                    if let Some(head) = table.insert(k, pos) {
                        next[pos as usize] = head;
                    }
                }
            }
            start = end;
        }
        let mut out = Rel {
            ids: vec![Vec::new(); nslots],
            len: 0,
        };
        let joined: Vec<usize> = (0..nslots)
            .filter(|&s| s == 0 || plan.joins[..step].iter().any(|x| x.slot == s))
            .collect();
        let mut start = 0;
        while start < probe_len {
            (self.check)()?;
            let end = (start + CHUNK_ROWS).min(probe_len);
            let b = side(!build_left, start, end);
            let keys = self.keys(probe_keys, &real, &mut dicts, &b)?;
            // Candidate pairs: (left row, right position).
            let mut pairs: Vec<(u32, u32)> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let Some(k) = k else { continue };
                let mut at = table.get(k).copied().unwrap_or(u32::MAX);
                let probe = (start + i) as u32;
                while at != u32::MAX {
                    pairs.push(if build_left { (at, probe) } else { (probe, at) });
                    at = next[at as usize];
                    if pairs.len().is_multiple_of(CHUNK_ROWS) {
                        if out.len + pairs.len() > JOIN_ROWS_MAX {
                            return Err(past("rows of a join", JOIN_ROWS_MAX));
                        }
                        (self.check)()?;
                    }
                }
            }
            if !j.on.is_empty() && !pairs.is_empty() {
                let mut cand = Rel {
                    ids: vec![Vec::new(); nslots],
                    len: pairs.len(),
                };
                for &s in &joined {
                    cand.ids[s] = pairs.iter().map(|p| rel.ids[s][p.0 as usize]).collect();
                }
                cand.ids[j.slot] = pairs.iter().map(|p| right[p.1 as usize]).collect();
                let cb = self.batch(&cand, 0, cand.len);
                let mut ok = vec![1u8; pairs.len()];
                for e in &j.on {
                    for (o, t) in ok.iter_mut().zip(truth(&self.eval(e, &cb)?, cand.len)) {
                        if t != 1 {
                            *o = 0;
                        }
                    }
                }
                let mut it = ok.into_iter();
                pairs.retain(|_| it.next() == Some(1));
            }
            if j.kind == JoinKind::Left {
                // Unmatched left rows, each once, with no right row.
                let mut matched = vec![false; end - start];
                for p in &pairs {
                    matched[p.0 as usize - start] = true;
                }
                for (i, m) in matched.into_iter().enumerate() {
                    if !m {
                        pairs.push(((start + i) as u32, u32::MAX));
                    }
                }
            }
            for &s in &joined {
                out.ids[s].extend(pairs.iter().map(|p| rel.ids[s][p.0 as usize]));
            }
            out.ids[j.slot].extend(pairs.iter().map(|p| {
                if p.1 == u32::MAX {
                    NO_ROW
                } else {
                    right[p.1 as usize]
                }
            }));
            out.len += pairs.len();
            if out.len > JOIN_ROWS_MAX {
                return Err(past("rows of a join", JOIN_ROWS_MAX));
            }
            start = end;
        }
        if !j.after.is_empty() {
            out = self.filter(out, &j.after)?;
        }
        Ok(out)
    }

    /// The rows of `rel` passing every condition of `conds`.
    fn filter(&self, rel: Rel, conds: &[PExpr]) -> FResult<Rel> {
        let mut keep = Vec::with_capacity(rel.len);
        let mut start = 0;
        while start < rel.len {
            (self.check)()?;
            let end = (start + CHUNK_ROWS).min(rel.len);
            let b = self.batch(&rel, start, end);
            let mut ok = vec![1u8; end - start];
            for c in conds {
                for (o, t) in ok.iter_mut().zip(truth(&self.eval(c, &b)?, b.len)) {
                    if t != 1 {
                        *o = 0;
                    }
                }
            }
            keep.extend(
                ok.into_iter()
                    .enumerate()
                    .filter(|(_, o)| *o == 1)
                    .map(|(i, _)| start + i),
            );
            start = end;
        }
        let ids = rel
            .ids
            .into_iter()
            .map(|ids| {
                if ids.is_empty() {
                    ids
                } else {
                    keep.iter().map(|&i| ids[i]).collect()
                }
            })
            .collect();
        Ok(Rel {
            ids,
            len: keep.len(),
        })
    }
}

/// Runs `plan` over `ctx`'s tables: the result's rows (after OFFSET),
/// at most `want` of them.
pub fn execute(ctx: &Ctx<'_>, plan: &Plan, want: usize) -> FResult<Vec<Vec<Value>>> {
    let nslots = plan.slots.len();
    let first = ctx.scan(0, &plan.slots[0].filters, nslots)?;
    let mut rel = Rel {
        len: first.len(),
        ids: {
            let mut v = vec![Vec::new(); nslots];
            v[0] = first;
            v
        },
    };
    for (step, j) in plan.joins.iter().enumerate() {
        let right = ctx.scan(j.slot, &plan.slots[j.slot].filters, nslots)?;
        rel = ctx.join(plan, step, rel, right)?;
    }
    let limit = plan.limit.map_or(want, |l| l.min(want));
    let needed = plan.offset.saturating_add(limit);
    let mut outputs: Vec<Vector> = match &plan.grouped {
        Some(g) => {
            let mat = aggregate(ctx, plan, &rel)?;
            let len = mat
                .first()
                .map_or(usize::from(g.keys.is_empty()), Vector::len);
            let b = Batch {
                sels: vec![Sel::None; nslots],
                mat: Some((&mat, 0, len)),
                len,
            };
            let keep: Option<Vec<usize>> = match &g.having {
                Some(h) => Some(
                    truth(&ctx.eval(h, &b)?, len)
                        .into_iter()
                        .enumerate()
                        .filter(|(_, t)| *t == 1)
                        .map(|(i, _)| i)
                        .collect(),
                ),
                None => None,
            };
            let mut outs = Vec::new();
            for o in &plan.outputs {
                let v = ctx.eval(o, &b)?.booleans_as_ints();
                outs.push(match &keep {
                    Some(k) => take(&v, k),
                    None => v,
                });
            }
            outs
        }
        None => {
            let early = plan.order.is_empty() && !plan.distinct;
            let mut outs: Vec<Option<Vector>> = vec![None; plan.outputs.len()];
            let mut got = 0;
            let mut start = 0;
            while start < rel.len && !(early && got >= needed) {
                (ctx.check)()?;
                let end = (start + CHUNK_ROWS).min(rel.len);
                let b = ctx.batch(&rel, start, end);
                for (o, e) in outs.iter_mut().zip(&plan.outputs) {
                    let v = expand(ctx.eval(e, &b)?.booleans_as_ints());
                    *o = Some(match o.take() {
                        None => v,
                        Some(acc) => append(acc, v)?,
                    });
                }
                got += end - start;
                if got > SORT_ROWS_MAX {
                    return Err(past("rows to sort or make distinct", SORT_ROWS_MAX));
                }
                start = end;
            }
            let n = if rel.len == 0 { 0 } else { got };
            outs.into_iter()
                .map(|o| o.unwrap_or(Vector::Const(Scalar::Null, n)))
                .map(|v| {
                    if n == 0 {
                        Vector::Const(Scalar::Null, 0)
                    } else {
                        v
                    }
                })
                .collect()
        }
    };
    let n = outputs.first().map_or(0, Vector::len);
    let mut order: Vec<usize> = (0..n).collect();
    if plan.distinct {
        let mut seen: HashSet<Vec<u64>> = HashSet::new();
        order.retain(|&i| {
            let key: Vec<u64> = outputs
                .iter()
                .flat_map(|v| match word(v, i, false) {
                    Some(w) => [0, w],
                    None => [1, 0],
                })
                .collect();
            seen.insert(key)
        });
    }
    if !plan.order.is_empty() {
        let cmp = |a: &usize, b: &usize| -> Ordering {
            for k in &plan.order {
                let o = compare_rows(ctx, &outputs[k.output], *a, *b);
                let o = if k.desc { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        };
        if needed < order.len() {
            order.select_nth_unstable_by(needed, cmp);
            order.truncate(needed);
        }
        order.sort_by(cmp);
    }
    let rows: Vec<usize> = order.into_iter().skip(plan.offset).take(limit).collect();
    let outputs: Vec<Vector> = outputs.iter_mut().map(|v| take(v, &rows)).collect();
    Ok((0..rows.len())
        .map(|i| outputs.iter().map(|v| value(ctx, v, i)).collect())
        .collect())
}

/// Hash aggregation of `rel`: the grouped result's columns (keys, then
/// aggregates).
fn aggregate(ctx: &Ctx<'_>, plan: &Plan, rel: &Rel) -> FResult<Vec<Vector>> {
    let g = plan.grouped.as_ref().expect("a grouped plan");
    let mut groups: HashMap<([u64; 4], u8), u32> = HashMap::new();
    let mut key_cols: Vec<Option<Vector>> = vec![None; g.keys.len()];
    let mut states: Vec<State> = g.aggs.iter().map(|a| State::new(a.kind)).collect();
    let mut count = 0usize;
    if g.keys.is_empty() {
        groups.insert(([0; 4], 0), 0);
        count = 1;
    }
    let mut start = 0;
    while start < rel.len {
        (ctx.check)()?;
        let end = (start + CHUNK_ROWS).min(rel.len);
        let b = ctx.batch(rel, start, end);
        let keys: Vec<Vector> = g
            .keys
            .iter()
            .map(|k| ctx.eval(k, &b).map(|v| expand(v.booleans_as_ints())))
            .collect::<FResult<_>>()?;
        let mut gid = vec![0u32; b.len];
        if !keys.is_empty() {
            let mut fresh: Vec<usize> = Vec::new();
            for (i, slot) in gid.iter_mut().enumerate() {
                let mut k = [0u64; 4];
                let mut nulls = 0u8;
                for (j, v) in keys.iter().enumerate() {
                    match word(v, i, false) {
                        Some(w) => k[j] = w,
                        None => nulls |= 1 << j,
                    }
                }
                let next = count as u32;
                let id = *groups.entry((k, nulls)).or_insert(next);
                if id == next {
                    count += 1;
                    fresh.push(i);
                    if count > GROUPS_MAX {
                        return Err(past("groups", GROUPS_MAX));
                    }
                }
                *slot = id;
            }
            for (col, v) in key_cols.iter_mut().zip(&keys) {
                let part = take(v, &fresh);
                *col = Some(match col.take() {
                    None => part,
                    Some(acc) => append(acc, part)?,
                });
            }
        }
        for (state, a) in states.iter_mut().zip(&g.aggs) {
            let arg = match &a.arg {
                Some(e) => Some(expand(ctx.eval(e, &b)?.booleans_as_ints())),
                None => None,
            };
            state.update(ctx, &gid, count, arg.as_ref())?;
        }
        start = end;
    }
    let mut out: Vec<Vector> = key_cols
        .into_iter()
        .map(|c| c.unwrap_or(Vector::Const(Scalar::Null, 0)))
        .collect();
    let types = &g.types;
    for (i, s) in states.into_iter().enumerate() {
        let mut s = s;
        s.grow(count);
        out.push(match s {
            // No row at all: an empty total (sum NULL, avg NULL).
            State::Unset(_) => Vector::Const(Scalar::Null, count),
            s => s.finish(types[g.keys.len() + i])?,
        });
    }
    Ok(out)
}

/// An aggregate's running values, one per group.
enum State {
    Count(Vec<i64>),
    CountDistinct(Vec<HashSet<u64>>),
    SumInt(Vec<i128>, Vec<bool>),
    SumReal(Vec<(f64, f64)>, Vec<bool>),
    AvgInt(Vec<i128>, Vec<i64>),
    AvgReal(Vec<(f64, f64)>, Vec<i64>),
    /// min (`false`) or max (`true`): the best value so far per group,
    /// texts coded in dictionary `.2`.
    Best(bool, Vec<Option<BestV>>, Option<usize>),
    Unset(AggKind),
}

#[derive(Clone, Copy)]
enum BestV {
    I(i64),
    R(f64),
    T(u32),
}

/// A group has had a value: a flag, or a count (for avg).
trait Mark {
    fn mark(&mut self, g: usize);
}

impl Mark for Vec<bool> {
    fn mark(&mut self, g: usize) {
        self[g] = true;
    }
}

impl Mark for Vec<i64> {
    fn mark(&mut self, g: usize) {
        self[g] += 1;
    }
}

fn add_ints(
    v: &mut [i128],
    seen: &mut impl Mark,
    gid: &[u32],
    arg: Option<&Vector>,
) -> FResult<()> {
    let Some(Vector::Int(x, nulls)) = arg else {
        return unsupported("a sum of mixed kinds");
    };
    for (i, &g) in gid.iter().enumerate() {
        if nulls.as_ref().is_some_and(|n| n[i]) {
            continue;
        }
        v[g as usize] += i128::from(x[i]);
        seen.mark(g as usize);
    }
    Ok(())
}

fn add_reals(
    v: &mut [(f64, f64)],
    seen: &mut impl Mark,
    gid: &[u32],
    arg: Option<&Vector>,
) -> FResult<()> {
    let Some(num) = arg.and_then(Num::of) else {
        return unsupported("a sum of a non-number");
    };
    for (i, &g) in gid.iter().enumerate() {
        let Some(r) = num.real(i) else { continue };
        let (s, err) = &mut v[g as usize];
        // SQLite's kahanBabuskaNeumaierStep, so the sum is SQLite's.
        let t = *s + r;
        if s.abs() > r.abs() {
            *err += (*s - t) + r;
        } else {
            *err += (r - t) + *s;
        }
        *s = t;
        seen.mark(g as usize);
    }
    Ok(())
}

impl State {
    fn new(kind: AggKind) -> State {
        match kind {
            AggKind::CountStar | AggKind::Count => State::Count(Vec::new()),
            AggKind::CountDistinct => State::CountDistinct(Vec::new()),
            AggKind::Min => State::Best(false, Vec::new(), None),
            AggKind::Max => State::Best(true, Vec::new(), None),
            k => State::Unset(k),
        }
    }

    fn grow(&mut self, n: usize) {
        match self {
            State::Count(v) => v.resize(n, 0),
            State::CountDistinct(v) => v.resize_with(n, HashSet::new),
            State::SumInt(v, s) => {
                v.resize(n, 0);
                s.resize(n, false)
            }
            State::SumReal(v, s) => {
                v.resize(n, (0.0, 0.0));
                s.resize(n, false)
            }
            State::AvgInt(v, c) => {
                v.resize(n, 0);
                c.resize(n, 0)
            }
            State::AvgReal(v, c) => {
                v.resize(n, (0.0, 0.0));
                c.resize(n, 0)
            }
            State::Best(_, v, _) => v.resize(n, None),
            State::Unset(_) => {}
        }
    }

    fn update(
        &mut self,
        ctx: &Ctx<'_>,
        gid: &[u32],
        groups: usize,
        arg: Option<&Vector>,
    ) -> FResult<()> {
        if let State::Unset(kind) = *self {
            *self = match (kind, arg) {
                (AggKind::Sum, Some(Vector::Int(..))) => State::SumInt(Vec::new(), Vec::new()),
                (AggKind::Sum, _) => State::SumReal(Vec::new(), Vec::new()),
                (AggKind::Avg, Some(Vector::Int(..))) => State::AvgInt(Vec::new(), Vec::new()),
                (AggKind::Avg, _) => State::AvgReal(Vec::new(), Vec::new()),
                _ => return unsupported("an aggregate's state"),
            };
        }
        self.grow(groups);
        match self {
            State::Count(v) => match arg {
                None => gid.iter().for_each(|&g| v[g as usize] += 1),
                Some(a) => {
                    for (i, &g) in gid.iter().enumerate() {
                        if !a.is_null(i) {
                            v[g as usize] += 1;
                        }
                    }
                }
            },
            State::CountDistinct(v) => {
                let a = arg.expect("an argument");
                for (i, &g) in gid.iter().enumerate() {
                    if let Some(w) = word(a, i, false) {
                        v[g as usize].insert(w);
                    }
                }
            }
            State::SumInt(v, seen) => add_ints(v, seen, gid, arg)?,
            State::AvgInt(v, c) => add_ints(v, c, gid, arg)?,
            State::SumReal(v, seen) => add_reals(v, seen, gid, arg)?,
            State::AvgReal(v, c) => add_reals(v, c, gid, arg)?,
            State::Best(max, best, dict) => {
                let a = arg.expect("an argument");
                let max = *max;
                let better = |o: Ordering| {
                    if max {
                        o == Ordering::Greater
                    } else {
                        o == Ordering::Less
                    }
                };
                match a {
                    Vector::Int(x, _) => {
                        for (i, &g) in gid.iter().enumerate() {
                            if a.is_null(i) {
                                continue;
                            }
                            let b = &mut best[g as usize];
                            match b {
                                Some(BestV::I(y)) if !better(x[i].cmp(y)) => {}
                                _ => *b = Some(BestV::I(x[i])),
                            }
                        }
                    }
                    Vector::Real(x, _) => {
                        for (i, &g) in gid.iter().enumerate() {
                            if a.is_null(i) {
                                continue;
                            }
                            let b = &mut best[g as usize];
                            match b {
                                Some(BestV::R(y))
                                    if !better(x[i].partial_cmp(y).unwrap_or(Ordering::Equal)) => {}
                                _ => *b = Some(BestV::R(x[i])),
                            }
                        }
                    }
                    Vector::Text(codes, d) => {
                        *dict = Some(*d);
                        let dicts = ctx.dicts.borrow();
                        let words = dicts[*d].dict();
                        for (i, &g) in gid.iter().enumerate() {
                            let c = codes[i];
                            if c == NULL_CODE {
                                continue;
                            }
                            let b = &mut best[g as usize];
                            match b {
                                Some(BestV::T(y)) if !better(words.get(c).cmp(words.get(*y))) => {}
                                _ => *b = Some(BestV::T(c)),
                            }
                        }
                    }
                    Vector::Const(Scalar::Null, _) => {}
                    _ => return unsupported("min or max of this kind"),
                }
            }
            State::Unset(_) => unreachable!("set above"),
        }
        Ok(())
    }

    fn finish(self, ty: ETy) -> FResult<Vector> {
        Ok(match self {
            State::Count(v) => Vector::Int(v, None),
            State::CountDistinct(v) => {
                Vector::Int(v.iter().map(|s| s.len() as i64).collect(), None)
            }
            State::SumInt(v, seen) => {
                let mut out = Vec::with_capacity(v.len());
                for s in &v {
                    match i64::try_from(*s) {
                        Ok(x) => out.push(x),
                        // SQLite's "integer overflow": its error, in its words.
                        Err(_) => return unsupported("a sum past the integers"),
                    }
                }
                Vector::Int(out, Some(seen.iter().map(|s| !s).collect()))
            }
            State::SumReal(v, seen) => Vector::Real(
                v.iter().map(|(s, e)| s + e).collect(),
                Some(seen.iter().map(|s| !s).collect()),
            ),
            State::AvgInt(v, c) => Vector::Real(
                v.iter()
                    .zip(&c)
                    .map(|(s, &n)| if n == 0 { 0.0 } else { *s as f64 / n as f64 })
                    .collect(),
                Some(c.iter().map(|&n| n == 0).collect()),
            ),
            State::AvgReal(v, c) => Vector::Real(
                v.iter()
                    .zip(&c)
                    .map(|((s, e), &n)| if n == 0 { 0.0 } else { (s + e) / n as f64 })
                    .collect(),
                Some(c.iter().map(|&n| n == 0).collect()),
            ),
            State::Best(_, best, dict) => {
                let nulls: Vec<bool> = best.iter().map(Option::is_none).collect();
                match ty {
                    ETy::Int => Vector::Int(
                        best.iter()
                            .map(|b| match b {
                                Some(BestV::I(x)) => *x,
                                _ => 0,
                            })
                            .collect(),
                        Some(nulls),
                    ),
                    ETy::Real => Vector::Real(
                        best.iter()
                            .map(|b| match b {
                                Some(BestV::R(x)) => *x,
                                _ => 0.0,
                            })
                            .collect(),
                        Some(nulls),
                    ),
                    ETy::Text => match dict {
                        Some(d) => Vector::Text(
                            best.iter()
                                .map(|b| match b {
                                    Some(BestV::T(c)) => *c,
                                    _ => NULL_CODE,
                                })
                                .collect(),
                            d,
                        ),
                        None => Vector::Const(Scalar::Null, best.len()),
                    },
                    _ => Vector::Const(Scalar::Null, best.len()),
                }
            }
            State::Unset(_) => unsupported("an aggregate that saw no batch")?,
        })
    }
}

/// Field `n` (from 1) of `text` split at `delim` (not empty), or "" past
/// the end: PostgreSQL's `split_part` for n > 0. A byte scan for the
/// delimiter's first byte: the profile of the lineage query spent 42% of
/// its time in `str::split`'s two-way searcher, built for long needles.
/// (A match of a UTF-8 delimiter always starts on a character boundary.)
fn nth_field<'t>(text: &'t str, delim: &str, n: usize) -> &'t str {
    let (t, d) = (text.as_bytes(), delim.as_bytes());
    let (mut start, mut field, mut i) = (0, 1, 0);
    while i + d.len() <= t.len() {
        if t[i] == d[0] && &t[i..i + d.len()] == d {
            if field == n {
                return &text[start..i];
            }
            field += 1;
            i += d.len();
            start = i;
        } else {
            i += 1;
        }
    }
    if field == n {
        &text[start..]
    } else {
        ""
    }
}

/// Whether field 1 of `text` split at `delim` (not empty) is `want`,
/// looking at no more than `want.len() + delim.len()` bytes: it is iff
/// `text` starts with `want` and the delimiter's first occurrence is
/// right after it (or there is none and `text` is `want`) — and any
/// occurrence starting before that point ends inside that window.
fn first_field_is(text: &[u8], delim: &[u8], want: &[u8]) -> bool {
    if !text.starts_with(want) {
        return false;
    }
    let window = &text[..text.len().min(want.len() + delim.len())];
    match window.windows(delim.len()).position(|w| w == delim) {
        Some(i) => i == want.len(),
        None => text.len() == want.len(),
    }
}

/// `=` or `<>` (as `holds` says) of texts coded in one dictionary, row
/// by row: a code absent from it equals no code in it.
fn codes_equal(
    a: &[u32],
    b: impl IntoIterator<Item = u32>,
    holds: impl Fn(Ordering) -> u8,
) -> Vec<u8> {
    a.iter()
        .zip(b)
        .map(|(&x, y)| {
            if x == NULL_CODE || y == NULL_CODE {
                2
            } else if x == y {
                holds(Ordering::Equal)
            } else {
                holds(Ordering::Less)
            }
        })
        .collect()
}

/// `acc AND v`, row by row, in three-valued logic (0, 1, 2 = NULL).
fn and3(acc: &mut [u8], v: Vec<u8>) {
    for (a, v) in acc.iter_mut().zip(v) {
        *a = match (*a, v) {
            (0, _) | (_, 0) => 0,
            (2, _) | (_, 2) => 2,
            _ => 1,
        };
    }
}

/// `acc OR v`, row by row, in three-valued logic.
fn or3(acc: &mut [u8], v: Vec<u8>) {
    for (a, v) in acc.iter_mut().zip(v) {
        *a = match (*a, v) {
            (1, _) | (_, 1) => 1,
            (2, _) | (_, 2) => 2,
            _ => 0,
        };
    }
}

/// `NOT v`, in place: NULL stays NULL.
fn not3(v: &mut [u8]) {
    for a in v {
        *a = match *a {
            0 => 1,
            1 => 0,
            n => n,
        };
    }
}

/// Three-valued truth of a vector: 0, 1 or 2 (NULL) per row.
fn truth(v: &Vector, len: usize) -> Vec<u8> {
    match v {
        Vector::Bool(b) => b.clone(),
        Vector::Const(Scalar::Null, _) => vec![2; len],
        Vector::Const(Scalar::Int(i), _) => vec![u8::from(*i != 0); len],
        Vector::Const(Scalar::Real(r), _) => vec![u8::from(*r != 0.0); len],
        Vector::Int(x, n) => (0..len)
            .map(|i| {
                if n.as_ref().is_some_and(|n| n[i]) {
                    2
                } else {
                    u8::from(x[i] != 0)
                }
            })
            .collect(),
        // The planner admits only booleans where truth is asked.
        _ => vec![2; len],
    }
}

/// A numeric view of a vector.
enum Num<'a> {
    I(&'a [i64], Option<&'a [bool]>),
    R(&'a [f64], Option<&'a [bool]>),
    CI(i64),
    CR(f64),
}

impl<'a> Num<'a> {
    fn of(v: &'a Vector) -> Option<Num<'a>> {
        Some(match v {
            Vector::Int(x, n) => Num::I(x, n.as_deref()),
            Vector::Real(x, n) => Num::R(x, n.as_deref()),
            Vector::Const(Scalar::Int(i), _) => Num::CI(*i),
            Vector::Const(Scalar::Real(r), _) => Num::CR(*r),
            _ => return None,
        })
    }

    fn int(&self, i: usize) -> Option<i64> {
        match self {
            Num::I(x, n) => (!n.is_some_and(|n| n[i])).then(|| x[i]),
            Num::CI(c) => Some(*c),
            _ => None,
        }
    }

    fn real(&self, i: usize) -> Option<f64> {
        match self {
            Num::I(x, n) => (!n.is_some_and(|n| n[i])).then(|| x[i] as f64),
            Num::R(x, n) => (!n.is_some_and(|n| n[i])).then(|| x[i]),
            Num::CI(c) => Some(*c as f64),
            Num::CR(c) => Some(*c),
        }
    }
}

/// A value as a hashable word (`None` for NULL); `real` reads a number
/// as its f64 (a key compared with reals).
fn word(v: &Vector, i: usize, real: bool) -> Option<u64> {
    let canon = |r: f64| if r == 0.0 { 0u64 } else { r.to_bits() };
    match v {
        Vector::Int(x, n) => {
            if n.as_ref().is_some_and(|n| n[i]) {
                None
            } else if real {
                Some(canon(x[i] as f64))
            } else {
                Some(x[i] as u64)
            }
        }
        Vector::Real(x, n) => (!n.as_ref().is_some_and(|n| n[i])).then(|| canon(x[i])),
        Vector::Text(c, _) => (c[i] != NULL_CODE).then_some(c[i] as u64),
        Vector::Bool(b) => (b[i] != 2).then_some(b[i] as u64),
        Vector::Const(s, _) => match s {
            Scalar::Null => None,
            Scalar::Int(x) if real => Some(canon(*x as f64)),
            Scalar::Int(x) => Some(*x as u64),
            Scalar::Real(r) => Some(canon(*r)),
            // Constant texts are coded before they get here.
            Scalar::Text(_) => Some(u64::MAX),
        },
    }
}

/// Column `c`'s values at `sel` (text codes of dictionary `dict`).
fn gather(c: &Column, sel: Sel<'_>, dict: usize) -> Vector {
    let nulls = c.nulls.as_deref();
    match sel {
        Sel::Range(a, b) => match &c.data {
            Data::Int(v) => Vector::Int(v[a..b].to_vec(), nulls.map(|n| n[a..b].to_vec())),
            Data::Real(v) => Vector::Real(v[a..b].to_vec(), nulls.map(|n| n[a..b].to_vec())),
            Data::Text(v) => Vector::Text(v[a..b].to_vec(), dict),
        },
        Sel::Ids(ids) => {
            let has_missing = ids.contains(&NO_ROW);
            let null_at = |id: u32| id == NO_ROW || nulls.is_some_and(|n| n[id as usize]);
            let nulls_out = (nulls.is_some() || has_missing)
                .then(|| ids.iter().map(|&id| null_at(id)).collect());
            match &c.data {
                Data::Int(v) => Vector::Int(
                    ids.iter()
                        .map(|&id| if id == NO_ROW { 0 } else { v[id as usize] })
                        .collect(),
                    nulls_out,
                ),
                Data::Real(v) => Vector::Real(
                    ids.iter()
                        .map(|&id| if id == NO_ROW { 0.0 } else { v[id as usize] })
                        .collect(),
                    nulls_out,
                ),
                Data::Text(v) => Vector::Text(
                    ids.iter()
                        .map(|&id| {
                            if id == NO_ROW {
                                NULL_CODE
                            } else {
                                v[id as usize]
                            }
                        })
                        .collect(),
                    dict,
                ),
            }
        }
        Sel::None => Vector::Const(Scalar::Null, 0),
    }
}

fn slice(v: &Vector, a: usize, b: usize) -> Vector {
    let idx: Vec<usize> = (a..b).collect();
    take(v, &idx)
}

/// The rows `idx` of `v`.
fn take(v: &Vector, idx: &[usize]) -> Vector {
    let pick_nulls =
        |n: &Option<Vec<bool>>| n.as_ref().map(|n| idx.iter().map(|&i| n[i]).collect());
    match v {
        Vector::Int(x, n) => Vector::Int(idx.iter().map(|&i| x[i]).collect(), pick_nulls(n)),
        Vector::Real(x, n) => Vector::Real(idx.iter().map(|&i| x[i]).collect(), pick_nulls(n)),
        Vector::Text(x, d) => Vector::Text(idx.iter().map(|&i| x[i]).collect(), *d),
        Vector::Bool(x) => Vector::Bool(idx.iter().map(|&i| x[i]).collect()),
        Vector::Const(s, _) => Vector::Const(s.clone(), idx.len()),
    }
}

/// A constant spelled out as the vector of its kind (a text constant
/// stays one: it has no dictionary).
fn expand(v: Vector) -> Vector {
    match v {
        Vector::Const(Scalar::Int(i), n) => Vector::Int(vec![i; n], None),
        Vector::Const(Scalar::Real(r), n) => Vector::Real(vec![r; n], None),
        v => v,
    }
}

/// `a` followed by `b` (of one expression, so of one kind).
fn append(a: Vector, b: Vector) -> FResult<Vector> {
    let join_nulls = |an: Option<Vec<bool>>, alen: usize, bn: Option<Vec<bool>>, blen: usize| {
        if an.is_none() && bn.is_none() {
            return None;
        }
        let mut n = an.unwrap_or_else(|| vec![false; alen]);
        n.extend(bn.unwrap_or_else(|| vec![false; blen]));
        Some(n)
    };
    Ok(match (a, b) {
        (Vector::Int(mut x, xn), Vector::Int(y, yn)) => {
            let (xl, yl) = (x.len(), y.len());
            x.extend(y);
            Vector::Int(x, join_nulls(xn, xl, yn, yl))
        }
        (Vector::Real(mut x, xn), Vector::Real(y, yn)) => {
            let (xl, yl) = (x.len(), y.len());
            x.extend(y);
            Vector::Real(x, join_nulls(xn, xl, yn, yl))
        }
        (Vector::Text(mut x, d), Vector::Text(y, e)) if d == e => {
            x.extend(y);
            Vector::Text(x, d)
        }
        (Vector::Bool(mut x), Vector::Bool(y)) => {
            x.extend(y);
            Vector::Bool(x)
        }
        (Vector::Const(s, n), Vector::Const(t, m)) if s == t => Vector::Const(s, n + m),
        (Vector::Const(Scalar::Null, 0), v) | (v, Vector::Const(Scalar::Null, 0)) => v,
        _ => return unsupported("values of one column in different kinds"),
    })
}

/// SQLite's order of two values of one column: NULL first, numbers by
/// value, texts by bytes.
fn compare_rows(ctx: &Ctx<'_>, v: &Vector, a: usize, b: usize) -> Ordering {
    match (v.is_null(a), v.is_null(b)) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    match v {
        Vector::Int(x, _) => x[a].cmp(&x[b]),
        Vector::Real(x, _) => x[a].partial_cmp(&x[b]).unwrap_or(Ordering::Equal),
        Vector::Text(x, d) => {
            if x[a] == x[b] {
                return Ordering::Equal;
            }
            let dicts = ctx.dicts.borrow();
            let words = dicts[*d].dict();
            words.get(x[a]).cmp(words.get(x[b]))
        }
        Vector::Bool(x) => x[a].cmp(&x[b]),
        Vector::Const(..) => Ordering::Equal,
    }
}

/// Row `i` of `v` as a value.
fn value(ctx: &Ctx<'_>, v: &Vector, i: usize) -> Value {
    if v.is_null(i) {
        return Value::Null;
    }
    match v {
        Vector::Int(x, _) => Value::Int(x[i]),
        Vector::Real(x, _) => Value::Real(x[i]),
        Vector::Text(x, d) => Value::Text(ctx.text(*d, x[i])),
        Vector::Bool(x) => Value::Int(i64::from(x[i])),
        Vector::Const(s, _) => match s {
            Scalar::Null => Value::Null,
            Scalar::Int(x) => Value::Int(*x),
            Scalar::Real(r) => Value::Real(*r),
            Scalar::Text(t) => Value::Text(t.clone()),
        },
    }
}

fn slot_of(e: &PExpr) -> usize {
    match e {
        PExpr::Col { slot, .. } => *slot,
        _ => usize::MAX,
    }
}

fn col_of(e: &PExpr) -> &str {
    match e {
        PExpr::Col { col, .. } => col,
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::{first_field_is, nth_field};

    #[test]
    fn first_field_is_is_nth_field_one_compared() {
        let texts = [
            "/in @0 +5",
            "/in",
            "/in @",
            "/i",
            "",
            " @",
            "/in  @0",
            "/inx @0",
            "baaa",
            "baa",
            "ba",
            "aab",
            "abab",
            "x @@ y",
            "é→é→",
            "é",
            "/f12 @3",
            "/f1 @3",
        ];
        let delims = [" @", "aa", "ab", "→", "@", "a"];
        let wants = ["/in", "", "b", "ba", "a", "é", "/f1", "/f12", "x", " "];
        for text in texts {
            for delim in delims {
                for want in wants {
                    assert_eq!(
                        first_field_is(text.as_bytes(), delim.as_bytes(), want.as_bytes()),
                        nth_field(text, delim, 1) == want,
                        "{text:?} {delim:?} {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn nth_field_is_split_part_for_positive_fields() {
        for (text, delim) in [
            ("/in @0 +5", " @"),
            ("a,b,,c", ","),
            ("", ","),
            ("no delimiter", " @"),
            ("x @@ y @ z", " @"),
            ("é→é→", "→"),
            ("aaa", "aa"),
        ] {
            for n in 1..6 {
                let want = crate::dialect::split_part(text, delim, n as i64).unwrap();
                assert_eq!(nth_field(text, delim, n), want, "{text:?} {delim:?} {n}");
            }
        }
    }
}
