//! From the replica count the metrics ask for to the one the autoscaler sets: stabilization
//! over recent recommendations, then the rate limits — `spec.behavior`'s scaling rules, or
//! without a behavior Kubernetes' older fixed rules (scale up to at most twice the count, or 4;
//! scale down to the highest recommendation of the stabilization window) — then the
//! min/max bounds. Each result carries the reasons the conditions report.

use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::{HPAScalingPolicy, HorizontalPodAutoscalerBehavior};

/// A recommendation, as remembered for stabilization.
#[derive(Debug, Clone, Copy)]
struct Recommendation {
    replicas: i32,
    at: Instant,
}

/// A scale change, as remembered for the rate limits.
#[derive(Debug, Clone, Copy)]
struct ScaleEvent {
    change: i32,
    at: Instant,
}

/// What the controller remembers of one autoscaler.
#[derive(Debug, Default)]
pub struct History {
    recommendations: Vec<Recommendation>,
    up: Vec<ScaleEvent>,
    down: Vec<ScaleEvent>,
}

impl History {
    /// The first look at an autoscaler: its current count is taken as a recommendation, so
    /// a restarted controller does not scale down at once.
    pub fn starting_at(current: i32, now: Instant) -> History {
        History {
            recommendations: vec![Recommendation {
                replicas: current,
                at: now,
            }],
            ..Default::default()
        }
    }

    /// Remember a scale change made with `rules` (only behaviors use them).
    pub fn record_scale(&mut self, rules: &Rules, from: i32, to: i32, now: Instant) {
        let (events, longest) = if to > from {
            (&mut self.up, longest_period(&rules.up.policies))
        } else if to < from {
            (&mut self.down, longest_period(&rules.down.policies))
        } else {
            return;
        };
        events.retain(|e| now.saturating_duration_since(e.at) <= longest);
        events.push(ScaleEvent {
            change: (to - from).abs(),
            at: now,
        });
    }

    /// Remember a recommendation, replacing one older than `keep`.
    fn remember(&mut self, replicas: i32, keep: Duration, now: Instant) {
        let r = Recommendation { replicas, at: now };
        match self
            .recommendations
            .iter_mut()
            .find(|x| now.saturating_duration_since(x.at) > keep)
        {
            Some(old) => *old = r,
            None => self.recommendations.push(r),
        }
    }
}

fn longest_period(policies: &[HPAScalingPolicy]) -> Duration {
    Duration::from_secs(
        policies
            .iter()
            .map(|p| p.period_seconds.max(0) as u64)
            .max()
            .unwrap_or(0),
    )
}

/// The sum of the changes within the last `period`.
fn change_in(events: &[ScaleEvent], period: Duration, now: Instant) -> i32 {
    events
        .iter()
        .filter(|e| now.saturating_duration_since(e.at) < period)
        .map(|e| e.change)
        .sum()
}

/// One direction's scaling rules, defaults filled in.
#[derive(Debug, Clone)]
pub struct Direction {
    pub window: Duration,
    pub select: String,
    pub policies: Vec<HPAScalingPolicy>,
}

/// A behavior's rules, with Kubernetes' defaults where fields are unset.
#[derive(Debug, Clone)]
pub struct Rules {
    pub up: Direction,
    pub down: Direction,
}

impl Rules {
    pub fn of(b: &HorizontalPodAutoscalerBehavior, downscale_window: Duration) -> Rules {
        let policy = |type_: &str, value, period_seconds| HPAScalingPolicy {
            type_: type_.into(),
            value,
            period_seconds,
        };
        let up = b.scale_up.clone().unwrap_or_default();
        let down = b.scale_down.clone().unwrap_or_default();
        let secs = |s: Option<i32>, d: Duration| {
            s.map(|s| Duration::from_secs(s.max(0) as u64)).unwrap_or(d)
        };
        Rules {
            up: Direction {
                window: secs(up.stabilization_window_seconds, Duration::ZERO),
                select: up.select_policy.unwrap_or_else(|| "Max".into()),
                policies: up
                    .policies
                    .unwrap_or_else(|| vec![policy("Pods", 4, 15), policy("Percent", 100, 15)]),
            },
            down: Direction {
                window: secs(down.stabilization_window_seconds, downscale_window),
                select: down.select_policy.unwrap_or_else(|| "Max".into()),
                policies: down
                    .policies
                    .unwrap_or_else(|| vec![policy("Percent", 100, 15)]),
            },
        }
    }
}

/// The count to set and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    pub replicas: i32,
    /// AbleToScale's (reason, message).
    pub able: (&'static str, &'static str),
    /// Whether ScalingLimited is True, and its (reason, message).
    pub limited: bool,
    pub limit: (&'static str, &'static str),
}

const READY: (&str, &str) = ("ReadyForNewScale", "recommended size matches current size");
const DOWN_STABILIZED: (&str, &str) = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
);
const UP_STABILIZED: (&str, &str) = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
);
const WITHIN: (&str, &str) = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const UP_LIMIT: (&str, &str) = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const DOWN_LIMIT: (&str, &str) = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);
const TOO_MANY: (&str, &str) = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const TOO_FEW: (&str, &str) = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);

/// Without a behavior: the highest recommendation of the downscale window, then at most
/// max(2 × current, 4) and the bounds (a minimum of 0 counts as 1).
pub fn without_behavior(
    h: &mut History,
    window: Duration,
    current: i32,
    proposed: i32,
    min: i32,
    max: i32,
    now: Instant,
) -> Normalized {
    let mut stabilized = proposed;
    for r in &h.recommendations {
        if now.saturating_duration_since(r.at) < window {
            stabilized = stabilized.max(r.replicas);
        }
    }
    h.remember(proposed, window, now);
    let able = if stabilized != proposed {
        DOWN_STABILIZED
    } else {
        READY
    };
    let up_limit = current.saturating_mul(2).max(4);
    let (max_allowed, over) = if max > up_limit {
        (up_limit, UP_LIMIT)
    } else {
        (max, TOO_MANY)
    };
    let min_allowed = min.max(1);
    let (replicas, limit) = if stabilized < min_allowed {
        (min_allowed, TOO_FEW)
    } else if stabilized > max_allowed {
        (max_allowed, over)
    } else {
        (stabilized, WITHIN)
    };
    Normalized {
        replicas,
        able,
        limited: replicas != stabilized,
        limit,
    }
}

/// With a behavior: the proposal held between the lowest recommendation of the scale-up
/// window and the highest of the scale-down window, then the rate the policies allow given
/// the changes of their periods, then the bounds.
pub fn with_behavior(
    h: &mut History,
    rules: &Rules,
    current: i32,
    proposed: i32,
    min: i32,
    max: i32,
    now: Instant,
) -> Normalized {
    let (mut up, mut down) = (proposed, proposed);
    for r in &h.recommendations {
        let age = now.saturating_duration_since(r.at);
        if age < rules.up.window {
            up = up.min(r.replicas);
        }
        if age < rules.down.window {
            down = down.max(r.replicas);
        }
    }
    let stabilized = current.max(up).min(down);
    h.remember(proposed, rules.up.window.max(rules.down.window), now);
    let able = if stabilized == proposed {
        READY
    } else if proposed >= current {
        UP_STABILIZED
    } else {
        DOWN_STABILIZED
    };

    let added = |period| change_in(&h.up, period, now);
    let deleted = |period| change_in(&h.down, period, now);
    let mut replicas = stabilized;
    let mut limit = WITHIN;
    if stabilized > current {
        let mut limit_up = match rules.up.select.as_str() {
            "Disabled" => current,
            select => {
                let proposals = rules.up.policies.iter().map(|p| {
                    let period = Duration::from_secs(p.period_seconds.max(0) as u64);
                    let start = current - added(period) + deleted(period);
                    match p.type_.as_str() {
                        "Pods" => start.saturating_add(p.value),
                        _ => (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32,
                    }
                });
                if select == "Min" {
                    proposals.min().unwrap_or(i32::MAX)
                } else {
                    proposals.max().unwrap_or(i32::MIN)
                }
            }
        };
        limit_up = limit_up.max(current);
        let (allowed, why) = if max > limit_up {
            (limit_up, UP_LIMIT)
        } else {
            (max, TOO_MANY)
        };
        if stabilized > allowed {
            replicas = allowed;
            limit = why;
        }
    } else if stabilized < current {
        let mut limit_down = match rules.down.select.as_str() {
            "Disabled" => current,
            select => {
                let proposals = rules.down.policies.iter().map(|p| {
                    let period = Duration::from_secs(p.period_seconds.max(0) as u64);
                    let start = current - added(period) + deleted(period);
                    match p.type_.as_str() {
                        "Pods" => start.saturating_sub(p.value),
                        _ => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
                    }
                });
                // "Min" picks the smallest change: the highest floor.
                if select == "Min" {
                    proposals.max().unwrap_or(i32::MIN)
                } else {
                    proposals.min().unwrap_or(i32::MAX)
                }
            }
        };
        limit_down = limit_down.min(current);
        let (allowed, why) = if min < limit_down {
            (limit_down, DOWN_LIMIT)
        } else {
            (min, TOO_FEW)
        };
        if stabilized < allowed {
            replicas = allowed;
            limit = why;
        }
    }
    Normalized {
        replicas,
        able,
        limited: replicas != stabilized,
        limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::autoscaling::v2::HPAScalingRules;

    /// A clock far enough from the process start to step back from.
    fn base() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    fn policy(type_: &str, value: i32, period_seconds: i32) -> HPAScalingPolicy {
        HPAScalingPolicy {
            type_: type_.into(),
            value,
            period_seconds,
        }
    }

    fn defaults() -> Rules {
        Rules::of(
            &HorizontalPodAutoscalerBehavior::default(),
            Duration::from_secs(300),
        )
    }

    #[test]
    fn without_a_behavior_scale_up_is_capped_at_twice_or_four() {
        let now = base();
        let mut h = History::starting_at(3, now);
        let n = without_behavior(&mut h, Duration::from_secs(300), 3, 10, 1, 20, now);
        assert_eq!((n.replicas, n.limited, n.limit), (6, true, UP_LIMIT));
        assert_eq!(n.able, READY);
        let mut h = History::default();
        let n = without_behavior(&mut h, Duration::from_secs(300), 1, 10, 1, 3, now);
        assert_eq!((n.replicas, n.limit), (3, TOO_MANY));
        let n = without_behavior(&mut h, Duration::ZERO, 5, 0, 0, 10, now);
        assert_eq!((n.replicas, n.limit), (1, TOO_FEW));
    }

    #[test]
    fn scale_down_waits_for_the_highest_recommendation_of_the_window() {
        let t0 = base();
        let mut h = History::starting_at(5, t0);
        let w = Duration::from_secs(300);
        // 100 s later the metrics ask for 2: the 5 of the window holds.
        let n = without_behavior(&mut h, w, 5, 2, 1, 10, t0 + Duration::from_secs(100));
        assert_eq!((n.replicas, n.able, n.limited), (5, DOWN_STABILIZED, false));
        // Once the 5 is older than the window, the highest left is the 2.
        let n = without_behavior(&mut h, w, 5, 2, 1, 10, t0 + Duration::from_secs(301));
        assert_eq!((n.replicas, n.able), (2, READY));
    }

    #[test]
    fn the_default_behavior_adds_four_pods_or_doubles_per_fifteen_seconds() {
        let t0 = base();
        let rules = defaults();
        let mut h = History::starting_at(1, t0);
        let n = with_behavior(&mut h, &rules, 1, 10, 1, 20, t0);
        assert_eq!((n.replicas, n.limited, n.limit), (5, true, UP_LIMIT));
        h.record_scale(&rules, 1, 5, t0);
        // 5 s later: the period began at 1, so 5 is still the limit.
        let n = with_behavior(&mut h, &rules, 5, 20, 1, 20, t0 + Duration::from_secs(5));
        assert_eq!(n.replicas, 5);
        // 16 s later the period starts at 5: max(5 + 4, 5 × 2) = 10.
        let n = with_behavior(&mut h, &rules, 5, 20, 1, 20, t0 + Duration::from_secs(16));
        assert_eq!((n.replicas, n.limit), (10, UP_LIMIT));
        // The maximum wins when it is lower.
        let n = with_behavior(&mut h, &rules, 5, 20, 1, 8, t0 + Duration::from_secs(16));
        assert_eq!((n.replicas, n.limit), (8, TOO_MANY));
    }

    #[test]
    fn scale_down_policies_and_windows_follow_the_behavior() {
        let t0 = base();
        let b = HorizontalPodAutoscalerBehavior {
            scale_down: Some(HPAScalingRules {
                stabilization_window_seconds: Some(0),
                select_policy: Some("Max".into()),
                policies: Some(vec![policy("Percent", 10, 60), policy("Pods", 3, 60)]),
            }),
            scale_up: None,
        };
        let rules = Rules::of(&b, Duration::from_secs(300));
        let mut h = History::starting_at(10, t0);
        // Max of the changes: 10 − max(1, 3) = 7.
        let n = with_behavior(&mut h, &rules, 10, 1, 1, 20, t0);
        assert_eq!((n.replicas, n.limit, n.limited), (7, DOWN_LIMIT, true));
        // "Min" takes the smaller change: 10 × 0.9 = 9.
        let mut min = rules.clone();
        min.down.select = "Min".into();
        let n = with_behavior(&mut History::default(), &min, 10, 1, 1, 20, t0);
        assert_eq!(n.replicas, 9);
        // "Disabled" never scales down.
        let mut off = rules.clone();
        off.down.select = "Disabled".into();
        let n = with_behavior(&mut History::default(), &off, 10, 1, 1, 20, t0);
        assert_eq!(n.replicas, 10);
        // The default scale-down window (300 s) holds the count up.
        let mut h = History::starting_at(10, t0);
        let n = with_behavior(
            &mut h,
            &defaults(),
            10,
            2,
            1,
            20,
            t0 + Duration::from_secs(60),
        );
        assert_eq!((n.replicas, n.able), (10, DOWN_STABILIZED));
        // A scale-up window keeps the lowest recent recommendation.
        let mut up = defaults();
        up.up.window = Duration::from_secs(60);
        let mut h = History::starting_at(3, t0);
        let n = with_behavior(&mut h, &up, 3, 6, 1, 20, t0 + Duration::from_secs(10));
        assert_eq!((n.replicas, n.able), (3, UP_STABILIZED));
    }
}
