//! Forwarding to the upstream resolvers (CoreDNS's `forward . /etc/resolv.conf`, with
//! `max_concurrent 1000`): each question goes to one upstream at a time over UDP, with a fresh
//! socket (so a random source port) and a random id, retried over TCP when the answer comes
//! back truncated; an upstream that timed out is tried last for a while; SERVFAIL when none
//! answers within the deadline.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::wire::{Edns, Message, Question};

/// How long one upstream gets to answer one attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a question may take over all attempts.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an upstream that failed goes to the back of the line.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// The UDP payload size we advertise upstream.
const UPSTREAM_UDP_SIZE: u16 = 1232;

/// Why a question could not be forwarded.
#[derive(Debug, PartialEq, Eq)]
pub enum ForwardError {
    /// No upstream resolvers are configured.
    NoUpstreams,
    /// Too many questions are already waiting for upstreams.
    Busy,
    /// No upstream answered in time.
    Failed,
}

/// The upstream resolvers.
pub struct Upstreams {
    addrs: Vec<SocketAddr>,
    next: AtomicUsize,
    inflight: AtomicUsize,
    max_concurrent: usize,
    /// Per upstream: until when (milliseconds since `epoch`) it is tried last.
    down_until: Vec<AtomicU64>,
    epoch: Instant,
}

struct InflightGuard<'a>(&'a AtomicUsize);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Upstreams {
    pub fn new(addrs: Vec<SocketAddr>, max_concurrent: usize) -> Upstreams {
        Upstreams {
            down_until: addrs.iter().map(|_| AtomicU64::new(0)).collect(),
            addrs,
            next: AtomicUsize::new(0),
            inflight: AtomicUsize::new(0),
            max_concurrent: max_concurrent.max(1),
            epoch: Instant::now(),
        }
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Questions waiting for an upstream now.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Ask the upstreams `q` (recursion desired, EDNS with our payload size and the client's
    /// DO bit, the client's CD bit) and return the first valid answer, whatever its rcode.
    pub async fn query(
        &self,
        q: &Question,
        dnssec_ok: bool,
        checking_disabled: bool,
    ) -> Result<Message, ForwardError> {
        if self.addrs.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        if self.inflight.fetch_add(1, Ordering::Relaxed) >= self.max_concurrent {
            self.inflight.fetch_sub(1, Ordering::Relaxed);
            return Err(ForwardError::Busy);
        }
        let _guard = InflightGuard(&self.inflight);
        let id: u16 = rand::random();
        let query = Message {
            id,
            recursion_desired: true,
            checking_disabled,
            questions: vec![q.clone()],
            edns: Some(Edns {
                dnssec_ok,
                ..Edns::new(UPSTREAM_UDP_SIZE)
            }),
            ..Message::default()
        };
        let wire = query.encode(u16::MAX as usize);
        let n = self.addrs.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = self.now_ms();
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        // Upstreams that failed lately go last (stable, so round-robin otherwise).
        order.sort_by_key(|&i| self.down_until[i].load(Ordering::Relaxed) > now);
        let deadline = Instant::now() + TOTAL_TIMEOUT;
        for i in order {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let addr = self.addrs[i];
            let attempt = tokio::time::timeout(left.min(ATTEMPT_TIMEOUT), udp(addr, &wire, q, id));
            match attempt.await {
                Ok(Ok(resp)) => {
                    self.down_until[i].store(0, Ordering::Relaxed);
                    if !resp.truncated {
                        return Ok(resp);
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let full =
                        tokio::time::timeout(left.min(ATTEMPT_TIMEOUT), tcp(addr, &wire, q, id));
                    return match full.await {
                        Ok(Ok(full)) => Ok(full),
                        // The truncated answer is still an answer: the client retries over TCP.
                        _ => Ok(resp),
                    };
                }
                Ok(Err(e)) => {
                    tracing::debug!(upstream = %addr, error = %e, "upstream failed");
                }
                Err(_) => {
                    tracing::debug!(upstream = %addr, "upstream timed out");
                }
            }
            let until = self.now_ms() + DOWN_FOR.as_millis() as u64;
            self.down_until[i].store(until, Ordering::Relaxed);
        }
        Err(ForwardError::Failed)
    }
}

/// Whether `resp` answers the query `id` for `q`.
fn matches(resp: &Message, q: &Question, id: u16) -> bool {
    if resp.id != id || !resp.response {
        return false;
    }
    match resp.questions.as_slice() {
        [rq] => rq.qtype == q.qtype && rq.qclass == q.qclass && rq.name.eq_ignore_case(&q.name),
        // Some servers leave the question out of errors.
        [] => resp.rcode != 0,
        _ => false,
    }
}

async fn udp(addr: SocketAddr, wire: &[u8], q: &Question, id: u16) -> std::io::Result<Message> {
    let local: SocketAddr = match addr.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local).await?;
    sock.connect(addr).await?;
    sock.send(wire).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = sock.recv(&mut buf).await?;
        // Anything that is not the answer (a stray or forged packet) is ignored.
        if let Ok(m) = Message::decode(&buf[..n]) {
            if matches(&m, q, id) {
                return Ok(m);
            }
        }
    }
}

async fn tcp(addr: SocketAddr, wire: &[u8], q: &Question, id: u16) -> std::io::Result<Message> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut out = Vec::with_capacity(wire.len() + 2);
    out.extend_from_slice(&(wire.len() as u16).to_be_bytes());
    out.extend_from_slice(wire);
    s.write_all(&out).await?;
    loop {
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).await?;
        if let Ok(m) = Message::decode(&buf) {
            if matches(&m, q, id) {
                return Ok(m);
            }
        }
    }
}

/// The name servers a resolv.conf names, in order.
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "nameserver" {
                return None;
            }
            let addr = words.next()?;
            // Drop an IPv6 zone (fe80::1%eth0): the zone cannot be expressed here.
            let addr = addr.split('%').next()?;
            addr.parse::<IpAddr>().ok()
        })
        .collect()
}

/// The upstreams to use by default: the resolv.conf's name servers on port 53, minus any
/// that would be this server itself (a forwarding loop).
pub fn upstreams_from_resolv_conf(
    resolv_conf: &str,
    listen: &[SocketAddr],
    local_ips: &[IpAddr],
) -> Vec<SocketAddr> {
    nameservers(resolv_conf)
        .into_iter()
        .map(|ip| SocketAddr::new(ip, 53))
        .filter(|up| !is_self(*up, listen, local_ips))
        .collect()
}

/// Whether `up` is one of the addresses this server listens on.
pub fn is_self(up: SocketAddr, listen: &[SocketAddr], local_ips: &[IpAddr]) -> bool {
    listen.iter().any(|l| {
        l.port() == up.port()
            && (l.ip() == up.ip()
                || (l.ip().is_unspecified()
                    && (up.ip().is_loopback() || local_ips.contains(&up.ip()))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{rtype, Name, RData, Record, CLASS_IN};

    #[test]
    fn reads_resolv_conf() {
        let text = "# comment\nsearch default.svc.cluster.local\nnameserver 10.0.0.2\n\
                    nameserver fe80::1%eth0\nnameserver  127.0.0.53 \noptions ndots:5\nnameserver bogus\n";
        assert_eq!(
            nameservers(text),
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fe80::1".parse().unwrap(),
                "127.0.0.53".parse().unwrap()
            ]
        );
        let listen: Vec<SocketAddr> = vec!["0.0.0.0:53".parse().unwrap()];
        let ups = upstreams_from_resolv_conf(text, &listen, &["10.0.0.2".parse().unwrap()]);
        // 10.0.0.2 is us, 127.0.0.53 is loopback on our port: only fe80::1 is left.
        assert_eq!(ups, vec!["[fe80::1]:53".parse::<SocketAddr>().unwrap()]);
        let listen: Vec<SocketAddr> = vec!["127.0.0.1:1053".parse().unwrap()];
        assert_eq!(upstreams_from_resolv_conf(text, &listen, &[]).len(), 3);
        let listen: Vec<SocketAddr> = vec!["127.0.0.53:53".parse().unwrap()];
        assert_eq!(upstreams_from_resolv_conf(text, &listen, &[]).len(), 2);
    }

    fn question() -> Question {
        Question {
            name: Name::parse("example.test").unwrap(),
            qtype: rtype::A,
            qclass: CLASS_IN,
        }
    }

    /// A fake upstream on loopback: answers every UDP query with `reply(query)`.
    async fn fake_upstream(
        reply: impl Fn(&Message) -> Option<Message> + Send + 'static,
    ) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(q) = Message::decode(&buf[..n]) else {
                    continue;
                };
                if let Some(r) = reply(&q) {
                    let _ = sock.send_to(&r.encode(4096), peer).await;
                }
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn forwards_and_ignores_mismatched_answers() {
        let (addr, task) = fake_upstream(|q| {
            let mut r = Message::reply_to(q);
            r.recursion_available = true;
            r.answers.push(Record::new(
                q.questions[0].name.clone(),
                60,
                RData::A(Ipv4Addr::new(192, 0, 2, 7)),
            ));
            Some(r)
        })
        .await;
        let ups = Upstreams::new(vec![addr], 10);
        let r = ups.query(&question(), false, false).await.unwrap();
        assert_eq!(r.answers[0].data, RData::A(Ipv4Addr::new(192, 0, 2, 7)));
        task.abort();

        // An upstream that answers with the wrong id is no answer: the next one is asked.
        let (bad, bad_task) = fake_upstream(|q| {
            let mut r = Message::reply_to(q);
            r.id = r.id.wrapping_add(1);
            Some(r)
        })
        .await;
        let (good, good_task) = fake_upstream(|q| Some(Message::reply_to(q))).await;
        let ups = Upstreams::new(vec![bad, good], 10);
        let started = Instant::now();
        let r = ups.query(&question(), false, false).await.unwrap();
        assert_eq!(r.rcode, 0);
        assert!(started.elapsed() >= ATTEMPT_TIMEOUT - Duration::from_millis(100));
        // Now the bad one is known to be down and goes last: the next question is quick.
        let started = Instant::now();
        ups.query(&question(), false, false).await.unwrap();
        ups.query(&question(), false, false).await.unwrap();
        assert!(started.elapsed() < ATTEMPT_TIMEOUT);
        bad_task.abort();
        good_task.abort();
    }

    #[tokio::test]
    async fn retries_truncated_answers_over_tcp() {
        let (addr, task) = fake_upstream(|q| {
            let mut r = Message::reply_to(q);
            r.truncated = true;
            Some(r)
        })
        .await;
        // The same port over TCP answers in full.
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let tcp_task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut len = [0u8; 2];
            s.read_exact(&mut len).await.unwrap();
            let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
            s.read_exact(&mut buf).await.unwrap();
            let q = Message::decode(&buf).unwrap();
            let mut r = Message::reply_to(&q);
            for i in 0..100 {
                r.answers.push(Record::new(
                    q.questions[0].name.clone(),
                    60,
                    RData::A(Ipv4Addr::new(192, 0, 2, i)),
                ));
            }
            let wire = r.encode(65535);
            s.write_all(&(wire.len() as u16).to_be_bytes())
                .await
                .unwrap();
            s.write_all(&wire).await.unwrap();
        });
        let ups = Upstreams::new(vec![addr], 10);
        let r = ups.query(&question(), false, false).await.unwrap();
        assert!(!r.truncated);
        assert_eq!(r.answers.len(), 100);
        task.abort();
        tcp_task.abort();
    }

    #[tokio::test]
    async fn fails_without_upstreams_and_when_busy() {
        let ups = Upstreams::new(vec![], 10);
        assert_eq!(
            ups.query(&question(), false, false).await.unwrap_err(),
            ForwardError::NoUpstreams
        );
        // An upstream that never answers, and room for one question at a time.
        let (addr, task) = fake_upstream(|_| None).await;
        let ups = std::sync::Arc::new(Upstreams::new(vec![addr], 1));
        let first = {
            let ups = ups.clone();
            tokio::spawn(async move { ups.query(&question(), false, false).await })
        };
        while ups.inflight() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            ups.query(&question(), false, false).await.unwrap_err(),
            ForwardError::Busy
        );
        assert_eq!(first.await.unwrap().unwrap_err(), ForwardError::Failed);
        task.abort();
    }
}
