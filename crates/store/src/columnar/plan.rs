//! From a statement to a columnar plan — or to "the row store answers
//! this" ([`Unsupported`]).
//!
//! The engine takes the shape analytics over OS state has: one `SELECT`
//! over kernel tables joined on equalities (inner or left), filtered by
//! comparisons, `IN`, `BETWEEN`, `IS NULL`, `AND`/`OR`/`NOT`, with
//! `split_part`, grouped with `count`, `sum`, `avg`, `min`, `max` and
//! `count(DISTINCT …)`, `DISTINCT`, `ORDER BY` an output column, `LIMIT`
//! and `OFFSET`. Everything else — subqueries, CTEs, casts, `LIKE`,
//! arithmetic, views, tenant tables, a comparison of a number with a text
//! (where SQLite's affinities decide), `SELECT *` — is SQLite's, so a
//! result never depends on which engine ran: the planner refuses what it
//! cannot give SQLite's exact answer for.

use sqlparser::ast::{
    self, BinaryOperator, Distinct, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    GroupByExpr, JoinConstraint, JoinOperator, LimitClause, OrderByKind, SelectItem, SetExpr,
    Statement, TableFactor, UnaryOperator,
};

use super::table::{unsupported, FResult, Ty};
use crate::value::Value;

/// Most keys of one equi-join or one grouping.
pub const KEYS_MAX: usize = 4;
/// Most tables one query joins.
pub const SLOTS_MAX: usize = 8;

/// A constant of a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A planned expression.
#[derive(Debug, Clone, PartialEq)]
pub enum PExpr {
    /// Column `col` of the table in FROM slot `slot`.
    Col {
        slot: usize,
        col: String,
    },
    /// Column `i` of the grouped result (group keys, then aggregates).
    Mat(usize),
    Lit(Scalar),
    Cmp(CmpOp, Box<PExpr>, Box<PExpr>),
    And(Vec<PExpr>),
    Or(Vec<PExpr>),
    Not(Box<PExpr>),
    IsNull(Box<PExpr>, bool),
    InList(Box<PExpr>, Vec<PExpr>, bool),
    SplitPart(Box<PExpr>, String, i64),
}

/// What an expression yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ETy {
    Int,
    Real,
    Text,
    Bool,
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Agg {
    pub kind: AggKind,
    pub arg: Option<PExpr>,
}

/// One table of FROM.
#[derive(Debug, Clone)]
pub struct Slot {
    pub table: String,
    pub alias: String,
    /// Its declared columns (name, kind the engine holds).
    pub declared: Vec<(String, Option<Ty>)>,
    /// The columns the query reads.
    pub used: Vec<(String, Ty)>,
    /// Conjuncts on this table alone, applied as it is scanned.
    pub filters: Vec<PExpr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
}

/// Joining slot `slot` to the slots before it.
#[derive(Debug, Clone)]
pub struct JoinStep {
    pub slot: usize,
    pub kind: JoinKind,
    /// (over the earlier slots, over `slot`).
    pub keys: Vec<(PExpr, PExpr)>,
    /// ON conjuncts neither a key nor on `slot` alone: checked per pair.
    pub on: Vec<PExpr>,
    /// WHERE conjuncts whose slots are all joined after this step.
    pub after: Vec<PExpr>,
}

#[derive(Debug, Clone)]
pub struct OrderKey {
    pub output: usize,
    pub desc: bool,
}

/// A query the engine runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub slots: Vec<Slot>,
    /// WHERE conjuncts on one table are in its slot's `filters`; the
    /// rest in the join step that brings their last table.
    pub joins: Vec<JoinStep>,
    pub grouped: Option<Grouping>,
    pub outputs: Vec<PExpr>,
    pub distinct: bool,
    pub order: Vec<OrderKey>,
    pub limit: Option<usize>,
    pub offset: usize,
}

#[derive(Debug, Clone)]
pub struct Grouping {
    pub keys: Vec<PExpr>,
    pub aggs: Vec<Agg>,
    pub having: Option<PExpr>,
    /// The kinds of the grouped result's columns (keys, then aggregates).
    pub types: Vec<ETy>,
}

/// What the planner needs to know of the database: a kernel table's
/// declared columns, `None` if `name` is not a kernel table the query may
/// read in its scope.
pub trait Catalog {
    fn table(&self, name: &str) -> FResult<Option<Declared>>;
}

/// A table's declared columns: name, and the kind the engine holds
/// (`None`: one it does not).
pub type Declared = Vec<(String, Option<Ty>)>;

/// Plans `sql` (PostgreSQL's dialect, as users write it) with `params`.
pub fn plan(sql: &str, params: &[Value], catalog: &dyn Catalog) -> FResult<Plan> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let statements = match sqlparser::parser::Parser::parse_sql(&dialect, sql) {
        Ok(s) => s,
        Err(e) => return unsupported(format!("not parsed: {e}")),
    };
    let [Statement::Query(q)] = statements.as_slice() else {
        return unsupported("not one SELECT");
    };
    if q.with.is_some()
        || q.fetch.is_some()
        || !q.locks.is_empty()
        || q.for_clause.is_some()
        || q.settings.is_some()
        || q.format_clause.is_some()
        || !q.pipe_operators.is_empty()
    {
        return unsupported("a clause the engine does not take");
    }
    let SetExpr::Select(s) = q.body.as_ref() else {
        return unsupported("not a plain SELECT");
    };
    if s.top.is_some()
        || s.into.is_some()
        || !s.lateral_views.is_empty()
        || s.prewhere.is_some()
        || !s.connect_by.is_empty()
        || !s.cluster_by.is_empty()
        || !s.distribute_by.is_empty()
        || !s.sort_by.is_empty()
        || !s.named_window.is_empty()
        || s.qualify.is_some()
        || s.exclude.is_some()
        || s.value_table_mode.is_some()
    {
        return unsupported("a clause the engine does not take");
    }
    let mut p = Planner {
        params,
        slots: Vec::new(),
    };
    // FROM: one table and its joins.
    let [from] = s.from.as_slice() else {
        return unsupported("not one FROM item");
    };
    let mut join_ons: Vec<(JoinKind, Option<&Expr>)> = Vec::new();
    p.add_slot(&from.relation, catalog)?;
    for j in &from.joins {
        let (kind, c) = match &j.join_operator {
            JoinOperator::Join(c) | JoinOperator::Inner(c) => (JoinKind::Inner, c),
            JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (JoinKind::Left, c),
            _ => return unsupported("a join other than inner or left"),
        };
        let JoinConstraint::On(on) = c else {
            return unsupported("a join without ON");
        };
        p.add_slot(&j.relation, catalog)?;
        join_ons.push((kind, Some(on)));
    }
    if p.slots.len() > SLOTS_MAX {
        return unsupported("too many tables");
    }
    // Join steps from the ON clauses.
    let mut joins = Vec::new();
    for (i, (kind, on)) in join_ons.into_iter().enumerate() {
        let slot = i + 1;
        let mut step = JoinStep {
            slot,
            kind,
            keys: Vec::new(),
            on: Vec::new(),
            after: Vec::new(),
        };
        if let Some(on) = on {
            for c in conjuncts(on) {
                let e = p.expr(c)?;
                let used = slots_of(&e);
                if used.iter().all(|&u| u == slot) {
                    p.slots[slot].filters.push(e);
                    continue;
                }
                if let Some((l, r)) = equi_key(&e, slot) {
                    if p.key_types_match(&l, &r) {
                        step.keys.push((l, r));
                        continue;
                    }
                }
                if used.iter().any(|&u| u > slot) {
                    return unsupported("ON names a later table");
                }
                step.on.push(e);
            }
        }
        if step.keys.is_empty() {
            return unsupported("a join without an equality key");
        }
        if step.keys.len() > KEYS_MAX {
            return unsupported("too many join keys");
        }
        joins.push(step);
    }
    // WHERE: on one table when it can be (not the inner side of a left
    // join, whose NULL rows the condition must see), else after the join
    // that brings its last table.
    if let Some(w) = &s.selection {
        for c in conjuncts(w) {
            let e = p.expr(c)?;
            let used = slots_of(&e);
            let last = used.iter().copied().max().unwrap_or(0);
            let single = used.iter().all(|&u| u == last);
            let left_inner = joins
                .iter()
                .any(|j: &JoinStep| j.slot == last && j.kind == JoinKind::Left);
            if single && !left_inner {
                p.slots[last].filters.push(e);
            } else if last == 0 {
                p.slots[0].filters.push(e);
            } else {
                joins[last - 1].after.push(e);
            }
        }
    }
    // The select list.
    let mut items = Vec::new();
    let mut aliases: Vec<Option<String>> = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                items.push(e);
                aliases.push(None);
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                items.push(expr);
                aliases.push(Some(alias.value.to_ascii_lowercase()));
            }
            _ => return unsupported("a wildcard in the select list"),
        }
    }
    let distinct = match &s.distinct {
        None | Some(Distinct::All) => false,
        Some(Distinct::Distinct) => true,
        Some(_) => return unsupported("DISTINCT ON"),
    };
    let group_exprs: Vec<&Expr> = match &s.group_by {
        GroupByExpr::Expressions(exprs, mods) if mods.is_empty() => exprs.iter().collect(),
        _ => return unsupported("GROUP BY ALL or a modifier"),
    };
    let any_agg = items.iter().any(|e| has_agg(e)) || s.having.as_ref().is_some_and(has_agg);
    let (mut grouped, outputs) = if any_agg || !group_exprs.is_empty() {
        let mut keys = Vec::new();
        for g in &group_exprs {
            // GROUP BY 2, GROUP BY an output's alias, or an expression.
            let e = match positional(g)? {
                Some(i) => match items.get(i) {
                    Some(item) => p.expr(item)?,
                    None => return unsupported("GROUP BY position out of range"),
                },
                None => match alias_of(g, &aliases, &p)? {
                    Some(i) => p.expr(items[i])?,
                    None => p.expr(g)?,
                },
            };
            if has_agg_planned(&e) {
                return unsupported("an aggregate in GROUP BY");
            }
            keys.push(e);
        }
        if keys.len() > KEYS_MAX {
            return unsupported("too many GROUP BY keys");
        }
        let mut aggs = Vec::new();
        let mut outputs = Vec::new();
        for item in &items {
            outputs.push(p.grouped_expr(item, &keys, &mut aggs)?);
        }
        let having = match &s.having {
            Some(h) => Some(p.grouped_expr(h, &keys, &mut aggs)?),
            None => None,
        };
        (
            Some(Grouping {
                keys,
                aggs,
                having,
                types: Vec::new(),
            }),
            outputs,
        )
    } else {
        if s.having.is_some() {
            return unsupported("HAVING without grouping");
        }
        let mut outputs = Vec::new();
        for item in &items {
            outputs.push(p.expr(item)?);
        }
        (None, outputs)
    };
    // ORDER BY an output column: by position, alias or the same
    // expression.
    let mut order = Vec::new();
    if let Some(ob) = &q.order_by {
        let OrderByKind::Expressions(list) = &ob.kind else {
            return unsupported("ORDER BY ALL");
        };
        if ob.interpolate.is_some() {
            return unsupported("INTERPOLATE");
        }
        for o in list {
            if o.options.nulls_first.is_some() || o.with_fill.is_some() {
                return unsupported("NULLS FIRST/LAST or WITH FILL");
            }
            let desc = match &o.options.sort {
                None | Some(ast::OrderBySort::Asc) => false,
                Some(ast::OrderBySort::Desc) => true,
                Some(_) => return unsupported("ORDER BY USING"),
            };
            let output = match positional(&o.expr)? {
                Some(i) if i < outputs.len() => i,
                Some(_) => return unsupported("ORDER BY position out of range"),
                None => match alias_of(&o.expr, &aliases, &p)? {
                    Some(i) => i,
                    None => {
                        let e = match &grouped {
                            Some(g) => {
                                let mut aggs = g.aggs.clone();
                                let e = p.grouped_expr(&o.expr, &g.keys, &mut aggs)?;
                                if aggs.len() != g.aggs.len() {
                                    return unsupported("ORDER BY an aggregate not selected");
                                }
                                e
                            }
                            None => p.expr(&o.expr)?,
                        };
                        match outputs.iter().position(|x| *x == e) {
                            Some(i) => i,
                            None => return unsupported("ORDER BY an expression not selected"),
                        }
                    }
                },
            };
            order.push(OrderKey { output, desc });
        }
    }
    let (limit, offset) = match &q.limit_clause {
        None => (None, 0),
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) if limit_by.is_empty() => {
            let l = match limit {
                Some(e) => p.count(e)?,
                None => None,
            };
            let o = match offset {
                Some(o) => p.count(&o.value)?.unwrap_or(0),
                None => 0,
            };
            (l, o)
        }
        Some(_) => return unsupported("this LIMIT form"),
    };
    // Every expression's kinds must be ones SQLite would compare the same
    // way.
    // A condition must be a boolean: SQLite's truth of a number or a
    // text is its own.
    for slot in &p.slots {
        for f in &slot.filters {
            if !matches!(p.typed(f, None)?, ETy::Bool | ETy::Null) {
                return unsupported("a condition that is not a boolean");
            }
        }
    }
    for j in &joins {
        for e in j.on.iter().chain(&j.after) {
            if !matches!(p.typed(e, None)?, ETy::Bool | ETy::Null) {
                return unsupported("a condition that is not a boolean");
            }
        }
    }
    if let Some(g) = &mut grouped {
        for k in &g.keys {
            p.typed(k, None)?;
        }
        for a in &g.aggs {
            if let Some(arg) = &a.arg {
                let t = p.typed(arg, None)?;
                if matches!(a.kind, AggKind::Sum | AggKind::Avg)
                    && !matches!(t, ETy::Int | ETy::Real)
                {
                    return unsupported("sum or avg of a non-number");
                }
            }
        }
        let mat = mat_types(&p, g)?;
        for o in &outputs {
            p.typed(o, Some(&mat))?;
        }
        if let Some(h) = &g.having {
            if !matches!(p.typed(h, Some(&mat))?, ETy::Bool | ETy::Null) {
                return unsupported("HAVING of a non-boolean");
            }
        }
        g.types = mat;
    } else {
        for o in &outputs {
            p.typed(o, None)?;
        }
    }
    Ok(Plan {
        slots: p.slots,
        joins,
        grouped,
        outputs,
        distinct,
        order,
        limit,
        offset,
    })
}

/// The kinds of a grouped result's columns: its keys, then its
/// aggregates.
pub fn mat_types(p: &dyn Typer, g: &Grouping) -> FResult<Vec<ETy>> {
    let mut out = Vec::new();
    for k in &g.keys {
        out.push(p.ty_of(k, None)?);
    }
    for a in &g.aggs {
        out.push(match a.kind {
            AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => ETy::Int,
            AggKind::Avg => ETy::Real,
            AggKind::Sum | AggKind::Min | AggKind::Max => {
                let t = p.ty_of(a.arg.as_ref().expect("an argument"), None)?;
                if t == ETy::Bool {
                    ETy::Int
                } else {
                    t
                }
            }
        });
    }
    Ok(out)
}

/// Kinds of planned expressions.
pub trait Typer {
    fn ty_of(&self, e: &PExpr, mat: Option<&[ETy]>) -> FResult<ETy>;
}

struct Planner<'a> {
    params: &'a [Value],
    slots: Vec<Slot>,
}

impl Typer for Planner<'_> {
    fn ty_of(&self, e: &PExpr, mat: Option<&[ETy]>) -> FResult<ETy> {
        self.typed(e, mat)
    }
}

/// Column types of a slot's columns, for typing.
pub fn slot_ty(slots: &[Slot], slot: usize, col: &str) -> Option<Ty> {
    slots[slot]
        .declared
        .iter()
        .find(|(n, _)| n == col)
        .and_then(|(_, t)| *t)
}

impl Planner<'_> {
    fn add_slot(&mut self, f: &TableFactor, catalog: &dyn Catalog) -> FResult<()> {
        let TableFactor::Table {
            name,
            alias,
            args,
            with_hints,
            version,
            with_ordinality,
            partitions,
            json_path,
            sample,
            index_directives,
            inheritance,
        } = f
        else {
            return unsupported("FROM something other than a table");
        };
        if args.is_some()
            || !with_hints.is_empty()
            || version.is_some()
            || *with_ordinality
            || !partitions.is_empty()
            || json_path.is_some()
            || sample.is_some()
            || !index_directives.is_empty()
            || inheritance.is_some()
        {
            return unsupported("a table modifier");
        }
        let [part] = name.0.as_slice() else {
            return unsupported("a qualified table name");
        };
        let Some(ident) = part.as_ident() else {
            return unsupported("a table function");
        };
        let table = ident.value.to_ascii_lowercase();
        let Some(declared) = catalog.table(&table)? else {
            return unsupported(format!("{table} is not a kernel table"));
        };
        let alias = match alias {
            Some(a) if a.columns.is_empty() => a.name.value.to_ascii_lowercase(),
            Some(_) => return unsupported("column aliases on a table"),
            None => table.clone(),
        };
        if self.slots.iter().any(|s| s.alias == alias) {
            return unsupported("a table name used twice");
        }
        self.slots.push(Slot {
            table,
            alias,
            declared,
            used: Vec::new(),
            filters: Vec::new(),
        });
        Ok(())
    }

    fn column(&mut self, slot: usize, col: &str) -> FResult<PExpr> {
        let s = &mut self.slots[slot];
        let Some((_, ty)) = s.declared.iter().find(|(n, _)| n == col) else {
            return unsupported(format!("no column {col}"));
        };
        let Some(ty) = *ty else {
            return unsupported(format!(
                "column {col} is of a kind the engine does not hold"
            ));
        };
        if !s.used.iter().any(|(n, _)| n == col) {
            s.used.push((col.to_string(), ty));
        }
        Ok(PExpr::Col {
            slot,
            col: col.to_string(),
        })
    }

    fn expr(&mut self, e: &Expr) -> FResult<PExpr> {
        Ok(match e {
            Expr::Nested(inner) => self.expr(inner)?,
            Expr::Identifier(id) => {
                let col = id.value.to_ascii_lowercase();
                let hits: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.slots[i].declared.iter().any(|(n, _)| *n == col))
                    .collect();
                match hits.as_slice() {
                    [one] => self.column(*one, &col)?,
                    _ => return unsupported(format!("column {col} unknown or ambiguous")),
                }
            }
            Expr::CompoundIdentifier(parts) => {
                let [t, c] = parts.as_slice() else {
                    return unsupported("a column name of more than two parts");
                };
                let alias = t.value.to_ascii_lowercase();
                let Some(slot) = self.slots.iter().position(|s| s.alias == alias) else {
                    return unsupported(format!("no table {alias}"));
                };
                self.column(slot, &c.value.to_ascii_lowercase())?
            }
            Expr::Value(v) => PExpr::Lit(self.literal(&v.value)?),
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match self.expr(expr)? {
                PExpr::Lit(Scalar::Int(i)) if i != i64::MIN => PExpr::Lit(Scalar::Int(-i)),
                PExpr::Lit(Scalar::Real(r)) => PExpr::Lit(Scalar::Real(-r)),
                _ => return unsupported("a minus sign on an expression"),
            },
            Expr::UnaryOp {
                op: UnaryOperator::Not,
                expr,
            } => PExpr::Not(Box::new(self.expr(expr)?)),
            Expr::BinaryOp { left, op, right } => {
                let cmp = match op {
                    BinaryOperator::Eq => Some(CmpOp::Eq),
                    BinaryOperator::NotEq => Some(CmpOp::Ne),
                    BinaryOperator::Lt => Some(CmpOp::Lt),
                    BinaryOperator::LtEq => Some(CmpOp::Le),
                    BinaryOperator::Gt => Some(CmpOp::Gt),
                    BinaryOperator::GtEq => Some(CmpOp::Ge),
                    _ => None,
                };
                match (cmp, op) {
                    (Some(c), _) => {
                        PExpr::Cmp(c, Box::new(self.expr(left)?), Box::new(self.expr(right)?))
                    }
                    (None, BinaryOperator::And) => {
                        PExpr::And(vec![self.expr(left)?, self.expr(right)?])
                    }
                    (None, BinaryOperator::Or) => {
                        PExpr::Or(vec![self.expr(left)?, self.expr(right)?])
                    }
                    _ => return unsupported(format!("operator {op}")),
                }
            }
            Expr::IsNull(x) => PExpr::IsNull(Box::new(self.expr(x)?), false),
            Expr::IsNotNull(x) => PExpr::IsNull(Box::new(self.expr(x)?), true),
            Expr::In {
                expr,
                target: ast::InTarget::List(list),
                negated,
                global: false,
            } => {
                let x = self.expr(expr)?;
                let mut l = Vec::new();
                for i in list {
                    l.push(self.expr(i)?);
                }
                if l.is_empty() {
                    return unsupported("an empty IN list");
                }
                PExpr::InList(Box::new(x), l, *negated)
            }
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let x = self.expr(expr)?;
                let b = PExpr::And(vec![
                    PExpr::Cmp(CmpOp::Ge, Box::new(x.clone()), Box::new(self.expr(low)?)),
                    PExpr::Cmp(CmpOp::Le, Box::new(x), Box::new(self.expr(high)?)),
                ]);
                if *negated {
                    PExpr::Not(Box::new(b))
                } else {
                    b
                }
            }
            Expr::Function(f) if is_agg_fn(f) => {
                return unsupported("an aggregate where it cannot be")
            }
            Expr::Function(f) => {
                let name = function_name(f);
                let args = plain_args(f)?;
                match (name.as_str(), args.as_slice()) {
                    ("split_part", [x, d, n]) => {
                        let x = self.expr(x)?;
                        let (PExpr::Lit(Scalar::Text(d)), PExpr::Lit(Scalar::Int(n))) =
                            (self.expr(d)?, self.expr(n)?)
                        else {
                            return unsupported("split_part with a computed delimiter or field");
                        };
                        if n == 0 {
                            // PostgreSQL's (and the dialect's) error.
                            return unsupported("split_part field 0");
                        }
                        PExpr::SplitPart(Box::new(x), d, n)
                    }
                    _ => return unsupported(format!("function {name}")),
                }
            }
            _ => return unsupported("this kind of expression"),
        })
    }

    /// An expression of a grouped query: group keys become their column
    /// of the grouped result, aggregates theirs (one per distinct call).
    fn grouped_expr(&mut self, e: &Expr, keys: &[PExpr], aggs: &mut Vec<Agg>) -> FResult<PExpr> {
        if let Expr::Nested(inner) = e {
            return self.grouped_expr(inner, keys, aggs);
        }
        if let Expr::Function(f) = e {
            if is_agg_fn(f) {
                let agg = self.agg(f)?;
                let i = match aggs.iter().position(|a| *a == agg) {
                    Some(i) => i,
                    None => {
                        aggs.push(agg);
                        aggs.len() - 1
                    }
                };
                return Ok(PExpr::Mat(keys.len() + i));
            }
        }
        // Whole-expression match with a key first; otherwise build from
        // the parts.
        if !has_agg(e) {
            if let Ok(planned) = self.expr(e) {
                if let Some(i) = keys.iter().position(|k| *k == planned) {
                    return Ok(PExpr::Mat(i));
                }
                if slots_of(&planned).is_empty() {
                    return Ok(planned);
                }
            }
        }
        Ok(match e {
            Expr::BinaryOp { left, op, right } => {
                let l = self.grouped_expr(left, keys, aggs)?;
                let r = self.grouped_expr(right, keys, aggs)?;
                match op {
                    BinaryOperator::And => PExpr::And(vec![l, r]),
                    BinaryOperator::Or => PExpr::Or(vec![l, r]),
                    BinaryOperator::Eq => PExpr::Cmp(CmpOp::Eq, Box::new(l), Box::new(r)),
                    BinaryOperator::NotEq => PExpr::Cmp(CmpOp::Ne, Box::new(l), Box::new(r)),
                    BinaryOperator::Lt => PExpr::Cmp(CmpOp::Lt, Box::new(l), Box::new(r)),
                    BinaryOperator::LtEq => PExpr::Cmp(CmpOp::Le, Box::new(l), Box::new(r)),
                    BinaryOperator::Gt => PExpr::Cmp(CmpOp::Gt, Box::new(l), Box::new(r)),
                    BinaryOperator::GtEq => PExpr::Cmp(CmpOp::Ge, Box::new(l), Box::new(r)),
                    _ => return unsupported(format!("operator {op}")),
                }
            }
            Expr::UnaryOp {
                op: UnaryOperator::Not,
                expr,
            } => PExpr::Not(Box::new(self.grouped_expr(expr, keys, aggs)?)),
            _ => return unsupported("a column neither grouped nor aggregated"),
        })
    }

    fn agg(&mut self, f: &ast::Function) -> FResult<Agg> {
        let name = function_name(f);
        let FunctionArguments::List(list) = &f.args else {
            return unsupported("an aggregate without arguments");
        };
        if !list.clauses.is_empty() {
            return unsupported("an aggregate clause");
        }
        let distinct = matches!(
            list.duplicate_treatment,
            Some(ast::DuplicateTreatment::Distinct)
        );
        if let [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] = list.args.as_slice() {
            if name == "count" && !distinct {
                return Ok(Agg {
                    kind: AggKind::CountStar,
                    arg: None,
                });
            }
            return unsupported("* in an aggregate");
        }
        let args = plain_args(f)?;
        let [arg] = args.as_slice() else {
            return unsupported("an aggregate of several arguments");
        };
        let arg = self.expr(arg)?;
        let kind = match (name.as_str(), distinct) {
            ("count", false) => AggKind::Count,
            ("count", true) => AggKind::CountDistinct,
            ("sum", false) => AggKind::Sum,
            ("avg", false) => AggKind::Avg,
            ("min", false) => AggKind::Min,
            ("max", false) => AggKind::Max,
            _ => return unsupported(format!("aggregate {name}")),
        };
        Ok(Agg {
            kind,
            arg: Some(arg),
        })
    }

    fn literal(&self, v: &ast::Value) -> FResult<Scalar> {
        Ok(match v {
            ast::Value::Number(n, _) => {
                if let Ok(i) = n.parse::<i64>() {
                    Scalar::Int(i)
                } else if n.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    match n.parse::<f64>() {
                        Ok(r) => Scalar::Real(r),
                        Err(_) => return unsupported("a number"),
                    }
                } else {
                    return unsupported("a number's form");
                }
            }
            ast::Value::SingleQuotedString(s) => Scalar::Text(s.clone()),
            ast::Value::Null => Scalar::Null,
            ast::Value::Boolean(b) => Scalar::Int(i64::from(*b)),
            ast::Value::Placeholder(p) => {
                let Some(i) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) else {
                    return unsupported("a placeholder that is not $N");
                };
                match i.checked_sub(1).and_then(|i| self.params.get(i)) {
                    Some(Value::Null) => Scalar::Null,
                    Some(Value::Int(x)) => Scalar::Int(*x),
                    Some(Value::Real(x)) => Scalar::Real(*x),
                    Some(Value::Text(t)) => Scalar::Text(t.clone()),
                    Some(Value::Blob(_)) => return unsupported("a blob parameter"),
                    None => return unsupported("a parameter not given"),
                }
            }
            _ => return unsupported("this kind of literal"),
        })
    }

    /// A LIMIT's or OFFSET's count (`None`: no limit, as SQLite reads a
    /// negative one).
    fn count(&self, e: &Expr) -> FResult<Option<usize>> {
        let v = match e {
            Expr::Value(v) => self.literal(&v.value)?,
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match expr.as_ref() {
                Expr::Value(v) => match self.literal(&v.value)? {
                    Scalar::Int(i) => Scalar::Int(-i),
                    _ => return unsupported("this LIMIT"),
                },
                _ => return unsupported("this LIMIT"),
            },
            _ => return unsupported("a computed LIMIT"),
        };
        match v {
            Scalar::Int(i) if i < 0 => Ok(None),
            Scalar::Int(i) => Ok(Some(usize::try_from(i).unwrap_or(usize::MAX))),
            _ => unsupported("a LIMIT that is not an integer"),
        }
    }

    fn key_types_match(&self, l: &PExpr, r: &PExpr) -> bool {
        let (Ok(a), Ok(b)) = (self.typed(l, None), self.typed(r, None)) else {
            return false;
        };
        matches!(
            (a, b),
            (ETy::Int | ETy::Real, ETy::Int | ETy::Real) | (ETy::Text, ETy::Text)
        )
    }

    /// The kind `e` yields, refusing mixes whose meaning SQLite's
    /// affinities decide.
    fn typed(&self, e: &PExpr, mat: Option<&[ETy]>) -> FResult<ETy> {
        Ok(match e {
            PExpr::Col { slot, col } => match slot_ty(&self.slots, *slot, col) {
                Some(Ty::Int) => ETy::Int,
                Some(Ty::Real) => ETy::Real,
                Some(Ty::Text) => ETy::Text,
                None => return unsupported("a column the engine does not hold"),
            },
            PExpr::Mat(i) => match mat.and_then(|m| m.get(*i)) {
                Some(t) => *t,
                None => return unsupported("a grouped column outside grouping"),
            },
            PExpr::Lit(s) => match s {
                Scalar::Null => ETy::Null,
                Scalar::Int(_) => ETy::Int,
                Scalar::Real(_) => ETy::Real,
                Scalar::Text(_) => ETy::Text,
            },
            PExpr::Cmp(_, a, b) => {
                let (a, b) = (self.typed(a, mat)?, self.typed(b, mat)?);
                comparable(a, b)?;
                ETy::Bool
            }
            PExpr::And(xs) | PExpr::Or(xs) => {
                for x in xs {
                    if !matches!(self.typed(x, mat)?, ETy::Bool | ETy::Null) {
                        return unsupported("a logical operator on a non-boolean");
                    }
                }
                ETy::Bool
            }
            PExpr::Not(x) => {
                if !matches!(self.typed(x, mat)?, ETy::Bool | ETy::Null) {
                    return unsupported("NOT of a non-boolean");
                }
                ETy::Bool
            }
            PExpr::IsNull(x, _) => {
                self.typed(x, mat)?;
                ETy::Bool
            }
            PExpr::InList(x, list, _) => {
                let t = self.typed(x, mat)?;
                for i in list {
                    comparable(t, self.typed(i, mat)?)?;
                }
                ETy::Bool
            }
            PExpr::SplitPart(x, _, _) => match self.typed(x, mat)? {
                ETy::Text | ETy::Null => ETy::Text,
                _ => return unsupported("split_part of a non-text"),
            },
        })
    }
}

/// Whether SQLite compares `a` and `b` as the engine does (numbers with
/// numbers, texts with texts, or a NULL).
fn comparable(a: ETy, b: ETy) -> FResult<()> {
    match (a, b) {
        (ETy::Null, _) | (_, ETy::Null) => Ok(()),
        (ETy::Int | ETy::Real, ETy::Int | ETy::Real) => Ok(()),
        (ETy::Text, ETy::Text) => Ok(()),
        _ => unsupported("a comparison of different kinds"),
    }
}

fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut v = conjuncts(left);
            v.extend(conjuncts(right));
            v
        }
        Expr::Nested(inner) => match inner.as_ref() {
            Expr::BinaryOp {
                op: BinaryOperator::And,
                ..
            } => conjuncts(inner),
            _ => vec![e],
        },
        _ => vec![e],
    }
}

/// The FROM slots an expression reads.
pub fn slots_of(e: &PExpr) -> Vec<usize> {
    fn walk(e: &PExpr, out: &mut Vec<usize>) {
        match e {
            PExpr::Col { slot, .. } => {
                if !out.contains(slot) {
                    out.push(*slot)
                }
            }
            PExpr::Mat(_) | PExpr::Lit(_) => {}
            PExpr::Cmp(_, a, b) => {
                walk(a, out);
                walk(b, out);
            }
            PExpr::And(xs) | PExpr::Or(xs) => xs.iter().for_each(|x| walk(x, out)),
            PExpr::Not(x) | PExpr::IsNull(x, _) | PExpr::SplitPart(x, _, _) => walk(x, out),
            PExpr::InList(x, l, _) => {
                walk(x, out);
                l.iter().for_each(|i| walk(i, out));
            }
        }
    }
    let mut out = Vec::new();
    walk(e, &mut out);
    out
}

/// `a = b` with one side over `slot` alone and the other over earlier
/// slots (and some slot): (earlier side, `slot`'s side).
fn equi_key(e: &PExpr, slot: usize) -> Option<(PExpr, PExpr)> {
    let PExpr::Cmp(CmpOp::Eq, a, b) = e else {
        return None;
    };
    let (sa, sb) = (slots_of(a), slots_of(b));
    let only = |s: &[usize]| !s.is_empty() && s.iter().all(|&x| x == slot);
    let before = |s: &[usize]| !s.is_empty() && s.iter().all(|&x| x < slot);
    if before(&sa) && only(&sb) {
        Some((a.as_ref().clone(), b.as_ref().clone()))
    } else if only(&sa) && before(&sb) {
        Some((b.as_ref().clone(), a.as_ref().clone()))
    } else {
        None
    }
}

fn function_name(f: &ast::Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

fn is_agg_fn(f: &ast::Function) -> bool {
    let name = function_name(f);
    let one_arg = match &f.args {
        FunctionArguments::List(l) => l.args.len() == 1,
        _ => false,
    };
    // min and max of several arguments are SQLite's scalar functions.
    matches!(name.as_str(), "count" | "sum" | "avg" | "total")
        || (matches!(name.as_str(), "min" | "max") && one_arg)
}

fn has_agg(e: &Expr) -> bool {
    let mut found = false;
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let Expr::Function(f) = x {
            if is_agg_fn(f) {
                found = true;
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}

fn has_agg_planned(e: &PExpr) -> bool {
    match e {
        PExpr::Mat(_) => true,
        PExpr::Col { .. } | PExpr::Lit(_) => false,
        PExpr::Cmp(_, a, b) => has_agg_planned(a) || has_agg_planned(b),
        PExpr::And(xs) | PExpr::Or(xs) => xs.iter().any(has_agg_planned),
        PExpr::Not(x) | PExpr::IsNull(x, _) | PExpr::SplitPart(x, _, _) => has_agg_planned(x),
        PExpr::InList(x, l, _) => has_agg_planned(x) || l.iter().any(has_agg_planned),
    }
}

/// A function's plain positional arguments; anything else refused.
fn plain_args(f: &ast::Function) -> FResult<Vec<&Expr>> {
    if f.filter.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
        || f.null_treatment.is_some()
        || !matches!(f.parameters, FunctionArguments::None)
    {
        return unsupported("a function clause");
    }
    let FunctionArguments::List(list) = &f.args else {
        return unsupported("a function without an argument list");
    };
    if !list.clauses.is_empty() || list.duplicate_treatment.is_some() && !is_agg_fn(f) {
        return unsupported("a function argument clause");
    }
    let mut out = Vec::new();
    for a in &list.args {
        match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(e),
            _ => return unsupported("a named or wildcard argument"),
        }
    }
    Ok(out)
}

/// `ORDER BY 2`, `GROUP BY 1`: the output column (0-based).
fn positional(e: &Expr) -> FResult<Option<usize>> {
    if let Expr::Value(v) = e {
        if let ast::Value::Number(n, _) = &v.value {
            return match n.parse::<usize>() {
                Ok(i) if i >= 1 => Ok(Some(i - 1)),
                _ => unsupported("a position that is not a whole number from 1"),
            };
        }
    }
    Ok(None)
}

/// An output named by its alias. A name that is both an alias and a
/// column is refused: SQLite's ORDER BY takes the alias and its GROUP BY
/// the column, a subtlety left to SQLite.
fn alias_of(e: &Expr, aliases: &[Option<String>], p: &Planner<'_>) -> FResult<Option<usize>> {
    let Expr::Identifier(id) = e else {
        return Ok(None);
    };
    let name = id.value.to_ascii_lowercase();
    let alias = aliases
        .iter()
        .position(|a| a.as_deref() == Some(name.as_str()));
    let is_column = p
        .slots
        .iter()
        .any(|s| s.declared.iter().any(|(n, _)| *n == name));
    match (alias, is_column) {
        (Some(_), true) => unsupported(format!("{name} is both an alias and a column")),
        (alias, _) => Ok(alias),
    }
}
