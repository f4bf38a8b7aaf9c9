//! The result file of a suite and its printed table.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::machine::Machine;

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
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

    pub fn note(mut self, note: impl Into<String>) -> Figure {
        self.note = Some(note.into());
        self
    }

    /// Holds the figure to `target`: `ratio <= x`, `ratio >= x`, `value <= x`
    /// or `value >= x`.
    pub fn target(mut self, target: &str) -> Figure {
        let parts: Vec<&str> = target.split_whitespace().collect();
        let met = match parts.as_slice() {
            [what, op, bound] => {
                let bound: f64 = bound.parse().unwrap_or(f64::NAN);
                let x = match *what {
                    "ratio" => self.ratio,
                    "value" => Some(self.value),
                    _ => None,
                };
                x.map(|x| match *op {
                    "<=" => x <= bound,
                    ">=" => x >= bound,
                    _ => false,
                })
            }
            _ => None,
        };
        self.target = Some(target.to_string());
        self.met = Some(met.unwrap_or(false));
        self
    }
}

pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
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
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }

    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.json", self.suite));
        std::fs::write(&path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(path)
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso8601_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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
}
