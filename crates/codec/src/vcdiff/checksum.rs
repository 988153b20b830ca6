//! Adler-32 (RFC 1950 §8.2), which xdelta3 stores per window under its `VCD_ADLER32` extension.

const MOD_ADLER: u32 = 65_521;
/// Largest run of bytes whose sums cannot overflow a `u32` before reduction (zlib's NMAX).
const NMAX: usize = 5_552;

pub(crate) fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(NMAX) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD_ADLER;
        b %= MOD_ADLER;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_known_values() {
        assert_eq!(super::adler32(b""), 1);
        assert_eq!(super::adler32(b"Wikipedia"), 0x11E6_0398);
        // From an `xdelta3 printhdr` of a real delta.
        assert_eq!(
            super::adler32(b"hello there world hello world!!!\n"),
            0xD2E8_0B7E
        );
    }
}
