//! The server side of WebSocket (RFC 6455) as the streaming subresources need it: the
//! handshake answer and reading and writing frames.

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The GUID RFC 6455 appends to the client's key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The largest message accepted from a client.
pub const MAX_MESSAGE: usize = 16 << 20;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// SHA-1 (FIPS 180-4), for the handshake only.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in chunk.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// The `Sec-WebSocket-Accept` answer to a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let digest = sha1(format!("{}{GUID}", key.trim()).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// Whether the request asks for a WebSocket.
pub fn is_websocket(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The subprotocols the client offers, in its order.
pub fn offered_protocols(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// One frame as sent by the server: final, unmasked.
pub fn encode(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | (opcode & 0x0f));
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= u16::MAX as usize => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with a status code.
pub fn close_frame(code: u16) -> Vec<u8> {
    encode(OP_CLOSE, &code.to_be_bytes())
}

/// One frame as read: (final, opcode, unmasked payload).
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Read one frame; a frame larger than [`MAX_MESSAGE`] is an error.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).await?;
    let fin = head[0] & 0x80 != 0;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).await?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b).await?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    if len > MAX_MESSAGE as u64 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "websocket frame too large",
        ));
    }
    let mut mask = [0u8; 4];
    if masked {
        r.read_exact(&mut mask).await?;
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).await?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok(Frame {
        fin,
        opcode,
        payload,
    })
}

/// Reads whole messages, answering pings through `pong` and joining fragments.
pub struct MessageReader<R> {
    r: R,
    partial: Option<(u8, Vec<u8>)>,
}

/// What the client sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    /// A text or binary message.
    Data(Vec<u8>),
    /// A ping, whose payload the pong must echo.
    Ping(Vec<u8>),
    /// The client closes.
    Close,
}

impl<R: AsyncRead + Unpin> MessageReader<R> {
    pub fn new(r: R) -> Self {
        MessageReader { r, partial: None }
    }

    /// The next message (pongs are skipped).
    pub async fn next(&mut self) -> std::io::Result<Message> {
        loop {
            let f = read_frame(&mut self.r).await?;
            match f.opcode {
                OP_PING => return Ok(Message::Ping(f.payload)),
                OP_PONG => continue,
                OP_CLOSE => return Ok(Message::Close),
                OP_TEXT | OP_BINARY if f.fin && self.partial.is_none() => {
                    return Ok(Message::Data(f.payload))
                }
                OP_TEXT | OP_BINARY => self.partial = Some((f.opcode, f.payload)),
                OP_CONTINUATION => {
                    let Some((_, mut buf)) = self.partial.take() else {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "websocket continuation without a start",
                        ));
                    };
                    buf.extend_from_slice(&f.payload);
                    if buf.len() > MAX_MESSAGE {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "websocket message too large",
                        ));
                    }
                    if f.fin {
                        return Ok(Message::Data(buf));
                    }
                    self.partial = Some((OP_BINARY, buf));
                }
                _ => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "unknown websocket opcode",
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    #[test]
    fn the_handshake_answer_is_rfc_6455s() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn frames_round_trip_masked_and_long() {
        for len in [0usize, 5, 125, 126, 65535, 65536] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let f = encode(OP_BINARY, &payload);
            let got = read_frame(&mut f.as_slice()).await.unwrap();
            assert_eq!(got.payload, payload);
            assert!(got.fin);
            assert_eq!(got.opcode, OP_BINARY);
        }
        // A masked client frame: "Hello" from RFC 6455 5.7.
        let masked = [
            0x81u8, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let got = read_frame(&mut &masked[..]).await.unwrap();
        assert_eq!(got.payload, b"Hello");
        assert_eq!(got.opcode, OP_TEXT);
    }

    #[tokio::test]
    async fn fragments_join_and_pings_surface() {
        let mut wire = Vec::new();
        // "Hel" + ping + "lo" (RFC 6455 5.7's fragmented example, with a ping between).
        wire.extend_from_slice(&[0x01, 0x03, b'H', b'e', b'l']);
        wire.extend_from_slice(&encode(OP_PING, b"p"));
        wire.extend_from_slice(&[0x80, 0x02, b'l', b'o']);
        wire.extend_from_slice(&close_frame(1000));
        let mut r = MessageReader::new(wire.as_slice());
        assert_eq!(r.next().await.unwrap(), Message::Ping(b"p".to_vec()));
        assert_eq!(r.next().await.unwrap(), Message::Data(b"Hello".to_vec()));
        assert_eq!(r.next().await.unwrap(), Message::Close);
        assert!(r.next().await.is_err());
    }

    #[test]
    fn protocols_are_read_in_order() {
        let mut h = http::HeaderMap::new();
        h.insert("upgrade", "WebSocket".parse().unwrap());
        h.append(
            "sec-websocket-protocol",
            "v5.channel.k8s.io, v4.channel.k8s.io".parse().unwrap(),
        );
        assert!(is_websocket(&h));
        assert_eq!(
            offered_protocols(&h),
            ["v5.channel.k8s.io", "v4.channel.k8s.io"]
        );
    }
}
