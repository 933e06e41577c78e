//! WebSocket clients of exec, attach and port-forward, served over the kubelet's SPDY.
//!
//! kubectl 1.32 opens exec and attach as WebSocket `v5.channel.k8s.io`: each binary message
//! starts with its channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize) and `[255, c]`
//! closes channel `c` (the client's end of stdin). The kubelet speaks `v4.channel.k8s.io`
//! over SPDY, one stream per channel; the API server translates between the two, as
//! Kubernetes' stream translator does. Port-forward over WebSocket
//! (`SPDY/3.1+portforward.k8s.io`) carries the SPDY connection itself in binary messages,
//! so it is only unwrapped.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::spdy;
use super::websocket::{self, Message, MessageReader};

pub const V5_PROTOCOL: &str = "v5.channel.k8s.io";
pub const V4_PROTOCOL: &str = "v4.channel.k8s.io";
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
pub const CLOSE: u8 = 255;

/// The largest DATA frame sent to the kubelet.
const CHUNK: usize = 32 * 1024;

/// Which channels a session has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channels {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// What a client message asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum FromClient<'a> {
    Stdin(&'a [u8]),
    CloseStdin,
    Resize(&'a [u8]),
    Ignore,
}

/// Read a v5 client message.
pub fn classify(msg: &[u8]) -> FromClient<'_> {
    match msg.split_first() {
        Some((&STDIN, data)) => FromClient::Stdin(data),
        Some((&RESIZE, data)) => FromClient::Resize(data),
        Some((&CLOSE, [STDIN, ..])) => FromClient::CloseStdin,
        _ => FromClient::Ignore,
    }
}

/// A v5 message to the client on `channel`.
pub fn to_client(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(data.len() + 1);
    msg.push(channel);
    msg.extend_from_slice(data);
    websocket::encode(websocket::OP_BINARY, &msg)
}

/// The SPDY streams of a remote-command session, in the order a v4 client opens them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streams {
    /// (stream id, channel, streamType header).
    pub list: Vec<(u32, u8, &'static str)>,
}

impl Streams {
    pub fn plan(c: Channels) -> Streams {
        let mut wanted = vec![(ERROR, "error")];
        if c.stdin {
            wanted.push((STDIN, "stdin"));
        }
        if c.stdout {
            wanted.push((STDOUT, "stdout"));
        }
        // A terminal has no separate stderr.
        if c.stderr && !c.tty {
            wanted.push((STDERR, "stderr"));
        }
        if c.tty {
            wanted.push((RESIZE, "resize"));
        }
        Streams {
            list: wanted
                .into_iter()
                .enumerate()
                .map(|(i, (ch, kind))| (1 + 2 * i as u32, ch, kind))
                .collect(),
        }
    }

    pub fn id(&self, channel: u8) -> Option<u32> {
        self.list
            .iter()
            .find(|(_, ch, _)| *ch == channel)
            .map(|(id, _, _)| *id)
    }

    pub fn channel(&self, id: u32) -> Option<u8> {
        self.list
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, ch, _)| *ch)
    }

    /// The SYN_STREAM frames opening every stream.
    pub fn open(&self, enc: &mut spdy::HeaderEncoder) -> Vec<u8> {
        let mut out = Vec::new();
        for (id, _, kind) in &self.list {
            out.extend(spdy::syn_stream(*id, &enc.block(&[("streamType", kind)])));
        }
        out
    }
}

/// Write everything sent on `rx` to `w`, then shut it down.
fn writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut w: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(buf) = rx.recv().await {
            if w.write_all(&buf).await.is_err() {
                break;
            }
            let _ = w.flush().await;
        }
        let _ = w.shutdown().await;
    })
}

/// Relay a v5 WebSocket client and a kubelet's v4 SPDY session until the kubelet's side
/// ends (the command exited and its status was sent) or the client goes away.
pub async fn exec_session<C, K>(client: C, kubelet: K, channels: Channels)
where
    C: AsyncRead + AsyncWrite + Send + 'static,
    K: AsyncRead + AsyncWrite + Send + 'static,
{
    let (client_r, client_w) = tokio::io::split(client);
    let (mut kubelet_r, kubelet_w) = tokio::io::split(kubelet);
    let (ws_tx, ws_rx) = mpsc::channel::<Vec<u8>>(64);
    let (sp_tx, sp_rx) = mpsc::channel::<Vec<u8>>(64);
    let ws_writer = writer(client_w, ws_rx);
    let sp_writer = writer(kubelet_w, sp_rx);
    let streams = Streams::plan(channels);
    let mut enc = spdy::HeaderEncoder::default();
    if sp_tx.send(streams.open(&mut enc)).await.is_err() {
        return;
    }

    // The client's side: stdin, its end, terminal sizes; pings are answered.
    let mut reader = {
        let streams = streams.clone();
        let ws_tx = ws_tx.clone();
        let sp_tx = sp_tx.clone();
        tokio::spawn(async move {
            let mut messages = MessageReader::new(client_r);
            let mut stdin_closed = false;
            loop {
                match messages.next().await {
                    Ok(Message::Data(msg)) => match classify(&msg) {
                        FromClient::Stdin(data) if !stdin_closed => {
                            if let Some(id) = streams.id(STDIN) {
                                for chunk in data.chunks(CHUNK) {
                                    if sp_tx.send(spdy::data(id, false, chunk)).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                        FromClient::CloseStdin if !stdin_closed => {
                            stdin_closed = true;
                            if let Some(id) = streams.id(STDIN) {
                                let _ = sp_tx.send(spdy::data(id, true, &[])).await;
                            }
                        }
                        FromClient::Resize(size) => {
                            if let Some(id) = streams.id(RESIZE) {
                                let _ = sp_tx.send(spdy::data(id, false, size)).await;
                            }
                        }
                        _ => {}
                    },
                    Ok(Message::Ping(p)) => {
                        let _ = ws_tx.send(websocket::encode(websocket::OP_PONG, &p)).await;
                    }
                    Ok(Message::Close) | Err(_) => return,
                }
            }
        })
    };

    // The kubelet's side: output and the final status go to the client in order.
    let mut open: Vec<u8> = streams
        .list
        .iter()
        .map(|(_, ch, _)| *ch)
        .filter(|ch| matches!(*ch, ERROR | STDOUT | STDERR))
        .collect();
    let relay = async {
        while !open.is_empty() {
            let frame = match spdy::read_frame(&mut kubelet_r).await {
                Ok(f) => f,
                Err(_) => break,
            };
            match frame {
                spdy::Frame::Data { id, fin, data } => {
                    let Some(ch) = streams.channel(id) else {
                        continue;
                    };
                    if !data.is_empty() && ws_tx.send(to_client(ch, &data)).await.is_err() {
                        break;
                    }
                    if fin {
                        open.retain(|c| *c != ch);
                    }
                }
                spdy::Frame::Control {
                    kind: spdy::PING,
                    payload,
                    ..
                } => {
                    let _ = sp_tx.send(spdy::ping(&payload)).await;
                }
                ref f @ spdy::Frame::Control {
                    kind: spdy::RST_STREAM,
                    ..
                } => {
                    if let Some(ch) = f.control_stream().and_then(|id| streams.channel(id)) {
                        open.retain(|c| *c != ch);
                    }
                }
                _ => {}
            }
        }
    };
    tokio::select! {
        _ = relay => {}
        _ = &mut reader => {}
    }
    reader.abort();
    let _ = ws_tx.send(websocket::close_frame(1000)).await;
    drop(ws_tx);
    drop(sp_tx);
    let _ = ws_writer.await;
    let _ = sp_writer.await;
}

/// Carry a port-forward SPDY connection between a tunneling WebSocket client and the
/// kubelet: binary messages one way, bytes the other.
pub async fn tunnel<C, K>(client: C, kubelet: K)
where
    C: AsyncRead + AsyncWrite + Send + 'static,
    K: AsyncRead + AsyncWrite + Send + 'static,
{
    use tokio::io::AsyncReadExt;
    let (client_r, client_w) = tokio::io::split(client);
    let (mut kubelet_r, mut kubelet_w) = tokio::io::split(kubelet);
    let (ws_tx, ws_rx) = mpsc::channel::<Vec<u8>>(64);
    let ws_writer = writer(client_w, ws_rx);
    let up = {
        let ws_tx = ws_tx.clone();
        async move {
            let mut messages = MessageReader::new(client_r);
            loop {
                match messages.next().await {
                    Ok(Message::Data(msg)) => {
                        if kubelet_w.write_all(&msg).await.is_err() {
                            break;
                        }
                    }
                    Ok(Message::Ping(p)) => {
                        let _ = ws_tx.send(websocket::encode(websocket::OP_PONG, &p)).await;
                    }
                    Ok(Message::Close) | Err(_) => break,
                }
            }
            let _ = kubelet_w.shutdown().await;
        }
    };
    let down = {
        let ws_tx = ws_tx.clone();
        async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match kubelet_r.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if ws_tx
                            .send(websocket::encode(websocket::OP_BINARY, &buf[..n]))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    let _ = ws_tx.send(websocket::close_frame(1000)).await;
    drop(ws_tx);
    let _ = ws_writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn client_messages_map_to_streams() {
        assert_eq!(classify(&[0, b'h', b'i']), FromClient::Stdin(b"hi"));
        assert_eq!(classify(&[255, 0]), FromClient::CloseStdin);
        assert_eq!(classify(&[4, b'{', b'}']), FromClient::Resize(b"{}"));
        assert_eq!(classify(&[255, 1]), FromClient::Ignore);
        assert_eq!(classify(&[]), FromClient::Ignore);
        assert_eq!(to_client(1, b"x"), [0x82, 2, 1, b'x']);
    }

    #[test]
    fn streams_are_opened_as_a_v4_client_opens_them() {
        let s = Streams::plan(Channels {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        });
        assert_eq!(
            s.list,
            [
                (1, ERROR, "error"),
                (3, STDIN, "stdin"),
                (5, STDOUT, "stdout"),
                (7, STDERR, "stderr")
            ]
        );
        let t = Streams::plan(Channels {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        });
        assert_eq!(t.id(STDERR), None);
        assert_eq!(t.id(RESIZE), Some(7));
        assert_eq!(t.channel(5), Some(STDOUT));
    }

    /// A v5 client and a fake kubelet: stdin and its close go to the stdin stream, output
    /// and status come back on their channels, then the WebSocket closes.
    #[tokio::test]
    async fn a_session_translates_both_ways() {
        let (client, mut client_peer) = tokio::io::duplex(1 << 16);
        let (kubelet, mut kubelet_peer) = tokio::io::duplex(1 << 16);
        let channels = Channels {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let session = tokio::spawn(exec_session(client, kubelet, channels));

        // The kubelet sees the four SYN_STREAMs.
        for want in [1u32, 3, 5, 7] {
            let f = spdy::read_frame(&mut kubelet_peer).await.unwrap();
            assert_eq!(f.control_stream(), Some(want));
        }
        // The client types and ends its input (masked frames, as clients send them).
        let masked = |payload: &[u8]| {
            let mut f = vec![0x82, 0x80 | payload.len() as u8, 1, 2, 3, 4];
            f.extend(
                payload
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]),
            );
            f
        };
        client_peer
            .write_all(&masked(&[0, b'h', b'i']))
            .await
            .unwrap();
        client_peer.write_all(&masked(&[255, 0])).await.unwrap();
        assert_eq!(
            spdy::read_frame(&mut kubelet_peer).await.unwrap(),
            spdy::Frame::Data {
                id: 3,
                fin: false,
                data: b"hi".to_vec()
            }
        );
        assert_eq!(
            spdy::read_frame(&mut kubelet_peer).await.unwrap(),
            spdy::Frame::Data {
                id: 3,
                fin: true,
                data: vec![]
            }
        );
        // The kubelet answers a ping, writes output, the status, and closes its streams.
        kubelet_peer
            .write_all(&spdy::ping(&[0, 0, 0, 2]))
            .await
            .unwrap();
        kubelet_peer
            .write_all(&spdy::data(5, false, b"out"))
            .await
            .unwrap();
        kubelet_peer
            .write_all(&spdy::data(7, true, b"err"))
            .await
            .unwrap();
        kubelet_peer
            .write_all(&spdy::data(5, true, b""))
            .await
            .unwrap();
        let status = br#"{"status":"Success"}"#;
        kubelet_peer
            .write_all(&spdy::data(1, true, status))
            .await
            .unwrap();
        assert_eq!(
            spdy::read_frame(&mut kubelet_peer).await.unwrap(),
            spdy::Frame::Control {
                kind: spdy::PING,
                flags: 0,
                payload: vec![0, 0, 0, 2]
            }
        );
        session.await.unwrap();
        let mut got = Vec::new();
        client_peer.read_to_end(&mut got).await.unwrap();
        let mut want = to_client(STDOUT, b"out");
        want.extend(to_client(STDERR, b"err"));
        want.extend(to_client(ERROR, status));
        want.extend(websocket::close_frame(1000));
        assert_eq!(got, want);
    }
}
