//! SHA-256 content addresses.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 digest of a blob's bytes: its address in the store.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hash(pub [u8; 32]);

/// A string that is not 64 hexadecimal digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a SHA-256 digest: expected 64 hexadecimal digits")]
pub struct HashParseError {
    pub input: String,
}

impl Hash {
    pub fn of(data: &[u8]) -> Hash {
        Hash(Sha256::digest(data).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Result<Hash, HashParseError> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).map_err(|_| HashParseError {
            input: text.to_owned(),
        })?;
        Ok(Hash(bytes))
    }
}

impl FromStr for Hash {
    type Err = HashParseError;

    fn from_str(text: &str) -> Result<Hash, HashParseError> {
        Hash::from_hex(text)
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest_round_trips_through_hex() {
        let hash = Hash::of(b"abc");
        let text = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(hash.to_hex(), text);
        assert_eq!(hash.to_string(), text);
        assert_eq!(text.parse::<Hash>().unwrap(), hash);
        assert_eq!(Hash::from_hex(&text.to_uppercase()).unwrap(), hash);
    }

    #[test]
    fn bad_hex_is_an_error() {
        for bad in ["", "abc", &"g".repeat(64), &"a".repeat(66)] {
            let err = Hash::from_hex(bad).unwrap_err();
            assert_eq!(err.input, bad);
        }
    }
}
