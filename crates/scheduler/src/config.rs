//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`) as `capstan scheduler --config`
//! reads it: strict decoding, v1.32 defaulting (`apis/config/v1/defaults.go` and
//! `default_plugins.go`'s `mergePlugins`), `ValidateKubeSchedulerConfiguration`, and one
//! `Framework` per profile built as `runtime.NewFramework` + `profile.NewMap` do (multiPoint
//! expansion, score weights, one queue sort and at least one binder per profile).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::framework::{Enabled, Framework, Plugin, MAX_NODE_SCORE};
use crate::plugins::{self, Constructor};

pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
pub const KIND: &str = "KubeSchedulerConfiguration";
/// The profile name of pods that set no `spec.schedulerName`.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Plugins removed from the v1 API (still named in old configs).
const INVALID_PLUGINS: &[&str] = &[
    "AzureDiskLimits",
    "CinderLimits",
    "EBSLimits",
    "GCEPDLimits",
];

/// A defaulted `KubeSchedulerConfiguration`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub parallelism: i32,
    pub leader_election: LeaderElection,
    pub client_connection: ClientConnection,
    pub enable_profiling: bool,
    pub enable_contention_profiling: bool,
    /// 0: adaptive (5%..50% by cluster size). A profile's own value overrides it.
    pub percentage_of_nodes_to_score: i32,
    pub pod_initial_backoff_seconds: i64,
    pub pod_max_backoff_seconds: i64,
    /// Never empty after defaulting. Plugin sets are already merged with the defaults.
    pub profiles: Vec<Profile>,
    /// Kept as given so validation can refuse them (extenders are not supported).
    pub extenders: Vec<Value>,
    pub delay_cache_until_active: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElection {
    pub leader_elect: bool,
    pub lease_duration: GoDuration,
    pub renew_deadline: GoDuration,
    pub retry_period: GoDuration,
    pub resource_lock: String,
    pub resource_name: String,
    pub resource_namespace: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    pub kubeconfig: String,
    pub accept_content_types: String,
    pub content_type: String,
    pub qps: f32,
    pub burst: i32,
}

/// One scheduling profile (`KubeSchedulerProfile`).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub scheduler_name: String,
    pub percentage_of_nodes_to_score: Option<i32>,
    /// The defaults merged with the configured sets (`mergePlugins`).
    pub plugins: Plugins,
    pub plugin_config: Vec<PluginConfig>,
}

/// The plugin set of every extension point, plus `multiPoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugins {
    pub pre_enqueue: PluginSet,
    pub queue_sort: PluginSet,
    pub pre_filter: PluginSet,
    pub filter: PluginSet,
    pub post_filter: PluginSet,
    pub pre_score: PluginSet,
    pub score: PluginSet,
    pub reserve: PluginSet,
    pub permit: PluginSet,
    pub pre_bind: PluginSet,
    pub bind: PluginSet,
    pub post_bind: PluginSet,
    pub multi_point: PluginSet,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSet {
    pub enabled: Vec<PluginRef>,
    /// Names; `*` disables every default of the set.
    pub disabled: Vec<String>,
}

/// A plugin named in a `PluginSet` (`v1.Plugin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    pub name: String,
    /// 0 when not given (Score then uses 1).
    pub weight: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub name: String,
    /// `Null` when not given.
    pub args: Value,
}

/// The extension points a `PluginSet` configures (all but `multiPoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionPoint {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl ExtensionPoint {
    /// In the order of the `Plugins` fields.
    pub const ALL: [ExtensionPoint; 12] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
    ];

    /// The order `NewFramework` fills the points in (decides which error is reported first).
    const FRAMEWORK_ORDER: [ExtensionPoint; 12] = [
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::Reserve,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
        ExtensionPoint::Permit,
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
    ];

    /// The field name in `plugins`.
    pub fn field(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "preEnqueue",
            ExtensionPoint::QueueSort => "queueSort",
            ExtensionPoint::PreFilter => "preFilter",
            ExtensionPoint::Filter => "filter",
            ExtensionPoint::PostFilter => "postFilter",
            ExtensionPoint::PreScore => "preScore",
            ExtensionPoint::Score => "score",
            ExtensionPoint::Reserve => "reserve",
            ExtensionPoint::Permit => "permit",
            ExtensionPoint::PreBind => "preBind",
            ExtensionPoint::Bind => "bind",
            ExtensionPoint::PostBind => "postBind",
        }
    }

    /// The Go interface name, as upstream's error messages say it.
    fn go_type(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "PreEnqueuePlugin",
            ExtensionPoint::QueueSort => "QueueSortPlugin",
            ExtensionPoint::PreFilter => "PreFilterPlugin",
            ExtensionPoint::Filter => "FilterPlugin",
            ExtensionPoint::PostFilter => "PostFilterPlugin",
            ExtensionPoint::PreScore => "PreScorePlugin",
            ExtensionPoint::Score => "ScorePlugin",
            ExtensionPoint::Reserve => "ReservePlugin",
            ExtensionPoint::Permit => "PermitPlugin",
            ExtensionPoint::PreBind => "PreBindPlugin",
            ExtensionPoint::Bind => "BindPlugin",
            ExtensionPoint::PostBind => "PostBindPlugin",
        }
    }

    /// Whether `plugin` extends this point (PreBind and PostBind have no trait yet).
    pub fn implemented_by(self, plugin: &dyn Plugin) -> bool {
        match self {
            ExtensionPoint::PreEnqueue => plugin.as_pre_enqueue().is_some(),
            ExtensionPoint::QueueSort => plugin.as_queue_sort().is_some(),
            ExtensionPoint::PreFilter => plugin.as_pre_filter().is_some(),
            ExtensionPoint::Filter => plugin.as_filter().is_some(),
            ExtensionPoint::PostFilter => plugin.as_post_filter().is_some(),
            ExtensionPoint::PreScore => plugin.as_pre_score().is_some(),
            ExtensionPoint::Score => plugin.as_score().is_some(),
            ExtensionPoint::Reserve => plugin.as_reserve().is_some(),
            ExtensionPoint::Permit => plugin.as_permit().is_some(),
            ExtensionPoint::Bind => plugin.as_bind().is_some(),
            ExtensionPoint::PreBind | ExtensionPoint::PostBind => false,
        }
    }
}

impl Plugins {
    pub fn get(&self, ep: ExtensionPoint) -> &PluginSet {
        match ep {
            ExtensionPoint::PreEnqueue => &self.pre_enqueue,
            ExtensionPoint::QueueSort => &self.queue_sort,
            ExtensionPoint::PreFilter => &self.pre_filter,
            ExtensionPoint::Filter => &self.filter,
            ExtensionPoint::PostFilter => &self.post_filter,
            ExtensionPoint::PreScore => &self.pre_score,
            ExtensionPoint::Score => &self.score,
            ExtensionPoint::Reserve => &self.reserve,
            ExtensionPoint::Permit => &self.permit,
            ExtensionPoint::PreBind => &self.pre_bind,
            ExtensionPoint::Bind => &self.bind,
            ExtensionPoint::PostBind => &self.post_bind,
        }
    }

    pub fn get_mut(&mut self, ep: ExtensionPoint) -> &mut PluginSet {
        match ep {
            ExtensionPoint::PreEnqueue => &mut self.pre_enqueue,
            ExtensionPoint::QueueSort => &mut self.queue_sort,
            ExtensionPoint::PreFilter => &mut self.pre_filter,
            ExtensionPoint::Filter => &mut self.filter,
            ExtensionPoint::PostFilter => &mut self.post_filter,
            ExtensionPoint::PreScore => &mut self.pre_score,
            ExtensionPoint::Score => &mut self.score,
            ExtensionPoint::Reserve => &mut self.reserve,
            ExtensionPoint::Permit => &mut self.permit,
            ExtensionPoint::PreBind => &mut self.pre_bind,
            ExtensionPoint::Bind => &mut self.bind,
            ExtensionPoint::PostBind => &mut self.post_bind,
        }
    }

    /// v1.32's defaults: every in-tree plugin through `multiPoint`.
    pub fn defaults() -> Plugins {
        Plugins {
            multi_point: PluginSet {
                enabled: plugins::DEFAULT_PLUGINS
                    .iter()
                    .map(|&(name, weight)| PluginRef {
                        name: name.to_string(),
                        weight: i32::try_from(weight).unwrap_or(0),
                    })
                    .collect(),
                disabled: Vec::new(),
            },
            ..Plugins::default()
        }
    }

    /// `mergePlugins`: the configured sets applied over `defaults`, set by set.
    pub fn merge(defaults: &Plugins, custom: Option<&Plugins>) -> Plugins {
        let Some(custom) = custom else {
            return defaults.clone();
        };
        let mut out = Plugins {
            multi_point: merge_set(&defaults.multi_point, &custom.multi_point),
            ..Plugins::default()
        };
        for ep in ExtensionPoint::ALL {
            *out.get_mut(ep) = merge_set(defaults.get(ep), custom.get(ep));
        }
        out
    }
}

/// `mergePluginSet`: defaults not disabled stay in place (replaced by a custom entry of the
/// same name, keeping the default's position); the other custom entries follow in order.
fn merge_set(defaults: &PluginSet, custom: &PluginSet) -> PluginSet {
    let mut disabled: Vec<String> = custom.disabled.clone();
    disabled.extend(defaults.disabled.iter().cloned());
    // A name enabled twice is represented by its last entry (the other one is appended and
    // rejected as a double registration when the framework is built).
    let last_index = |name: &str| custom.enabled.iter().rposition(|p| p.name == name);
    let mut replaced: Vec<usize> = Vec::new();
    let mut enabled = Vec::new();
    if !disabled.iter().any(|d| d == "*") {
        for p in &defaults.enabled {
            if disabled.contains(&p.name) {
                continue;
            }
            match last_index(&p.name) {
                Some(i) => {
                    replaced.push(i);
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(p.clone()),
            }
        }
    }
    for (i, p) in custom.enabled.iter().enumerate() {
        if !replaced.contains(&i) {
            enabled.push(p.clone());
        }
    }
    PluginSet { enabled, disabled }
}

/// The configuration a file with only `apiVersion` and `kind` gives.
pub fn default_config() -> Config {
    apply_defaults(RawConfig::default())
}

/// Read, decode, default and validate the file `--config` names.
pub fn load(path: &std::path::Path) -> Result<Config, String> {
    let data = std::fs::read(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let text = String::from_utf8(data)
        .map_err(|_| format!("{}: the configuration is not valid UTF-8", path.display()))?;
    parse(&text)
}

/// Decode (strictly), default and validate a YAML or JSON `KubeSchedulerConfiguration`.
pub fn parse(data: &str) -> Result<Config, String> {
    let cfg = decode(data)?;
    validate(&cfg)?;
    Ok(cfg)
}

/// Decode strictly and apply defaults, without validating.
pub fn decode(data: &str) -> Result<Config, String> {
    let seen = RefCell::new(Vec::new());
    let dups = RefCell::new(Vec::new());
    let value = parse_document(data, &seen, &dups)?;
    check_type_meta(&value)?;
    let mut dec = Decoder::default();
    let raw = dec.config(&value);
    if let Some(err) = dec.type_error {
        return Err(err);
    }
    let seen = seen.into_inner();
    let position = |p: &String| seen.iter().position(|s| s == p).unwrap_or(usize::MAX);
    let mut strict: Vec<(usize, String)> = dups
        .into_inner()
        .into_iter()
        .map(|p| (position(&p), format!("duplicate field {}", go_quote(&p))))
        .collect();
    strict.extend(
        dec.unknown
            .iter()
            .map(|p| (position(p), format!("unknown field {}", go_quote(p)))),
    );
    if !strict.is_empty() {
        strict.sort_by_key(|(i, _)| *i);
        let msgs: Vec<String> = strict.into_iter().map(|(_, m)| m).collect();
        return Err(format!("strict decoding error: {}", msgs.join(", ")));
    }
    Ok(apply_defaults(raw))
}

// ---------------------------------------------------------------------------------------------
// Go's time.Duration, as metav1.Duration reads and prints it.

/// A signed duration in nanoseconds, written as Go writes durations (`15s`, `1m30s`, `500ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration(pub i64);

impl GoDuration {
    pub const fn from_secs(s: i64) -> GoDuration {
        GoDuration(s.saturating_mul(1_000_000_000))
    }

    /// The duration as `std` holds it (negative durations become zero).
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }

    /// `time.ParseDuration`.
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        let invalid = || format!("time: invalid duration {}", go_quote(text));
        let mut s = text;
        let mut negative = false;
        if let Some(rest) = s.strip_prefix('-') {
            negative = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let not_digit = |c: char| !c.is_ascii_digit();
        let mut total: u128 = 0;
        while !s.is_empty() {
            let end = s.find(not_digit).unwrap_or(s.len());
            let (whole, rest) = s.split_at(end);
            s = rest;
            let mut frac = "";
            if let Some(rest) = s.strip_prefix('.') {
                let end = rest.find(not_digit).unwrap_or(rest.len());
                frac = &rest[..end];
                s = &rest[end..];
            }
            if whole.is_empty() && frac.is_empty() {
                return Err(invalid());
            }
            let end = s
                .find(|c: char| c == '.' || c.is_ascii_digit())
                .unwrap_or(s.len());
            let (unit, rest) = s.split_at(end);
            s = rest;
            let scale: u128 = match unit {
                "" => return Err(format!("time: missing unit in duration {}", go_quote(text))),
                "ns" => 1,
                "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                _ => {
                    return Err(format!(
                        "time: unknown unit {} in duration {}",
                        go_quote(unit),
                        go_quote(text)
                    ))
                }
            };
            if whole.len() > 20 {
                return Err(invalid());
            }
            let whole: u128 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| invalid())?
            };
            let mut v = whole.checked_mul(scale).ok_or_else(invalid)?;
            if !frac.is_empty() {
                let digits = &frac[..frac.len().min(18)];
                let f: u128 = digits.parse().map_err(|_| invalid())?;
                v += f * scale / 10u128.pow(digits.len() as u32);
            }
            total = total.checked_add(v).ok_or_else(invalid)?;
            if total > 1u128 << 63 {
                return Err(invalid());
            }
        }
        if negative {
            Ok(GoDuration((-(total as i128)) as i64))
        } else if total > i64::MAX as u128 {
            Err(invalid())
        } else {
            Ok(GoDuration(total as i64))
        }
    }
}

impl fmt::Display for GoDuration {
    /// `time.Duration.String`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        if self.0 < 0 {
            f.write_str("-")?;
        }
        let u = self.0.unsigned_abs();
        if u < 1_000_000_000 {
            let (div, digits, unit) = if u < 1_000 {
                (1, 0, "ns")
            } else if u < 1_000_000 {
                (1_000, 3, "\u{b5}s")
            } else {
                (1_000_000, 6, "ms")
            };
            return write!(f, "{}{unit}", with_fraction(u / div, u % div, digits));
        }
        let secs = u / 1_000_000_000;
        let seconds = with_fraction(secs % 60, u % 1_000_000_000, 9);
        let (hours, minutes) = (secs / 3600, (secs / 60) % 60);
        if hours > 0 {
            write!(f, "{hours}h{minutes}m{seconds}s")
        } else if minutes > 0 {
            write!(f, "{minutes}m{seconds}s")
        } else {
            write!(f, "{seconds}s")
        }
    }
}

fn with_fraction(whole: u64, frac: u64, digits: usize) -> String {
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// Go's `%q` for the strings that appear in messages.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------------
// Reading the document: YAML or JSON into a JSON value, noting duplicate keys and key order.

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn parse_document(
    data: &str,
    seen: &RefCell<Vec<String>>,
    dups: &RefCell<Vec<String>>,
) -> Result<Value, String> {
    let seed = StrictSeed {
        path: String::new(),
        seen,
        dups,
    };
    if data.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(data);
        let value = seed
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v))
            .map_err(|e| format!("json parse error: {e}"))?;
        return Ok(value);
    }
    if data.trim().is_empty() {
        return Ok(Value::Null);
    }
    seed.deserialize(serde_yaml::Deserializer::from_str(data))
        .map_err(|e| format!("error converting YAML to JSON: yaml: {e}"))
}

/// Builds a JSON value, recording every key's path (in document order) and duplicate keys.
struct StrictSeed<'a> {
    path: String,
    seen: &'a RefCell<Vec<String>>,
    dups: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-compatible value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{}: {v} is not a JSON number", self.path)))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = StrictSeed {
                path: format!("{}[{}]", self.path, out.len()),
                seen: self.seen,
                dups: self.dups,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(MapKey(key)) = map.next_key()? {
            let path = join(&self.path, &key);
            self.seen.borrow_mut().push(path.clone());
            let seed = StrictSeed {
                path: path.clone(),
                seen: self.seen,
                dups: self.dups,
            };
            let value = map.next_value_seed(seed)?;
            if out.insert(key, value).is_some() {
                self.dups.borrow_mut().push(path);
            }
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key; YAML's non-string scalar keys become their text, as YAML-to-JSON does.
struct MapKey(String);

impl<'de> serde::Deserialize<'de> for MapKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MapKey, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = MapKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<MapKey, E> {
                Ok(MapKey("null".to_string()))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

/// `apiVersion` and `kind` are looked at before anything else, as the scheme's decoder does.
fn check_type_meta(v: &Value) -> Result<(), String> {
    let empty = Map::new();
    let map = match v {
        Value::Object(m) => m,
        Value::Null => &empty,
        other => {
            return Err(format!(
                "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string; Kind string }}",
                json_kind(other)
            ))
        }
    };
    let text = |key: &str| -> Result<String, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!(
                "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go struct field .{key} of type string",
                json_kind(other)
            )),
        }
    };
    let (api_version, kind) = (text("apiVersion")?, text("kind")?);
    let raw = || serde_json::to_string(v).unwrap_or_default();
    if kind.is_empty() {
        return Err(format!("Object 'Kind' is missing in '{}'", raw()));
    }
    if api_version.is_empty() {
        return Err(format!("Object 'apiVersion' is missing in '{}'", raw()));
    }
    if api_version != API_VERSION || kind != KIND {
        return Err(format!(
            "no kind {} is registered for version {} in scheme \"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme/scheme.go:30\"",
            go_quote(&kind),
            go_quote(&api_version)
        ));
    }
    Ok(())
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------
// Typed decoding: unknown fields by path (with list indices), type errors as Go's decoder words
// them (innermost struct, then the field path without indices).

const CONFIG_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
];
const LEADER_ELECTION_FIELDS: &[&str] = &[
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
];
const CLIENT_CONNECTION_FIELDS: &[&str] = &[
    "kubeconfig",
    "acceptContentTypes",
    "contentType",
    "qps",
    "burst",
];
const PROFILE_FIELDS: &[&str] = &[
    "schedulerName",
    "percentageOfNodesToScore",
    "plugins",
    "pluginConfig",
];
const PLUGIN_SET_FIELDS: &[&str] = &["enabled", "disabled"];
const PLUGIN_FIELDS: &[&str] = &["name", "weight"];
const PLUGIN_CONFIG_FIELDS: &[&str] = &["name", "args"];

/// The configuration as written, before defaulting (`None`: not given).
#[derive(Default)]
struct RawConfig {
    parallelism: Option<i32>,
    leader_elect: Option<bool>,
    lease_duration: GoDuration,
    renew_deadline: GoDuration,
    retry_period: GoDuration,
    resource_lock: String,
    resource_name: String,
    resource_namespace: String,
    client_connection: Option<ClientConnection>,
    enable_profiling: Option<bool>,
    enable_contention_profiling: Option<bool>,
    percentage_of_nodes_to_score: Option<i32>,
    pod_initial_backoff_seconds: Option<i64>,
    pod_max_backoff_seconds: Option<i64>,
    profiles: Vec<RawProfile>,
    extenders: Vec<Value>,
    delay_cache_until_active: bool,
}

#[derive(Default)]
struct RawProfile {
    scheduler_name: Option<String>,
    percentage_of_nodes_to_score: Option<i32>,
    plugins: Option<Plugins>,
    plugin_config: Vec<PluginConfig>,
}

/// Where a value sits: the strict-decoding path (`profiles[0].plugins`) and Go's field stack
/// (`profiles.plugins`).
#[derive(Clone, Default)]
struct At {
    path: String,
    stack: String,
}

impl At {
    fn field(&self, key: &str) -> At {
        At {
            path: join(&self.path, key),
            stack: join(&self.stack, key),
        }
    }
    fn index(&self, i: usize) -> At {
        At {
            path: format!("{}[{i}]", self.path),
            stack: self.stack.clone(),
        }
    }
}

/// A JSON object being decoded as the Go struct `go_struct`.
struct Obj<'v> {
    map: &'v Map<String, Value>,
    at: At,
    go_struct: &'static str,
}

impl<'v> Obj<'v> {
    /// The field's value, `None` when absent or null (Go leaves the zero value).
    fn get(&self, key: &str) -> Option<(&'v Value, At)> {
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some((v, self.at.field(key))),
        }
    }
}

#[derive(Default)]
struct Decoder {
    unknown: Vec<String>,
    type_error: Option<String>,
}

impl Decoder {
    fn fail(&mut self, msg: String) {
        if self.type_error.is_none() {
            self.type_error = Some(msg);
        }
    }

    fn mismatch(&mut self, found: &str, go_struct: &str, at: &At, go_type: &str) {
        self.fail(format!(
            "json: cannot unmarshal {found} into Go struct field {go_struct}.{} of type {go_type}",
            at.stack
        ));
    }

    /// `v` as the struct `go_struct` (a field of the struct `parent`), noting unknown fields.
    fn object<'v>(
        &mut self,
        v: &'v Value,
        at: At,
        parent: &str,
        go_struct: &'static str,
        go_type: &str,
        known: &[&str],
    ) -> Option<Obj<'v>> {
        match v {
            Value::Null => None,
            Value::Object(map) => {
                for key in map.keys() {
                    if !known.contains(&key.as_str()) {
                        self.unknown.push(at.field(key).path);
                    }
                }
                Some(Obj { map, at, go_struct })
            }
            other => {
                self.mismatch(json_kind(other), parent, &at, go_type);
                None
            }
        }
    }

    fn child<'v>(
        &mut self,
        o: &Obj<'v>,
        key: &str,
        go_struct: &'static str,
        go_type: &str,
        known: &[&str],
    ) -> Option<Obj<'v>> {
        let (v, at) = o.get(key)?;
        self.object(v, at, o.go_struct, go_struct, go_type, known)
    }

    fn list<'v>(&mut self, o: &Obj<'v>, key: &str, go_type: &str) -> Vec<(&'v Value, At)> {
        match o.get(key) {
            None => Vec::new(),
            Some((Value::Array(items), at)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (v, at.index(i)))
                .collect(),
            Some((other, at)) => {
                self.mismatch(json_kind(other), o.go_struct, &at, go_type);
                Vec::new()
            }
        }
    }

    fn int(&mut self, o: &Obj, key: &str, go_type: &str, min: i64, max: i64) -> Option<i64> {
        let (v, at) = o.get(key)?;
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(i) if (min..=max).contains(&i) => Some(i),
                _ => {
                    self.mismatch(&format!("number {n}"), o.go_struct, &at, go_type);
                    None
                }
            },
            other => {
                self.mismatch(json_kind(other), o.go_struct, &at, go_type);
                None
            }
        }
    }

    fn int32(&mut self, o: &Obj, key: &str) -> Option<i32> {
        self.int(o, key, "int32", i32::MIN.into(), i32::MAX.into())
            .and_then(|i| i32::try_from(i).ok())
    }

    fn int64(&mut self, o: &Obj, key: &str) -> Option<i64> {
        self.int(o, key, "int64", i64::MIN, i64::MAX)
    }

    fn float32(&mut self, o: &Obj, key: &str) -> Option<f32> {
        let (v, at) = o.get(key)?;
        match v {
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.abs() <= f64::from(f32::MAX) => Some(f as f32),
                _ => {
                    self.mismatch(&format!("number {n}"), o.go_struct, &at, "float32");
                    None
                }
            },
            other => {
                self.mismatch(json_kind(other), o.go_struct, &at, "float32");
                None
            }
        }
    }

    fn boolean(&mut self, o: &Obj, key: &str) -> Option<bool> {
        let (v, at) = o.get(key)?;
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.mismatch(json_kind(other), o.go_struct, &at, "bool");
                None
            }
        }
    }

    fn string(&mut self, o: &Obj, key: &str) -> Option<String> {
        let (v, at) = o.get(key)?;
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.mismatch(json_kind(other), o.go_struct, &at, "string");
                None
            }
        }
    }

    /// A `metav1.Duration` (a Go duration string).
    fn duration(&mut self, o: &Obj, key: &str) -> GoDuration {
        match o.get(key) {
            None => GoDuration(0),
            Some((Value::String(s), _)) => match GoDuration::parse(s) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(e);
                    GoDuration(0)
                }
            },
            Some((other, _)) => {
                self.fail(format!(
                    "json: cannot unmarshal {} into Go value of type string",
                    json_kind(other)
                ));
                GoDuration(0)
            }
        }
    }

    fn config(&mut self, v: &Value) -> RawConfig {
        let mut raw = RawConfig::default();
        let Value::Object(map) = v else {
            return raw;
        };
        for key in map.keys() {
            if !CONFIG_FIELDS.contains(&key.as_str()) {
                self.unknown.push(key.clone());
            }
        }
        let o = Obj {
            map,
            at: At::default(),
            go_struct: "KubeSchedulerConfiguration",
        };
        raw.parallelism = self.int32(&o, "parallelism");
        if let Some(le) = self.child(
            &o,
            "leaderElection",
            "LeaderElectionConfiguration",
            "v1alpha1.LeaderElectionConfiguration",
            LEADER_ELECTION_FIELDS,
        ) {
            raw.leader_elect = self.boolean(&le, "leaderElect");
            raw.lease_duration = self.duration(&le, "leaseDuration");
            raw.renew_deadline = self.duration(&le, "renewDeadline");
            raw.retry_period = self.duration(&le, "retryPeriod");
            raw.resource_lock = self.string(&le, "resourceLock").unwrap_or_default();
            raw.resource_name = self.string(&le, "resourceName").unwrap_or_default();
            raw.resource_namespace = self.string(&le, "resourceNamespace").unwrap_or_default();
        }
        if let Some(cc) = self.child(
            &o,
            "clientConnection",
            "ClientConnectionConfiguration",
            "v1alpha1.ClientConnectionConfiguration",
            CLIENT_CONNECTION_FIELDS,
        ) {
            raw.client_connection = Some(ClientConnection {
                kubeconfig: self.string(&cc, "kubeconfig").unwrap_or_default(),
                accept_content_types: self.string(&cc, "acceptContentTypes").unwrap_or_default(),
                content_type: self.string(&cc, "contentType").unwrap_or_default(),
                qps: self.float32(&cc, "qps").unwrap_or(0.0),
                burst: self.int32(&cc, "burst").unwrap_or(0),
            });
        }
        raw.enable_profiling = self.boolean(&o, "enableProfiling");
        raw.enable_contention_profiling = self.boolean(&o, "enableContentionProfiling");
        raw.percentage_of_nodes_to_score = self.int32(&o, "percentageOfNodesToScore");
        raw.pod_initial_backoff_seconds = self.int64(&o, "podInitialBackoffSeconds");
        raw.pod_max_backoff_seconds = self.int64(&o, "podMaxBackoffSeconds");
        for (v, at) in self.list(&o, "profiles", "[]v1.KubeSchedulerProfile") {
            let profile = self.profile(v, at);
            raw.profiles.push(profile);
        }
        raw.extenders = self
            .list(&o, "extenders", "[]v1.Extender")
            .into_iter()
            .map(|(v, _)| v.clone())
            .collect();
        raw.delay_cache_until_active = self.boolean(&o, "delayCacheUntilActive").unwrap_or(false);
        raw
    }

    fn profile(&mut self, v: &Value, at: At) -> RawProfile {
        let mut raw = RawProfile::default();
        let Some(o) = self.object(
            v,
            at,
            "KubeSchedulerConfiguration",
            "KubeSchedulerProfile",
            "v1.KubeSchedulerProfile",
            PROFILE_FIELDS,
        ) else {
            return raw;
        };
        raw.scheduler_name = self.string(&o, "schedulerName");
        raw.percentage_of_nodes_to_score = self.int32(&o, "percentageOfNodesToScore");
        if let Some(p) = self.child(&o, "plugins", "Plugins", "v1.Plugins", &PLUGINS_FIELDS) {
            let mut plugins = Plugins {
                multi_point: self.plugin_set(&p, "multiPoint"),
                ..Plugins::default()
            };
            for ep in ExtensionPoint::ALL {
                *plugins.get_mut(ep) = self.plugin_set(&p, ep.field());
            }
            raw.plugins = Some(plugins);
        }
        for (v, at) in self.list(&o, "pluginConfig", "[]v1.PluginConfig") {
            let Some(c) = self.object(
                v,
                at,
                "KubeSchedulerProfile",
                "PluginConfig",
                "v1.PluginConfig",
                PLUGIN_CONFIG_FIELDS,
            ) else {
                raw.plugin_config.push(PluginConfig {
                    name: String::new(),
                    args: Value::Null,
                });
                continue;
            };
            raw.plugin_config.push(PluginConfig {
                name: self.string(&c, "name").unwrap_or_default(),
                args: c.map.get("args").cloned().unwrap_or(Value::Null),
            });
        }
        raw
    }

    fn plugin_set(&mut self, plugins: &Obj, key: &str) -> PluginSet {
        let mut set = PluginSet::default();
        let Some(o) = self.child(plugins, key, "PluginSet", "v1.PluginSet", PLUGIN_SET_FIELDS)
        else {
            return set;
        };
        for (v, at) in self.list(&o, "enabled", "[]v1.Plugin") {
            let p = self.plugin(v, at);
            set.enabled.push(p);
        }
        for (v, at) in self.list(&o, "disabled", "[]v1.Plugin") {
            let p = self.plugin(v, at);
            set.disabled.push(p.name);
        }
        set
    }

    fn plugin(&mut self, v: &Value, at: At) -> PluginRef {
        let mut p = PluginRef {
            name: String::new(),
            weight: 0,
        };
        if let Some(o) = self.object(v, at, "PluginSet", "Plugin", "v1.Plugin", PLUGIN_FIELDS) {
            p.name = self.string(&o, "name").unwrap_or_default();
            p.weight = self.int32(&o, "weight").unwrap_or(0);
        }
        p
    }
}

/// The fields of `plugins`: every extension point and `multiPoint`.
const PLUGINS_FIELDS: [&str; 13] = [
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
];

/// `SetDefaults_KubeSchedulerConfiguration` (with the component-base leader-election defaults).
fn apply_defaults(raw: RawConfig) -> Config {
    let mut profiles = raw.profiles;
    if profiles.is_empty() {
        profiles.push(RawProfile::default());
    }
    // Only a lone profile gets the default name; validation asks the others for one.
    if profiles.len() == 1 && profiles[0].scheduler_name.is_none() {
        profiles[0].scheduler_name = Some(DEFAULT_SCHEDULER_NAME.to_string());
    }
    let defaults = Plugins::defaults();
    let profiles = profiles
        .into_iter()
        .map(|p| Profile {
            scheduler_name: p.scheduler_name.unwrap_or_default(),
            percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
            plugins: Plugins::merge(&defaults, p.plugins.as_ref()),
            plugin_config: p.plugin_config,
        })
        .collect();

    let or_string = |s: String, default: &str| {
        if s.is_empty() {
            default.to_string()
        } else {
            s
        }
    };
    let or_duration = |d: GoDuration, secs: i64| {
        if d.0 == 0 {
            GoDuration::from_secs(secs)
        } else {
            d
        }
    };
    let cc = raw.client_connection.unwrap_or(ClientConnection {
        kubeconfig: String::new(),
        accept_content_types: String::new(),
        content_type: String::new(),
        qps: 0.0,
        burst: 0,
    });
    let enable_profiling = raw.enable_profiling.unwrap_or(true);
    Config {
        parallelism: raw.parallelism.unwrap_or(16),
        leader_election: LeaderElection {
            leader_elect: raw.leader_elect.unwrap_or(true),
            lease_duration: or_duration(raw.lease_duration, 15),
            renew_deadline: or_duration(raw.renew_deadline, 10),
            retry_period: or_duration(raw.retry_period, 2),
            resource_lock: or_string(raw.resource_lock, "leases"),
            resource_name: or_string(raw.resource_name, "kube-scheduler"),
            resource_namespace: or_string(raw.resource_namespace, "kube-system"),
        },
        client_connection: ClientConnection {
            kubeconfig: cc.kubeconfig,
            accept_content_types: cc.accept_content_types,
            content_type: or_string(cc.content_type, "application/vnd.kubernetes.protobuf"),
            qps: if cc.qps == 0.0 { 50.0 } else { cc.qps },
            burst: if cc.burst == 0 { 100 } else { cc.burst },
        },
        enable_profiling,
        enable_contention_profiling: raw.enable_contention_profiling.unwrap_or(enable_profiling),
        percentage_of_nodes_to_score: raw.percentage_of_nodes_to_score.unwrap_or(0),
        pod_initial_backoff_seconds: raw.pod_initial_backoff_seconds.unwrap_or(1),
        pod_max_backoff_seconds: raw.pod_max_backoff_seconds.unwrap_or(10),
        profiles,
        extenders: raw.extenders,
        delay_cache_until_active: raw.delay_cache_until_active,
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: `ValidateKubeSchedulerConfiguration` (field errors as `field.Error` prints them,
// several joined as an aggregate prints them).

/// Check a defaulted configuration; plugin args are checked by the plugins' constructors.
pub fn validate(cfg: &Config) -> Result<(), String> {
    validate_with(cfg, &plugins::registry())
}

fn invalid(path: &str, value: impl fmt::Display, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

fn validate_with(cfg: &Config, registry: &[(&'static str, Constructor)]) -> Result<(), String> {
    let mut errs: Vec<String> = Vec::new();
    let cc = &cfg.client_connection;
    if cc.burst < 0 {
        errs.push(invalid(
            "clientConnection.burst",
            cc.burst,
            "must be non-negative",
        ));
    }
    validate_leader_election(&cfg.leader_election, &mut errs);

    if cfg.parallelism <= 0 {
        errs.push(invalid(
            "parallelism",
            cfg.parallelism,
            "should be an integer value greater than zero",
        ));
    }
    if cfg.profiles.is_empty() {
        errs.push("profiles: Required value".to_string());
    } else {
        let mut existing: Vec<(&str, usize)> = Vec::new();
        for (i, profile) in cfg.profiles.iter().enumerate() {
            validate_profile(i, profile, registry, &mut errs);
            let name = profile.scheduler_name.as_str();
            match existing.iter_mut().find(|(n, _)| *n == name) {
                Some((_, idx)) => {
                    errs.push(format!(
                        "profiles[{i}].schedulerName: Duplicate value: {}",
                        go_quote(&format!("profiles[{idx}].schedulerName"))
                    ));
                    *idx = i;
                }
                None => existing.push((name, i)),
            }
        }
        validate_common_queue_sort(&cfg.profiles, &mut errs);
    }
    validate_percentage(
        "percentageOfNodesToScore",
        Some(cfg.percentage_of_nodes_to_score),
        &mut errs,
    );
    if cfg.pod_initial_backoff_seconds <= 0 {
        errs.push(invalid(
            "podInitialBackoffSeconds",
            cfg.pod_initial_backoff_seconds,
            "must be greater than 0",
        ));
    }
    if cfg.pod_max_backoff_seconds < cfg.pod_initial_backoff_seconds {
        errs.push(invalid(
            "podMaxBackoffSeconds",
            cfg.pod_max_backoff_seconds,
            "must be greater than or equal to PodInitialBackoffSeconds",
        ));
    }
    if !cfg.extenders.is_empty() {
        errs.push("extenders: Forbidden: scheduler extenders are not supported".to_string());
    }
    aggregate(errs)
}

/// An aggregate error: one message as is, several in brackets, repeats dropped.
fn aggregate(errs: Vec<String>) -> Result<(), String> {
    let mut unique: Vec<String> = Vec::new();
    for e in errs {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.remove(0)),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

/// component-base's `ValidateLeaderElectionConfiguration`, plus the scheduler's lease-only rule.
fn validate_leader_election(le: &LeaderElection, errs: &mut Vec<String>) {
    if !le.leader_elect {
        return;
    }
    let positive = [
        ("leaseDuration", le.lease_duration),
        ("renewDeadline", le.renew_deadline),
        ("retryPeriod", le.retry_period),
    ];
    for (field, d) in positive {
        if d.0 <= 0 {
            errs.push(invalid(
                &format!("leaderElection.{field}"),
                d,
                "must be greater than zero",
            ));
        }
    }
    if le.lease_duration <= le.renew_deadline {
        errs.push(invalid(
            "leaderElection.leaseDuration",
            le.renew_deadline,
            "LeaseDuration must be greater than RenewDeadline",
        ));
    }
    let required = [
        ("resourceLock", &le.resource_lock),
        ("resourceNamespace", &le.resource_namespace),
        ("resourceName", &le.resource_name),
    ];
    for (field, value) in required {
        if value.is_empty() {
            errs.push(invalid(
                &format!("leaderElection.{field}"),
                go_quote(value),
                &format!("{field} is required"),
            ));
        }
    }
    if le.resource_lock != "leases" {
        errs.push(invalid(
            "leaderElection.resourceLock",
            go_quote(&le.resource_lock),
            "resourceLock value must be \"leases\"",
        ));
    }
}

fn validate_percentage(path: &str, value: Option<i32>, errs: &mut Vec<String>) {
    if let Some(v) = value {
        if !(0..=100).contains(&v) {
            errs.push(invalid(path, v, "not in valid range [0-100]"));
        }
    }
}

fn was_invalid(path: &str, name: &str) -> String {
    invalid(
        path,
        go_quote(name),
        &format!(
            "was invalid in version {} (KubeSchedulerConfiguration is version {})",
            go_quote(API_VERSION),
            go_quote(API_VERSION)
        ),
    )
}

fn validate_profile(
    i: usize,
    profile: &Profile,
    registry: &[(&'static str, Constructor)],
    errs: &mut Vec<String>,
) {
    let path = format!("profiles[{i}]");
    if profile.scheduler_name.is_empty() {
        errs.push(format!("{path}.schedulerName: Required value"));
    }
    validate_percentage(
        &format!("{path}.percentageOfNodesToScore"),
        profile.percentage_of_nodes_to_score,
        errs,
    );
    for ep in ExtensionPoint::ALL {
        for (k, p) in profile.plugins.get(ep).enabled.iter().enumerate() {
            if INVALID_PLUGINS.contains(&p.name.as_str()) {
                let at = format!("{path}.plugins.{}.enabled[{k}]", ep.field());
                errs.push(was_invalid(&at, &p.name));
            }
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for (j, pc) in profile.plugin_config.iter().enumerate() {
        let at = format!("{path}.pluginConfig[{j}]");
        if seen.contains(&pc.name.as_str()) {
            errs.push(format!("{at}: Duplicate value: {}", go_quote(&pc.name)));
        } else {
            seen.push(&pc.name);
        }
        if INVALID_PLUGINS.contains(&pc.name.as_str()) {
            errs.push(was_invalid(&at, &pc.name));
        } else if let Some((_, new)) = registry.iter().find(|(n, _)| *n == pc.name) {
            if let Err(e) = new(&pc.args) {
                errs.push(args_error(&at, &e));
            }
        }
    }
}

/// A plugin's args error under `profiles[i].pluginConfig[j].args`: an error that starts with a
/// field path (`scoringStrategy.type: ...`) is joined to it with a dot.
fn args_error(at: &str, err: &str) -> String {
    let starts_with_path = err.split_once(": ").is_some_and(|(head, _)| {
        !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']' | '_' | '-'))
            && head.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
    });
    if starts_with_path {
        format!("{at}.args.{err}")
    } else {
        format!("{at}.args: {err}")
    }
}

/// Go's `%#v` of an internal `config.PluginSet` (upstream prints the set this way).
fn go_plugin_set(set: &PluginSet) -> String {
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "[]config.Plugin(nil)".to_string()
        } else {
            format!("[]config.Plugin{{{}}}", items.join(", "))
        }
    };
    let plugin = |name: &str, weight: i32| {
        format!("config.Plugin{{Name:{}, Weight:{weight}}}", go_quote(name))
    };
    format!(
        "config.PluginSet{{Enabled:{}, Disabled:{}}}",
        list(
            set.enabled
                .iter()
                .map(|p| plugin(&p.name, p.weight))
                .collect()
        ),
        list(set.disabled.iter().map(|n| plugin(n, 0)).collect()),
    )
}

/// Every profile must configure the same queue sort set (and args) as the first.
fn validate_common_queue_sort(profiles: &[Profile], errs: &mut Vec<String>) {
    let Some(first) = profiles.first() else {
        return;
    };
    let canon = &first.plugins.queue_sort;
    let name = canon.enabled.first().map_or("", |p| p.name.as_str());
    if canon.enabled.len() > 1 {
        errs.push(invalid(
            "profiles[0].plugins.queueSort.Enabled",
            canon.enabled.len(),
            "only one queue sort plugin can be enabled",
        ));
    }
    let args_of = |p: &'_ Profile| -> Option<Value> {
        if name.is_empty() {
            return None;
        }
        p.plugin_config
            .iter()
            .rev()
            .find(|c| c.name == name)
            .map(|c| c.args.clone())
            .filter(|a| !a.is_null())
    };
    let canon_args = args_of(first);
    for (i, p) in profiles.iter().enumerate().skip(1) {
        let curr = &p.plugins.queue_sort;
        if curr != canon {
            errs.push(invalid(
                &format!("profiles[{i}].plugins.queueSort"),
                go_plugin_set(curr),
                "must be the same for all profiles",
            ));
        }
        for c in &p.plugin_config {
            let args = Some(c.args.clone()).filter(|a| !a.is_null());
            if c.name == name && args != canon_args {
                errs.push(invalid(
                    &format!("profiles[{i}].pluginConfig.args"),
                    c.args.to_string(),
                    "queueSort must be the same for all profiles",
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Building the profiles: `runtime.NewFramework` for each, then `profile.NewMap`'s checks.

/// One framework per profile, from the in-tree registry. Expects a validated configuration.
pub fn build_profiles(cfg: &Config) -> Result<Vec<Framework>, String> {
    build_profiles_with(cfg, &plugins::registry())
}

fn build_profiles_with(
    cfg: &Config,
    registry: &[(&'static str, Constructor)],
) -> Result<Vec<Framework>, String> {
    let mut out: Vec<Framework> = Vec::with_capacity(cfg.profiles.len());
    let mut first_queue_sort: Option<(&'static str, Option<&Value>)> = None;
    for profile in &cfg.profiles {
        let fw = new_framework(profile, registry).map_err(|e| {
            format!(
                "creating profile for scheduler name {}: {e}",
                profile.scheduler_name
            )
        })?;
        if fw.scheduler_name.is_empty() {
            return Err("scheduler name is needed".to_string());
        }
        if out.iter().any(|f| f.scheduler_name == fw.scheduler_name) {
            return Err(format!(
                "duplicate profile with scheduler name {}",
                go_quote(&fw.scheduler_name)
            ));
        }
        let queue_sort = fw.queue_sort.as_ref().map_or("", |e| e.plugin.name());
        let args = profile
            .plugin_config
            .iter()
            .rev()
            .find(|c| c.name == queue_sort)
            .map(|c| &c.args)
            .filter(|a| !a.is_null());
        match first_queue_sort {
            None => first_queue_sort = Some((queue_sort, args)),
            Some((first, first_args)) => {
                if first != queue_sort {
                    return Err(format!(
                        "different queue sort plugins for profile {}: {}, first: {}",
                        go_quote(&fw.scheduler_name),
                        go_quote(queue_sort),
                        go_quote(first)
                    ));
                }
                if first_args != args {
                    return Err(format!(
                        "different queue sort plugin args for profile {}",
                        go_quote(&fw.scheduler_name)
                    ));
                }
            }
        }
        out.push(fw);
    }
    Ok(out)
}

/// The plugins of one extension point, by name, in run order.
type PointList<'a> = (ExtensionPoint, Vec<&'a str>);

fn new_framework(
    profile: &Profile,
    registry: &[(&'static str, Constructor)],
) -> Result<Framework, String> {
    let plugins = &profile.plugins;
    let mut needed: Vec<&str> = Vec::new();
    for set in ExtensionPoint::ALL
        .iter()
        .map(|&ep| plugins.get(ep))
        .chain([&plugins.multi_point])
    {
        needed.extend(set.enabled.iter().map(|p| p.name.as_str()));
    }
    let mut args: Vec<(&str, &Value)> = Vec::new();
    for c in &profile.plugin_config {
        if args.iter().any(|(n, _)| *n == c.name) {
            return Err(format!("repeated config for plugin {}", c.name));
        }
        args.push((&c.name, &c.args));
    }
    // Each needed plugin is built once and shared by all its extension points.
    let mut instances: Vec<(&'static str, Arc<dyn Plugin>)> = Vec::new();
    for &(name, new) in registry {
        if !needed.contains(&name) {
            continue;
        }
        let a = args
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&Value::Null, |(_, a)| *a);
        let plugin = new(a).map_err(|e| format!("initializing plugin {}: {e}", go_quote(name)))?;
        instances.push((name, plugin));
    }
    let lookup = |name: &str| -> Option<&Arc<dyn Plugin>> {
        instances.iter().find(|(n, _)| *n == name).map(|(_, p)| p)
    };

    let mut lists: Vec<PointList> = Vec::with_capacity(ExtensionPoint::FRAMEWORK_ORDER.len());
    for ep in ExtensionPoint::FRAMEWORK_ORDER {
        let mut names: Vec<&str> = Vec::new();
        for p in &plugins.get(ep).enabled {
            let Some(plugin) = lookup(&p.name) else {
                return Err(format!(
                    "{} {} does not exist",
                    ep.go_type(),
                    go_quote(&p.name)
                ));
            };
            if !ep.implemented_by(plugin.as_ref()) {
                return Err(format!(
                    "plugin {} does not extend {} plugin",
                    go_quote(&p.name),
                    ep.go_type()
                ));
            }
            if names.contains(&p.name.as_str()) {
                return Err(format!(
                    "plugin {} already registered as {}",
                    go_quote(&p.name),
                    go_quote(ep.go_type())
                ));
            }
            names.push(&p.name);
        }
        lists.push((ep, names));
    }
    if !plugins.multi_point.enabled.is_empty() {
        for (ep, names) in lists.iter_mut() {
            *names = expand_multi_point(plugins, *ep, std::mem::take(names), &lookup)?;
        }
    }
    let list = |ep: ExtensionPoint| -> &[&str] {
        lists
            .iter()
            .find(|(e, _)| *e == ep)
            .map_or(&[], |(_, n)| n.as_slice())
    };

    let name = &profile.scheduler_name;
    let queue_sort = list(ExtensionPoint::QueueSort);
    if queue_sort.len() != 1 {
        return Err(format!(
            "only one queue sort plugin required for profile with scheduler name {}, but got {}",
            go_quote(name),
            queue_sort.len()
        ));
    }
    if list(ExtensionPoint::Bind).is_empty() {
        return Err(format!(
            "at least one bind plugin is needed for profile with scheduler name {}",
            go_quote(name)
        ));
    }
    let weights = score_weights(plugins, &lookup)?;
    for n in list(ExtensionPoint::Score) {
        if !weights.iter().any(|(w, _)| w == n) {
            return Err(format!(
                "score plugin {} is not configured with weight",
                go_quote(n)
            ));
        }
    }

    let entries = |ep: ExtensionPoint| -> Vec<Enabled> {
        list(ep)
            .iter()
            .filter_map(|n| {
                let plugin = lookup(n)?.clone();
                let weight = match ep {
                    ExtensionPoint::Score => {
                        weights.iter().find(|(w, _)| w == n).map_or(1, |w| w.1)
                    }
                    _ => 0,
                };
                Some(Enabled { plugin, weight })
            })
            .collect()
    };
    let mut fw = Framework {
        scheduler_name: name.clone(),
        percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
        ..Framework::default()
    };
    fw.pre_enqueue = entries(ExtensionPoint::PreEnqueue);
    fw.queue_sort = entries(ExtensionPoint::QueueSort).into_iter().next();
    fw.pre_filter = entries(ExtensionPoint::PreFilter);
    fw.filter = entries(ExtensionPoint::Filter);
    fw.post_filter = entries(ExtensionPoint::PostFilter);
    fw.pre_score = entries(ExtensionPoint::PreScore);
    fw.score = entries(ExtensionPoint::Score);
    fw.reserve = entries(ExtensionPoint::Reserve);
    fw.permit = entries(ExtensionPoint::Permit);
    fw.bind = entries(ExtensionPoint::Bind);
    Ok(fw)
}

/// `expandMultiPointPlugins` for one point: the multiPoint plugins that implement it, unless
/// disabled there; a plugin also enabled explicitly keeps its explicit place and weight.
/// Order: explicit plugins also in multiPoint, then multiPoint-only, then the other explicit.
fn expand_multi_point<'a>(
    plugins: &'a Plugins,
    ep: ExtensionPoint,
    explicit: Vec<&'a str>,
    lookup: &dyn Fn(&str) -> Option<&'a Arc<dyn Plugin>>,
) -> Result<Vec<&'a str>, String> {
    let set = plugins.get(ep);
    if set.disabled.iter().any(|d| d == "*") {
        return Ok(explicit);
    }
    let mut overridden: Vec<&str> = Vec::new();
    let mut from_multi_point: Vec<&str> = Vec::new();
    for p in &plugins.multi_point.enabled {
        let Some(plugin) = lookup(&p.name) else {
            return Err(format!(
                "{} {} does not exist",
                ep.go_type(),
                go_quote(&p.name)
            ));
        };
        if !ep.implemented_by(plugin.as_ref()) || set.disabled.contains(&p.name) {
            continue;
        }
        let name = p.name.as_str();
        if explicit.contains(&name) {
            if !overridden.contains(&name) {
                overridden.push(name);
            }
            continue;
        }
        if from_multi_point.contains(&name) {
            return Err(format!(
                "plugin {} already registered as {}",
                go_quote(name),
                go_quote(ep.go_type())
            ));
        }
        from_multi_point.push(name);
    }
    let mut out: Vec<&str> = explicit
        .iter()
        .copied()
        .filter(|n| overridden.contains(n))
        .collect();
    out.extend(from_multi_point);
    out.extend(explicit.iter().copied().filter(|n| !overridden.contains(n)));
    Ok(out)
}

/// `getScoreWeights`: explicit Score weights win over multiPoint ones; 0 means 1; the sum of
/// the maximum weighted scores must fit an int64.
fn score_weights<'a>(
    plugins: &'a Plugins,
    lookup: &dyn Fn(&str) -> Option<&'a Arc<dyn Plugin>>,
) -> Result<Vec<(&'a str, i64)>, String> {
    let mut weights: Vec<(&str, i64)> = Vec::new();
    let mut total: i128 = 0;
    for p in plugins
        .score
        .enabled
        .iter()
        .chain(&plugins.multi_point.enabled)
    {
        let Some(plugin) = lookup(&p.name) else {
            continue;
        };
        if !ExtensionPoint::Score.implemented_by(plugin.as_ref())
            || weights.iter().any(|(n, _)| *n == p.name)
        {
            continue;
        }
        let weight = if p.weight == 0 {
            1
        } else {
            i64::from(p.weight)
        };
        let max = i128::from(weight) * i128::from(MAX_NODE_SCORE);
        if max > i128::from(i64::MAX) - total {
            return Err("total score of Score plugins could overflow".to_string());
        }
        total += max;
        weights.push((&p.name, weight));
    }
    Ok(weights)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::framework::{
        BindPlugin, CycleState, FilterPlugin, NodeStatuses, PermitPlugin, PostFilterPlugin,
        PostFilterResult, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
        QueueSortPlugin, ReservePlugin, ScorePlugin, Status,
    };
    use crate::snapshot::Snapshot;
    use crate::types::{NodeInfo, PodInfo};

    // Fake plugins that extend the points upstream's plugins extend, so ordering tests do not
    // depend on how far the real plugins have been written.
    const PE: u16 = 1;
    const QS: u16 = 1 << 1;
    const PF: u16 = 1 << 2;
    const F: u16 = 1 << 3;
    const POF: u16 = 1 << 4;
    const PS: u16 = 1 << 5;
    const S: u16 = 1 << 6;
    const R: u16 = 1 << 7;
    const PM: u16 = 1 << 8;
    const B: u16 = 1 << 9;

    struct Fake {
        name: &'static str,
        points: u16,
    }

    impl Fake {
        fn has(&self, bit: u16) -> bool {
            self.points & bit != 0
        }
    }

    impl Plugin for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
            self.has(PE).then_some(self as &dyn PreEnqueuePlugin)
        }
        fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
            self.has(QS).then_some(self as &dyn QueueSortPlugin)
        }
        fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
            self.has(PF).then_some(self as &dyn PreFilterPlugin)
        }
        fn as_filter(&self) -> Option<&dyn FilterPlugin> {
            self.has(F).then_some(self as &dyn FilterPlugin)
        }
        fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
            self.has(POF).then_some(self as &dyn PostFilterPlugin)
        }
        fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
            self.has(PS).then_some(self as &dyn PreScorePlugin)
        }
        fn as_score(&self) -> Option<&dyn ScorePlugin> {
            self.has(S).then_some(self as &dyn ScorePlugin)
        }
        fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
            self.has(R).then_some(self as &dyn ReservePlugin)
        }
        fn as_permit(&self) -> Option<&dyn PermitPlugin> {
            self.has(PM).then_some(self as &dyn PermitPlugin)
        }
        fn as_bind(&self) -> Option<&dyn BindPlugin> {
            self.has(B).then_some(self as &dyn BindPlugin)
        }
    }

    impl PreEnqueuePlugin for Fake {
        fn pre_enqueue(&self, _: &PodInfo) -> Status {
            Status::success()
        }
    }
    impl QueueSortPlugin for Fake {
        fn less(&self, _: &PodInfo, a: u64, _: &PodInfo, b: u64) -> bool {
            a < b
        }
    }
    impl PreFilterPlugin for Fake {
        fn pre_filter(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &Snapshot,
        ) -> (PreFilterResult, Status) {
            (PreFilterResult::default(), Status::success())
        }
    }
    impl FilterPlugin for Fake {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::success()
        }
    }
    impl PostFilterPlugin for Fake {
        fn post_filter(
            &self,
            _: &CycleState,
            _: &PodInfo,
            _: &Framework,
            _: &Snapshot,
            _: &NodeStatuses,
        ) -> (Option<PostFilterResult>, Status) {
            (None, Status::unschedulable("fake"))
        }
    }
    impl PreScorePlugin for Fake {
        fn pre_score(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &[&NodeInfo],
            _: &Snapshot,
        ) -> Status {
            Status::success()
        }
    }
    impl ScorePlugin for Fake {
        fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
            Ok(0)
        }
    }
    impl ReservePlugin for Fake {
        fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
            Status::success()
        }
        fn unreserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) {}
    }
    impl PermitPlugin for Fake {
        fn permit(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
            (Status::success(), Duration::ZERO)
        }
    }
    impl BindPlugin for Fake {}

    macro_rules! fake {
        ($f:ident, $name:expr, $points:expr) => {
            fn $f(_: &Value) -> Result<Arc<dyn Plugin>, String> {
                Ok(Arc::new(Fake {
                    name: $name,
                    points: $points,
                }))
            }
        };
    }

    // The in-tree plugins with the extension points they have upstream in v1.32.
    fake!(scheduling_gates, "SchedulingGates", PE);
    fake!(priority_sort, "PrioritySort", QS);
    fake!(node_unschedulable, "NodeUnschedulable", F);
    fake!(node_name, "NodeName", F);
    fake!(taint_toleration, "TaintToleration", F | PS | S);
    fake!(node_affinity, "NodeAffinity", PF | F | PS | S);
    fake!(node_ports, "NodePorts", PF | F);
    fake!(fit, "NodeResourcesFit", PF | F | PS | S);
    fake!(volume_restrictions, "VolumeRestrictions", PF | F);
    fake!(pod_topology_spread, "PodTopologySpread", PF | F | PS | S);
    fake!(inter_pod_affinity, "InterPodAffinity", PF | F | PS | S);
    fake!(default_preemption, "DefaultPreemption", POF);
    fake!(
        balanced_allocation,
        "NodeResourcesBalancedAllocation",
        PS | S
    );
    fake!(image_locality, "ImageLocality", S);
    fake!(default_binder, "DefaultBinder", B);
    // Upstream framework_test's plugins.
    fake!(
        test_plugin,
        "TestPlugin",
        QS | PF | F | POF | PS | S | R | PM | B
    );
    fake!(score_plugin_1, "ScorePlugin1", PS | S);
    fake!(score_plugin_2, "ScorePlugin2", PS | S);
    fake!(score_with_normalize_1, "ScoreWithNormalizePlugin1", S);
    fake!(queue_sort_plugin, "QueueSortPlugin", QS);
    fake!(bind_plugin, "BindPlugin", B);
    fake!(other_sort, "OtherSort", QS);

    fn fail_args(args: &Value) -> Result<Arc<dyn Plugin>, String> {
        match args.get("mode").and_then(Value::as_str) {
            Some("path") => Err("scoringStrategy.type: Unsupported value: \"X\"".to_string()),
            Some(_) => Err("unknown field `mode`, expected `scoringStrategy`".to_string()),
            None => Ok(Arc::new(Fake {
                name: "Picky",
                points: F,
            })),
        }
    }

    fn registry() -> Vec<(&'static str, Constructor)> {
        vec![
            ("SchedulingGates", scheduling_gates),
            ("PrioritySort", priority_sort),
            ("NodeUnschedulable", node_unschedulable),
            ("NodeName", node_name),
            ("TaintToleration", taint_toleration),
            ("NodeAffinity", node_affinity),
            ("NodePorts", node_ports),
            ("NodeResourcesFit", fit),
            ("VolumeRestrictions", volume_restrictions),
            ("PodTopologySpread", pod_topology_spread),
            ("InterPodAffinity", inter_pod_affinity),
            ("DefaultPreemption", default_preemption),
            ("NodeResourcesBalancedAllocation", balanced_allocation),
            ("ImageLocality", image_locality),
            ("DefaultBinder", default_binder),
            ("TestPlugin", test_plugin),
            ("ScorePlugin1", score_plugin_1),
            ("ScorePlugin2", score_plugin_2),
            ("ScoreWithNormalizePlugin1", score_with_normalize_1),
            ("QueueSortPlugin", queue_sort_plugin),
            ("BindPlugin", bind_plugin),
            ("OtherSort", other_sort),
            ("Picky", fail_args),
        ]
    }

    /// A config file with the given body after apiVersion and kind.
    fn yaml(body: &str) -> String {
        format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}")
    }

    fn decoded(body: &str) -> Config {
        match decode(&yaml(body)) {
            Ok(c) => c,
            Err(e) => panic!("decode failed: {e}"),
        }
    }

    fn validation_error(body: &str) -> String {
        let cfg = decoded(body);
        match validate_with(&cfg, &registry()) {
            Ok(()) => panic!("expected a validation error for:\n{body}"),
            Err(e) => e,
        }
    }

    fn build(body: &str) -> Result<Vec<Framework>, String> {
        let cfg = decoded(body);
        validate_with(&cfg, &registry())?;
        build_profiles_with(&cfg, &registry())
    }

    fn built(body: &str) -> Vec<Framework> {
        match build(body) {
            Ok(f) => f,
            Err(e) => panic!("build failed: {e}"),
        }
    }

    fn names(list: &[Enabled]) -> Vec<&'static str> {
        list.iter().map(|e| e.plugin.name()).collect()
    }

    fn weighted(list: &[Enabled]) -> Vec<(&'static str, i64)> {
        list.iter().map(|e| (e.plugin.name(), e.weight)).collect()
    }

    /// Every extension point's plugins, by name.
    fn points(fw: &Framework) -> Vec<(&'static str, Vec<&'static str>)> {
        vec![
            ("preEnqueue", names(&fw.pre_enqueue)),
            (
                "queueSort",
                fw.queue_sort.iter().map(|e| e.plugin.name()).collect(),
            ),
            ("preFilter", names(&fw.pre_filter)),
            ("filter", names(&fw.filter)),
            ("postFilter", names(&fw.post_filter)),
            ("preScore", names(&fw.pre_score)),
            ("score", names(&fw.score)),
            ("reserve", names(&fw.reserve)),
            ("permit", names(&fw.permit)),
            ("bind", names(&fw.bind)),
        ]
    }

    fn pset(enabled: &[(&str, i32)], disabled: &[&str]) -> PluginSet {
        PluginSet {
            enabled: enabled
                .iter()
                .map(|&(n, w)| PluginRef {
                    name: n.to_string(),
                    weight: w,
                })
                .collect(),
            disabled: disabled.iter().map(|d| d.to_string()).collect(),
        }
    }

    // ----- defaulting -----

    #[test]
    fn empty_configuration_gets_the_v1_32_defaults() {
        let cfg = decoded("");
        assert_eq!(cfg, default_config());
        assert_eq!(cfg.parallelism, 16);
        assert_eq!(
            cfg.leader_election,
            LeaderElection {
                leader_elect: true,
                lease_duration: GoDuration::from_secs(15),
                renew_deadline: GoDuration::from_secs(10),
                retry_period: GoDuration::from_secs(2),
                resource_lock: "leases".into(),
                resource_name: "kube-scheduler".into(),
                resource_namespace: "kube-system".into(),
            }
        );
        assert_eq!(
            cfg.client_connection,
            ClientConnection {
                kubeconfig: String::new(),
                accept_content_types: String::new(),
                content_type: "application/vnd.kubernetes.protobuf".into(),
                qps: 50.0,
                burst: 100,
            }
        );
        assert!(cfg.enable_profiling && cfg.enable_contention_profiling);
        assert_eq!(cfg.percentage_of_nodes_to_score, 0);
        assert_eq!(
            (cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds),
            (1, 10)
        );
        assert!(!cfg.delay_cache_until_active);
        assert_eq!(cfg.profiles.len(), 1);
        let p = &cfg.profiles[0];
        assert_eq!(p.scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(p.percentage_of_nodes_to_score, None);
        assert_eq!(p.plugins, Plugins::defaults());
        let multi: Vec<(&str, i64)> = p
            .plugins
            .multi_point
            .enabled
            .iter()
            .map(|e| (e.name.as_str(), i64::from(e.weight)))
            .collect();
        assert_eq!(multi, plugins::DEFAULT_PLUGINS.to_vec());
        assert_eq!(validate(&cfg), Ok(()));
    }

    #[test]
    fn zero_values_take_defaults_but_explicit_pointers_are_kept() {
        let cfg = decoded(
            "leaderElection:\n  leaseDuration: 0s\n  resourceName: ''\n\
             clientConnection:\n  qps: 0\n  burst: 0\n  kubeconfig: /etc/k.conf\n\
             parallelism: 8\npercentageOfNodesToScore: 0\npodInitialBackoffSeconds: 3\n\
             podMaxBackoffSeconds: 30\nenableProfiling: false\n",
        );
        assert_eq!(
            cfg.leader_election.lease_duration,
            GoDuration::from_secs(15)
        );
        assert_eq!(cfg.leader_election.resource_name, "kube-scheduler");
        assert_eq!(cfg.client_connection.qps, 50.0);
        assert_eq!(cfg.client_connection.burst, 100);
        assert_eq!(cfg.client_connection.kubeconfig, "/etc/k.conf");
        assert_eq!(cfg.parallelism, 8);
        assert_eq!(cfg.pod_initial_backoff_seconds, 3);
        assert_eq!(cfg.pod_max_backoff_seconds, 30);
        // Contention profiling follows profiling when not set.
        assert!(!cfg.enable_profiling && !cfg.enable_contention_profiling);
    }

    #[test]
    fn null_fields_are_left_to_the_defaults() {
        let cfg =
            decoded("parallelism: null\nprofiles: null\nleaderElection:\n  leaderElect: null\n");
        assert_eq!(cfg, default_config());
    }

    #[test]
    fn only_a_lone_profile_is_given_the_default_name() {
        let cfg = decoded("profiles:\n- percentageOfNodesToScore: 20\n");
        assert_eq!(cfg.profiles[0].scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(cfg.profiles[0].percentage_of_nodes_to_score, Some(20));
        let cfg = decoded("profiles:\n- schedulerName: a\n- {}\n");
        assert_eq!(cfg.profiles[1].scheduler_name, "");
        let cfg = decoded("profiles:\n- schedulerName: ''\n");
        assert_eq!(cfg.profiles[0].scheduler_name, "");
    }

    #[test]
    fn json_documents_are_read_like_yaml() {
        let json = format!(
            r#"{{"apiVersion": "{API_VERSION}", "kind": "{KIND}",
	"parallelism": 4, "profiles": [{{"schedulerName": "j", "plugins": {{"score": {{"disabled": [{{"name": "*"}}]}}}}}}]}}"#
        );
        let cfg = match decode(&json) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(cfg.parallelism, 4);
        assert_eq!(cfg.profiles[0].scheduler_name, "j");
        assert_eq!(cfg.profiles[0].plugins.score, pset(&[], &["*"]));
    }

    #[test]
    fn plugin_sets_merge_with_the_defaults_like_merge_plugins() {
        // Upstream TestMergePlugins, on the filter and multiPoint sets.
        let d12 = pset(&[("DefaultPlugin1", 0), ("DefaultPlugin2", 0)], &[]);
        let p123 = pset(&[("Plugin1", 0), ("Plugin2", 0), ("Plugin3", 0)], &[]);
        let cases: Vec<(&str, PluginSet, PluginSet, PluginSet)> = vec![
            (
                "append custom plugin",
                d12.clone(),
                pset(&[("CustomPlugin", 0)], &[]),
                pset(
                    &[
                        ("DefaultPlugin1", 0),
                        ("DefaultPlugin2", 0),
                        ("CustomPlugin", 0),
                    ],
                    &[],
                ),
            ),
            (
                "insert after default plugin 2",
                d12.clone(),
                pset(
                    &[("CustomPlugin", 0), ("DefaultPlugin2", 0)],
                    &["DefaultPlugin2"],
                ),
                pset(
                    &[
                        ("DefaultPlugin1", 0),
                        ("CustomPlugin", 0),
                        ("DefaultPlugin2", 0),
                    ],
                    &["DefaultPlugin2"],
                ),
            ),
            (
                "insert before all plugins",
                d12.clone(),
                pset(
                    &[
                        ("CustomPlugin", 0),
                        ("DefaultPlugin1", 0),
                        ("DefaultPlugin2", 0),
                    ],
                    &["*"],
                ),
                pset(
                    &[
                        ("CustomPlugin", 0),
                        ("DefaultPlugin1", 0),
                        ("DefaultPlugin2", 0),
                    ],
                    &["*"],
                ),
            ),
            (
                "reorder default plugins",
                d12.clone(),
                pset(&[("DefaultPlugin2", 0), ("DefaultPlugin1", 0)], &["*"]),
                pset(&[("DefaultPlugin2", 0), ("DefaultPlugin1", 0)], &["*"]),
            ),
            (
                "custom plugin overrides default plugin",
                p123.clone(),
                pset(&[("Plugin1", 2), ("Plugin3", 3)], &[]),
                pset(&[("Plugin1", 2), ("Plugin2", 0), ("Plugin3", 3)], &[]),
            ),
            (
                "order preserved after override",
                p123.clone(),
                pset(&[("Plugin2", 2), ("Plugin1", 1)], &[]),
                pset(&[("Plugin1", 1), ("Plugin2", 2), ("Plugin3", 0)], &[]),
            ),
            (
                "repeated custom plugin",
                p123.clone(),
                pset(
                    &[
                        ("Plugin1", 0),
                        ("Plugin2", 2),
                        ("Plugin3", 0),
                        ("Plugin2", 4),
                    ],
                    &[],
                ),
                pset(
                    &[
                        ("Plugin1", 0),
                        ("Plugin2", 4),
                        ("Plugin3", 0),
                        ("Plugin2", 2),
                    ],
                    &[],
                ),
            ),
        ];
        for (name, defaults, custom, want) in cases {
            let defaults = Plugins {
                filter: defaults,
                ..Plugins::default()
            };
            let custom = Plugins {
                filter: custom,
                ..Plugins::default()
            };
            let got = Plugins::merge(&defaults, Some(&custom));
            assert_eq!(got.filter, want, "{name}");
            assert_eq!(
                Plugins::merge(&defaults, None),
                defaults,
                "{name}: no custom plugins"
            );
        }

        // MultiPoint: disabled entries are kept so expansion can skip those plugins.
        let defaults = Plugins {
            multi_point: pset(&[("DefaultPlugin1", 0), ("DefaultPlugin2", 0)], &[]),
            ..Plugins::default()
        };
        let custom = Plugins {
            multi_point: pset(
                &[("CustomPlugin", 0), ("CustomPlugin2", 0)],
                &["DefaultPlugin2"],
            ),
            score: pset(&[], &["CustomPlugin2"]),
            ..Plugins::default()
        };
        let got = Plugins::merge(&defaults, Some(&custom));
        assert_eq!(
            got.multi_point,
            pset(
                &[
                    ("DefaultPlugin1", 0),
                    ("CustomPlugin", 0),
                    ("CustomPlugin2", 0)
                ],
                &["DefaultPlugin2"]
            )
        );
        assert_eq!(got.score, pset(&[], &["CustomPlugin2"]));
        let custom = Plugins {
            multi_point: pset(&[], &["DefaultPlugin1", "DefaultPlugin2"]),
            ..Plugins::default()
        };
        assert_eq!(
            Plugins::merge(&defaults, Some(&custom)).multi_point,
            pset(&[], &["DefaultPlugin1", "DefaultPlugin2"])
        );
    }

    // ----- strict decoding -----

    #[test]
    fn decoding_errors_match_kubernetes_strict_decoding() {
        let cases: Vec<(&str, String, &str)> = vec![
            (
                "unknown top-level field",
                yaml("parallelism: 2\nfoo: 1\n"),
                "strict decoding error: unknown field \"foo\"",
            ),
            (
                "field names are case-sensitive",
                yaml("Parallelism: 2\n"),
                "strict decoding error: unknown field \"Parallelism\"",
            ),
            (
                "unknown nested fields are named by path, in document order",
                yaml(
                    "profiles:\n- schedulerName: a\n  plugins:\n    score:\n      enabled:\n      - name: X\n        wieght: 2\n  bogus: true\nleaderElection:\n  leaseDurationSeconds: 3\n",
                ),
                "strict decoding error: unknown field \"profiles[0].plugins.score.enabled[0].wieght\", unknown field \"profiles[0].bogus\", unknown field \"leaderElection.leaseDurationSeconds\"",
            ),
            (
                "unknown extension point",
                yaml("profiles:\n- plugins:\n    normalizeScore: {}\n"),
                "strict decoding error: unknown field \"profiles[0].plugins.normalizeScore\"",
            ),
            (
                "duplicate field",
                yaml("parallelism: 2\nparallelism: 3\n"),
                "strict decoding error: duplicate field \"parallelism\"",
            ),
            (
                "duplicate field in json",
                format!(r#"{{"apiVersion":"{API_VERSION}","kind":"{KIND}","profiles":[{{"schedulerName":"a","schedulerName":"b"}}]}}"#),
                "strict decoding error: duplicate field \"profiles[0].schedulerName\"",
            ),
            (
                "string for an integer",
                yaml("parallelism: \"16\"\n"),
                "json: cannot unmarshal string into Go struct field KubeSchedulerConfiguration.parallelism of type int32",
            ),
            (
                "nested type error names the innermost struct",
                yaml("profiles:\n- plugins:\n    score:\n      enabled:\n      - name: X\n        weight: heavy\n"),
                "json: cannot unmarshal string into Go struct field Plugin.profiles.plugins.score.enabled.weight of type int32",
            ),
            (
                "object for a list",
                yaml("profiles:\n  schedulerName: a\n"),
                "json: cannot unmarshal object into Go struct field KubeSchedulerConfiguration.profiles of type []v1.KubeSchedulerProfile",
            ),
            (
                "out of range int32",
                yaml("parallelism: 3000000000\n"),
                "json: cannot unmarshal number 3000000000 into Go struct field KubeSchedulerConfiguration.parallelism of type int32",
            ),
            (
                "fraction for an integer",
                yaml("podMaxBackoffSeconds: 1.5\n"),
                "json: cannot unmarshal number 1.5 into Go struct field KubeSchedulerConfiguration.podMaxBackoffSeconds of type int64",
            ),
            (
                "bad duration",
                yaml("leaderElection:\n  renewDeadline: ten\n"),
                "time: invalid duration \"ten\"",
            ),
            (
                "duration without unit",
                yaml("leaderElection:\n  renewDeadline: \"10\"\n"),
                "time: missing unit in duration \"10\"",
            ),
            (
                "wrong kind",
                format!("apiVersion: {API_VERSION}\nkind: KubeProxyConfiguration\n"),
                "no kind \"KubeProxyConfiguration\" is registered for version \"kubescheduler.config.k8s.io/v1\" in scheme \"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme/scheme.go:30\"",
            ),
            (
                "removed version",
                format!("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: {KIND}\n"),
                "no kind \"KubeSchedulerConfiguration\" is registered for version \"kubescheduler.config.k8s.io/v1beta3\" in scheme \"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme/scheme.go:30\"",
            ),
            (
                "missing kind",
                format!("apiVersion: {API_VERSION}\n"),
                "Object 'Kind' is missing in '{\"apiVersion\":\"kubescheduler.config.k8s.io/v1\"}'",
            ),
            (
                "missing apiVersion",
                format!("kind: {KIND}\n"),
                "Object 'apiVersion' is missing in '{\"kind\":\"KubeSchedulerConfiguration\"}'",
            ),
            ("empty file", String::new(), "Object 'Kind' is missing in 'null'"),
        ];
        for (name, input, want) in cases {
            assert_eq!(decode(&input), Err(want.to_string()), "{name}");
        }
    }

    #[test]
    fn malformed_documents_are_errors_not_panics() {
        for input in [
            "apiVersion: [\n",
            "- a\n- b\n",
            "{\"apiVersion\": ",
            "apiVersion: 5\nkind: x\n",
            "\u{0}\u{1}",
        ] {
            assert!(decode(input).is_err(), "{input:?}");
        }
        assert!(decode("- a\n").unwrap_err().starts_with(
            "couldn't get version/kind; json parse error: json: cannot unmarshal array"
        ));
        assert!(decode("a: [\n")
            .unwrap_err()
            .starts_with("error converting YAML to JSON: yaml: "));
    }

    #[test]
    fn plugin_args_are_not_checked_by_the_configuration_decoder() {
        let cfg = decoded(
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      anything: [1, 2]\n",
        );
        assert_eq!(cfg.profiles[0].plugin_config[0].name, "NodeResourcesFit");
        assert_eq!(
            cfg.profiles[0].plugin_config[0].args,
            serde_json::json!({"anything": [1, 2]})
        );
    }

    // ----- validation -----

    #[test]
    fn validation_errors_name_the_field_as_upstream_does() {
        let was_invalid = "was invalid in version \"kubescheduler.config.k8s.io/v1\" (KubeSchedulerConfiguration is version \"kubescheduler.config.k8s.io/v1\")";
        let cases: Vec<(&str, &str, String)> = vec![
            (
                "non-positive parallelism",
                "parallelism: 0\n",
                "parallelism: Invalid value: 0: should be an integer value greater than zero".into(),
            ),
            (
                "percentage over 100",
                "percentageOfNodesToScore: 110\n",
                "percentageOfNodesToScore: Invalid value: 110: not in valid range [0-100]".into(),
            ),
            (
                "negative profile percentage",
                "profiles:\n- percentageOfNodesToScore: -1\n",
                "profiles[0].percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]".into(),
            ),
            (
                "zero initial backoff",
                "podInitialBackoffSeconds: 0\n",
                "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0".into(),
            ),
            (
                "max backoff below initial",
                "podInitialBackoffSeconds: 2\npodMaxBackoffSeconds: 1\n",
                "podMaxBackoffSeconds: Invalid value: 1: must be greater than or equal to PodInitialBackoffSeconds".into(),
            ),
            (
                "negative burst",
                "clientConnection:\n  burst: -1\n",
                "clientConnection.burst: Invalid value: -1: must be non-negative".into(),
            ),
            (
                "lease not longer than renew deadline",
                "leaderElection:\n  leaseDuration: 10s\n",
                "leaderElection.leaseDuration: Invalid value: 10s: LeaseDuration must be greater than RenewDeadline".into(),
            ),
            (
                "negative retry period",
                "leaderElection:\n  retryPeriod: -1.5s\n",
                "leaderElection.retryPeriod: Invalid value: -1.5s: must be greater than zero".into(),
            ),
            (
                "endpoints lock",
                "leaderElection:\n  resourceLock: endpoints\n",
                "leaderElection.resourceLock: Invalid value: \"endpoints\": resourceLock value must be \"leases\"".into(),
            ),
            (
                "second profile without a name",
                "profiles:\n- schedulerName: a\n- percentageOfNodesToScore: 5\n",
                "profiles[1].schedulerName: Required value".into(),
            ),
            (
                "duplicate scheduler name",
                "profiles:\n- schedulerName: a\n- schedulerName: a\n",
                "profiles[1].schedulerName: Duplicate value: \"profiles[0].schedulerName\"".into(),
            ),
            (
                "duplicate plugin config",
                "profiles:\n- pluginConfig:\n  - name: NodeAffinity\n  - name: NodeAffinity\n",
                "profiles[0].pluginConfig[1]: Duplicate value: \"NodeAffinity\"".into(),
            ),
            (
                "different queue sort sets",
                "profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      enabled:\n      - name: OtherSort\n      disabled:\n      - name: \"*\"\n",
                "profiles[1].plugins.queueSort: Invalid value: config.PluginSet{Enabled:[]config.Plugin{config.Plugin{Name:\"OtherSort\", Weight:0}}, Disabled:[]config.Plugin{config.Plugin{Name:\"*\", Weight:0}}}: must be the same for all profiles".into(),
            ),
            (
                "two queue sort plugins",
                "profiles:\n- plugins:\n    queueSort:\n      enabled:\n      - name: PrioritySort\n      - name: OtherSort\n",
                "profiles[0].plugins.queueSort.Enabled: Invalid value: 2: only one queue sort plugin can be enabled".into(),
            ),
            (
                "removed plugin enabled",
                "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: EBSLimits\n",
                format!("profiles[0].plugins.filter.enabled[0]: Invalid value: \"EBSLimits\": {was_invalid}"),
            ),
            (
                "removed plugin configured",
                "profiles:\n- pluginConfig:\n  - name: GCEPDLimits\n",
                format!("profiles[0].pluginConfig[0]: Invalid value: \"GCEPDLimits\": {was_invalid}"),
            ),
            (
                "plugin args error with a field path",
                "profiles:\n- pluginConfig:\n  - name: Picky\n    args:\n      mode: path\n",
                "profiles[0].pluginConfig[0].args.scoringStrategy.type: Unsupported value: \"X\"".into(),
            ),
            (
                "plugin args error without a field path",
                "profiles:\n- pluginConfig:\n  - name: Picky\n    args:\n      mode: other\n",
                "profiles[0].pluginConfig[0].args: unknown field `mode`, expected `scoringStrategy`".into(),
            ),
            (
                "extenders",
                "extenders:\n- urlPrefix: http://127.0.0.1:8888\n  filterVerb: filter\n",
                "extenders: Forbidden: scheduler extenders are not supported".into(),
            ),
            (
                "several errors are aggregated",
                "parallelism: -1\npercentageOfNodesToScore: -5\n",
                "[parallelism: Invalid value: -1: should be an integer value greater than zero, percentageOfNodesToScore: Invalid value: -5: not in valid range [0-100]]".into(),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(validation_error(body), want, "{name}");
        }
    }

    #[test]
    fn valid_configurations_pass_validation() {
        for body in [
            "",
            "leaderElection:\n  leaderElect: false\n  leaseDuration: -5s\n  resourceLock: endpoints\n",
            "profiles:\n- schedulerName: a\n- schedulerName: b\n  percentageOfNodesToScore: 100\n",
            "profiles:\n- pluginConfig:\n  - name: Picky\n  - name: OutOfTree\n    args: {x: 1}\n",
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 5\nextenders: []\n",
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: 0\n",
        ] {
            let cfg = decoded(body);
            assert_eq!(validate_with(&cfg, &registry()), Ok(()), "{body}");
        }
    }

    #[test]
    fn parse_decodes_and_validates() {
        assert_eq!(
            parse(&yaml("parallelism: 0\n")),
            Err(
                "parallelism: Invalid value: 0: should be an integer value greater than zero"
                    .into()
            )
        );
        assert_eq!(parse(&yaml("")), Ok(default_config()));
        assert!(
            load(std::path::Path::new("/nonexistent/capstan-scheduler.yaml"))
                .unwrap_err()
                .starts_with("open /nonexistent/capstan-scheduler.yaml: ")
        );
    }

    // ----- building profiles -----

    #[test]
    fn default_profile_has_the_v1_32_plugins_at_every_point_in_order() {
        let fws = built("");
        assert_eq!(fws.len(), 1);
        let fw = &fws[0];
        assert_eq!(fw.scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(fw.percentage_of_nodes_to_score, None);
        let want: Vec<(&str, Vec<&str>)> = vec![
            ("preEnqueue", vec!["SchedulingGates"]),
            ("queueSort", vec!["PrioritySort"]),
            (
                "preFilter",
                vec![
                    "NodeAffinity",
                    "NodePorts",
                    "NodeResourcesFit",
                    "VolumeRestrictions",
                    "PodTopologySpread",
                    "InterPodAffinity",
                ],
            ),
            (
                "filter",
                vec![
                    "NodeUnschedulable",
                    "NodeName",
                    "TaintToleration",
                    "NodeAffinity",
                    "NodePorts",
                    "NodeResourcesFit",
                    "VolumeRestrictions",
                    "PodTopologySpread",
                    "InterPodAffinity",
                ],
            ),
            ("postFilter", vec!["DefaultPreemption"]),
            (
                "preScore",
                vec![
                    "TaintToleration",
                    "NodeAffinity",
                    "NodeResourcesFit",
                    "PodTopologySpread",
                    "InterPodAffinity",
                    "NodeResourcesBalancedAllocation",
                ],
            ),
            (
                "score",
                vec![
                    "TaintToleration",
                    "NodeAffinity",
                    "NodeResourcesFit",
                    "PodTopologySpread",
                    "InterPodAffinity",
                    "NodeResourcesBalancedAllocation",
                    "ImageLocality",
                ],
            ),
            ("reserve", vec![]),
            ("permit", vec![]),
            ("bind", vec!["DefaultBinder"]),
        ];
        assert_eq!(points(fw), want);
        assert_eq!(
            weighted(&fw.score),
            vec![
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1),
            ]
        );
    }

    #[test]
    fn a_plugin_is_built_once_and_shared_by_its_extension_points() {
        let fw = &built("")[0];
        let at = |list: &[Enabled], name: &str| -> Option<Arc<dyn Plugin>> {
            list.iter()
                .find(|e| e.plugin.name() == name)
                .map(|e| e.plugin.clone())
        };
        let (Some(a), Some(b), Some(c), Some(d)) = (
            at(&fw.pre_filter, "NodeAffinity"),
            at(&fw.filter, "NodeAffinity"),
            at(&fw.pre_score, "NodeAffinity"),
            at(&fw.score, "NodeAffinity"),
        ) else {
            panic!("NodeAffinity missing at a point");
        };
        assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&b, &c) && Arc::ptr_eq(&c, &d));
        assert_eq!(fw.plugins().len(), plugins::DEFAULT_PLUGINS.len());
    }

    #[test]
    fn disabling_every_score_plugin_keeps_only_the_explicit_ones() {
        let fw = &built(
            "profiles:\n- plugins:\n    score:\n      disabled:\n      - name: \"*\"\n      enabled:\n      - name: ImageLocality\n        weight: 5\n",
        )[0];
        assert_eq!(weighted(&fw.score), vec![("ImageLocality", 5)]);
        // Other points still get the multiPoint defaults.
        assert_eq!(names(&fw.pre_score).len(), 6);
        assert_eq!(names(&fw.filter).len(), 9);

        let fw =
            &built("profiles:\n- plugins:\n    score:\n      disabled:\n      - name: \"*\"\n")[0];
        assert!(fw.score.is_empty());
    }

    #[test]
    fn custom_weights_follow_upstream_precedence() {
        type Case = (&'static str, &'static str, Vec<(&'static str, i64)>);
        let cases: Vec<Case> = vec![
            (
                "explicit score entry moves first and sets the weight",
                "score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 7\n",
                vec![
                    ("NodeResourcesFit", 7),
                    ("TaintToleration", 3),
                    ("NodeAffinity", 2),
                    ("PodTopologySpread", 2),
                    ("InterPodAffinity", 2),
                    ("NodeResourcesBalancedAllocation", 1),
                    ("ImageLocality", 1),
                ],
            ),
            (
                "explicit entry without weight means 1, not the multiPoint weight",
                "score:\n      enabled:\n      - name: TaintToleration\n",
                vec![
                    ("TaintToleration", 1),
                    ("NodeAffinity", 2),
                    ("NodeResourcesFit", 1),
                    ("PodTopologySpread", 2),
                    ("InterPodAffinity", 2),
                    ("NodeResourcesBalancedAllocation", 1),
                    ("ImageLocality", 1),
                ],
            ),
            (
                "multiPoint weight replaces the default in place",
                "multiPoint:\n      enabled:\n      - name: ImageLocality\n        weight: 4\n      - name: TaintToleration\n        weight: 9\n",
                vec![
                    ("TaintToleration", 9),
                    ("NodeAffinity", 2),
                    ("NodeResourcesFit", 1),
                    ("PodTopologySpread", 2),
                    ("InterPodAffinity", 2),
                    ("NodeResourcesBalancedAllocation", 1),
                    ("ImageLocality", 4),
                ],
            ),
            (
                "disabled at score only",
                "score:\n      disabled:\n      - name: NodeAffinity\n      - name: ImageLocality\n",
                vec![
                    ("TaintToleration", 3),
                    ("NodeResourcesFit", 1),
                    ("PodTopologySpread", 2),
                    ("InterPodAffinity", 2),
                    ("NodeResourcesBalancedAllocation", 1),
                ],
            ),
        ];
        for (name, plugins, want) in cases {
            let fw = &built(&format!("profiles:\n- plugins:\n    {plugins}"))[0];
            assert_eq!(weighted(&fw.score), want, "{name}");
        }
        // A plugin disabled at score still filters.
        let fw = &built(
            "profiles:\n- plugins:\n    score:\n      disabled:\n      - name: NodeAffinity\n",
        )[0];
        assert!(names(&fw.filter).contains(&"NodeAffinity"));
        assert!(names(&fw.pre_score).contains(&"NodeAffinity"));
    }

    #[test]
    fn disabling_a_plugin_in_multi_point_removes_it_everywhere() {
        let fw = &built(
            "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: NodePorts\n      - name: ImageLocality\n",
        )[0];
        let all: Vec<&str> = points(fw).into_iter().flat_map(|(_, n)| n).collect();
        assert!(!all.contains(&"NodePorts") && !all.contains(&"ImageLocality"));
        assert!(all.contains(&"NodeResourcesFit"));
    }

    #[test]
    fn two_profiles_are_built_independently() {
        let fws = built(
            "profiles:\n- schedulerName: default-scheduler\n- schedulerName: no-scoring\n  percentageOfNodesToScore: 30\n  plugins:\n    preScore:\n      disabled:\n      - name: \"*\"\n    score:\n      disabled:\n      - name: \"*\"\n",
        );
        assert_eq!(fws.len(), 2);
        assert_eq!(fws[0].scheduler_name, "default-scheduler");
        assert_eq!(fws[1].scheduler_name, "no-scoring");
        assert_eq!(fws[1].percentage_of_nodes_to_score, Some(30));
        assert_eq!(fws[0].score.len(), 7);
        assert!(fws[1].score.is_empty() && fws[1].pre_score.is_empty());
        assert_eq!(names(&fws[1].filter), names(&fws[0].filter));
        // Separate instances per profile.
        assert!(!Arc::ptr_eq(
            &fws[0].filter[0].plugin,
            &fws[1].filter[0].plugin
        ));
    }

    /// Upstream TestNewFrameworkMultiPointExpansion, on internal plugin sets (no defaults).
    #[test]
    fn multi_point_expansion_matches_upstream() {
        let tp = "TestPlugin";
        let all_points_tp = |pre_score: Vec<&'static str>, score: Vec<(&'static str, i64)>| {
            (
                vec![
                    ("preEnqueue", vec![]),
                    ("queueSort", vec![tp]),
                    ("preFilter", vec![tp]),
                    ("filter", vec![tp]),
                    ("postFilter", vec![tp]),
                    ("preScore", pre_score),
                    ("score", score.iter().map(|s| s.0).collect()),
                    ("reserve", vec![tp]),
                    ("permit", vec![tp]),
                    ("bind", vec![tp]),
                ],
                score,
            )
        };
        type Want = (
            Vec<(&'static str, Vec<&'static str>)>,
            Vec<(&'static str, i64)>,
        );
        let cases: Vec<(&str, Plugins, Result<Want, &str>)> = vec![
            (
                "plugin expansion",
                Plugins {
                    multi_point: pset(&[(tp, 5)], &[]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(vec![tp], vec![(tp, 5)])),
            ),
            (
                "disable MultiPoint plugin at some extension points",
                Plugins {
                    multi_point: pset(&[(tp, 0)], &[]),
                    pre_score: pset(&[], &[tp]),
                    score: pset(&[], &[tp]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(vec![], vec![])),
            ),
            (
                "multiple MultiPoint plugins",
                Plugins {
                    multi_point: pset(&[(tp, 0), ("ScorePlugin1", 0)], &[]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(
                    vec![tp, "ScorePlugin1"],
                    vec![(tp, 1), ("ScorePlugin1", 1)],
                )),
            ),
            (
                "disable MultiPoint extension",
                Plugins {
                    multi_point: pset(&[(tp, 0), ("ScorePlugin1", 0)], &[]),
                    pre_score: pset(&[], &["*"]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(vec![], vec![(tp, 1), ("ScorePlugin1", 1)])),
            ),
            (
                "reorder MultiPoint plugins (specified extension takes precedence)",
                Plugins {
                    multi_point: pset(
                        &[("ScoreWithNormalizePlugin1", 0), (tp, 0), ("ScorePlugin1", 0)],
                        &[],
                    ),
                    score: pset(&[("ScorePlugin1", 0), (tp, 0)], &[]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(
                    vec![tp, "ScorePlugin1"],
                    vec![("ScorePlugin1", 1), (tp, 1), ("ScoreWithNormalizePlugin1", 1)],
                )),
            ),
            (
                "reorder MultiPoint plugins (specified extension only takes precedence when it exists in MultiPoint)",
                Plugins {
                    multi_point: pset(&[(tp, 0), ("ScorePlugin1", 0)], &[]),
                    score: pset(
                        &[("ScoreWithNormalizePlugin1", 0), ("ScorePlugin1", 0), (tp, 0)],
                        &[],
                    ),
                    ..Plugins::default()
                },
                Ok(all_points_tp(
                    vec![tp, "ScorePlugin1"],
                    vec![("ScorePlugin1", 1), (tp, 1), ("ScoreWithNormalizePlugin1", 1)],
                )),
            ),
            (
                "override MultiPoint plugins weights",
                Plugins {
                    multi_point: pset(&[(tp, 0), ("ScorePlugin1", 0)], &[]),
                    score: pset(&[("ScorePlugin1", 5), (tp, 3)], &[]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(
                    vec![tp, "ScorePlugin1"],
                    vec![("ScorePlugin1", 5), (tp, 3)],
                )),
            ),
            (
                "disable and enable MultiPoint plugins with '*'",
                Plugins::merge(
                    &Plugins::default(),
                    Some(&Plugins {
                        multi_point: pset(
                            &[("QueueSortPlugin", 0), ("BindPlugin", 0), ("ScorePlugin1", 0)],
                            &["*"],
                        ),
                        ..Plugins::default()
                    }),
                ),
                Ok((
                    vec![
                        ("preEnqueue", vec![]),
                        ("queueSort", vec!["QueueSortPlugin"]),
                        ("preFilter", vec![]),
                        ("filter", vec![]),
                        ("postFilter", vec![]),
                        ("preScore", vec!["ScorePlugin1"]),
                        ("score", vec!["ScorePlugin1"]),
                        ("reserve", vec![]),
                        ("permit", vec![]),
                        ("bind", vec!["BindPlugin"]),
                    ],
                    vec![("ScorePlugin1", 1)],
                )),
            ),
            (
                "expect 'already registered' error",
                Plugins {
                    multi_point: pset(&[(tp, 0), (tp, 0)], &[]),
                    ..Plugins::default()
                },
                Err("plugin \"TestPlugin\" already registered as \"PreFilterPlugin\""),
            ),
            (
                "override MultiPoint plugins weights and avoid a plugin being loaded multiple times",
                Plugins {
                    multi_point: pset(&[(tp, 0), ("ScorePlugin1", 0)], &[]),
                    score: pset(&[("ScorePlugin1", 5), ("ScorePlugin2", 5), (tp, 3)], &[]),
                    ..Plugins::default()
                },
                Ok(all_points_tp(
                    vec![tp, "ScorePlugin1"],
                    vec![("ScorePlugin1", 5), (tp, 3), ("ScorePlugin2", 5)],
                )),
            ),
        ];
        for (name, plugins, want) in cases {
            let profile = Profile {
                scheduler_name: "p".into(),
                percentage_of_nodes_to_score: None,
                plugins,
                plugin_config: Vec::new(),
            };
            let got =
                new_framework(&profile, &registry()).map(|fw| (points(&fw), weighted(&fw.score)));
            assert_eq!(got, want.map_err(String::from), "{name}");
        }
    }

    #[test]
    fn building_errors_use_upstream_wording() {
        let cases: Vec<(&str, &str, String)> = vec![
            (
                "unknown plugin at an extension point",
                "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: Foo\n",
                "creating profile for scheduler name default-scheduler: FilterPlugin \"Foo\" does not exist".into(),
            ),
            (
                "unknown plugin in multiPoint",
                "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: Foo\n",
                "creating profile for scheduler name default-scheduler: PreFilterPlugin \"Foo\" does not exist".into(),
            ),
            (
                "plugin enabled at a point it does not extend",
                "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: ImageLocality\n",
                "creating profile for scheduler name default-scheduler: plugin \"ImageLocality\" does not extend FilterPlugin plugin".into(),
            ),
            (
                "no trait for preBind yet",
                "profiles:\n- plugins:\n    preBind:\n      enabled:\n      - name: DefaultBinder\n",
                "creating profile for scheduler name default-scheduler: plugin \"DefaultBinder\" does not extend PreBindPlugin plugin".into(),
            ),
            (
                "plugin enabled twice at a point",
                "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NodeName\n      - name: NodeName\n",
                "creating profile for scheduler name default-scheduler: plugin \"NodeName\" already registered as \"FilterPlugin\"".into(),
            ),
            (
                "no queue sort",
                "profiles:\n- plugins:\n    queueSort:\n      disabled:\n      - name: \"*\"\n",
                "creating profile for scheduler name default-scheduler: only one queue sort plugin required for profile with scheduler name \"default-scheduler\", but got 0".into(),
            ),
            (
                "two queue sorts through multiPoint",
                "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: OtherSort\n",
                "creating profile for scheduler name default-scheduler: only one queue sort plugin required for profile with scheduler name \"default-scheduler\", but got 2".into(),
            ),
            (
                "no binder",
                "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: DefaultBinder\n",
                "creating profile for scheduler name default-scheduler: at least one bind plugin is needed for profile with scheduler name \"default-scheduler\"".into(),
            ),
            (
                "queue sort differs only after expansion",
                "profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    multiPoint:\n      enabled:\n      - name: OtherSort\n      disabled:\n      - name: PrioritySort\n",
                "different queue sort plugins for profile \"b\": \"OtherSort\", first: \"PrioritySort\"".into(),
            ),
        ];
        for (name, body, want) in cases {
            match build(body) {
                Ok(_) => panic!("{name}: expected an error"),
                Err(e) => assert_eq!(e, want, "{name}"),
            }
        }
    }

    #[test]
    fn plugin_constructor_errors_when_building_name_the_plugin() {
        let mut cfg =
            decoded("profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: Picky\n");
        cfg.profiles[0].plugin_config.push(PluginConfig {
            name: "Picky".into(),
            args: serde_json::json!({"mode": "path"}),
        });
        assert_eq!(
            build_profiles_with(&cfg, &registry()).err(),
            Some("creating profile for scheduler name default-scheduler: initializing plugin \"Picky\": scoringStrategy.type: Unsupported value: \"X\"".into())
        );
        // With valid args the plugin gets them and is placed after the multiPoint plugins.
        cfg.profiles[0].plugin_config[0].args = Value::Null;
        let fws = build_profiles_with(&cfg, &registry());
        let filter = fws.map(|f| names(&f[0].filter)).unwrap_or_default();
        assert_eq!(filter.last(), Some(&"Picky"));
    }

    #[test]
    fn in_tree_registry_builds_the_default_profile() {
        // Whatever extension points the in-tree plugins implement today, each point holds
        // plugins that implement it, in the default order, with the default weights.
        let fws = match build_profiles(&default_config()) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        let fw = &fws[0];
        assert_eq!(
            fw.queue_sort.as_ref().map(|e| e.plugin.name()),
            Some("PrioritySort")
        );
        assert_eq!(names(&fw.bind), vec!["DefaultBinder"]);
        let order: Vec<&str> = plugins::DEFAULT_PLUGINS.iter().map(|p| p.0).collect();
        let lists: Vec<(ExtensionPoint, &[Enabled])> = vec![
            (ExtensionPoint::PreEnqueue, &fw.pre_enqueue),
            (ExtensionPoint::PreFilter, &fw.pre_filter),
            (ExtensionPoint::Filter, &fw.filter),
            (ExtensionPoint::PostFilter, &fw.post_filter),
            (ExtensionPoint::PreScore, &fw.pre_score),
            (ExtensionPoint::Score, &fw.score),
            (ExtensionPoint::Reserve, &fw.reserve),
            (ExtensionPoint::Permit, &fw.permit),
        ];
        for (ep, list) in lists {
            let positions: Vec<usize> = list
                .iter()
                .map(|e| {
                    order
                        .iter()
                        .position(|n| *n == e.plugin.name())
                        .unwrap_or(usize::MAX)
                })
                .collect();
            assert!(
                positions.windows(2).all(|w| w[0] < w[1]),
                "{ep:?}: {positions:?}"
            );
            assert!(
                list.iter().all(|e| ep.implemented_by(e.plugin.as_ref())),
                "{ep:?}"
            );
        }
        for e in &fw.score {
            let default = plugins::DEFAULT_PLUGINS
                .iter()
                .find(|p| p.0 == e.plugin.name())
                .map(|p| p.1.max(1));
            assert_eq!(Some(e.weight), default, "{}", e.plugin.name());
        }
    }

    // ----- durations -----

    #[test]
    fn go_durations_parse_and_print_like_go() {
        let cases: Vec<(&str, i64, &str)> = vec![
            ("15s", 15_000_000_000, "15s"),
            ("0", 0, "0s"),
            ("1m30s", 90_000_000_000, "1m30s"),
            ("90s", 90_000_000_000, "1m30s"),
            ("1h", 3_600_000_000_000, "1h0m0s"),
            ("1.5s", 1_500_000_000, "1.5s"),
            ("100ms", 100_000_000, "100ms"),
            ("2us", 2_000, "2\u{b5}s"),
            ("1500ns", 1_500, "1.5\u{b5}s"),
            ("-1.5s", -1_500_000_000, "-1.5s"),
            ("+2h45m", 9_900_000_000_000, "2h45m0s"),
            (".5m", 30_000_000_000, "30s"),
        ];
        for (text, nanos, printed) in cases {
            assert_eq!(GoDuration::parse(text), Ok(GoDuration(nanos)), "{text}");
            assert_eq!(GoDuration(nanos).to_string(), printed, "{text}");
        }
        for (text, err) in [
            ("", "time: invalid duration \"\""),
            ("abc", "time: invalid duration \"abc\""),
            ("1", "time: missing unit in duration \"1\""),
            ("1d", "time: unknown unit \"d\" in duration \"1d\""),
            ("-", "time: invalid duration \"-\""),
            (".s", "time: invalid duration \".s\""),
            (
                "9999999999999999999999h",
                "time: invalid duration \"9999999999999999999999h\"",
            ),
            ("3000000h", "time: invalid duration \"3000000h\""),
        ] {
            assert_eq!(GoDuration::parse(text), Err(err.to_string()), "{text}");
        }
        assert_eq!(GoDuration(-5).as_std(), Duration::ZERO);
        assert_eq!(GoDuration::from_secs(2).as_std(), Duration::from_secs(2));
    }
}
