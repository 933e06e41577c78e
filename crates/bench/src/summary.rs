//! `capstan bench report`: the JSON lines that benchmarks print with `--json` (store, api, dns),
//! from one or several runs — capstan and a reference side by side — gathered into one
//! `report.json`, a Markdown report with a table per benchmark, and PNG bar charts of
//! throughput, latency percentiles and memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::plot::{short_number, BarChart};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A file of JSON lines from `capstan bench store|api|dns|density --json`, as `FILE` or
    /// `LABEL=FILE` (the label names the system measured, e.g. `kubernetes=k8s.jsonl`; it
    /// prefixes each line's own backend or label). Repeatable.
    #[arg(long = "input", required = true, value_name = "[LABEL=]FILE")]
    pub inputs: Vec<String>,

    /// The directory to write report.json, report.md and the charts into (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// The report's title.
    #[arg(long, default_value = "capstan benchmarks")]
    pub title: String,
}

/// Values per series, per workload.
type Series = Vec<Vec<Option<f64>>>;

/// One measurement, whatever benchmark printed it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// store, api or dns.
    pub benchmark: String,
    /// The system measured (input label and the line's backend/label).
    pub series: String,
    /// What was measured (the workload and its concurrency).
    pub workload: String,
    /// Operations (writes, queries, events delivered) per second.
    pub throughput: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub rss_mb: Option<f64>,
    /// The line as the benchmark printed it.
    pub raw: Value,
}

pub async fn run(args: ReportArgs) -> Result<()> {
    let mut rows = Vec::new();
    for input in &args.inputs {
        let (label, path) = match input.split_once('=') {
            Some((l, p)) if !l.is_empty() => (Some(l), Path::new(p)),
            _ => (None, Path::new(input.as_str())),
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line).with_context(|| {
                format!(
                    "{}:{}: not a JSON line of a benchmark",
                    path.display(),
                    n + 1
                )
            })?;
            rows.push(row(label, value).with_context(|| format!("{}:{}", path.display(), n + 1))?);
        }
    }
    if rows.is_empty() {
        bail!("no measurements in the inputs");
    }
    let files = write(&args.out, &args.title, &rows)?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// The row of one benchmark line; `label` names the input it came from.
pub fn row(label: Option<&str>, v: Value) -> Result<Row> {
    let num = |k: &str| v.get(k).and_then(Value::as_f64);
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let (benchmark, own, workload, throughput) = if v.get("queries_per_s").is_some() {
        (
            "dns",
            text("label"),
            format!("queries, {} in flight", num("concurrency").unwrap_or(0.0)),
            num("queries_per_s"),
        )
    } else if v.get("benchmark").and_then(Value::as_str) == Some("density") {
        (
            "density",
            text("label"),
            format!(
                "{} pods on {} nodes",
                num("pods").unwrap_or(0.0),
                num("nodes").unwrap_or(0.0)
            ),
            num("pods_per_s"),
        )
    } else if v.get("http").is_some() {
        let clients = num("clients").unwrap_or(0.0);
        (
            "api",
            text("backend"),
            format!(
                "{}, {clients} clients",
                text("workload").unwrap_or_default()
            ),
            num("ops_per_s"),
        )
    } else if v.get("writers").is_some() && v.get("workload").is_some() {
        (
            "store",
            text("backend"),
            format!(
                "{}, {}",
                text("workload").unwrap_or_default(),
                clients_text(num("writers").unwrap_or(0.0))
            ),
            num("writes_per_s").or(num("ops_per_s")),
        )
    } else {
        bail!("not a line of capstan bench store, api, dns or density: {v}");
    };
    let series = match (label, own) {
        (Some(l), Some(o)) if l != o => format!("{l} {o}"),
        (Some(l), _) => l.to_string(),
        (None, Some(o)) => o,
        (None, None) => "-".to_string(),
    };
    let rss_mb = v
        .get("rss_bytes")
        .and_then(Value::as_f64)
        .map(|b| b / 1048576.0);
    Ok(Row {
        benchmark: benchmark.to_string(),
        series,
        workload,
        throughput,
        p50_ms: num("p50_ms"),
        p90_ms: num("p90_ms"),
        p99_ms: num("p99_ms"),
        rss_mb,
        raw: v,
    })
}

fn clients_text(n: f64) -> String {
    if n == 1.0 {
        "1 client".to_string()
    } else {
        format!("{n} clients")
    }
}

/// Write report.json, report.md and the charts into `dir`; returns the files written.
pub fn write(dir: &Path, title: &str, rows: &[Row]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut put = |name: &str, bytes: &[u8]| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    put("report.json", &serde_json::to_vec_pretty(rows)?)?;

    let mut md = format!("# {title}\n");
    let mut by_benchmark: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_benchmark.entry(&r.benchmark).or_default().push(r);
    }
    for (benchmark, rows) in by_benchmark {
        md.push_str(&format!("\n## {benchmark}\n\n"));
        md.push_str(&table(&rows));
        let workloads = ordered(rows.iter().map(|r| r.workload.clone()));
        let series = ordered(rows.iter().map(|r| r.series.clone()));
        let value = |f: &dyn Fn(&Row) -> Option<f64>| -> Series {
            series
                .iter()
                .map(|s| {
                    workloads
                        .iter()
                        .map(|w| {
                            rows.iter()
                                .find(|r| &r.series == s && &r.workload == w)
                                .and_then(|r| f(r))
                        })
                        .collect()
                })
                .collect()
        };
        let charts: [(&str, &str, Series); 3] = [
            ("throughput", "operations/s", value(&|r| r.throughput)),
            ("p99", "p99 latency, ms", value(&|r| r.p99_ms)),
            ("rss", "resident memory, MB", value(&|r| r.rss_mb)),
        ];
        md.push('\n');
        for (what, unit, values) in charts {
            if values.iter().flatten().all(Option::is_none) {
                continue;
            }
            // Only the workloads this chart has a value for.
            let keep: Vec<usize> = (0..workloads.len())
                .filter(|&i| values.iter().any(|s| s[i].is_some()))
                .collect();
            let categories: Vec<String> = keep.iter().map(|&i| workloads[i].clone()).collect();
            let values: Vec<Vec<Option<f64>>> = values
                .iter()
                .map(|s| keep.iter().map(|&i| s[i]).collect())
                .collect();
            let name = format!("{benchmark}-{what}.png");
            let chart = BarChart {
                title: &format!("{benchmark}: {what}"),
                unit,
                categories: &categories,
                series: &series,
                values: &values,
            };
            put(&name, &chart.draw().png())?;
            md.push_str(&format!("![{benchmark} {what}]({name})\n"));
        }
    }
    put("report.md", md.as_bytes())?;
    Ok(written)
}

/// A Markdown table of `rows`: one line per workload and system, the systems of a workload
/// next to each other.
pub fn table(rows: &[&Row]) -> String {
    let cell = |v: Option<f64>| v.map_or("".to_string(), |v| short_number(v).to_lowercase());
    let ms = |v: Option<f64>| {
        v.map_or("".to_string(), |v| match v {
            v if v >= 1.0 || v == 0.0 => format!("{v:.2}"),
            v if v >= 0.01 => format!("{v:.3}"),
            v => format!("{v:.4}"),
        })
    };
    let workloads = ordered(rows.iter().map(|r| r.workload.clone()));
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| workloads.iter().position(|w| *w == r.workload));
    let mut out = String::from("| workload | system | ops/s | p50 ms | p99 ms | RSS MB |\n");
    out.push_str("|---|---|---:|---:|---:|---:|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.workload,
            r.series,
            cell(r.throughput),
            ms(r.p50_ms),
            ms(r.p99_ms),
            r.rss_mb.map_or("".to_string(), |v| format!("{v:.0}")),
        ));
    }
    out
}

/// Distinct values in first-seen order.
fn ordered(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_line(backend: &str, writes: f64) -> Value {
        json!({"backend": backend, "workload": "write", "writers": 32, "writes_per_s": writes,
               "p50_ms": 1.5, "p99_ms": 4.0, "count": 1000, "seconds": 1.0})
    }

    #[test]
    fn lines_of_each_benchmark_become_rows() {
        let s = row(None, store_line("etcd", 900.0)).unwrap();
        assert_eq!(
            (s.benchmark.as_str(), s.series.as_str(), s.workload.as_str()),
            ("store", "etcd", "write, 32 clients")
        );
        assert_eq!(s.throughput, Some(900.0));
        let a = row(
            Some("kubernetes"),
            json!({"backend": "https://10.0.0.1:6443", "workload": "create-pods", "http": "h2",
                   "clients": 32, "ops_per_s": 170.0, "p50_ms": 100.0, "p99_ms": 180.0,
                   "max_ms": 300.0, "count": 5, "seconds": 1.0, "rss_bytes": 1073741824u64}),
        )
        .unwrap();
        assert_eq!(a.benchmark, "api");
        assert_eq!(a.series, "kubernetes https://10.0.0.1:6443");
        assert_eq!(a.rss_mb, Some(1024.0));
        let d = row(
            Some("capstan"),
            json!({"label": "capstan", "server": "127.0.0.1:53", "concurrency": 16,
                   "seconds": 10.0, "answered": 1, "queries_per_s": 55000.0, "p50_ms": 0.2,
                   "p90_ms": 0.5, "p99_ms": 3.0, "max_ms": 9.0}),
        )
        .unwrap();
        assert_eq!(
            (d.benchmark.as_str(), d.series.as_str(), d.workload.as_str()),
            ("dns", "capstan", "queries, 16 in flight")
        );
        assert_eq!(d.p90_ms, Some(0.5));
        let run = crate::density::DensityResult {
            nodes: 100,
            pods: 3000,
            all_running_seconds: 2.0,
            startup: crate::density::StartupSummary {
                count: 3000,
                p50_ms: 800.0,
                p90_ms: 1200.0,
                p99_ms: 1900.0,
            },
            control_plane: crate::density::ControlPlane {
                metrics_peak_rss_bytes: Some(209715200.0),
                ..Default::default()
            },
            ..Default::default()
        };
        let n = row(Some("capstan"), run.json("capstan")).unwrap();
        assert_eq!(
            (n.benchmark.as_str(), n.series.as_str(), n.workload.as_str()),
            ("density", "capstan", "3000 pods on 100 nodes")
        );
        assert_eq!(
            (n.throughput, n.p99_ms, n.rss_mb),
            (Some(1500.0), Some(1900.0), Some(200.0))
        );
        assert!(row(None, json!({"what": 1})).is_err());
    }

    #[test]
    fn the_report_has_a_table_and_charts_per_benchmark() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![
            row(None, store_line("embedded", 20_000.0)).unwrap(),
            row(None, store_line("etcd", 900.0)).unwrap(),
        ];
        let files = write(dir.path(), "T", &rows).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "report.json",
                "store-throughput.png",
                "store-p99.png",
                "report.md"
            ]
        );
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(
            md.contains("| write, 32 clients | embedded | 20k | 1.50 | 4.00 |  |"),
            "{md}"
        );
        assert!(md.contains("| write, 32 clients | etcd | 900 |"), "{md}");
        assert!(
            md.contains("![store throughput](store-throughput.png)"),
            "{md}"
        );
        let png = std::fs::read(dir.path().join("store-throughput.png")).unwrap();
        assert_eq!(&png[..4], b"\x89PNG");
        let json: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap())
                .unwrap();
        assert_eq!(json.len(), 2);
        assert_eq!(json[1]["raw"]["writes_per_s"], 900.0);
    }
}
