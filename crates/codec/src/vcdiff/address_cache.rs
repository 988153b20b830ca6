//! RFC 3284 §5.3 address caches (default s_near = 4, s_same = 3), shared by both directions.

use super::error::VcdiffError;
use super::varint::{varint_len, Reader};

const NEAR_SIZE: usize = 4;
const SAME_SIZE: usize = 3;
const SAME_ENTRIES: usize = SAME_SIZE * 256;
const MODE_SELF: u8 = 0;
const MODE_HERE: u8 = 1;
const FIRST_NEAR_MODE: u8 = 2;
const FIRST_SAME_MODE: u8 = FIRST_NEAR_MODE + NEAR_SIZE as u8;

/// How one COPY address is written: its mode, and either a varint or (SAME modes) one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EncodedAddress {
    pub mode: u8,
    pub value: u64,
}

impl EncodedAddress {
    pub(crate) fn is_same_mode(&self) -> bool {
        self.mode >= FIRST_SAME_MODE
    }

    /// Bytes this address occupies in the address section.
    pub(crate) fn cost(&self) -> usize {
        if self.is_same_mode() {
            1
        } else {
            varint_len(self.value)
        }
    }
}

/// Both caches; reset at the start of every window.
pub(crate) struct AddressCache {
    near: [u64; NEAR_SIZE],
    next_near: usize,
    same: Box<[u64; SAME_ENTRIES]>,
}

impl AddressCache {
    pub(crate) fn new() -> Self {
        Self {
            near: [0; NEAR_SIZE],
            next_near: 0,
            same: Box::new([0; SAME_ENTRIES]),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.near = [0; NEAR_SIZE];
        self.next_near = 0;
        self.same.fill(0);
    }

    fn update(&mut self, address: u64) {
        self.near[self.next_near] = address;
        self.next_near = (self.next_near + 1) % NEAR_SIZE;
        self.same[(address % SAME_ENTRIES as u64) as usize] = address;
    }

    /// The cheapest encoding of `address` at position `here`, without changing the cache.
    pub(crate) fn best_encoding(&self, address: u64, here: u64) -> EncodedAddress {
        let slot = (address % SAME_ENTRIES as u64) as usize;
        if self.same[slot] == address {
            return EncodedAddress {
                mode: FIRST_SAME_MODE + (slot / 256) as u8,
                value: (slot % 256) as u64,
            };
        }
        let mut best = EncodedAddress {
            mode: MODE_SELF,
            value: address,
        };
        let mut consider = |mode: u8, value: u64| {
            if varint_len(value) < varint_len(best.value) {
                best = EncodedAddress { mode, value };
            }
        };
        consider(MODE_HERE, here - address);
        for (i, &near) in self.near.iter().enumerate() {
            if address >= near {
                consider(FIRST_NEAR_MODE + i as u8, address - near);
            }
        }
        best
    }

    /// Encodes `address` (which must be below `here`) into `out`, updating the cache.
    pub(crate) fn encode(&mut self, address: u64, here: u64, out: &mut Vec<u8>) -> EncodedAddress {
        let encoded = self.best_encoding(address, here);
        if encoded.is_same_mode() {
            out.push(encoded.value as u8);
        } else {
            super::varint::write_varint(out, encoded.value);
        }
        self.update(address);
        encoded
    }

    /// Decodes one address in `mode` from the address section, checking it precedes `here`.
    pub(crate) fn decode(
        &mut self,
        mode: u8,
        here: u64,
        addresses: &mut Reader,
    ) -> Result<u64, VcdiffError> {
        let address = match mode {
            MODE_SELF => addresses.varint()?,
            MODE_HERE => {
                let back = addresses.varint()?;
                here.checked_sub(back)
                    .ok_or(VcdiffError::AddressOutOfRange {
                        address: back,
                        here,
                    })?
            }
            m if m < FIRST_SAME_MODE => {
                let offset = addresses.varint()?;
                self.near[(m - FIRST_NEAR_MODE) as usize]
                    .checked_add(offset)
                    .ok_or(VcdiffError::AddressOutOfRange {
                        address: u64::MAX,
                        here,
                    })?
            }
            m if m < FIRST_SAME_MODE + SAME_SIZE as u8 => {
                let byte = addresses.byte()? as usize;
                self.same[(m - FIRST_SAME_MODE) as usize * 256 + byte]
            }
            _ => return Err(VcdiffError::BadInstruction("address mode out of range")),
        };
        if address >= here {
            return Err(VcdiffError::AddressOutOfRange { address, here });
        }
        self.update(address);
        Ok(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoder_and_decoder_caches_stay_in_step() {
        let copies = [
            (100u64, 500u64),
            (104, 520),
            (100, 530),
            (3, 600),
            (10_000, 20_000),
            (100, 20_010),
            (9_990, 20_020),
        ];
        let mut enc = AddressCache::new();
        let mut bytes = Vec::new();
        let modes: Vec<u8> = copies
            .iter()
            .map(|&(a, h)| enc.encode(a, h, &mut bytes).mode)
            .collect();
        assert!(
            modes.iter().any(|&m| m >= FIRST_SAME_MODE),
            "a repeated address uses SAME: {modes:?}"
        );
        let mut dec = AddressCache::new();
        let mut r = Reader::new(&bytes, "addresses");
        for (&(a, h), &m) in copies.iter().zip(&modes) {
            assert_eq!(dec.decode(m, h, &mut r).unwrap(), a);
        }
        assert!(r.is_empty());
    }

    #[test]
    fn rejects_addresses_at_or_after_here() {
        let mut dec = AddressCache::new();
        let mut r = Reader::new(&[10], "addresses");
        assert!(matches!(
            dec.decode(MODE_SELF, 10, &mut r),
            Err(VcdiffError::AddressOutOfRange { .. })
        ));
        let mut r = Reader::new(&[11], "addresses");
        assert!(matches!(
            dec.decode(MODE_HERE, 10, &mut r),
            Err(VcdiffError::AddressOutOfRange { .. })
        ));
    }
}
