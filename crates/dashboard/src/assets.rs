//! The UI's files, embedded in the binary: hand-written JavaScript modules and CSS, no build
//! step.

use http::{header, HeaderMap, HeaderValue};

pub(crate) struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $file:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $file)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

pub(crate) static ASSETS: &[Asset] = &[
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!("/style.css", "style.css", "text/css; charset=utf-8"),
    asset!("/favicon.svg", "favicon.svg", "image/svg+xml"),
    asset!("/js/boot.js", "js/boot.js", JS),
    asset!("/js/app.js", "js/app.js", JS),
    asset!("/js/api.js", "js/api.js", JS),
    asset!("/js/dom.js", "js/dom.js", JS),
    asset!("/js/yaml.js", "js/yaml.js", JS),
    asset!("/js/login.js", "js/login.js", JS),
    asset!("/js/overview.js", "js/overview.js", JS),
    asset!("/js/list.js", "js/list.js", JS),
    asset!("/js/detail.js", "js/detail.js", JS),
    asset!("/js/logs.js", "js/logs.js", JS),
];

pub(crate) fn find(path: &str) -> Option<&'static Asset> {
    let path = if path == "/index.html" { "/" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

/// The UI runs only its own scripts and talks only to its own origin; it is never framed.
pub(crate) fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}
