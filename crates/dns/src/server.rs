//! The DNS server: UDP sockets (several per address, with SO_REUSEPORT, so that the kernel
//! spreads queries over the runtime's threads) and a TCP listener per address (length-prefixed
//! messages, several per connection, closed when idle). Questions for the cluster zone are
//! answered on the socket's task; forwarded ones (and CNAMEs leaving the zone) in a task of
//! their own, through the cache.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

use crate::cache::{Cache, Key};
use crate::forward::{ForwardError, Upstreams};
use crate::wire::{rcode, rtype, Edns, Header, Message, Question, Record, MIN_UDP_SIZE};
use crate::zone::{Answer, Chase, Zone};

/// The largest UDP payload we send, whatever the client advertises.
const MAX_UDP_SIZE: usize = 65_000;
/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(8);
/// How long a TCP client may take to send a query it started.
const TCP_READ: Duration = Duration::from_secs(2);
/// At most this many TCP connections at once; more are closed at once.
const MAX_TCP_CONNECTIONS: usize = 1024;

/// What the server's tasks share.
pub(crate) struct Shared {
    pub zone: Arc<Zone>,
    pub cache: Cache,
    pub upstreams: Upstreams,
    tcp_connections: AtomicUsize,
}

/// What to do with one received message.
pub(crate) enum Step {
    Reply(Vec<u8>),
    /// Not answered (unreadable, or itself a response).
    Drop,
    /// Needs the upstreams: finish in a task of its own.
    Later(Later),
}

pub(crate) struct Later {
    query: Message,
    limit: usize,
    chase: Option<Chase>,
}

impl Shared {
    pub fn new(zone: Arc<Zone>, cache: Cache, upstreams: Upstreams) -> Shared {
        Shared {
            zone,
            cache,
            upstreams,
            tcp_connections: AtomicUsize::new(0),
        }
    }

    /// Handle one message received over UDP (`udp`) or TCP, as far as can be done at once.
    pub fn handle(&self, buf: &[u8], udp: bool) -> Step {
        let Some(header) = Header::peek(buf) else {
            return Step::Drop;
        };
        if header.is_response() {
            return Step::Drop;
        }
        let query = match Message::decode(buf) {
            Ok(q) => q,
            Err(e) => {
                tracing::debug!(error = %e, "malformed query");
                return Step::Reply(
                    Message::error_for_header(header, rcode::FORMERR).encode(MIN_UDP_SIZE),
                );
            }
        };
        let limit = if udp {
            query.edns.as_ref().map_or(MIN_UDP_SIZE, |e| {
                (e.udp_size as usize).clamp(MIN_UDP_SIZE, MAX_UDP_SIZE)
            })
        } else {
            u16::MAX as usize
        };
        let mut resp = reply_to(&query);
        if query.opcode != 0 {
            resp.rcode = rcode::NOTIMP;
            return Step::Reply(resp.encode(limit));
        }
        if query.edns.as_ref().is_some_and(|e| e.version > 0) {
            resp.rcode = rcode::BADVERS;
            return Step::Reply(resp.encode(limit));
        }
        if query.questions.len() != 1 {
            resp.rcode = rcode::FORMERR;
            return Step::Reply(resp.encode(limit));
        }
        let q = &query.questions[0];
        match self.zone.lookup(&q.name, q.qtype) {
            Answer::Forward => Step::Later(Later {
                query,
                limit,
                chase: None,
            }),
            Answer::Records {
                chase: Some(chase), ..
            } => Step::Later(Later {
                query,
                limit,
                chase: Some(chase),
            }),
            Answer::Records {
                answers,
                additional,
                chase: None,
            } => {
                resp.authoritative = true;
                resp.answers = answers;
                resp.additional = additional;
                load_balance(&mut resp);
                Step::Reply(resp.encode(limit))
            }
            Answer::Refused => {
                resp.rcode = rcode::REFUSED;
                Step::Reply(resp.encode(limit))
            }
            Answer::NoData(soa) => Step::Reply(error(resp, rcode::NOERROR, soa, limit)),
            Answer::NxDomain(soa) => Step::Reply(error(resp, rcode::NXDOMAIN, soa, limit)),
            Answer::NotReady(soa) => Step::Reply(error(resp, rcode::SERVFAIL, soa, limit)),
        }
    }

    /// Finish a question that needs the upstreams.
    pub async fn complete(&self, later: Later) -> Vec<u8> {
        let Later {
            query,
            limit,
            chase,
        } = later;
        let mut resp = reply_to(&query);
        let dnssec_ok = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
        let cd = query.checking_disabled;
        match chase {
            None => match self.resolve(&query.questions[0], dnssec_ok, cd).await {
                Ok((m, ttl)) => {
                    resp.rcode = m.rcode;
                    resp.authoritative = ttl.is_some_and(|t| t.hit) || m.authoritative;
                    resp.recursion_available = m.recursion_available;
                    resp.authentic_data = m.authentic_data && (dnssec_ok || query.authentic_data);
                    resp.answers = with_ttl(&m.answers, ttl);
                    resp.authority = with_ttl(&m.authority, ttl);
                    resp.additional = with_ttl(&m.additional, ttl);
                    if resp.rcode > 15 && resp.edns.is_none() {
                        resp.rcode = rcode::SERVFAIL;
                    }
                }
                Err(ForwardError::Busy) => resp.rcode = rcode::REFUSED,
                Err(_) => resp.rcode = rcode::SERVFAIL,
            },
            Some(chase) => {
                let q = Question {
                    name: chase.target.clone(),
                    qtype: chase.qtype,
                    qclass: query.questions[0].qclass,
                };
                resp.authoritative = true;
                if let Ok((m, ttl)) = self.resolve(&q, dnssec_ok, cd).await {
                    resp.answers = chase.cnames;
                    resp.answers.extend(with_ttl(&m.answers, ttl));
                }
                if resp.answers.is_empty() {
                    let domain = self.zone.config().domain.clone();
                    resp.authority
                        .push(self.zone.soa(&query.questions[0].name, &domain));
                }
            }
        }
        load_balance(&mut resp);
        resp.encode(limit)
    }

    /// An upstream answer to `q`, from the cache or the upstreams, and how to set its TTLs.
    async fn resolve(
        &self,
        q: &Question,
        dnssec_ok: bool,
        cd: bool,
    ) -> Result<(Arc<Message>, Option<Ttl>), ForwardError> {
        let key = Key::new(q, dnssec_ok, cd);
        if let Some(hit) = self.cache.get(&key, Instant::now()) {
            return Ok((
                hit.msg,
                Some(Ttl {
                    seconds: hit.remaining,
                    hit: true,
                }),
            ));
        }
        let m = Arc::new(self.upstreams.query(q, dnssec_ok, cd).await?);
        let kept = self.cache.insert(key, m.clone(), Instant::now());
        Ok((
            m,
            (kept > 0).then_some(Ttl {
                seconds: kept,
                hit: false,
            }),
        ))
    }
}

/// An authoritative answer without records: `rcode` and the zone's SOA.
fn error(mut resp: Message, rcode: u16, soa: Record, limit: usize) -> Vec<u8> {
    resp.rcode = rcode;
    resp.authoritative = true;
    resp.authority.push(soa);
    resp.encode(limit)
}

/// How TTLs of an upstream answer are handed out: on a cache hit all are the time left; on a
/// miss none exceeds the time it is cached for.
#[derive(Clone, Copy)]
struct Ttl {
    seconds: u32,
    hit: bool,
}

fn with_ttl(records: &[Record], ttl: Option<Ttl>) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            match ttl {
                Some(Ttl { seconds, hit: true }) => r.ttl = seconds,
                Some(Ttl {
                    seconds,
                    hit: false,
                }) => r.ttl = r.ttl.min(seconds),
                None => {}
            }
            r
        })
        .collect()
}

/// A response to `query` that echoes its EDNS payload size and DO bit (no options).
fn reply_to(query: &Message) -> Message {
    let mut resp = Message::reply_to(query);
    resp.edns = query.edns.as_ref().map(|e| Edns {
        udp_size: e.udp_size.max(MIN_UDP_SIZE as u16),
        version: 0,
        dnssec_ok: e.dnssec_ok,
        options: Vec::new(),
    });
    resp
}

/// CoreDNS's `loadbalance`: in a successful answer, CNAMEs first, then other records, then
/// the address records and MX records each in random order.
fn load_balance(resp: &mut Message) {
    if resp.rcode != rcode::NOERROR {
        return;
    }
    for section in [&mut resp.answers, &mut resp.authority, &mut resp.additional] {
        if section.len() < 2 {
            continue;
        }
        let rank = |r: &Record| match r.rtype() {
            rtype::CNAME => 0,
            rtype::A | rtype::AAAA => 2,
            rtype::MX => 3,
            _ => 1,
        };
        section.sort_by_key(rank);
        let mut i = 0;
        while i < section.len() {
            let r = rank(&section[i]);
            let mut j = i;
            while j < section.len() && rank(&section[j]) == r {
                j += 1;
            }
            if r >= 2 {
                shuffle(&mut section[i..j]);
            }
            i = j;
        }
    }
}

fn shuffle<T>(items: &mut [T]) {
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new(
            rand::random::<u64>() | 1
        );
    }
    STATE.with(|s| {
        let mut x = s.get();
        for i in (1..items.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = (x % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
        s.set(x);
    });
}

// ---------------------------------------------------------------------------------------------
// Sockets

/// The bound sockets of one listen address.
pub(crate) struct Bound {
    pub udp: Vec<UdpSocket>,
    pub tcp: TcpListener,
    pub addr: SocketAddr,
}

/// Bind `addr` for TCP and `workers` UDP sockets sharing its port; with port 0, one free port
/// for both.
pub(crate) async fn bind(addr: SocketAddr, workers: usize) -> anyhow::Result<Bound> {
    let mut last_err = None;
    for _ in 0..if addr.port() == 0 { 20 } else { 1 } {
        // TCP first, without SO_REUSEPORT: a second server on the same address fails here,
        // instead of silently sharing the UDP port.
        let tcp = tcp_listener(addr).with_context(|| format!("cannot listen on {addr}/tcp"))?;
        let actual = tcp
            .local_addr()
            .context("reading the TCP listener's address")?;
        let mut udp = Vec::with_capacity(workers);
        let mut failed = None;
        for _ in 0..workers.max(1) {
            match udp_socket(actual) {
                Ok(s) => udp.push(s),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None => {
                return Ok(Bound {
                    udp,
                    tcp,
                    addr: actual,
                })
            }
            Some(e) => last_err = Some(e),
        }
    }
    let e = last_err.map(|e| e.to_string()).unwrap_or_default();
    anyhow::bail!("cannot listen on {addr}/udp: {e}")
}

/// A TCP listener; an IPv6 one takes IPv6 only, so that `0.0.0.0` and `[::]` can both be
/// listened on.
fn tcp_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

fn udp_socket(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    // Room for bursts of queries while the threads are busy.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

/// Serve the bound sockets; returns their tasks.
pub(crate) fn serve(bound: Bound, shared: Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for sock in bound.udp {
        tasks.push(tokio::spawn(udp_loop(Arc::new(sock), shared.clone())));
    }
    tasks.push(tokio::spawn(tcp_loop(bound.tcp, shared)));
    tasks
}

async fn udp_loop(sock: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "receiving a UDP query failed");
                tokio::task::yield_now().await;
                continue;
            }
        };
        match shared.handle(&buf[..n], true) {
            Step::Reply(out) => {
                // A full socket buffer loses the reply, as any UDP datagram may be lost.
                if let Err(e) = sock.try_send_to(&out, peer) {
                    if e.kind() == std::io::ErrorKind::WouldBlock {
                        let _ = sock.send_to(&out, peer).await;
                    }
                }
            }
            Step::Drop => {}
            Step::Later(later) => {
                let sock = sock.clone();
                let shared = shared.clone();
                tokio::spawn(async move {
                    let out = shared.complete(later).await;
                    let _ = sock.send_to(&out, peer).await;
                });
            }
        }
    }
}

async fn tcp_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if shared.tcp_connections.fetch_add(1, Ordering::Relaxed) >= MAX_TCP_CONNECTIONS {
                    shared.tcp_connections.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                let shared = shared.clone();
                tokio::spawn(async move {
                    tcp_connection(stream, &shared).await;
                    shared.tcp_connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a DNS TCP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn tcp_connection(mut s: TcpStream, shared: &Shared) {
    let _ = s.set_nodelay(true);
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, s.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        match tokio::time::timeout(TCP_READ, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let out = match shared.handle(&buf, false) {
            Step::Reply(out) => out,
            Step::Drop => continue,
            Step::Later(later) => shared.complete(later).await,
        };
        let mut framed = Vec::with_capacity(out.len() + 2);
        framed.extend_from_slice(&(out.len() as u16).to_be_bytes());
        framed.extend_from_slice(&out);
        if s.write_all(&framed).await.is_err() {
            return;
        }
    }
}
