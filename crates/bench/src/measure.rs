//! Latency samples and their percentiles.

/// Latency samples in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    ns: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples {
            ns: Vec::with_capacity(n),
            sorted: false,
        }
    }

    pub fn push(&mut self, ns: u64) {
        self.ns.push(ns);
        self.sorted = false;
    }

    pub fn extend(&mut self, other: Samples) {
        self.ns.extend(other.ns);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// The `q`-quantile (0.0..=1.0) in microseconds; NaN without samples.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.ns.is_empty() {
            return f64::NAN;
        }
        if !self.sorted {
            self.ns.sort_unstable();
            self.sorted = true;
        }
        let idx = ((self.ns.len() - 1) as f64 * q).round() as usize;
        self.ns[idx] as f64 / 1_000.0
    }
}

/// Clients' runs together: each run's samples and the instants it
/// started and ended measuring.
#[derive(Debug, Default)]
pub struct Runs {
    /// Every sample of every run.
    pub all: Samples,
    /// From the first start to the last end, in seconds (NaN without
    /// runs): what a throughput is over.
    pub span_s: f64,
}

impl Runs {
    pub fn of(
        runs: impl IntoIterator<Item = (Samples, std::time::Instant, std::time::Instant)>,
    ) -> Runs {
        let mut all = Samples::default();
        let mut span: Option<(std::time::Instant, std::time::Instant)> = None;
        for (s, a, b) in runs {
            all.extend(s);
            span = Some(span.map_or((a, b), |(f, l)| (f.min(a), l.max(b))));
        }
        Runs {
            all,
            span_s: span.map_or(f64::NAN, |(a, b)| (b - a).as_secs_f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(i * 1000);
        }
        assert_eq!(s.quantile_us(0.5), 51.0);
        assert_eq!(s.quantile_us(0.99), 99.0);
        assert_eq!(s.quantile_us(0.0), 1.0);
        assert!(Samples::default().quantile_us(0.5).is_nan());
    }
}
