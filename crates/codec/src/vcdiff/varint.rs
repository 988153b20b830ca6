//! RFC 3284 §2 integers (base 128, most significant digit first) and a bounds-checked reader.

use super::error::VcdiffError;

/// A `u64` needs at most 10 base-128 digits; anything longer is malformed.
const MAX_VARINT_BYTES: usize = 10;

/// Appends `value` as an RFC 3284 integer.
pub(crate) fn write_varint(out: &mut Vec<u8>, value: u64) {
    let len = varint_len(value);
    for i in (0..len).rev() {
        let digit = ((value >> (7 * i)) & 0x7f) as u8;
        out.push(if i == 0 { digit } else { digit | 0x80 });
    }
}

/// The number of bytes `write_varint` uses for `value`.
pub(crate) fn varint_len(value: u64) -> usize {
    let bits = 64 - value.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// A cursor over one section of a delta. Running off its end is `Truncated`, so callers that
/// read from a partially received stream can tell "need more input" from malformed input.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Names the section in `Truncated` errors.
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self {
            bytes,
            pos: 0,
            what,
        }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn truncated(&self) -> VcdiffError {
        VcdiffError::Truncated { what: self.what }
    }

    pub(crate) fn byte(&mut self) -> Result<u8, VcdiffError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.truncated())?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], VcdiffError> {
        if len > self.remaining() {
            return Err(self.truncated());
        }
        let slice = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }

    pub(crate) fn varint(&mut self) -> Result<u64, VcdiffError> {
        let mut value: u64 = 0;
        for _ in 0..MAX_VARINT_BYTES {
            let b = self.byte()?;
            if value >> 57 != 0 {
                return Err(VcdiffError::BadInteger { what: self.what });
            }
            value = (value << 7) | u64::from(b & 0x7f);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(VcdiffError::BadInteger { what: self.what })
    }

    /// An integer that must fit in memory-sized arithmetic.
    pub(crate) fn size(&mut self) -> Result<usize, VcdiffError> {
        let value = self.varint()?;
        usize::try_from(value).map_err(|_| VcdiffError::BadInteger { what: self.what })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_examples() {
        let mut out = Vec::new();
        write_varint(&mut out, 123_456_789);
        assert_eq!(out, [0xBA, 0xEF, 0x9A, 0x15]);
        out.clear();
        write_varint(&mut out, 60_000);
        assert_eq!(out, [0x83, 0xD4, 0x60]);
        assert_eq!(Reader::new(&out, "t").varint().unwrap(), 60_000);
    }

    #[test]
    fn round_trips_and_lengths() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out, "t");
            assert_eq!(r.varint().unwrap(), v);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn rejects_overlong_and_overflowing() {
        assert!(matches!(
            Reader::new(&[0x80; 11], "t").varint(),
            Err(VcdiffError::BadInteger { .. })
        ));
        // 2^64 does not fit.
        let mut too_big = vec![0x82];
        too_big.extend([0x80; 8]);
        too_big.push(0x00);
        assert!(matches!(
            Reader::new(&too_big, "t").varint(),
            Err(VcdiffError::BadInteger { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x81], "t").varint(),
            Err(VcdiffError::Truncated { .. })
        ));
    }
}
