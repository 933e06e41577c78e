//! DNS messages on the wire (RFC 1035, with SRV from RFC 2782, AAAA from RFC 3596 and EDNS(0)
//! from RFC 6891): decoding that checks every bound and refuses compression pointers that do
//! not point strictly backwards (so a crafted packet can neither read out of bounds nor loop),
//! and encoding with name compression and record-level truncation to a size limit.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Record and query types this crate knows by name.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const ANY: u16 = 255;
}

/// Response codes (the values above 15 need EDNS to be carried).
pub mod rcode {
    pub const NOERROR: u16 = 0;
    pub const FORMERR: u16 = 1;
    pub const SERVFAIL: u16 = 2;
    pub const NXDOMAIN: u16 = 3;
    pub const NOTIMP: u16 = 4;
    pub const REFUSED: u16 = 5;
    pub const BADVERS: u16 = 16;
}

/// The Internet class.
pub const CLASS_IN: u16 = 1;

/// The smallest UDP payload every DNS server must accept (RFC 1035).
pub const MIN_UDP_SIZE: usize = 512;

/// Why a message or name could not be read or built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireError(pub &'static str);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for WireError {}

const TRUNCATED: WireError = WireError("message truncated");

// ---------------------------------------------------------------------------------------------
// Names

/// A domain name, kept as its uncompressed wire form (length-prefixed labels ending with the
/// empty root label). Case is preserved; comparisons that DNS defines as case-insensitive
/// have their own methods.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Name {
    wire: Vec<u8>,
}

impl Name {
    /// The root name, `.`.
    pub fn root() -> Name {
        Name { wire: vec![0] }
    }

    /// A name from its presentation form: dot-separated labels, a trailing dot optional, `\.`
    /// and `\DDD` escapes understood; `.` or `` is the root.
    pub fn parse(text: &str) -> Result<Name, WireError> {
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes == b"." {
            return Ok(Name::root());
        }
        let mut wire = Vec::with_capacity(bytes.len() + 2);
        let mut label: Vec<u8> = Vec::with_capacity(63);
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            match c {
                b'.' => {
                    push_label(&mut wire, &label)?;
                    label.clear();
                    if i + 1 == bytes.len() {
                        wire.push(0);
                        return Name::checked(wire);
                    }
                }
                b'\\' => {
                    let d = bytes.get(i + 1..i + 4);
                    match d {
                        Some(d) if d.iter().all(u8::is_ascii_digit) => {
                            let v = (d[0] - b'0') as u16 * 100
                                + (d[1] - b'0') as u16 * 10
                                + (d[2] - b'0') as u16;
                            if v > 255 {
                                return Err(WireError("bad \\DDD escape in name"));
                            }
                            label.push(v as u8);
                            i += 3;
                        }
                        _ => {
                            let e = *bytes
                                .get(i + 1)
                                .ok_or(WireError("name ends with a backslash"))?;
                            label.push(e);
                            i += 1;
                        }
                    }
                }
                _ => label.push(c),
            }
            i += 1;
        }
        push_label(&mut wire, &label)?;
        wire.push(0);
        Name::checked(wire)
    }

    /// A name from its labels, most specific first.
    pub fn from_labels<I, L>(labels: I) -> Result<Name, WireError>
    where
        I: IntoIterator<Item = L>,
        L: AsRef<[u8]>,
    {
        let mut wire = Vec::with_capacity(64);
        for l in labels {
            push_label(&mut wire, l.as_ref())?;
        }
        wire.push(0);
        Name::checked(wire)
    }

    fn checked(wire: Vec<u8>) -> Result<Name, WireError> {
        if wire.len() > 255 {
            return Err(WireError("name longer than 255 bytes"));
        }
        Ok(Name { wire })
    }

    /// The uncompressed wire form.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    pub fn is_root(&self) -> bool {
        self.wire.len() == 1
    }

    /// The labels, most specific first (the root label is not included).
    pub fn labels(&self) -> Labels<'_> {
        Labels {
            wire: &self.wire,
            pos: 0,
        }
    }

    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    /// Equal, ignoring ASCII case (length bytes are below 64, so never letters).
    pub fn eq_ignore_case(&self, other: &Name) -> bool {
        self.wire.eq_ignore_ascii_case(&other.wire)
    }

    pub fn to_lowercase(&self) -> Name {
        Name {
            wire: self.wire.to_ascii_lowercase(),
        }
    }

    /// Whether this name is `zone` or below it (ignoring case).
    pub fn is_within(&self, zone: &Name) -> bool {
        self.zone_offset(zone).is_some()
    }

    /// Where `zone`'s labels start in this name's wire form, if this name is within it.
    fn zone_offset(&self, zone: &Name) -> Option<usize> {
        if zone.wire.len() > self.wire.len() {
            return None;
        }
        let start = self.wire.len() - zone.wire.len();
        let mut pos = 0;
        while pos < start {
            pos += 1 + self.wire[pos] as usize;
        }
        (pos == start && self.wire[start..].eq_ignore_ascii_case(&zone.wire)).then_some(start)
    }

    /// The labels in front of `zone`, most specific first, if this name is within `zone`.
    pub fn labels_before(&self, zone: &Name) -> Option<Vec<&[u8]>> {
        let end = self.zone_offset(zone)?;
        let mut out = Vec::with_capacity(6);
        let mut pos = 0;
        while pos < end {
            let len = self.wire[pos] as usize;
            out.push(&self.wire[pos + 1..pos + 1 + len]);
            pos += 1 + len;
        }
        Some(out)
    }

    /// The last `zone`'s worth of this name, keeping this name's case (for an owner name that
    /// echoes the question's spelling).
    pub fn tail_like(&self, zone: &Name) -> Name {
        match self.zone_offset(zone) {
            Some(start) => Name {
                wire: self.wire[start..].to_vec(),
            },
            None => zone.clone(),
        }
    }

    /// This name with `label` put in front.
    pub fn prepend(&self, label: &[u8]) -> Result<Name, WireError> {
        let mut wire = Vec::with_capacity(self.wire.len() + label.len() + 1);
        push_label(&mut wire, label)?;
        wire.extend_from_slice(&self.wire);
        Name::checked(wire)
    }
}

fn push_label(wire: &mut Vec<u8>, label: &[u8]) -> Result<(), WireError> {
    if label.is_empty() {
        return Err(WireError("empty label in name"));
    }
    if label.len() > 63 {
        return Err(WireError("label longer than 63 bytes"));
    }
    wire.push(label.len() as u8);
    wire.extend_from_slice(label);
    Ok(())
}

/// The labels of a [`Name`].
pub struct Labels<'a> {
    wire: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let len = *self.wire.get(self.pos)? as usize;
        if len == 0 {
            return None;
        }
        let label = self.wire.get(self.pos + 1..self.pos + 1 + len)?;
        self.pos += 1 + len;
        Some(label)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        for label in self.labels() {
            for &b in label {
                match b {
                    b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => {
                        write!(f, "\\{}", b as char)?
                    }
                    0x21..=0x7e => write!(f, "{}", b as char)?,
                    _ => write!(f, "\\{b:03}")?,
                }
            }
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------------------------
// Messages

/// One question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub name: Name,
    pub qtype: u16,
    pub qclass: u16,
}

/// A resource record (OPT is carried in [`Message::edns`] instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub name: Name,
    pub class: u16,
    pub ttl: u32,
    pub data: RData,
}

impl Record {
    /// An Internet-class record.
    pub fn new(name: Name, ttl: u32, data: RData) -> Record {
        Record {
            name,
            class: CLASS_IN,
            ttl,
            data,
        }
    }

    pub fn rtype(&self) -> u16 {
        self.data.rtype()
    }
}

/// Record data: the types a cluster DNS serves or must rewrite, and everything else as opaque
/// bytes (RFC 3597: names inside unknown types are never compressed, so bytes are enough).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(Name),
    Ns(Name),
    Ptr(Name),
    Soa {
        mname: Name,
        rname: Name,
        serial: u32,
        refresh: u32,
        retry: u32,
        expire: u32,
        minimum: u32,
    },
    Mx {
        preference: u16,
        exchange: Name,
    },
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: Name,
    },
    /// Character-strings, each at most 255 bytes.
    Txt(Vec<Vec<u8>>),
    Other {
        rtype: u16,
        data: Vec<u8>,
    },
}

impl RData {
    pub fn rtype(&self) -> u16 {
        match self {
            RData::A(_) => rtype::A,
            RData::Aaaa(_) => rtype::AAAA,
            RData::Cname(_) => rtype::CNAME,
            RData::Ns(_) => rtype::NS,
            RData::Ptr(_) => rtype::PTR,
            RData::Soa { .. } => rtype::SOA,
            RData::Mx { .. } => rtype::MX,
            RData::Srv { .. } => rtype::SRV,
            RData::Txt(_) => rtype::TXT,
            RData::Other { rtype, .. } => *rtype,
        }
    }
}

/// The EDNS(0) pseudo-record of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edns {
    /// The largest UDP payload the sender can take.
    pub udp_size: u16,
    pub version: u8,
    pub dnssec_ok: bool,
    /// Options as (code, data).
    pub options: Vec<(u16, Vec<u8>)>,
}

impl Edns {
    /// EDNS version 0 with this payload size, no options.
    pub fn new(udp_size: u16) -> Edns {
        Edns {
            udp_size,
            version: 0,
            dnssec_ok: false,
            options: Vec::new(),
        }
    }

    fn wire_len(&self) -> usize {
        11 + self.options.iter().map(|(_, d)| 4 + d.len()).sum::<usize>()
    }
}

/// A whole message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pub id: u16,
    pub response: bool,
    pub opcode: u8,
    pub authoritative: bool,
    pub truncated: bool,
    pub recursion_desired: bool,
    pub recursion_available: bool,
    pub authentic_data: bool,
    pub checking_disabled: bool,
    /// The full (12-bit) response code; values above 15 need [`Message::edns`].
    pub rcode: u16,
    pub questions: Vec<Question>,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    pub edns: Option<Edns>,
}

/// The fixed header of a message, readable even when the rest is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
}

impl Header {
    /// The header of `buf`, if it is at least 12 bytes long.
    pub fn peek(buf: &[u8]) -> Option<Header> {
        if buf.len() < 12 {
            return None;
        }
        Some(Header {
            id: u16::from_be_bytes([buf[0], buf[1]]),
            flags: u16::from_be_bytes([buf[2], buf[3]]),
            qdcount: u16::from_be_bytes([buf[4], buf[5]]),
        })
    }

    pub fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xF) as u8
    }

    pub fn recursion_desired(&self) -> bool {
        self.flags & 0x0100 != 0
    }
}

impl Message {
    /// A response to `query`: its id, opcode, RD and CD bits and questions; nothing else.
    pub fn reply_to(query: &Message) -> Message {
        Message {
            id: query.id,
            response: true,
            opcode: query.opcode,
            recursion_desired: query.recursion_desired,
            checking_disabled: query.checking_disabled,
            questions: query.questions.clone(),
            ..Message::default()
        }
    }

    /// A bare error response (no question) to a message whose header alone could be read.
    pub fn error_for_header(header: Header, rcode: u16) -> Message {
        Message {
            id: header.id,
            response: true,
            opcode: header.opcode(),
            recursion_desired: header.recursion_desired(),
            rcode,
            ..Message::default()
        }
    }

    /// Read a message. Never panics; any inconsistency is an error.
    pub fn decode(buf: &[u8]) -> Result<Message, WireError> {
        let h = Header::peek(buf).ok_or(TRUNCATED)?;
        let count = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]) as usize;
        let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
        let flags = h.flags;
        let mut m = Message {
            id: h.id,
            response: flags & 0x8000 != 0,
            opcode: ((flags >> 11) & 0xF) as u8,
            authoritative: flags & 0x0400 != 0,
            truncated: flags & 0x0200 != 0,
            recursion_desired: flags & 0x0100 != 0,
            recursion_available: flags & 0x0080 != 0,
            authentic_data: flags & 0x0020 != 0,
            checking_disabled: flags & 0x0010 != 0,
            rcode: flags & 0xF,
            ..Message::default()
        };
        // Every question takes at least 5 bytes and every record 11: counts that cannot fit
        // are refused before anything is allocated for them.
        let rest = buf.len() - 12;
        if qd * 5 + (an + ns + ar) * 11 > rest {
            return Err(TRUNCATED);
        }
        let mut pos = 12;
        m.questions.reserve(qd);
        for _ in 0..qd {
            let (name, next) = read_name(buf, pos)?;
            let f = buf.get(next..next + 4).ok_or(TRUNCATED)?;
            m.questions.push(Question {
                name,
                qtype: u16::from_be_bytes([f[0], f[1]]),
                qclass: u16::from_be_bytes([f[2], f[3]]),
            });
            pos = next + 4;
        }
        m.answers.reserve(an);
        for _ in 0..an {
            let (r, next) = read_record(buf, pos)?;
            pos = next;
            match r {
                Read::Record(r) => m.answers.push(r),
                Read::Opt(..) => {
                    return Err(WireError("OPT record outside the additional section"))
                }
            }
        }
        m.authority.reserve(ns);
        for _ in 0..ns {
            let (r, next) = read_record(buf, pos)?;
            pos = next;
            match r {
                Read::Record(r) => m.authority.push(r),
                Read::Opt(..) => {
                    return Err(WireError("OPT record outside the additional section"))
                }
            }
        }
        m.additional.reserve(ar);
        for _ in 0..ar {
            let (r, next) = read_record(buf, pos)?;
            pos = next;
            match r {
                Read::Record(r) => m.additional.push(r),
                Read::Opt(edns, ext_rcode) => {
                    if m.edns.is_some() {
                        return Err(WireError("more than one OPT record"));
                    }
                    m.rcode |= (ext_rcode as u16) << 4;
                    m.edns = Some(edns);
                }
            }
        }
        Ok(m)
    }

    /// The message on the wire, at most `limit` bytes long (at least the header and
    /// questions): records that do not fit are left out, whole, and if any answer or authority
    /// record had to go the TC bit is set. The OPT record always stays.
    pub fn encode(&self, limit: usize) -> Vec<u8> {
        let mut e = Encoder::with_capacity(limit.min(512));
        let opt_len = self.edns.as_ref().map_or(0, Edns::wire_len);
        e.buf.extend_from_slice(&[0; 12]);
        for q in &self.questions {
            e.name(&q.name, true);
            e.u16(q.qtype);
            e.u16(q.qclass);
        }
        let mut truncated = self.truncated;
        let mut counts = [0u16; 3];
        'sections: for (i, section) in [&self.answers, &self.authority, &self.additional]
            .into_iter()
            .enumerate()
        {
            for r in section {
                let mark = e.buf.len();
                e.record(r);
                if e.buf.len() + opt_len > limit || counts[i] == u16::MAX {
                    e.rollback(mark);
                    if i < 2 {
                        truncated = true;
                    }
                    break 'sections;
                }
                counts[i] += 1;
            }
        }
        if let Some(edns) = &self.edns {
            e.buf.push(0);
            e.u16(rtype::OPT);
            e.u16(edns.udp_size);
            let ttl = ((self.rcode as u32 >> 4) & 0xFF) << 24
                | (edns.version as u32) << 16
                | if edns.dnssec_ok { 0x8000 } else { 0 };
            e.u32(ttl);
            let len: usize = edns.options.iter().map(|(_, d)| 4 + d.len()).sum();
            e.u16(len as u16);
            for (code, data) in &edns.options {
                e.u16(*code);
                e.u16(data.len() as u16);
                e.buf.extend_from_slice(data);
            }
            counts[2] += 1;
        }
        let b = &mut e.buf;
        b[0..2].copy_from_slice(&self.id.to_be_bytes());
        b[2] = (self.response as u8) << 7
            | (self.opcode & 0xF) << 3
            | (self.authoritative as u8) << 2
            | (truncated as u8) << 1
            | self.recursion_desired as u8;
        b[3] = (self.recursion_available as u8) << 7
            | (self.authentic_data as u8) << 5
            | (self.checking_disabled as u8) << 4
            | (self.rcode & 0xF) as u8;
        b[4..6]
            .copy_from_slice(&(self.questions.len().min(u16::MAX as usize) as u16).to_be_bytes());
        b[6..8].copy_from_slice(&counts[0].to_be_bytes());
        b[8..10].copy_from_slice(&counts[1].to_be_bytes());
        b[10..12].copy_from_slice(&counts[2].to_be_bytes());
        e.buf
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Read a possibly compressed name at `pos`; returns it and the position after it.
/// Compression pointers must point strictly before the place the previous jump started from,
/// so following them always terminates.
fn read_name(msg: &[u8], mut pos: usize) -> Result<(Name, usize), WireError> {
    let mut wire = Vec::with_capacity(32);
    let mut after: Option<usize> = None;
    let mut limit = pos;
    loop {
        let len = *msg.get(pos).ok_or(TRUNCATED)?;
        match len & 0xC0 {
            0x00 => {
                if len == 0 {
                    wire.push(0);
                    return Ok((Name { wire }, after.unwrap_or(pos + 1)));
                }
                let l = len as usize;
                let label = msg.get(pos + 1..pos + 1 + l).ok_or(TRUNCATED)?;
                if wire.len() + 1 + l + 1 > 255 {
                    return Err(WireError("name longer than 255 bytes"));
                }
                wire.push(len);
                wire.extend_from_slice(label);
                pos += 1 + l;
            }
            0xC0 => {
                let low = *msg.get(pos + 1).ok_or(TRUNCATED)?;
                let target = ((len as usize & 0x3F) << 8) | low as usize;
                if after.is_none() {
                    after = Some(pos + 2);
                }
                if target >= limit {
                    return Err(WireError("compression pointer does not point backwards"));
                }
                limit = target;
                pos = target;
            }
            _ => return Err(WireError("unknown label type")),
        }
    }
}

enum Read {
    Record(Record),
    /// The OPT record and the upper 8 bits of the response code it carries.
    Opt(Edns, u8),
}

fn read_record(msg: &[u8], pos: usize) -> Result<(Read, usize), WireError> {
    let (name, p) = read_name(msg, pos)?;
    let f = msg.get(p..p + 10).ok_or(TRUNCATED)?;
    let rtype = u16::from_be_bytes([f[0], f[1]]);
    let class = u16::from_be_bytes([f[2], f[3]]);
    let ttl = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
    let rdlen = u16::from_be_bytes([f[8], f[9]]) as usize;
    let start = p + 10;
    let end = start + rdlen;
    let rd = msg.get(start..end).ok_or(TRUNCATED)?;
    if rtype == rtype::OPT {
        if !name.is_root() {
            return Err(WireError("OPT record not owned by the root"));
        }
        let mut options = Vec::new();
        let mut i = 0;
        while i < rd.len() {
            let h = rd.get(i..i + 4).ok_or(TRUNCATED)?;
            let code = u16::from_be_bytes([h[0], h[1]]);
            let len = u16::from_be_bytes([h[2], h[3]]) as usize;
            let data = rd.get(i + 4..i + 4 + len).ok_or(TRUNCATED)?;
            options.push((code, data.to_vec()));
            i += 4 + len;
        }
        let edns = Edns {
            udp_size: class,
            version: (ttl >> 16) as u8,
            dnssec_ok: ttl & 0x8000 != 0,
            options,
        };
        return Ok((Read::Opt(edns, (ttl >> 24) as u8), end));
    }
    let data = read_rdata(msg, rtype, start, end)?;
    Ok((
        Read::Record(Record {
            name,
            class,
            ttl,
            data,
        }),
        end,
    ))
}

fn read_rdata(msg: &[u8], rtype: u16, start: usize, end: usize) -> Result<RData, WireError> {
    let rd = &msg[start..end];
    // A name inside record data, which must end inside it.
    let name_at = |pos: usize| -> Result<(Name, usize), WireError> {
        let (n, next) = read_name(msg, pos)?;
        if next > end {
            return Err(WireError("name overruns its record"));
        }
        Ok((n, next))
    };
    let exact = |next: usize, data: RData| -> Result<RData, WireError> {
        if next == end {
            Ok(data)
        } else {
            Err(WireError("record data length does not match its contents"))
        }
    };
    let u16_at = |p: usize| -> Result<u16, WireError> {
        let b = msg
            .get(p..p + 2)
            .filter(|_| p + 2 <= end)
            .ok_or(TRUNCATED)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    };
    let u32_at = |p: usize| -> Result<u32, WireError> {
        let b = msg
            .get(p..p + 4)
            .filter(|_| p + 4 <= end)
            .ok_or(TRUNCATED)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    match rtype {
        rtype::A => {
            let b: [u8; 4] = rd
                .try_into()
                .map_err(|_| WireError("A record is not 4 bytes"))?;
            Ok(RData::A(Ipv4Addr::from(b)))
        }
        rtype::AAAA => {
            let b: [u8; 16] = rd
                .try_into()
                .map_err(|_| WireError("AAAA record is not 16 bytes"))?;
            Ok(RData::Aaaa(Ipv6Addr::from(b)))
        }
        rtype::CNAME | rtype::NS | rtype::PTR => {
            let (n, next) = name_at(start)?;
            let data = match rtype {
                rtype::CNAME => RData::Cname(n),
                rtype::NS => RData::Ns(n),
                _ => RData::Ptr(n),
            };
            exact(next, data)
        }
        rtype::SOA => {
            let (mname, p) = name_at(start)?;
            let (rname, p) = name_at(p)?;
            let data = RData::Soa {
                mname,
                rname,
                serial: u32_at(p)?,
                refresh: u32_at(p + 4)?,
                retry: u32_at(p + 8)?,
                expire: u32_at(p + 12)?,
                minimum: u32_at(p + 16)?,
            };
            exact(p + 20, data)
        }
        rtype::MX => {
            let preference = u16_at(start)?;
            let (exchange, next) = name_at(start + 2)?;
            exact(
                next,
                RData::Mx {
                    preference,
                    exchange,
                },
            )
        }
        rtype::SRV => {
            let priority = u16_at(start)?;
            let weight = u16_at(start + 2)?;
            let port = u16_at(start + 4)?;
            let (target, next) = name_at(start + 6)?;
            exact(
                next,
                RData::Srv {
                    priority,
                    weight,
                    port,
                    target,
                },
            )
        }
        rtype::TXT => {
            let mut strings = Vec::new();
            let mut i = 0;
            while i < rd.len() {
                let len = rd[i] as usize;
                let s = rd.get(i + 1..i + 1 + len).ok_or(TRUNCATED)?;
                strings.push(s.to_vec());
                i += 1 + len;
            }
            Ok(RData::Txt(strings))
        }
        _ => Ok(RData::Other {
            rtype,
            data: rd.to_vec(),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

struct Encoder {
    buf: Vec<u8>,
    /// Hash of a lower-cased name suffix → where it was written.
    names: HashMap<u64, u16, BuildHasherDefault<Prehashed>>,
}

impl Encoder {
    fn with_capacity(n: usize) -> Encoder {
        Encoder {
            buf: Vec::with_capacity(n),
            names: HashMap::default(),
        }
    }

    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Forget everything written from `mark` on.
    fn rollback(&mut self, mark: usize) {
        self.buf.truncate(mark);
        self.names.retain(|_, off| (*off as usize) < mark);
    }

    /// Write `name`, as a pointer to an earlier copy of its longest known suffix when
    /// `compress` (RFC 1035 4.1.4); every suffix written in full becomes a pointer target.
    fn name(&mut self, name: &Name, compress: bool) {
        let wire = name.wire();
        // Label offsets, and the hash of each suffix, computed from the end.
        let mut starts = [0usize; 128];
        let mut n = 0;
        let mut p = 0;
        while wire[p] != 0 && n < starts.len() {
            starts[n] = p;
            n += 1;
            p += 1 + wire[p] as usize;
        }
        let mut hashes = [0u64; 128];
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for i in (0..n).rev() {
            let s = starts[i];
            for &b in &wire[s..s + 1 + wire[s] as usize] {
                h ^= b.to_ascii_lowercase() as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            hashes[i] = h;
        }
        for i in 0..n {
            let suffix = &wire[starts[i]..];
            if compress {
                if let Some(&off) = self.names.get(&hashes[i]) {
                    if same_name_at(&self.buf, off as usize, suffix) {
                        self.u16(0xC000 | off);
                        return;
                    }
                }
            }
            let here = self.buf.len();
            if here < 0x3FFF {
                self.names.entry(hashes[i]).or_insert(here as u16);
            }
            let len = wire[starts[i]] as usize;
            self.buf
                .extend_from_slice(&wire[starts[i]..starts[i] + 1 + len]);
        }
        self.buf.push(0);
    }

    fn record(&mut self, r: &Record) {
        self.name(&r.name, true);
        self.u16(r.rtype());
        self.u16(r.class);
        self.u32(r.ttl);
        let len_at = self.buf.len();
        self.u16(0);
        match &r.data {
            RData::A(ip) => self.buf.extend_from_slice(&ip.octets()),
            RData::Aaaa(ip) => self.buf.extend_from_slice(&ip.octets()),
            RData::Cname(n) | RData::Ns(n) | RData::Ptr(n) => self.name(n, true),
            RData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            } => {
                self.name(mname, true);
                self.name(rname, true);
                for v in [serial, refresh, retry, expire, minimum] {
                    self.u32(*v);
                }
            }
            RData::Mx {
                preference,
                exchange,
            } => {
                self.u16(*preference);
                self.name(exchange, true);
            }
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.u16(*priority);
                self.u16(*weight);
                self.u16(*port);
                // RFC 2782: the target is not compressed.
                self.name(target, false);
            }
            RData::Txt(strings) => {
                for s in strings {
                    // A string longer than a character-string can hold goes out in pieces.
                    if s.is_empty() {
                        self.buf.push(0);
                    }
                    for chunk in s.chunks(255) {
                        self.buf.push(chunk.len() as u8);
                        self.buf.extend_from_slice(chunk);
                    }
                }
            }
            RData::Other { data, .. } => self.buf.extend_from_slice(data),
        }
        let len = (self.buf.len() - len_at - 2).min(u16::MAX as usize) as u16;
        self.buf[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    }
}

/// Whether the (possibly compressed) name written at `off` in our own output equals the
/// uncompressed `suffix`, ignoring case.
fn same_name_at(buf: &[u8], mut off: usize, suffix: &[u8]) -> bool {
    let mut i = 0;
    let mut jumps = 0;
    loop {
        let Some(&len) = buf.get(off) else {
            return false;
        };
        if len & 0xC0 == 0xC0 {
            let Some(&low) = buf.get(off + 1) else {
                return false;
            };
            off = ((len as usize & 0x3F) << 8) | low as usize;
            jumps += 1;
            if jumps > 127 {
                return false;
            }
            continue;
        }
        let l = len as usize;
        let (Some(a), Some(b)) = (buf.get(off..off + 1 + l), suffix.get(i..i + 1 + l)) else {
            return false;
        };
        if !a.eq_ignore_ascii_case(b) {
            return false;
        }
        if l == 0 {
            return i + 1 == suffix.len();
        }
        off += 1 + l;
        i += 1 + l;
    }
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn names_parse_and_print() {
        assert_eq!(n("example.com").to_string(), "example.com.");
        assert_eq!(n("example.com.").to_string(), "example.com.");
        assert_eq!(n(".").to_string(), ".");
        assert_eq!(n("a\\.b.c").label_count(), 2);
        assert_eq!(n("a\\.b.c").to_string(), "a\\.b.c.");
        assert_eq!(n("a\\032b").labels().next().unwrap(), b"a b");
        assert!(Name::parse("a..b").is_err());
        assert!(Name::parse(&"x".repeat(64)).is_err());
        let long = vec!["abcdefghi"; 26].join(".");
        assert!(Name::parse(&long).is_err(), "over 255 bytes");
        assert!(n("Web.Default.SVC.cluster.local").is_within(&n("cluster.local")));
        assert!(!n("xcluster.local").is_within(&n("cluster.local")));
        assert!(n("cluster.local").is_within(&n("cluster.local")));
        let name = n("A.b.cluster.LOCAL");
        let before = name.labels_before(&n("cluster.local")).unwrap();
        assert_eq!(before, vec![b"A".as_slice(), b"b".as_slice()]);
        assert_eq!(
            n("x.Cluster.Local")
                .tail_like(&n("cluster.local"))
                .to_string(),
            "Cluster.Local."
        );
        assert!(n("A.B").eq_ignore_case(&n("a.b")));
    }

    fn sample() -> Message {
        let q = n("web.default.svc.cluster.local");
        Message {
            id: 0xBEEF,
            response: true,
            authoritative: true,
            recursion_desired: true,
            questions: vec![Question {
                name: q.clone(),
                qtype: rtype::SRV,
                qclass: CLASS_IN,
            }],
            answers: vec![
                Record::new(
                    q.clone(),
                    30,
                    RData::Srv {
                        priority: 0,
                        weight: 100,
                        port: 80,
                        target: n("web.default.svc.cluster.local"),
                    },
                ),
                Record::new(
                    q.clone(),
                    30,
                    RData::Cname(n("other.default.svc.cluster.local")),
                ),
                Record::new(q.clone(), 30, RData::Txt(vec![b"1.1.0".to_vec(), vec![]])),
                Record::new(
                    q.clone(),
                    30,
                    RData::Mx {
                        preference: 10,
                        exchange: n("mail.example"),
                    },
                ),
                Record::new(
                    n("1.0.96.10.in-addr.arpa"),
                    30,
                    RData::Ptr(n("kubernetes.default.svc.cluster.local")),
                ),
                Record::new(n("ns.example"), 30, RData::Ns(n("ns1.example"))),
                Record::new(
                    n("x.example"),
                    7,
                    RData::Other {
                        rtype: 99,
                        data: vec![1, 2, 3],
                    },
                ),
            ],
            authority: vec![Record::new(
                n("cluster.local"),
                30,
                RData::Soa {
                    mname: n("ns.dns.cluster.local"),
                    rname: n("hostmaster.cluster.local"),
                    serial: 1,
                    refresh: 7200,
                    retry: 1800,
                    expire: 86400,
                    minimum: 30,
                },
            )],
            additional: vec![
                Record::new(q.clone(), 30, RData::A(Ipv4Addr::new(10, 96, 0, 1))),
                Record::new(q, 30, RData::Aaaa("fd00::1".parse().unwrap())),
            ],
            edns: Some(Edns {
                udp_size: 1232,
                version: 0,
                dnssec_ok: true,
                options: vec![(10, vec![1, 2, 3, 4, 5, 6, 7, 8])],
            }),
            ..Message::default()
        }
    }

    #[test]
    fn round_trips_every_type() {
        let m = sample();
        let wire = m.encode(65535);
        let back = Message::decode(&wire).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn compresses_names() {
        let m = sample();
        let wire = m.encode(65535);
        // The question name appears once in full; later owners point at it.
        let needle = b"\x03web\x07default\x03svc\x07cluster\x05local\x00";
        let full = wire.windows(needle.len()).filter(|w| w == needle).count();
        // Once in the question, once more as the (uncompressed) SRV target.
        assert_eq!(full, 2);
        let plain: usize = 12
            + m.questions[0].name.wire().len()
            + 4
            + m.answers
                .iter()
                .chain(&m.additional)
                .map(|r| r.name.wire().len() + 10 + 40)
                .sum::<usize>();
        assert!(wire.len() < plain, "{} >= {plain}", wire.len());
    }

    #[test]
    fn extended_rcode_travels_in_opt() {
        let mut m = sample();
        m.rcode = rcode::BADVERS;
        let back = Message::decode(&m.encode(65535)).unwrap();
        assert_eq!(back.rcode, rcode::BADVERS);
    }

    #[test]
    fn truncates_whole_records_and_sets_tc() {
        let q = n("big.default.svc.cluster.local");
        let mut m = Message {
            id: 1,
            response: true,
            questions: vec![Question {
                name: q.clone(),
                qtype: rtype::A,
                qclass: CLASS_IN,
            }],
            ..Message::default()
        };
        for i in 0..100u8 {
            m.answers.push(Record::new(
                q.clone(),
                30,
                RData::A(Ipv4Addr::new(10, 0, 0, i)),
            ));
        }
        let wire = m.encode(512);
        assert!(wire.len() <= 512);
        let back = Message::decode(&wire).unwrap();
        assert!(back.truncated);
        assert!(!back.answers.is_empty() && back.answers.len() < 100);
        assert_eq!(back.answers[..], m.answers[..back.answers.len()]);

        // Additional records that do not fit are dropped without TC.
        let mut m2 = m.clone();
        m2.additional = std::mem::take(&mut m2.answers);
        m2.answers = vec![Record::new(q, 30, RData::A(Ipv4Addr::new(1, 2, 3, 4)))];
        let back = Message::decode(&m2.encode(512)).unwrap();
        assert!(!back.truncated);
        assert_eq!(back.answers.len(), 1);
        assert!(back.additional.len() < 100);
    }

    #[test]
    fn refuses_pointer_loops_and_forward_pointers() {
        // Header with one question whose name is a pointer to itself.
        let mut buf = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
        assert!(Message::decode(&buf).is_err());
        // A label then a pointer back to that label: a loop.
        let mut buf = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&[1, b'a', 0xC0, 12, 0, 1, 0, 1]);
        assert!(Message::decode(&buf).is_err());
        // A pointer forward.
        let mut buf = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&[0xC0, 14, 0, 0, 1, 0, 1]);
        assert!(Message::decode(&buf).is_err());
        // Reserved label types.
        let mut buf = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&[0x40, 0, 0, 1, 0, 1]);
        assert!(Message::decode(&buf).is_err());
    }

    #[test]
    fn refuses_bad_record_lengths_and_counts() {
        let m = sample();
        let wire = m.encode(65535);
        // Claim 65535 answers.
        let mut w = wire.clone();
        w[6] = 0xFF;
        w[7] = 0xFF;
        assert!(Message::decode(&w).is_err());
        // A records must be 4 bytes.
        let q = n("a.example");
        let a = Message {
            answers: vec![Record::new(
                q,
                1,
                RData::Other {
                    rtype: rtype::A,
                    data: vec![1, 2, 3],
                },
            )],
            ..Message::default()
        };
        assert!(Message::decode(&a.encode(512)).is_err());
        // Two OPT records.
        let mut two = Message {
            edns: Some(Edns::new(1232)),
            ..Message::default()
        }
        .encode(512);
        let opt = two[12..].to_vec();
        two.extend_from_slice(&opt);
        two[11] = 2;
        assert!(Message::decode(&two).is_err());
    }

    /// Random bytes, every truncation of a valid message and random corruptions of it never
    /// panic, and whatever decodes re-encodes and decodes to the same message.
    #[test]
    fn garbage_never_panics() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = sample().encode(65535);
        for cut in 0..valid.len() {
            let _ = Message::decode(&valid[..cut]);
        }
        for _ in 0..20_000 {
            let mut buf = valid.clone();
            for _ in 0..(rnd() % 8 + 1) {
                let i = (rnd() as usize) % buf.len();
                buf[i] = rnd() as u8;
            }
            let cut = (rnd() as usize) % (buf.len() + 1);
            if let Ok(m) = Message::decode(&buf[..cut]) {
                let again = Message::decode(&m.encode(65535)).unwrap();
                assert_eq!(again.questions, m.questions);
                assert_eq!(again.answers, m.answers);
            }
        }
        for _ in 0..20_000 {
            let len = (rnd() % 600) as usize;
            let mut buf: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            if buf.len() >= 12 {
                // Make small counts likely so that decoding gets past the header.
                for i in [4, 6, 8, 10] {
                    buf[i] = 0;
                    buf[i + 1] %= 4;
                }
            }
            let _ = Message::decode(&buf);
        }
    }
}
