//! Text the way the Go kubelet prints it: quoted strings (`%q`), durations, network and
//! gRPC errors. Probe and hook messages end up in events and pod status, where users
//! compare them with what Kubernetes shows.

use std::fmt::Write as _;
use std::time::Duration;

/// Go's `strconv.Quote` of raw bytes (invalid UTF-8 bytes become `\xNN`).
pub fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{b}' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() || is_format_char(c) => {
                    if (c as u32) < 0x10000 {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    } else {
                        let _ = write!(out, "\\U{:08x}", c as u32);
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

/// Invisible formatting characters Go does not count as printable.
fn is_format_char(c: char) -> bool {
    matches!(c as u32, 0xad | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2064 | 0xfeff)
}

/// Go's `%q` of a string.
pub fn quote_str(s: &str) -> String {
    quote(s.as_bytes())
}

/// Go's `%v` of a `[]string`: `[a b c]`.
pub fn string_slice(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// Go's `time.Duration.String()` of a whole number of seconds and nanoseconds.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 && nanos == 0 {
        return "0s".into();
    }
    if secs == 0 {
        // Below a second Go switches units; probes and hooks only use whole seconds.
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else {
            format!("{}µs", nanos / 1_000)
        };
    }
    let frac = if nanos == 0 {
        String::new()
    } else {
        let s = format!("{nanos:09}");
        format!(".{}", s.trim_end_matches('0'))
    };
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}{frac}s")
    } else if m > 0 {
        format!("{m}m{s}{frac}s")
    } else {
        format!("{s}{frac}s")
    }
}

/// Go's `net.JoinHostPort`.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The text Go gives an OS error (`syscall.Errno.Error()`): `connection refused`.
pub fn os_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            let text = match text.rfind(" (os error ") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            lower_first(&text)
        }
        None => match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "EOF".into(),
            std::io::ErrorKind::TimedOut => "i/o timeout".into(),
            _ => lower_first(&e.to_string()),
        },
    }
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The name Go prints for a gRPC status code (`codes.Code.String()`).
pub fn code_name(code: capstan_cri::Code) -> &'static str {
    use capstan_cri::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// A gRPC error as grpc-go prints it: `rpc error: code = NotFound desc = ...`.
pub fn rpc_error(code: capstan_cri::Code, message: &str) -> String {
    format!("rpc error: code = {} desc = {}", code_name(code), message)
}

/// A CRI call's error as the Go kubelet prints it.
pub fn status_error(s: &capstan_cri::Status) -> String {
    rpc_error(s.code(), s.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote_str(""), r#""""#);
        assert_eq!(quote_str("a \"b\"\n\tc\\"), r#""a \"b\"\n\tc\\""#);
        assert_eq!(quote(b"x\x01\xff"), r#""x\x01\xff""#);
        assert_eq!(quote_str("héllo"), r#""héllo""#);
        assert_eq!(quote_str("\u{85}"), r#""\u0085""#);
    }

    #[test]
    fn durations_like_go() {
        assert_eq!(duration(Duration::from_secs(1)), "1s");
        assert_eq!(duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(duration(Duration::from_secs(3725)), "1h2m5s");
        assert_eq!(duration(Duration::ZERO), "0s");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn os_errors_like_go() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(os_error(&e), "connection refused");
        let e = std::io::Error::from_raw_os_error(libc::EHOSTUNREACH);
        assert_eq!(os_error(&e), "no route to host");
        assert_eq!(join_host_port("::1", 80), "[::1]:80");
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(
            rpc_error(capstan_cri::Code::NotFound, "unknown service"),
            "rpc error: code = NotFound desc = unknown service"
        );
        assert_eq!(string_slice(&["sh".into(), "-c".into()]), "[sh -c]");
    }
}
