//! The cache of forwarded answers, as CoreDNS's `cache 30` in kubeadm's Corefile: answers are
//! kept for their smallest TTL, denials (NXDOMAIN, NODATA) for their SOA's negative TTL, both
//! between 5 and the configured maximum (30 s) seconds; upstream SERVFAILs for 5 s;
//! truncated answers and other errors not at all. The number of entries is bounded: when a
//! shard is full, an expired entry or else an arbitrary one makes room.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::wire::{rcode, Message, Question, RData};

const SHARDS: usize = 16;
/// The shortest time anything is cached.
const MIN_TTL: u32 = 5;
/// How long an upstream SERVFAIL is kept.
const SERVFAIL_TTL: u32 = 5;

/// What a cached answer is filed under.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    name: Vec<u8>,
    qtype: u16,
    qclass: u16,
    dnssec_ok: bool,
    checking_disabled: bool,
}

impl Key {
    pub fn new(q: &Question, dnssec_ok: bool, checking_disabled: bool) -> Key {
        Key {
            name: q.name.wire().to_ascii_lowercase(),
            qtype: q.qtype,
            qclass: q.qclass,
            dnssec_ok,
            checking_disabled,
        }
    }

    fn shard(&self) -> usize {
        let mut h: u32 = 0x811c_9dc5;
        for &b in &self.name {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
        h ^= self.qtype as u32;
        (h.wrapping_mul(0x9E37_79B1) >> 16) as usize % SHARDS
    }
}

struct Entry {
    msg: Arc<Message>,
    stored: Instant,
    ttl: u32,
}

/// A cached answer and the seconds it has left.
pub struct Hit {
    pub msg: Arc<Message>,
    pub remaining: u32,
}

/// A bounded answer cache shared by all server tasks.
pub struct Cache {
    shards: Vec<Mutex<HashMap<Key, Entry>>>,
    per_shard: usize,
    max_ttl: u32,
}

impl Cache {
    /// A cache of at most about `capacity` answers kept at most `max_ttl` seconds; a capacity
    /// of 0 caches nothing.
    pub fn new(capacity: usize, max_ttl: u32) -> Cache {
        Cache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS),
            max_ttl: max_ttl.max(MIN_TTL),
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &Key, now: Instant) -> Option<Hit> {
        if self.per_shard == 0 {
            return None;
        }
        let mut shard = self.shards[key.shard()].lock();
        let e = shard.get(key)?;
        let age = now.saturating_duration_since(e.stored);
        if age >= Duration::from_secs(e.ttl as u64) {
            shard.remove(key);
            return None;
        }
        Some(Hit {
            msg: e.msg.clone(),
            remaining: e.ttl - age.as_secs() as u32,
        })
    }

    /// Keep `msg` (an upstream answer to the question of `key`) if it is cacheable; returns
    /// the seconds it is kept for (0: not kept), which also caps the TTLs handed out now.
    pub fn insert(&self, key: Key, msg: Arc<Message>, now: Instant) -> u32 {
        let ttl = self.ttl_for(&msg);
        if ttl == 0 || self.per_shard == 0 {
            return ttl;
        }
        let mut shard = self.shards[key.shard()].lock();
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            let victim = shard
                .iter()
                .take(8)
                .find(|(_, e)| {
                    now.saturating_duration_since(e.stored) >= Duration::from_secs(e.ttl as u64)
                })
                .or_else(|| shard.iter().next())
                .map(|(k, _)| k.clone());
            if let Some(k) = victim {
                shard.remove(&k);
            }
        }
        shard.insert(
            key,
            Entry {
                msg,
                stored: now,
                ttl,
            },
        );
        ttl
    }

    /// How long `msg` may be cached, in seconds (0: not at all).
    pub fn ttl_for(&self, msg: &Message) -> u32 {
        if msg.truncated {
            return 0;
        }
        match msg.rcode {
            rcode::SERVFAIL => return SERVFAIL_TTL,
            rcode::NOERROR | rcode::NXDOMAIN => {}
            _ => return 0,
        }
        let denial = msg.rcode == rcode::NXDOMAIN || msg.answers.is_empty();
        let mut min: Option<u32> = None;
        for r in msg
            .answers
            .iter()
            .chain(&msg.authority)
            .chain(&msg.additional)
        {
            let ttl = match &r.data {
                // RFC 2308: a denial lives as long as the SOA's TTL and its minimum allow.
                RData::Soa { minimum, .. } if denial => r.ttl.min(*minimum),
                _ => r.ttl,
            };
            min = Some(min.map_or(ttl, |m| m.min(ttl)));
        }
        let ttl = min.unwrap_or(MIN_TTL);
        ttl.clamp(MIN_TTL, self.max_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{rtype, Name, Record, CLASS_IN};
    use std::net::Ipv4Addr;

    fn q(name: &str) -> Question {
        Question {
            name: Name::parse(name).unwrap(),
            qtype: rtype::A,
            qclass: CLASS_IN,
        }
    }

    fn answer(name: &str, ttl: u32) -> Arc<Message> {
        Arc::new(Message {
            response: true,
            questions: vec![q(name)],
            answers: vec![Record::new(
                Name::parse(name).unwrap(),
                ttl,
                RData::A(Ipv4Addr::new(192, 0, 2, 1)),
            )],
            ..Message::default()
        })
    }

    fn nxdomain(name: &str, soa_ttl: u32, minimum: u32) -> Arc<Message> {
        Arc::new(Message {
            response: true,
            rcode: rcode::NXDOMAIN,
            questions: vec![q(name)],
            authority: vec![Record::new(
                Name::parse("example").unwrap(),
                soa_ttl,
                RData::Soa {
                    mname: Name::parse("ns.example").unwrap(),
                    rname: Name::parse("h.example").unwrap(),
                    serial: 1,
                    refresh: 1,
                    retry: 1,
                    expire: 1,
                    minimum,
                },
            )],
            ..Message::default()
        })
    }

    #[test]
    fn ttls_are_clamped_like_coredns_cache_30() {
        let c = Cache::new(100, 30);
        assert_eq!(c.ttl_for(&answer("a.example", 300)), 30);
        assert_eq!(c.ttl_for(&answer("a.example", 12)), 12);
        assert_eq!(c.ttl_for(&answer("a.example", 0)), 5);
        assert_eq!(c.ttl_for(&nxdomain("b.example", 3600, 20)), 20);
        assert_eq!(c.ttl_for(&nxdomain("b.example", 10, 900)), 10);
        assert_eq!(c.ttl_for(&nxdomain("b.example", 1, 1)), 5);
        let mut tc = (*answer("a.example", 60)).clone();
        tc.truncated = true;
        assert_eq!(c.ttl_for(&tc), 0);
        let mut refused = (*answer("a.example", 60)).clone();
        refused.rcode = rcode::REFUSED;
        assert_eq!(c.ttl_for(&refused), 0);
        let mut servfail = (*answer("a.example", 60)).clone();
        servfail.rcode = rcode::SERVFAIL;
        assert_eq!(c.ttl_for(&servfail), 5);
    }

    #[test]
    fn hits_expire_and_keys_ignore_case() {
        let c = Cache::new(100, 30);
        let t0 = Instant::now();
        let key = Key::new(&q("A.Example"), false, false);
        assert_eq!(c.insert(key, answer("a.example", 20), t0), 20);
        let lower = Key::new(&q("a.example"), false, false);
        let hit = c.get(&lower, t0 + Duration::from_secs(5)).unwrap();
        assert_eq!(hit.remaining, 15);
        // DNSSEC-OK queries are cached apart.
        assert!(c.get(&Key::new(&q("a.example"), true, false), t0).is_none());
        assert!(c.get(&lower, t0 + Duration::from_secs(20)).is_none());
        assert!(c.is_empty(), "expired entries are dropped when seen");
    }

    #[test]
    fn size_is_bounded() {
        let c = Cache::new(64, 30);
        let t0 = Instant::now();
        for i in 0..10_000 {
            let name = format!("n{i}.example");
            c.insert(Key::new(&q(&name), false, false), answer(&name, 30), t0);
        }
        assert!(c.len() <= 64, "{} entries", c.len());
        let name = "last.example";
        c.insert(Key::new(&q(name), false, false), answer(name, 30), t0);
        assert!(c.get(&Key::new(&q(name), false, false), t0).is_some());
        let off = Cache::new(0, 30);
        off.insert(Key::new(&q(name), false, false), answer(name, 30), t0);
        assert!(off.get(&Key::new(&q(name), false, false), t0).is_none());
    }
}
