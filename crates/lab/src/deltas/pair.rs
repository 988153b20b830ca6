//! Measuring one version pair: every method's body size, every body decoded back and
//! compared with the new version, and the timed codecs' CPU times.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::external::{self, ChildTime, Startup, Tool};
use super::method::{DeltaMethod, Peer};
use crate::timing::{median_cpu_time, Repeats};
use crate::LabError;

/// Where and how pairs are measured.
pub struct Bench<'a> {
    pub xdelta3: &'a Tool,
    pub zstd: &'a Tool,
    pub runs: u32,
    /// Scratch folder for the peers' files.
    pub work: &'a Path,
}

/// Encode and decode time of one codec on one pair.
#[derive(Clone, Copy, Debug, Default)]
pub struct OurTime {
    pub encode: Duration,
    pub decode: Duration,
}

#[derive(Clone, Copy, Debug)]
pub struct PeerTime {
    pub encode: ChildTime,
    pub decode: ChildTime,
}

/// Everything measured on one pair.
pub struct PairMeasurement {
    /// Body size per method ([`DeltaMethod::index`]); `None` when not measured.
    pub bytes: [Option<u64>; DeltaMethod::ALL.len()],
    /// The bodies themselves, when asked to keep them.
    pub bodies: Vec<(DeltaMethod, Vec<u8>)>,
    pub vcdiff: OurTime,
    pub dcz: OurTime,
    pub xdelta3: Option<PeerTime>,
    pub zstd_patch: Option<PeerTime>,
    /// Peer failures on this pair: (method, message). Their columns stay `None`.
    pub failures: Vec<(DeltaMethod, String)>,
}

impl Bench<'_> {
    fn repeats(&self) -> Repeats {
        Repeats {
            max_runs: self.runs,
            budget: Duration::MAX,
        }
    }

    pub fn measure(
        &self,
        old_path: &Path,
        new_path: &Path,
        old: &[u8],
        new: &[u8],
        keep_bodies: bool,
    ) -> Result<PairMeasurement, LabError> {
        let mut m = PairMeasurement {
            bytes: [None; DeltaMethod::ALL.len()],
            bodies: Vec::new(),
            vcdiff: OurTime::default(),
            dcz: OurTime::default(),
            xdelta3: None,
            zstd_patch: None,
            failures: Vec::new(),
        };
        let round_trip = |method: DeltaMethod| LabError::RoundTrip {
            setting: method.name().to_string(),
            path: new_path.to_path_buf(),
        };
        let record = |m: &mut PairMeasurement, method: DeltaMethod, body: Vec<u8>| {
            m.bytes[method.index()] = Some(body.len() as u64);
            if keep_bodies {
                m.bodies.push((method, body));
            }
        };

        m.bytes[DeltaMethod::Identity.index()] = Some(new.len() as u64);
        let compressions = DeltaMethod::ALL
            .into_iter()
            .filter_map(|method| Some((method, method.compression()?)));
        for (method, (coding, level)) in compressions {
            let body = codec::compress(coding, level, new);
            if codec::decompress(coding, &body, new.len()).ok().as_deref() != Some(new) {
                return Err(round_trip(method));
            }
            record(&mut m, method, body);
        }
        let dictionaries = DeltaMethod::ALL
            .into_iter()
            .filter_map(|method| Some((method, method.dictionary()?)));
        for (method, (coding, level)) in dictionaries {
            let repeats = if method == DeltaMethod::Dcz {
                self.repeats()
            } else {
                // dcb is measured for size only: one run.
                Repeats {
                    max_runs: 1,
                    budget: Duration::MAX,
                }
            };
            let (body, encode) = median_cpu_time(repeats, || {
                codec::dictionary::encode(coding, level, old, new)
            });
            let (decoded, decode) = median_cpu_time(repeats, || {
                codec::dictionary::decode(coding, old, &body, new.len())
            });
            if decoded.ok().as_deref() != Some(new) {
                return Err(round_trip(method));
            }
            if method == DeltaMethod::Dcz {
                m.dcz = OurTime { encode, decode };
            }
            record(&mut m, method, body);
        }
        let (delta, encode) = median_cpu_time(self.repeats(), || codec::vcdiff::encode(old, new));
        let (decoded, decode) = median_cpu_time(self.repeats(), || {
            codec::vcdiff::decode(old, &delta, new.len())
        });
        if decoded.ok().as_deref() != Some(new) {
            return Err(round_trip(DeltaMethod::Vcdiff));
        }
        m.vcdiff = OurTime { encode, decode };
        record(&mut m, DeltaMethod::Vcdiff, delta);

        let peers = DeltaMethod::ALL
            .into_iter()
            .filter_map(|method| Some((method, method.peer()?)));
        for (method, peer) in peers {
            let tool = match peer {
                Peer::Xdelta3 => self.xdelta3,
                Peer::Zstd => self.zstd,
            };
            if !tool.available() {
                continue;
            }
            // Only the like-for-like xdelta3 run and zstd are timed; xdelta3's defaults
            // are there for size.
            let runs = if method == DeltaMethod::Xdelta3Default {
                1
            } else {
                self.runs
            };
            match self.peer_pair(tool, method, old_path, new_path, new, runs) {
                Ok((body, time)) => {
                    match method {
                        DeltaMethod::Xdelta3 => m.xdelta3 = Some(time),
                        DeltaMethod::ZstdPatch => m.zstd_patch = Some(time),
                        _ => {}
                    }
                    record(&mut m, method, body);
                }
                Err(e) => m.failures.push((method, e)),
            }
        }
        Ok(m)
    }

    /// Encodes with the peer, decodes its output with the peer, checks the result.
    fn peer_pair(
        &self,
        tool: &Tool,
        method: DeltaMethod,
        old: &Path,
        new_path: &Path,
        new: &[u8],
        runs: u32,
    ) -> Result<(Vec<u8>, PeerTime), String> {
        let delta = self.work.join(format!("{}.delta", method.name()));
        let decoded = self.work.join(format!("{}.decoded", method.name()));
        let stderr = self.work.join("stderr");
        let (enc_args, dec_args) = peer_commands(method, old, new_path, &delta, &decoded);
        let enc_args: Vec<&OsStr> = enc_args.iter().map(|a| a.as_os_str()).collect();
        let dec_args: Vec<&OsStr> = dec_args.iter().map(|a| a.as_os_str()).collect();
        let encode = external::run_repeated(&tool.program, &enc_args, &stderr, runs)?;
        let body = std::fs::read(&delta).map_err(|e| format!("{}: {e}", delta.display()))?;
        let decode = external::run_repeated(&tool.program, &dec_args, &stderr, runs)?;
        let back = std::fs::read(&decoded).map_err(|e| format!("{}: {e}", decoded.display()))?;
        if back != new {
            return Err(format!(
                "{}'s delta did not decode back to {}",
                tool.name,
                new_path.display()
            ));
        }
        Ok((body, PeerTime { encode, decode }))
    }
}

/// The encode and decode argument lists of a peer method.
pub fn peer_commands(
    method: DeltaMethod,
    old: &Path,
    new: &Path,
    delta: &Path,
    decoded: &Path,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let s = |x: &str| PathBuf::from(x);
    let p = |x: &Path| x.to_path_buf();
    let patch_from = |x: &Path| {
        let mut arg = std::ffi::OsString::from("--patch-from=");
        arg.push(x);
        PathBuf::from(arg)
    };
    match method {
        DeltaMethod::Xdelta3 => (
            vec![
                s("-e"),
                s("-9"),
                s("-S"),
                s("none"),
                s("-A"),
                s("-n"),
                s("-f"),
                s("-s"),
                p(old),
                p(new),
                p(delta),
            ],
            vec![s("-d"), s("-f"), s("-s"), p(old), p(delta), p(decoded)],
        ),
        DeltaMethod::Xdelta3Default => (
            vec![s("-e"), s("-9"), s("-f"), s("-s"), p(old), p(new), p(delta)],
            vec![s("-d"), s("-f"), s("-s"), p(old), p(delta), p(decoded)],
        ),
        DeltaMethod::ZstdPatch => (
            vec![
                s("-19"),
                s("--long=27"),
                s("-q"),
                s("-f"),
                patch_from(old),
                p(new),
                s("-o"),
                p(delta),
            ],
            vec![
                s("-d"),
                s("--long=27"),
                s("-q"),
                s("-f"),
                patch_from(old),
                p(delta),
                s("-o"),
                p(decoded),
            ],
        ),
        _ => unreachable!("{method:?} is not a peer method"),
    }
}

/// The peer's CPU time for encoding a one-byte file against another and decoding the
/// result: process start, dynamic linking and fixed buffer setup, which every timed run
/// includes.
pub fn startup_time(tool: &Tool, method: DeltaMethod, work: &Path, runs: u32) -> Option<Startup> {
    let old = work.join("startup.old");
    let new = work.join("startup.new");
    std::fs::write(&old, b"a").ok()?;
    std::fs::write(&new, b"b").ok()?;
    let (enc, dec) = peer_commands(
        method,
        &old,
        &new,
        &work.join("startup.delta"),
        &work.join("startup.decoded"),
    );
    let time = |args: &[PathBuf]| {
        let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        external::run_repeated(&tool.program, &args, &work.join("stderr"), runs)
            .ok()
            .map(|t| t.cpu)
    };
    Some(Startup {
        encode: time(&enc)?,
        decode: time(&dec)?,
    })
}
