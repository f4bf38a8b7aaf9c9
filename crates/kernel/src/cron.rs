//! Cron expressions for scheduled workflows (`workflows::set_schedule_tx`):
//! five fields (minute hour day-of-month month day-of-week) or six (a
//! second first), each `*`, a number, a range `a-b`, a step `*/n` or
//! `a-b/n`, or a comma-separated list of those; day-of-week 0–7 (0 and 7
//! are Sunday). As in cron, when both day fields are restricted a day
//! matching either fires. Times are UTC.

use crate::{Error, Result};

/// Longest expression accepted, in bytes.
pub const CRON_BYTES_MAX: usize = 256;
/// How far ahead [`Cron::next_after`] looks for a firing (an expression
/// such as `0 0 30 2 *` never fires).
pub const HORIZON_DAYS: i64 = 5 * 366;

/// A parsed expression: for each field, the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    days_restricted: bool,
    weekdays_restricted: bool,
}

fn field(text: &str, what: &str, lo: u32, hi: u32) -> Result<(u64, bool)> {
    let bad = |why: &str| Error::Invalid(format!("cron {what} field {text:?}: {why}"));
    let mut set = 0u64;
    let mut restricted = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let s: u32 = s.parse().map_err(|_| bad("a step is a number"))?;
                if s == 0 {
                    return Err(bad("a step is at least 1"));
                }
                (r, s)
            }
            None => (part, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else {
            restricted = true;
            let num = |s: &str| -> Result<u32> {
                let n: u32 = s.parse().map_err(|_| bad("not a number"))?;
                if n < lo || n > hi {
                    return Err(bad(&format!("{n} is outside {lo}..={hi}")));
                }
                Ok(n)
            };
            match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(bad("a range goes up"));
                    }
                    (a, b)
                }
                // `n/s`: from n to the end, every s.
                None if step > 1 => (num(range)?, hi),
                None => {
                    let n = num(range)?;
                    (n, n)
                }
            }
        };
        if range == "*" && step > 1 {
            restricted = true;
        }
        let mut v = a;
        while v <= b {
            set |= 1 << v;
            v += step;
        }
    }
    Ok((set, restricted))
}

impl Cron {
    pub fn parse(expr: &str) -> Result<Cron> {
        if expr.len() > CRON_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a cron expression is at most {CRON_BYTES_MAX} bytes"
            )));
        }
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(Error::Invalid(format!(
                    "cron {expr:?} has {n} fields: give 5 (minute hour day month weekday) or 6 \
                     (a second first)"
                )))
            }
        };
        let (seconds, _) = field(sec, "second", 0, 59)?;
        let (minutes, _) = field(rest[0], "minute", 0, 59)?;
        let (hours, _) = field(rest[1], "hour", 0, 23)?;
        let (days, days_restricted) = field(rest[2], "day-of-month", 1, 31)?;
        let (months, _) = field(rest[3], "month", 1, 12)?;
        let (mut weekdays, weekdays_restricted) = field(rest[4], "day-of-week", 0, 7)?;
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1; // 7 is Sunday too
        }
        Ok(Cron {
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
            days_restricted,
            weekdays_restricted,
        })
    }

    fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let d = self.days & (1 << day) != 0;
        let w = self.weekdays & (1 << weekday) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => d || w,
            _ => d && w,
        }
    }

    /// The first firing strictly after `after_us` (µs since the epoch,
    /// UTC), within [`HORIZON_DAYS`].
    pub fn next_after(&self, after_us: i64) -> Option<i64> {
        let t = after_us.div_euclid(1_000_000) + 1; // the next whole second
        let (mut day, mut sod) = (t.div_euclid(86_400), t.rem_euclid(86_400));
        for _ in 0..HORIZON_DAYS {
            let (_, month, dom) = tabos_store::civil_from_days(day);
            let weekday = (day + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday
            if self.months & (1 << month) != 0 && self.day_matches(dom, weekday) {
                let (h0, m0, s0) = (sod / 3_600, sod % 3_600 / 60, sod % 60);
                for h in h0..24 {
                    if self.hours & (1 << h) == 0 {
                        continue;
                    }
                    let m_start = if h == h0 { m0 } else { 0 };
                    for m in m_start..60 {
                        if self.minutes & (1 << m) == 0 {
                            continue;
                        }
                        let s_start = if h == h0 && m == m0 { s0 } else { 0 };
                        if let Some(s) = (s_start..60).find(|s| self.seconds & (1 << s) != 0) {
                            return Some((day * 86_400 + h * 3_600 + m * 60 + s) * 1_000_000);
                        }
                    }
                }
            }
            day += 1;
            sod = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-24T10:30:15Z.
    const T: i64 = 1_795_516_215 * 1_000_000;

    fn at(s: i64) -> i64 {
        s * 1_000_000
    }

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(tabos_store::civil_from_days(0), (1970, 1, 1));
        assert_eq!(
            tabos_store::civil_from_days(T / 86_400_000_000),
            (2026, 11, 24)
        );
        assert_eq!(tabos_store::civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn next_firings() {
        let every_second = Cron::parse("* * * * * *").unwrap();
        assert_eq!(every_second.next_after(T), Some(T + 1_000_000));
        let every_minute = Cron::parse("* * * * *").unwrap();
        assert_eq!(every_minute.next_after(T), Some(T + at(45)));
        let every_5 = Cron::parse("*/5 * * * *").unwrap();
        assert_eq!(every_5.next_after(T), Some(T + at(4 * 60 + 45)));
        // Daily at 02:00: tomorrow.
        let daily = Cron::parse("0 2 * * *").unwrap();
        assert_eq!(daily.next_after(T), Some(T + at(15 * 3_600 + 29 * 60 + 45)));
        // Sundays (2026-11-29) at midnight, as 0 and as 7.
        for e in ["0 0 * * 0", "0 0 * * 7"] {
            let sunday = Cron::parse(e).unwrap();
            assert_eq!(sunday.next_after(T), Some(at(1_795_910_400)), "{e}");
        }
        // Never: February 30th.
        assert_eq!(Cron::parse("0 0 30 2 *").unwrap().next_after(T), None);
        // Lists and ranges.
        let c = Cron::parse("15,45 9-17/4 * * 1-5").unwrap();
        assert_eq!(c.next_after(T), Some(T + at(2 * 3_600 + 44 * 60 + 45)));
    }

    #[test]
    fn bad_expressions_are_refused() {
        for bad in [
            "",
            "* * * *",
            "* * * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "5-1 * * * *",
            "a * * * *",
            "* * * 13 *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }
}
