//! Routes — which handler answers which URL path — kept as JSON in the
//! namespace at `/www/<site>/routes`, and the pure parts of answering:
//! matching, mapping a URL path into a static root without escaping it,
//! and content types.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most routes a site may have.
pub const ROUTES_MAX: usize = 256;
/// Longest site name.
pub const SITE_BYTES_MAX: usize = 64;

/// What answers a route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Handler {
    /// Files under `root` in the realm's tabos fs (a directory answers
    /// with its `index.html`).
    Static { root: String },
    /// The stored procedure `name`, called with the request as JSON; what
    /// it returns is the page (HTML).
    Procedure { name: String },
}

/// One route: URL paths starting with `prefix` (at a `/` boundary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub prefix: String,
    #[serde(flatten)]
    pub handler: Handler,
}

/// A site's routes, longest prefix first when matched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routes {
    pub routes: Vec<Route>,
}

impl Routes {
    pub fn check(&self) -> Result<()> {
        if self.routes.len() > ROUTES_MAX {
            return Err(Error::Invalid(format!("at most {ROUTES_MAX} routes")));
        }
        for r in &self.routes {
            if !r.prefix.starts_with('/') || r.prefix.contains("..") {
                return Err(Error::Invalid(format!(
                    "route prefix {:?} must start with '/' and hold no '..'",
                    r.prefix
                )));
            }
            match &r.handler {
                Handler::Static { root } if !root.starts_with('/') => {
                    return Err(Error::Invalid(format!(
                        "static root {root:?} must be an absolute tabos fs path"
                    )))
                }
                Handler::Procedure { name } if name.is_empty() => {
                    return Err(Error::Invalid("a procedure route needs a name".into()))
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn from_json(b: &[u8]) -> Result<Routes> {
        let r: Routes = serde_json::from_slice(b)
            .map_err(|e| Error::Invalid(format!("the site's routes are not valid: {e}")))?;
        r.check()?;
        Ok(r)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("routes serialize")
    }

    /// The route for URL path `path` and what is left of the path after
    /// its prefix.
    pub fn find<'a>(&'a self, path: &'a str) -> Option<(&'a Route, &'a str)> {
        self.routes
            .iter()
            .filter_map(|r| {
                let p = r.prefix.trim_end_matches('/');
                let rest = path.strip_prefix(p)?;
                (rest.is_empty() || rest.starts_with('/')).then_some((r, rest))
            })
            .max_by_key(|(r, _)| r.prefix.len())
    }
}

/// The tabos fs path of URL path `rest` under `root`, or `None` if it
/// would leave `root` (`..`, a NUL) — percent-decoded first.
pub fn under(root: &str, rest: &str) -> Option<String> {
    let decoded = percent_decode(rest)?;
    let mut parts: Vec<&str> = Vec::new();
    for p in decoded.split('/') {
        match p {
            "" | "." => {}
            ".." => return None,
            p if p.contains('\0') || p.contains('\\') => return None,
            p => parts.push(p),
        }
    }
    let root = root.trim_end_matches('/');
    Some(if parts.is_empty() {
        if root.is_empty() {
            "/".into()
        } else {
            root.into()
        }
    } else {
        format!("{root}/{}", parts.join("/"))
    })
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The content type of a file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("ico") => "image/x-icon",
        Some("wasm") => "application/wasm",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// A site name: 1..=64 bytes of letters, digits, '-' and '_'.
pub fn validate_site(site: &str) -> Result<()> {
    tabos_client::app::check_name("site", site, SITE_BYTES_MAX).map_err(Error::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_their_root() {
        assert_eq!(
            under("/site", "/a/b.html").as_deref(),
            Some("/site/a/b.html")
        );
        assert_eq!(under("/site", "").as_deref(), Some("/site"));
        assert_eq!(under("/site/", "//x/./y").as_deref(), Some("/site/x/y"));
        assert_eq!(under("/site", "/a%20b").as_deref(), Some("/site/a b"));
        for bad in [
            "/../etc/passwd",
            "/a/../../x",
            "/%2e%2e/x",
            "/a%00b",
            "/%zz",
            "/a\\b",
        ] {
            assert_eq!(under("/site", bad), None, "{bad}");
        }
    }

    #[test]
    fn the_longest_prefix_wins() {
        let r = Routes {
            routes: vec![
                Route {
                    prefix: "/".into(),
                    handler: Handler::Static {
                        root: "/site".into(),
                    },
                },
                Route {
                    prefix: "/api".into(),
                    handler: Handler::Procedure { name: "api".into() },
                },
            ],
        };
        r.check().unwrap();
        assert_eq!(r.find("/api/x").unwrap().0.prefix, "/api");
        assert_eq!(r.find("/api").unwrap().1, "");
        assert_eq!(r.find("/apix").unwrap().0.prefix, "/");
        assert_eq!(Routes::from_json(&r.to_json()).unwrap(), r);
        let bad = Routes {
            routes: vec![Route {
                prefix: "x".into(),
                handler: Handler::Static { root: "/s".into() },
            }],
        };
        assert!(bad.check().is_err());
        assert_eq!(content_type("/a/INDEX.HTML"), "text/html; charset=utf-8");
        assert!(validate_site("a/b").is_err());
    }
}
