//! Container logs: the CRI log files the runtime writes, read back as `kubectl logs` wants
//! them (tail, since, timestamps, a byte limit, and following a running container).
//!
//! Each line of a CRI log file is `<RFC3339Nano time> <stdout|stderr> <tag> <text>`; the tag
//! is `F` for a full line and `P` for a partial one, whose text continues on the next line of
//! the file (the runtime splits long lines).

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use capstan_cri::{v1, Runtime};
use tokio::sync::mpsc;

/// How often a followed log is checked for new content.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// How often a followed container is asked whether it still runs.
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// The largest chunk sent at once.
const CHUNK: usize = 32 * 1024;

/// What `/containerLogs` was asked for (Kubernetes' PodLogOptions as the kubelet reads them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Lines older than this (Unix nanoseconds) are skipped.
    pub since: Option<i128>,
    /// Only this many lines from the end (None: all).
    pub tail: Option<i64>,
    /// Stop after this many bytes (None: no limit).
    pub limit_bytes: Option<i64>,
}

/// Why the options were refused: 400 for what does not parse, 422 for what is invalid.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionsError {
    pub code: u16,
    pub message: String,
}

/// Go's strconv.ParseBool.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl LogOptions {
    /// Read the query parameters (`follow`, `previous`, `timestamps`, `sinceSeconds`,
    /// `sinceTime`, `tailLines` — or the older `tail`, where `all` means every line —
    /// and `limitBytes`), validated as Kubernetes validates PodLogOptions.
    pub fn from_query(query: &[(String, String)], now: SystemTime) -> Result<Self, OptionsError> {
        let undecodable = || OptionsError {
            code: 400,
            message: r#"{"message": "Unable to decode query."}"#.into(),
        };
        let invalid = || OptionsError {
            code: 422,
            message: r#"{"message": "Invalid request."}"#.into(),
        };
        let last = |key: &str| {
            query
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let flag = |key: &str| match last(key) {
            None => Ok(false),
            Some(v) => parse_bool(v).ok_or_else(undecodable),
        };
        let int = |key: &str| match last(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| undecodable()),
        };
        let mut opts = LogOptions {
            follow: flag("follow")?,
            previous: flag("previous")?,
            timestamps: flag("timestamps")?,
            ..Default::default()
        };
        let mut tail = int("tailLines")?;
        if let Some(t) = last("tail").filter(|t| !t.is_empty()) {
            tail = if t == "all" {
                None
            } else {
                Some(t.parse::<i64>().map_err(|_| undecodable())?)
            };
        }
        let since_seconds = int("sinceSeconds")?;
        let since_time = match last("sinceTime") {
            None | Some("") => None,
            Some(v) => Some(parse_rfc3339(v.as_bytes()).ok_or_else(undecodable)?),
        };
        let limit = int("limitBytes")?;
        if tail.is_some_and(|t| t < 0)
            || limit.is_some_and(|l| l < 1)
            || since_seconds.is_some_and(|s| s < 1)
            || (since_seconds.is_some() && since_time.is_some())
        {
            return Err(invalid());
        }
        opts.tail = tail;
        opts.limit_bytes = limit;
        opts.since = match (since_time, since_seconds) {
            (Some(t), _) => Some(t.nanos),
            (None, Some(s)) => Some(unix_nanos(now) - i128::from(s) * 1_000_000_000),
            (None, None) => None,
        };
        Ok(opts)
    }
}

pub fn unix_nanos(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// A parsed RFC 3339 time: the instant and the offset it was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339 {
    /// Nanoseconds since the Unix epoch.
    pub nanos: i128,
    /// The written offset from UTC, in seconds (None for `Z`).
    pub offset: Option<i32>,
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (Go's time.RFC3339Nano, which also reads
/// RFC3339 times without a fraction).
pub fn parse_rfc3339(s: &[u8]) -> Option<Rfc3339> {
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = s.get(from..from + n)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, c: &[u8]| s.get(at).is_some_and(|b| c.contains(b));
    let (y, mo, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (h, mi, se) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac: i128 = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                frac = frac * 10 + i128::from(s[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start).min(9)..9 {
            frac *= 10;
        }
    }
    let offset = match s.get(i)? {
        b'Z' | b'z' if s.len() == i + 1 => None,
        b'+' | b'-' if s.len() == i + 6 && s[i + 3] == b':' => {
            let (oh, om) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            let secs = (oh * 3600 + om * 60) as i32;
            Some(if s[i] == b'-' { -secs } else { secs })
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - i64::from(offset.unwrap_or(0));
    Some(Rfc3339 {
        nanos: i128::from(secs) * 1_000_000_000 + frac,
        offset,
    })
}

/// Format as the kubelet prefixes log lines: RFC 3339 with exactly nine fraction digits, in
/// the offset the time was written with.
pub fn format_rfc3339_fixed(t: Rfc3339) -> String {
    let off = i128::from(t.offset.unwrap_or(0));
    let local = t.nanos + off * 1_000_000_000;
    let secs = local.div_euclid(1_000_000_000) as i64;
    let frac = local.rem_euclid(1_000_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let zone = match t.offset {
        None => "Z".to_string(),
        Some(o) => {
            let sign = if o < 0 { '-' } else { '+' };
            let o = o.abs();
            format!("{sign}{:02}:{:02}", o / 3600, (o % 3600) / 60)
        }
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:09}{zone}",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One parsed line of a CRI log file.
#[derive(Debug, Clone, PartialEq)]
pub struct CriLine<'a> {
    pub time: Rfc3339,
    pub stream: Stream,
    pub partial: bool,
    /// The text, with its newline for a full line, without one for a partial line.
    pub text: &'a [u8],
}

/// Parse one line of a CRI log file (as read, with its trailing newline if it had one).
pub fn parse_cri_line(line: &[u8]) -> Result<CriLine<'_>, String> {
    let next_space = |s: &[u8]| s.iter().position(|&b| b == b' ');
    let i = next_space(line).ok_or("timestamp is not found")?;
    let time = parse_rfc3339(&line[..i])
        .ok_or("unexpected timestamp format \"2006-01-02T15:04:05.999999999Z07:00\"")?;
    let rest = &line[i + 1..];
    let i = next_space(rest).ok_or("stream type is not found")?;
    let stream = match &rest[..i] {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(format!(
                "unexpected stream type {:?}",
                String::from_utf8_lossy(other)
            ))
        }
    };
    let rest = &rest[i + 1..];
    let i = next_space(rest).ok_or("log tag is not found")?;
    // The tag may carry more `:`-separated parts later; the first says full or partial.
    let partial = rest[..i].split(|&b| b == b':').next() == Some(b"P");
    let mut text = &rest[i + 1..];
    if partial && text.last() == Some(&b'\n') {
        text = &text[..text.len() - 1];
    }
    Ok(CriLine {
        time,
        stream,
        partial,
        text,
    })
}

/// Whether to go on after writing a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    More,
    /// The byte limit is reached.
    Limit,
}

/// Turns parsed lines into output, applying `since`, `timestamps` and `limitBytes`.
pub struct LogWriter {
    since: Option<i128>,
    timestamps: bool,
    remain: i64,
}

impl LogWriter {
    pub fn new(opts: &LogOptions) -> LogWriter {
        LogWriter {
            since: opts.since,
            timestamps: opts.timestamps,
            remain: opts.limit_bytes.unwrap_or(i64::MAX),
        }
    }

    /// Append `line` to `out`; `prefix` says whether it starts a new output line (so gets
    /// the timestamp when asked for).
    pub fn write(&mut self, line: &CriLine<'_>, prefix: bool, out: &mut Vec<u8>) -> Written {
        if self.since.is_some_and(|s| line.time.nanos < s) {
            return Written::More;
        }
        let mut bytes = Vec::new();
        if self.timestamps && prefix {
            bytes.extend_from_slice(format_rfc3339_fixed(line.time).as_bytes());
            bytes.push(b' ');
        }
        bytes.extend_from_slice(line.text);
        let n = bytes
            .len()
            .min(usize::try_from(self.remain).unwrap_or(usize::MAX));
        out.extend_from_slice(&bytes[..n]);
        self.remain -= n as i64;
        if self.remain <= 0 {
            Written::Limit
        } else {
            Written::More
        }
    }
}

/// Where the last `n` lines of `f` start: the offset after which exactly `n` newlines remain
/// (0 when the file has no more than `n` lines).
pub fn tail_start<F: Read + Seek>(f: &mut F, n: i64) -> std::io::Result<u64> {
    const BLOCK: u64 = 1024;
    if n < 0 {
        return Ok(0);
    }
    let n = n as u64;
    let size = f.seek(SeekFrom::End(0))?;
    let mut right = size;
    let mut count = 0u64;
    let mut buf = Vec::new();
    let mut left = size;
    while right > 0 && count <= n {
        left = right.saturating_sub(BLOCK);
        buf = vec![0; (right - left) as usize];
        f.seek(SeekFrom::Start(left))?;
        f.read_exact(&mut buf)?;
        count += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        right = left;
    }
    let mut at = 0usize;
    while count > n {
        match buf[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => break,
        }
        count -= 1;
    }
    Ok(left + at as u64)
}

/// Whether the runtime says the container still runs (an unknown container does not).
async fn still_running(runtime: &Arc<dyn Runtime>, id: &str) -> bool {
    match runtime
        .container_status(v1::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
    {
        Ok(r) => r.status.is_some_and(|s| {
            s.state != v1::ContainerState::ContainerExited as i32
                && s.state != v1::ContainerState::ContainerUnknown as i32
        }),
        Err(_) => false,
    }
}

/// Read the log file at `path` per `opts`, sending the output in chunks to `tx` until the
/// end (with `follow`: until container `id` stops and its last lines are sent), the byte
/// limit, or the receiver goes away.
pub async fn read_logs(
    path: std::path::PathBuf,
    id: String,
    opts: LogOptions,
    runtime: Arc<dyn Runtime>,
    tx: mpsc::Sender<Bytes>,
) {
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "cannot open the log file");
            return;
        }
    };
    let mut pos = match opts.tail {
        Some(n) => tail_start(&mut file, n).unwrap_or(0),
        None => 0,
    };
    let limited = opts.tail.filter(|_| !opts.follow);
    let mut remaining_lines = limited.unwrap_or(i64::MAX);
    let mut writer = LogWriter::new(&opts);
    let mut new_line = true;
    // With follow: whether the container ran when last asked.
    let mut running = true;
    let mut last_check = std::time::Instant::now();
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        if limited.is_some() && remaining_lines <= 0 {
            break;
        }
        // Read what is there.
        let read = file
            .seek(SeekFrom::Start(pos))
            .and_then(|_| file.read(&mut buf));
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "reading the log file");
                break;
            }
        };
        if n > 0 {
            pos += n as u64;
            pending.extend_from_slice(&buf[..n]);
            let mut start = 0;
            let mut stop = false;
            while let Some(i) = pending[start..].iter().position(|&b| b == b'\n') {
                let line = &pending[start..start + i + 1];
                start += i + 1;
                if emit(line, &mut writer, &mut new_line, &mut out) == Written::Limit {
                    stop = true;
                    break;
                }
                if limited.is_some() {
                    remaining_lines -= 1;
                    if remaining_lines <= 0 {
                        stop = true;
                        break;
                    }
                }
            }
            pending.drain(..start);
            if !out.is_empty()
                && tx
                    .send(Bytes::from(std::mem::take(&mut out)))
                    .await
                    .is_err()
            {
                return;
            }
            if stop {
                break;
            }
            continue;
        }
        // At the end of the file.
        if !opts.follow || !running {
            // A last line without its newline is still shown.
            if !pending.is_empty() {
                let line = std::mem::take(&mut pending);
                emit(&line, &mut writer, &mut new_line, &mut out);
                let _ = tx.send(Bytes::from(std::mem::take(&mut out))).await;
            }
            break;
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
        if last_check.elapsed() >= RUNNING_CHECK {
            last_check = std::time::Instant::now();
            // Once it stopped, what it wrote last is read before the end.
            running = still_running(&runtime, &id).await;
        }
    }
}

/// Parse and write one line; unparsable lines are skipped as the kubelet skips them.
fn emit(line: &[u8], writer: &mut LogWriter, new_line: &mut bool, out: &mut Vec<u8>) -> Written {
    let parsed = match parse_cri_line(line) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, "skipping a log line that does not parse");
            return Written::More;
        }
    };
    let written = writer.write(&parsed, *new_line, out);
    *new_line = parsed.text.last().is_none_or(|&b| b == b'\n');
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn full_and_partial_lines_parse() {
        let l = parse_cri_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world\n").unwrap();
        assert_eq!(l.stream, Stream::Stdout);
        assert!(!l.partial);
        assert_eq!(l.text, b"hello world\n");
        assert_eq!(l.time.nanos, 1_475_713_029_669_794_202);
        let p = parse_cri_line(b"2016-10-06T00:17:09.669794202Z stderr P part\n").unwrap();
        assert_eq!(p.stream, Stream::Stderr);
        assert!(p.partial);
        assert_eq!(p.text, b"part");
        // Tags may carry more parts after a colon.
        let t = parse_cri_line(b"2016-10-06T00:17:09Z stdout P:x y\n").unwrap();
        assert!(t.partial);
        assert_eq!(t.text, b"y");
        // An empty full line.
        assert_eq!(
            parse_cri_line(b"2016-10-06T00:17:09Z stdout F \n")
                .unwrap()
                .text,
            b"\n"
        );
    }

    #[test]
    fn bad_lines_are_refused() {
        assert_eq!(
            parse_cri_line(b"garbage").unwrap_err(),
            "timestamp is not found"
        );
        assert!(parse_cri_line(b"notatime stdout F x\n").is_err());
        assert_eq!(
            parse_cri_line(b"2016-10-06T00:17:09Z stdin F x\n").unwrap_err(),
            "unexpected stream type \"stdin\""
        );
        assert_eq!(
            parse_cri_line(b"2016-10-06T00:17:09Z stdout F").unwrap_err(),
            "log tag is not found"
        );
    }

    #[test]
    fn times_parse_and_format_like_go() {
        let t = parse_rfc3339(b"2024-02-29T23:59:58.5+02:00").unwrap();
        assert_eq!(t.offset, Some(7200));
        assert_eq!(
            format_rfc3339_fixed(t),
            "2024-02-29T23:59:58.500000000+02:00"
        );
        let z = parse_rfc3339(b"1970-01-01T00:00:01Z").unwrap();
        assert_eq!(z.nanos, 1_000_000_000);
        assert_eq!(format_rfc3339_fixed(z), "1970-01-01T00:00:01.000000000Z");
        assert_eq!(
            parse_rfc3339(b"2024-02-29T21:59:58.5Z").unwrap().nanos,
            t.nanos
        );
        assert!(parse_rfc3339(b"2024-13-01T00:00:00Z").is_none());
        assert!(parse_rfc3339(b"2024-01-01T00:00:00").is_none());
        assert!(parse_rfc3339(b"2024-01-01T00:00:00.Z").is_none());
    }

    fn render(lines: &[&str], opts: &LogOptions) -> String {
        let mut w = LogWriter::new(opts);
        let mut new_line = true;
        let mut out = Vec::new();
        for l in lines {
            if emit(l.as_bytes(), &mut w, &mut new_line, &mut out) == Written::Limit {
                break;
            }
        }
        String::from_utf8(out).unwrap()
    }

    const LOG: &[&str] = &[
        "2024-01-01T00:00:01.000000001Z stdout F one\n",
        "2024-01-01T00:00:02Z stderr P tw\n",
        "2024-01-01T00:00:03Z stderr F o\n",
        "not a log line\n",
        "2024-01-01T00:00:04Z stdout F three\n",
    ];

    #[test]
    fn partial_lines_join_and_get_one_timestamp() {
        assert_eq!(render(LOG, &LogOptions::default()), "one\ntwo\nthree\n");
        let ts = LogOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            render(LOG, &ts),
            "2024-01-01T00:00:01.000000001Z one\n2024-01-01T00:00:02.000000000Z two\n2024-01-01T00:00:04.000000000Z three\n"
        );
    }

    #[test]
    fn since_and_limit_bytes_apply() {
        let since = LogOptions {
            since: Some(parse_rfc3339(b"2024-01-01T00:00:02.5Z").unwrap().nanos),
            ..Default::default()
        };
        // The first half of the partial line is older, so only its end remains.
        assert_eq!(render(LOG, &since), "o\nthree\n");
        let limit = LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(render(LOG, &limit), "one\ntw");
    }

    #[test]
    fn tail_finds_the_last_lines() {
        let text = "a\nb\nc\nd";
        let mut f = std::io::Cursor::new(text.as_bytes().to_vec());
        assert_eq!(tail_start(&mut f, 0).unwrap(), 6);
        assert_eq!(tail_start(&mut f, 1).unwrap(), 4);
        assert_eq!(tail_start(&mut f, 3).unwrap(), 0);
        assert_eq!(tail_start(&mut f, 10).unwrap(), 0);
        assert_eq!(tail_start(&mut f, -1).unwrap(), 0);
        // Across blocks.
        let long: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let mut f = std::io::Cursor::new(long.as_bytes().to_vec());
        let at = tail_start(&mut f, 2).unwrap() as usize;
        assert_eq!(&long[at..], "line 1998\nline 1999\n");
    }

    #[test]
    fn options_validate_like_kubernetes() {
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let o = LogOptions::from_query(
            &q(&[
                ("follow", "true"),
                ("tailLines", "5"),
                ("sinceSeconds", "10"),
            ]),
            now,
        )
        .unwrap();
        assert!(o.follow && !o.previous);
        assert_eq!(o.tail, Some(5));
        assert_eq!(o.since, Some(990_000_000_000));
        let all = LogOptions::from_query(&q(&[("tailLines", "3"), ("tail", "all")]), now).unwrap();
        assert_eq!(all.tail, None);
        for bad in [
            &[("tailLines", "-1")][..],
            &[("limitBytes", "0")],
            &[("sinceSeconds", "0")],
            &[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")],
        ] {
            assert_eq!(LogOptions::from_query(&q(bad), now).unwrap_err().code, 422);
        }
        for bad in [
            &[("follow", "yes")][..],
            &[("tailLines", "x")],
            &[("sinceTime", "x")],
        ] {
            assert_eq!(LogOptions::from_query(&q(bad), now).unwrap_err().code, 400);
        }
    }

    fn exited(id: &str) -> crate::server::tests_support::FakeRuntime {
        let rt = crate::server::tests_support::FakeRuntime::default();
        rt.statuses.lock().insert(
            id.to_string(),
            v1::ContainerStatus {
                id: id.to_string(),
                state: v1::ContainerState::ContainerExited as i32,
                ..Default::default()
            },
        );
        rt
    }

    #[tokio::test]
    async fn follow_reads_until_the_container_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2024-01-01T00:00:01Z stdout F a\n").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let task = tokio::spawn(read_logs(
            path.clone(),
            "c1".into(),
            opts,
            Arc::new(exited("c1")),
            tx,
        ));
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"a\n"));
        // Lines written before the runtime is asked again still arrive.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"2024-01-01T00:00:02Z stdout F b\n").unwrap();
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"b\n"));
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("follow ends once the container exited")
            .unwrap();
        assert!(rx.recv().await.is_none());
    }
}
