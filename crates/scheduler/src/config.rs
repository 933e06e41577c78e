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
const INVALID_PLUGINS: &[&str] = &["AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"];

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
        GoDuration(s * 1_000_000_000)
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
const CLIENT_CONNECTION_FIELDS: &[&str] =
    &["kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"];
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
        enable_contention_profiling: raw
            .enable_contention_profiling
            .unwrap_or(enable_profiling),
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
        errs.push(invalid("clientConnection.burst", cc.burst, "must be non-negative"));
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
        list(set.enabled.iter().map(|p| plugin(&p.name, p.weight)).collect()),
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
                return Err(format!("{} {} does not exist", ep.go_type(), go_quote(&p.name)));
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
            return Err(format!("score plugin {} is not configured with weight", go_quote(n)));
        }
    }

    let entries = |ep: ExtensionPoint| -> Vec<Enabled> {
        list(ep)
            .iter()
            .filter_map(|n| {
                let plugin = lookup(n)?.clone();
                let weight = match ep {
                    ExtensionPoint::Score => weights.iter().find(|(w, _)| w == n).map_or(1, |w| w.1),
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
            return Err(format!("{} {} does not exist", ep.go_type(), go_quote(&p.name)));
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
    for p in plugins.score.enabled.iter().chain(&plugins.multi_point.enabled) {
        let Some(plugin) = lookup(&p.name) else {
            continue;
        };
        if !ExtensionPoint::Score.implemented_by(plugin.as_ref())
            || weights.iter().any(|(n, _)| *n == p.name)
        {
            continue;
        }
        let weight = if p.weight == 0 { 1 } else { i64::from(p.weight) };
        let max = i128::from(weight) * i128::from(MAX_NODE_SCORE);
        if max > i128::from(i64::MAX) - total {
            return Err("total score of Score plugins could overflow".to_string());
        }
        total += max;
        weights.push((&p.name, weight));
    }
    Ok(weights)
}
