//! Just enough SPDY/3.1 to be a remote-command client of a kubelet: opening streams
//! (SYN_STREAM), sending and receiving data, answering pings. The header blocks we send
//! are a zlib stream of stored (uncompressed) blocks, each header block ending with a sync
//! flush as a compressing writer's does, which any zlib reader accepts; the
//! header blocks the server sends (SYN_REPLY) are skipped unread.

use tokio::io::{AsyncRead, AsyncReadExt};

pub const FLAG_FIN: u8 = 0x01;

pub const SYN_STREAM: u16 = 1;
pub const SYN_REPLY: u16 = 2;
pub const RST_STREAM: u16 = 3;
pub const PING: u16 = 6;
pub const GOAWAY: u16 = 7;

/// The largest frame payload accepted (the 24-bit length's range).
const MAX_FRAME: usize = 1 << 24;

/// Encodes header blocks as one zlib stream across the connection, without compression.
#[derive(Default)]
pub struct HeaderEncoder {
    started: bool,
}

impl HeaderEncoder {
    /// The compressed name/value block of `pairs` (names lower-case, as SPDY wants).
    pub fn block(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
        for (name, value) in pairs {
            let name = name.to_ascii_lowercase();
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 16);
        if !self.started {
            // zlib: deflate, 32 KiB window, no preset dictionary, check bits.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        for chunk in raw.chunks(u16::MAX as usize) {
            // A stored block, not the last of the stream.
            out.push(0x00);
            let len = chunk.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // An empty stored block (a zlib sync flush), so that the reader hands over the
        // block's data without looking past the frame for the next block.
        out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
        out
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&[0x80, 0x03]);
    out.extend_from_slice(&kind.to_be_bytes());
    let len = payload.len() as u32;
    out.push(flags);
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// SYN_STREAM opening `id` with the (encoded) header block.
pub fn syn_stream(id: u32, header_block: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(header_block.len() + 10);
    p.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(header_block);
    control(SYN_STREAM, 0, &p)
}

/// A DATA frame (with `fin`, the sender's last on that stream).
pub fn data(id: u32, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    out.push(if fin { FLAG_FIN } else { 0 });
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// A PING frame answering one with `payload`.
pub fn ping(payload: &[u8]) -> Vec<u8> {
    control(PING, 0, payload)
}

/// One frame as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Data {
        id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    Control {
        kind: u16,
        flags: u8,
        payload: Vec<u8>,
    },
}

impl Frame {
    /// The stream a control frame names (SYN_REPLY, RST_STREAM, ...).
    pub fn control_stream(&self) -> Option<u32> {
        match self {
            Frame::Control { payload, .. } if payload.len() >= 4 => Some(
                u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
            ),
            _ => None,
        }
    }
}

pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await?;
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "spdy frame too large",
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    if head[0] & 0x80 != 0 {
        Ok(Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            flags,
            payload,
        })
    } else {
        Ok(Frame::Data {
            id: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff,
            fin: flags & FLAG_FIN != 0,
            data: payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read back a stored-block zlib stream (the test's own inflater for stored blocks).
    fn unstore(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if b.starts_with(&[0x78, 0x01]) {
            b = &b[2..];
        }
        while !b.is_empty() {
            assert_eq!(b[0], 0, "a stored, non-final block");
            let len = u16::from_le_bytes([b[1], b[2]]);
            let nlen = u16::from_le_bytes([b[3], b[4]]);
            assert_eq!(len, !nlen);
            out.extend_from_slice(&b[5..5 + len as usize]);
            b = &b[5 + len as usize..];
        }
        out
    }

    #[test]
    fn header_blocks_are_a_valid_zlib_stream() {
        // The zlib header's check bits: (CMF*256 + FLG) is a multiple of 31, no FDICT.
        assert_eq!((0x78u32 * 256 + 0x01) % 31, 0);
        let mut enc = HeaderEncoder::default();
        let first = enc.block(&[("streamType", "error")]);
        assert_eq!(&first[..2], &[0x78, 0x01]);
        let nv = unstore(&first);
        assert_eq!(&nv[..4], &1u32.to_be_bytes());
        assert_eq!(&nv[4..8], &10u32.to_be_bytes());
        assert_eq!(&nv[8..18], b"streamtype");
        assert_eq!(&nv[18..22], &5u32.to_be_bytes());
        assert_eq!(&nv[22..], b"error");
        // Later blocks continue the stream: no second zlib header.
        assert!(first.ends_with(&[0, 0, 0, 0xff, 0xff]), "{first:?}");
        let second = enc.block(&[("streamType", "stdout")]);
        assert_eq!(second[0], 0x00);
        assert!(unstore(&second).ends_with(b"stdout"));
    }

    #[tokio::test]
    async fn frames_encode_and_decode() {
        let d = data(3, true, b"hi");
        assert_eq!(d, [0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i']);
        assert_eq!(
            read_frame(&mut d.as_slice()).await.unwrap(),
            Frame::Data {
                id: 3,
                fin: true,
                data: b"hi".to_vec()
            }
        );
        let s = syn_stream(5, b"xyz");
        assert_eq!(&s[..4], &[0x80, 0x03, 0x00, 0x01]);
        let f = read_frame(&mut s.as_slice()).await.unwrap();
        assert_eq!(f.control_stream(), Some(5));
        match f {
            Frame::Control {
                kind,
                flags,
                payload,
            } => {
                assert_eq!((kind, flags), (SYN_STREAM, 0));
                assert_eq!(&payload[10..], b"xyz");
            }
            other => panic!("{other:?}"),
        }
        let p = ping(&7u32.to_be_bytes());
        assert_eq!(p, [0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 7]);
    }
}
