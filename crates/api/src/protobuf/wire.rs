//! Protobuf wire-format primitives over a byte slice. Every read is bounds-checked; nothing here
//! panics or allocates.

use super::ProtoError;

pub(super) const VARINT: u8 = 0;
pub(super) const FIXED64: u8 = 1;
pub(super) const LEN: u8 = 2;
pub(super) const START_GROUP: u8 = 3;
pub(super) const END_GROUP: u8 = 4;
pub(super) const FIXED32: u8 = 5;

/// Groups nest; skipping one is bounded like message nesting.
const MAX_GROUP_DEPTH: usize = 100;

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(ProtoError::Truncated);
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(ProtoError::VarintOverflow);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(ProtoError::VarintOverflow)
    }

    /// The next field's (number, wire type).
    pub(super) fn tag(&mut self) -> Result<(u32, u8), ProtoError> {
        let tag = self.varint()?;
        let wire = (tag & 7) as u8;
        let number = tag >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(ProtoError::InvalidFieldNumber(number));
        }
        if wire > 5 {
            return Err(ProtoError::InvalidWireType(wire));
        }
        Ok((number as u32, wire))
    }

    pub(super) fn fixed32(&mut self) -> Result<u32, ProtoError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn fixed64(&mut self) -> Result<u64, ProtoError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-delimited payload.
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| ProtoError::Truncated)?;
        self.take(len)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self.pos.checked_add(n).ok_or(ProtoError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(ProtoError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// Skips the value of a field of the given wire type (an unknown field).
    pub(super) fn skip(&mut self, number: u32, wire: u8) -> Result<(), ProtoError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.bytes().map(drop),
            FIXED32 => self.take(4).map(drop),
            START_GROUP => {
                // Iterative: a stack of open group numbers.
                let mut open = [0u32; MAX_GROUP_DEPTH];
                let mut depth = 1;
                open[0] = number;
                while depth > 0 {
                    let (n, w) = self.tag()?;
                    match w {
                        START_GROUP => {
                            if depth == MAX_GROUP_DEPTH {
                                return Err(ProtoError::TooDeep);
                            }
                            open[depth] = n;
                            depth += 1;
                        }
                        END_GROUP => {
                            if open[depth - 1] != n {
                                return Err(ProtoError::UnbalancedGroup);
                            }
                            depth -= 1;
                        }
                        _ => self.skip(n, w)?,
                    }
                }
                Ok(())
            }
            _ => Err(ProtoError::UnbalancedGroup),
        }
    }
}
