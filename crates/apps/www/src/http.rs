//! What HTTP asks of a static file, decided before a byte of it is read:
//! validators (`ETag`, `Last-Modified`), conditional requests (304),
//! ranges (206, 416) and whether to compress — as nginx answers them
//! (RFC 9110 sections 8.8, 13 and 14).

/// Most ranges one request may ask for; past it the whole file is sent
/// (as nginx's `max_ranges`), so that many tiny ranges cannot multiply
/// the work.
pub const RANGES_MAX: usize = 16;
/// Largest file compressed on the fly (larger ones are sent as they are,
/// streamed).
pub const COMPRESS_BYTES_MAX: u64 = 8 << 20;
/// Smallest file worth compressing.
pub const COMPRESS_BYTES_MIN: u64 = 256;

/// A file's validators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// A strong entity tag: the modification time (µs) and size, as nginx
    /// makes its own from mtime and size. Any write moves the mtime.
    pub etag: String,
    /// Seconds since the epoch.
    pub modified_s: i64,
}

impl Validators {
    pub fn new(mtime_us: i64, size: u64) -> Validators {
        Validators {
            etag: format!("\"{mtime_us:x}-{size:x}\""),
            modified_s: mtime_us.div_euclid(1_000_000),
        }
    }

    /// `Last-Modified`'s value.
    pub fn last_modified(&self) -> String {
        http_date(self.modified_s)
    }

    /// The tag of a compressed representation: weak, as nginx's is when
    /// it compresses (the bytes differ from the file's).
    pub fn weak_etag(&self) -> String {
        format!("W/{}", self.etag)
    }

    /// Whether a GET with these request headers is answered 304 Not
    /// Modified: `If-None-Match` if present (weak comparison), else
    /// `If-Modified-Since`.
    pub fn not_modified(
        &self,
        if_none_match: Option<&str>,
        if_modified_since: Option<&str>,
    ) -> bool {
        if let Some(tags) = if_none_match {
            return tags
                .split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == self.etag);
        }
        match if_modified_since.and_then(parse_http_date) {
            Some(since) => self.modified_s <= since,
            None => false,
        }
    }

    /// Whether `If-Range` (a strong tag or a date) lets a range be sent.
    pub fn range_applies(&self, if_range: Option<&str>) -> bool {
        match if_range.map(str::trim) {
            None => true,
            Some(v) if v.starts_with('"') => v == self.etag,
            Some(v) if v.starts_with("W/") => false,
            Some(v) => parse_http_date(v) == Some(self.modified_s),
        }
    }
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable range: the whole file (a header that is absent, not
    /// bytes, malformed, or asks for more than [`RANGES_MAX`]).
    Whole,
    /// These byte ranges (inclusive ends), in the order asked.
    Parts(Vec<(u64, u64)>),
    /// None of them is within the file: 416.
    Unsatisfiable,
}

/// Parses `Range: bytes=…` for a file of `size` bytes.
pub fn ranges(header: Option<&str>, size: u64) -> Ranges {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ranges::Whole;
    };
    let mut parts = Vec::new();
    let mut asked = 0;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        asked += 1;
        if asked > RANGES_MAX {
            return Ranges::Whole;
        }
        let Some((first, last)) = item.split_once('-') else {
            return Ranges::Whole;
        };
        let num = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let range = match (first.trim(), last.trim()) {
            ("", n) => match num(n) {
                // The last n bytes.
                Some(0) => None,
                Some(n) if size > 0 => Some((size.saturating_sub(n), size - 1)),
                Some(_) => None,
                None => return Ranges::Whole,
            },
            (a, "") => match num(a) {
                Some(a) if a < size => Some((a, size - 1)),
                Some(_) => None,
                None => return Ranges::Whole,
            },
            (a, b) => match (num(a), num(b)) {
                (Some(a), Some(b)) if a > b => return Ranges::Whole,
                (Some(a), Some(b)) if a < size => Some((a, b.min(size - 1))),
                (Some(_), Some(_)) => None,
                _ => return Ranges::Whole,
            },
        };
        parts.extend(range);
    }
    if asked == 0 {
        return Ranges::Whole;
    }
    if parts.is_empty() {
        return Ranges::Unsatisfiable;
    }
    Ranges::Parts(parts)
}

/// Whether a file of this content type is compressed when the client
/// accepts it.
pub fn compressible(content_type: &str) -> bool {
    let t = content_type.split(';').next().unwrap_or_default().trim();
    t.starts_with("text/")
        || matches!(
            t,
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "image/svg+xml"
                | "application/wasm"
        )
}

/// Whether `Accept-Encoding` accepts gzip (with a q-value above 0).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|h| {
        h.split(',').any(|item| {
            let mut it = item.split(';').map(str::trim);
            let coding = it.next().unwrap_or_default();
            let q = it
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && q > 0.0
        })
    })
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) of seconds since the
/// epoch.
pub fn http_date(s: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.max(0) as u64);
    httpdate::fmt_http_date(t)
}

/// Seconds since the epoch of an HTTP date in any of its three forms;
/// `None` for anything else.
pub fn parse_http_date(text: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(text.trim()).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_imf_fixdates_both_ways() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        for s in [0, 951_782_400, 1_795_638_597, 4_102_444_800] {
            assert_eq!(parse_http_date(&http_date(s)), Some(s), "{s}");
        }
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn ranges_are_read_as_nginx_reads_them() {
        let r = |h: &str| ranges(Some(h), 1000);
        assert_eq!(r("bytes=0-99"), Ranges::Parts(vec![(0, 99)]));
        assert_eq!(r("bytes=900-"), Ranges::Parts(vec![(900, 999)]));
        assert_eq!(r("bytes=-100"), Ranges::Parts(vec![(900, 999)]));
        assert_eq!(r("bytes=-5000"), Ranges::Parts(vec![(0, 999)]));
        assert_eq!(r("bytes=990-5000"), Ranges::Parts(vec![(990, 999)]));
        assert_eq!(r("bytes=0-0, 10-19"), Ranges::Parts(vec![(0, 0), (10, 19)]));
        assert_eq!(r("bytes=1000-"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=2000-3000"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Ranges::Unsatisfiable);
        assert_eq!(r("bytes=5-1"), Ranges::Whole);
        assert_eq!(r("bytes=x-1"), Ranges::Whole);
        assert_eq!(r("items=0-1"), Ranges::Whole);
        assert_eq!(ranges(None, 10), Ranges::Whole);
        let many = format!("bytes={}", vec!["0-0"; RANGES_MAX + 1].join(","));
        assert_eq!(r(&many), Ranges::Whole);
        assert_eq!(ranges(Some("bytes=0-"), 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn conditions_follow_the_validators() {
        let v = Validators::new(1_700_000_000_123_456, 42);
        assert!(v.not_modified(Some(&v.etag), None));
        assert!(v.not_modified(Some(&format!("\"x\", {}", v.weak_etag())), None));
        assert!(v.not_modified(Some("*"), None));
        assert!(!v.not_modified(Some("\"other\""), Some(&v.last_modified())));
        assert!(v.not_modified(None, Some(&v.last_modified())));
        assert!(!v.not_modified(None, Some(&http_date(v.modified_s - 1))));
        assert!(!v.not_modified(None, Some("garbage")));
        assert!(v.range_applies(None));
        assert!(v.range_applies(Some(&v.etag)));
        assert!(!v.range_applies(Some(&v.weak_etag())));
        assert!(v.range_applies(Some(&v.last_modified())));
        assert!(!v.range_applies(Some("\"stale\"")));
    }

    #[test]
    fn gzip_is_for_text_that_asks_for_it() {
        assert!(accepts_gzip(Some("gzip, deflate, br")));
        assert!(accepts_gzip(Some("br;q=1.0, gzip;q=0.8")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(None));
        assert!(compressible("text/html; charset=utf-8"));
        assert!(!compressible("image/png"));
    }
}
