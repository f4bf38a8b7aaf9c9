//! The result file of a suite and its printed table.
//!
//! A figure holds tabos's value, its peer's (measured in the same run, the
//! same number of runs, the same statistic: [`Figure::runs`]) and, apart
//! from both, a [`Reference`]: a number quoted from a paper or a vendor,
//! shown for context and never a ratio's denominator. [`Report::check`]
//! refuses a report that breaks those rules, and [`Report::write`] writes
//! none that does.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::machine::Machine;

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// How a figure's value (and its peer's) was drawn from its runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Operations completed over all measured runs, divided by their
    /// wall-clock time.
    Rate,
    /// The median of every sample of every run.
    P50,
    /// The 99th percentile of every sample of every run.
    P99,
    /// The mean of every sample of every run.
    Mean,
    /// The median of the runs' values (each run one value: a wall time, a
    /// rate).
    MedianOfRuns,
    /// The best of the runs' values.
    BestOfRuns,
}

/// A figure quoted from a paper or a vendor: context for a measured one,
/// never its peer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Reference {
    pub name: String,
    pub value: f64,
}

/// One measured figure, with its peer's and the target it is held to.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub better: Better,
    pub peer: String,
    pub peer_value: Option<f64>,
    /// tabos / peer.
    pub ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
    /// How many runs each contestant got ([`Figure::runs`]).
    pub runs: Option<u32>,
    /// The statistic both the value and the peer's value are.
    pub stat: Option<Stat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Figure {
    pub fn new(name: impl Into<String>, value: f64, unit: &str, better: Better) -> Figure {
        Figure {
            name: name.into(),
            value,
            unit: unit.to_string(),
            better,
            peer: String::new(),
            peer_value: None,
            ratio: None,
            reference: None,
            runs: None,
            stat: None,
            target: None,
            met: None,
            note: None,
        }
    }

    /// Sets the peer and computes the ratio tabos / peer.
    pub fn peer(mut self, peer: &str, peer_value: Option<f64>) -> Figure {
        self.peer = peer.to_string();
        self.peer_value = peer_value;
        self.ratio = peer_value
            .filter(|p| *p != 0.0 && p.is_finite() && self.value.is_finite())
            .map(|p| round(self.value / p, 3));
        self
    }

    /// Shows a figure quoted from a paper or a vendor beside this one.
    pub fn reference(mut self, name: &str, value: f64) -> Figure {
        self.reference = Some(Reference {
            name: name.to_string(),
            value,
        });
        self
    }

    /// Says how the value was drawn: `runs` runs for every contestant, and
    /// the statistic both the value and the peer's value are.
    pub fn runs(mut self, runs: u32, stat: Stat) -> Figure {
        self.runs = Some(runs);
        self.stat = Some(stat);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Figure {
        self.note = Some(note.into());
        self
    }

    /// Holds the figure to `target`: `ratio <= x`, `ratio >= x`, `value <= x`
    /// or `value >= x`.
    pub fn target(mut self, target: &str) -> Figure {
        let parts: Vec<&str> = target.split_whitespace().collect();
        // A target the report cannot read could never be met.
        let [what, op, bound] = parts.as_slice() else {
            panic!("a target the report cannot read: {target:?}");
        };
        let bound: f64 = bound
            .parse()
            .unwrap_or_else(|_| panic!("a target's bound is not a number: {target:?}"));
        let x = match *what {
            "ratio" => self.ratio,
            "value" => Some(self.value),
            _ => panic!("a target of neither ratio nor value: {target:?}"),
        };
        let met = x.map(|x| match *op {
            "<=" => x <= bound,
            ">=" => x >= bound,
            _ => panic!("a target's comparison is neither <= nor >=: {target:?}"),
        });
        self.target = Some(target.to_string());
        // An unmeasured peer never meets a ratio target.
        self.met = Some(met.unwrap_or(false));
        self
    }
}

pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// A time series measured during a run: `(x, y)` points, drawn with the
/// other series of the same `plot` into `<suite>.<plot>.png`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Series {
    pub plot: String,
    pub name: String,
    pub x_unit: String,
    pub y_unit: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite: String,
    pub quick: bool,
    pub started: String,
    pub machine: Machine,
    pub figures: Vec<Figure>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Series>,
    /// The PNG files the series were drawn into (beside the result file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plots: Vec<String>,
}

impl Report {
    pub fn new(suite: &str, quick: bool) -> Report {
        Report {
            suite: suite.to_string(),
            quick,
            started: iso8601_now(),
            machine: Machine::read(),
            figures: Vec::new(),
            notes: Vec::new(),
            series: Vec::new(),
            plots: Vec::new(),
        }
    }

    pub fn print(&self) {
        let fmt = |v: f64| {
            if v.abs() >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        };
        let w = self
            .figures
            .iter()
            .map(|f| f.name.len())
            .max()
            .unwrap_or(10);
        println!(
            "\n{:w$}  {:>12}  {:>12}  {:>7}  {:<28}  target",
            "figure", "tabos", "peer", "ratio", "peer name"
        );
        for f in &self.figures {
            let target = match (&f.target, f.met) {
                (Some(t), Some(true)) => format!("{t}  met"),
                (Some(t), _) => format!("{t}  NOT MET"),
                _ => String::new(),
            };
            println!(
                "{:w$}  {:>12}  {:>12}  {:>7}  {:<28}  {target}",
                f.name,
                format!("{} {}", fmt(f.value), f.unit),
                f.peer_value.map_or("-".to_string(), fmt),
                f.ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
                f.peer,
            );
            if let Some(r) = &f.reference {
                println!("{:w$}  reference: {} = {}", "", r.name, fmt(r.value));
            }
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }

    /// What is wrong with the report, if anything: a figure without its
    /// runs and statistic, a ratio target without a measured peer, a
    /// reference held to a ratio, two figures of one name.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut names = std::collections::HashSet::new();
        for f in &self.figures {
            if !names.insert(f.name.as_str()) {
                problems.push(format!("{}: two figures of this name", f.name));
            }
            if f.runs.is_none() || f.stat.is_none() || f.runs == Some(0) {
                problems.push(format!("{}: says no runs and statistic", f.name));
            }
            let ratio_target = f.target.as_deref().is_some_and(|t| t.starts_with("ratio"));
            if ratio_target && f.peer.is_empty() {
                problems.push(format!("{}: a ratio target without a peer", f.name));
            }
            if f.peer.is_empty() && f.peer_value.is_some() {
                problems.push(format!("{}: a peer value without a peer", f.name));
            }
        }
        problems
    }

    /// Writes `<dir>/<suite>.json`; refuses a report [`Report::check`]
    /// finds wrong.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let problems = self.check();
        anyhow::ensure!(
            problems.is_empty(),
            "the {} report breaks the result-file rules:\n  {}",
            self.suite,
            problems.join("\n  ")
        );
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.json", self.suite));
        std::fs::write(&path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(path)
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso8601_now() -> String {
    tabos_store::rfc3339(tabos_store::now_us(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_evaluated() {
        let f = Figure::new("x", 300.0, "ops/s", Better::Higher)
            .peer("p", Some(100.0))
            .target("ratio >= 3");
        assert_eq!(f.ratio, Some(3.0));
        assert_eq!(f.met, Some(true));
        let f = Figure::new("y", 2000.0, "us", Better::Lower).target("value <= 1000");
        assert_eq!(f.met, Some(false));
        let f = Figure::new("z", 1.0, "us", Better::Lower)
            .peer("p", None)
            .target("ratio <= 1");
        assert_eq!(
            f.met,
            Some(false),
            "an unmeasured peer never meets a ratio target"
        );
        assert_eq!(iso8601_now().len(), 20);
    }

    #[test]
    fn reports_that_break_the_rules_are_refused() {
        let mut r = Report {
            suite: "t".into(),
            quick: true,
            started: iso8601_now(),
            machine: Machine::read(),
            figures: vec![Figure::new("a", 1.0, "us", Better::Lower)
                .peer("p", Some(2.0))
                .runs(3, Stat::P50)],
            notes: Vec::new(),
            series: Vec::new(),
            plots: Vec::new(),
        };
        assert!(r.check().is_empty());
        r.figures
            .push(Figure::new("b", 1.0, "us", Better::Lower).peer("p", Some(1.0)));
        r.figures.push(
            Figure::new("c", 1.0, "us", Better::Lower)
                .reference("a paper", 9.0)
                .runs(1, Stat::P50)
                .target("ratio <= 1"),
        );
        r.figures
            .push(Figure::new("a", 1.0, "us", Better::Lower).runs(1, Stat::P50));
        let problems = r.check();
        assert_eq!(problems.len(), 3, "{problems:?}");
        let dir = std::env::temp_dir().join(format!("tabos-report-{}", std::process::id()));
        assert!(r.write(&dir).is_err());
        assert!(!dir.join("t.json").exists());
    }
}
