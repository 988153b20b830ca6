//! What a pair's new version can be sent as: plain, compressed, or as a delta against
//! the old version, by wirefold's codecs at the levels the server uses or by a peer tool.

use codec::dictionary::DictionaryCoding;
use wirefold_http::ContentCoding;

/// Levels the server uses. Compression: the `cached` levels of the proxy's encode stage
/// (gzip 9, br 11, zstd 19); the lab's gzip column is the common `gzip -6` instead.
/// Dictionary codings: the levels the proxy produces in the background and keeps
/// (`dictionary_levels` in `crates/delta/src/lib.rs`: dcz 19, dcb 11).
pub const GZIP_LEVEL: u32 = 6;
pub const BR_LEVEL: u32 = 11;
pub const ZSTD_LEVEL: u32 = 19;
pub const DCB_LEVEL: u32 = 11;
pub const DCZ_LEVEL: u32 = 19;

/// A way to send the new version of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeltaMethod {
    Identity,
    Gzip,
    Br,
    Zstd,
    Dcb,
    Dcz,
    Vcdiff,
    /// `xdelta3 -e -9 -S none -A -n`: plain VCDIFF like ours.
    Xdelta3,
    /// `xdelta3 -e -9` with its defaults (secondary compression, header, checksum).
    Xdelta3Default,
    /// `zstd -19 --long=27 --patch-from=OLD`.
    ZstdPatch,
}

/// Peer tools the lab runs as child processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Xdelta3,
    Zstd,
}

impl DeltaMethod {
    pub const ALL: [DeltaMethod; 10] = [
        DeltaMethod::Identity,
        DeltaMethod::Gzip,
        DeltaMethod::Br,
        DeltaMethod::Zstd,
        DeltaMethod::Dcb,
        DeltaMethod::Dcz,
        DeltaMethod::Vcdiff,
        DeltaMethod::Xdelta3,
        DeltaMethod::Xdelta3Default,
        DeltaMethod::ZstdPatch,
    ];

    /// The position in [`Self::ALL`], which lists the methods in declaration order.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The column and JSON key.
    pub fn name(self) -> &'static str {
        match self {
            DeltaMethod::Identity => "identity",
            DeltaMethod::Gzip => "gzip_6",
            DeltaMethod::Br => "br_11",
            DeltaMethod::Zstd => "zstd_19",
            DeltaMethod::Dcb => "dcb_11",
            DeltaMethod::Dcz => "dcz_19",
            DeltaMethod::Vcdiff => "vcdiff",
            DeltaMethod::Xdelta3 => "xdelta3_9",
            DeltaMethod::Xdelta3Default => "xdelta3_9_default",
            DeltaMethod::ZstdPatch => "zstd_19_patch_from",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            DeltaMethod::Identity => "the new version as is",
            DeltaMethod::Gzip => "codec::compress gzip level 6 (zlib-rs)",
            DeltaMethod::Br => "codec::compress br level 11 (what wirefold serves cached)",
            DeltaMethod::Zstd => "codec::compress zstd level 19 (what wirefold serves cached)",
            DeltaMethod::Dcb => {
                "codec::dictionary::encode dcb level 11, old version as dictionary (RFC 9842 body: 36-byte header + brotli stream)"
            }
            DeltaMethod::Dcz => {
                "codec::dictionary::encode dcz level 19, old version as dictionary (RFC 9842 body: 40-byte header + zstd frame)"
            }
            DeltaMethod::Vcdiff => "codec::vcdiff::encode, default options (RFC 3284, no secondary compression)",
            DeltaMethod::Xdelta3 => "xdelta3 -e -9 -S none -A -n -s OLD NEW (plain VCDIFF, as ours)",
            DeltaMethod::Xdelta3Default => "xdelta3 -e -9 -s OLD NEW (its defaults, for reference)",
            DeltaMethod::ZstdPatch => "zstd -19 --long=27 --patch-from=OLD NEW",
        }
    }

    pub fn peer(self) -> Option<Peer> {
        match self {
            DeltaMethod::Xdelta3 | DeltaMethod::Xdelta3Default => Some(Peer::Xdelta3),
            DeltaMethod::ZstdPatch => Some(Peer::Zstd),
            _ => None,
        }
    }

    /// The compression coding and level of the plain-compression columns.
    pub fn compression(self) -> Option<(ContentCoding, u32)> {
        match self {
            DeltaMethod::Gzip => Some((ContentCoding::Gzip, GZIP_LEVEL)),
            DeltaMethod::Br => Some((ContentCoding::Br, BR_LEVEL)),
            DeltaMethod::Zstd => Some((ContentCoding::Zstd, ZSTD_LEVEL)),
            _ => None,
        }
    }

    /// The dictionary coding and level of the RFC 9842 columns.
    pub fn dictionary(self) -> Option<(DictionaryCoding, u32)> {
        match self {
            DeltaMethod::Dcb => Some((DictionaryCoding::Dcb, DCB_LEVEL)),
            DeltaMethod::Dcz => Some((DictionaryCoding::Dcz, DCZ_LEVEL)),
            _ => None,
        }
    }
}

#[test]
fn all_lists_the_methods_in_declaration_order() {
    let indexes = DeltaMethod::ALL.map(DeltaMethod::index);
    assert!(indexes.into_iter().eq(0..DeltaMethod::ALL.len()));
}
