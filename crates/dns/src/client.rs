//! A small DNS client: one question over UDP or TCP (for tests, benchmarks and tools).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::wire::{Edns, Message, Name, Question, CLASS_IN};

/// A query for `name`/`qtype` with recursion desired; with EDNS and this payload size if
/// `udp_size` is given.
pub fn query(name: &str, qtype: u16, udp_size: Option<u16>) -> anyhow::Result<Message> {
    let name = Name::parse(name).map_err(|e| anyhow::anyhow!("invalid name {name:?}: {e}"))?;
    Ok(Message {
        id: rand::random(),
        recursion_desired: true,
        questions: vec![Question {
            name,
            qtype,
            qclass: CLASS_IN,
        }],
        edns: udp_size.map(Edns::new),
        ..Message::default()
    })
}

/// Send `msg` over UDP to `server` and wait up to `timeout` for the answer with its id.
pub async fn exchange_udp(
    server: SocketAddr,
    msg: &Message,
    timeout: Duration,
) -> anyhow::Result<Message> {
    let local: SocketAddr = match server.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local)
        .await
        .context("binding a UDP socket")?;
    sock.connect(server)
        .await
        .with_context(|| format!("connecting to {server}"))?;
    sock.send(&msg.encode(u16::MAX as usize)).await?;
    let mut buf = vec![0u8; 65_535];
    let wait = async {
        loop {
            let n = sock.recv(&mut buf).await?;
            if let Ok(m) = Message::decode(&buf[..n]) {
                if m.id == msg.id {
                    return anyhow::Ok(m);
                }
            }
        }
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(r) => r,
        Err(_) => bail!("no answer from {server} within {timeout:?}"),
    }
}

/// Send `msg` over TCP to `server` and wait up to `timeout` for the answer.
pub async fn exchange_tcp(
    server: SocketAddr,
    msg: &Message,
    timeout: Duration,
) -> anyhow::Result<Message> {
    let work = async {
        let mut s = TcpStream::connect(server)
            .await
            .with_context(|| format!("connecting to {server}"))?;
        let wire = msg.encode(u16::MAX as usize);
        let mut out = (wire.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&wire);
        s.write_all(&out).await?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).await?;
        Message::decode(&buf).map_err(|e| anyhow::anyhow!("bad answer from {server}: {e}"))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => bail!("no answer from {server} over TCP within {timeout:?}"),
    }
}

/// Ask `server` over UDP, and again over TCP if the answer is truncated.
pub async fn resolve(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> anyhow::Result<Message> {
    let q = query(name, qtype, Some(1232))?;
    let m = exchange_udp(server, &q, timeout).await?;
    if m.truncated {
        return exchange_tcp(server, &q, timeout).await;
    }
    Ok(m)
}
