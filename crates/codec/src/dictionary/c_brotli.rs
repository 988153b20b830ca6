//! A small safe wrapper over Google's C brotli encoder (vendored by `brotlic-sys`)
//! with a raw prefix dictionary attached as a compound dictionary: unlike the
//! pure-Rust port, it reaches every byte of the dictionary, whatever the window.

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use brotlic_sys as sys;

/// A raw dictionary hashed for the encoder. The C side keeps a pointer to the
/// dictionary's bytes (it does not copy them), hence the borrow.
struct PreparedDictionary<'d> {
    raw: NonNull<sys::BrotliEncoderPreparedDictionary>,
    _bytes: PhantomData<&'d [u8]>,
}

impl<'d> PreparedDictionary<'d> {
    /// `None` if the C side could not allocate.
    fn new(dictionary: &'d [u8], quality: u32) -> Option<Self> {
        // SAFETY: pointer and length describe a live slice that the borrow keeps alive
        // as long as `Self`; null allocator functions select malloc/free.
        let raw = unsafe {
            sys::BrotliEncoderPrepareDictionary(
                sys::BrotliSharedDictionaryType_BROTLI_SHARED_DICTIONARY_RAW,
                dictionary.len(),
                dictionary.as_ptr(),
                quality as i32,
                None,
                None,
                ptr::null_mut(),
            )
        };
        NonNull::new(raw).map(|raw| PreparedDictionary {
            raw,
            _bytes: PhantomData,
        })
    }
}

impl Drop for PreparedDictionary<'_> {
    fn drop(&mut self) {
        // SAFETY: created by BrotliEncoderPrepareDictionary, destroyed once; every
        // encoder it was attached to is dropped first (see `compress`).
        unsafe { sys::BrotliEncoderDestroyPreparedDictionary(self.raw.as_ptr()) }
    }
}

struct EncoderState(NonNull<sys::BrotliEncoderState>);

impl EncoderState {
    fn new() -> Option<Self> {
        // SAFETY: null allocator functions select malloc/free.
        let raw = unsafe { sys::BrotliEncoderCreateInstance(None, None, ptr::null_mut()) };
        NonNull::new(raw).map(EncoderState)
    }

    fn set(&mut self, parameter: sys::BrotliEncoderParameter, value: u32) -> bool {
        // SAFETY: a live encoder that has not started yet.
        unsafe { sys::BrotliEncoderSetParameter(self.0.as_ptr(), parameter, value) != 0 }
    }
}

impl Drop for EncoderState {
    fn drop(&mut self) {
        // SAFETY: created by BrotliEncoderCreateInstance, destroyed once.
        unsafe { sys::BrotliEncoderDestroyInstance(self.0.as_ptr()) }
    }
}

/// Appends a brotli stream of `data` that may refer back into all of
/// `dictionary`. `None` if the C encoder failed (it only fails to allocate).
pub(super) fn compress(
    quality: u32,
    lgwin: u32,
    dictionary: &[u8],
    data: &[u8],
    out: &mut Vec<u8>,
) -> Option<()> {
    // Declared before the encoder, so dropped after it.
    let prepared = if dictionary.is_empty() {
        None
    } else {
        Some(PreparedDictionary::new(dictionary, quality)?)
    };
    let mut encoder = EncoderState::new()?;
    let size_hint = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let configured = encoder.set(sys::BrotliEncoderParameter_BROTLI_PARAM_QUALITY, quality)
        && encoder.set(sys::BrotliEncoderParameter_BROTLI_PARAM_LGWIN, lgwin)
        && encoder.set(
            sys::BrotliEncoderParameter_BROTLI_PARAM_SIZE_HINT,
            size_hint,
        );
    if !configured {
        return None;
    }
    if let Some(prepared) = &prepared {
        // SAFETY: both live; `prepared` outlives `encoder` (declared first).
        let attached = unsafe {
            sys::BrotliEncoderAttachPreparedDictionary(encoder.0.as_ptr(), prepared.raw.as_ptr())
        };
        if attached == 0 {
            return None;
        }
    }
    let mut next_in = data.as_ptr();
    let mut available_in = data.len();
    loop {
        let mut available_out = 0;
        // SAFETY: next_in/available_in always describe the unread tail of `data`;
        // with no output buffer (available_out 0, next_out null) the encoder keeps
        // its output internally for BrotliEncoderTakeOutput.
        let ok = unsafe {
            sys::BrotliEncoderCompressStream(
                encoder.0.as_ptr(),
                sys::BrotliEncoderOperation_BROTLI_OPERATION_FINISH,
                &mut available_in,
                &mut next_in,
                &mut available_out,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if ok == 0 {
            return None;
        }
        // SAFETY: the returned pointer is valid for `taken` bytes until the next
        // call on the encoder; we copy them out at once.
        unsafe {
            let mut taken = 0;
            let output = sys::BrotliEncoderTakeOutput(encoder.0.as_ptr(), &mut taken);
            if taken > 0 {
                if output.is_null() {
                    return None;
                }
                out.extend_from_slice(std::slice::from_raw_parts(output, taken));
            }
            if sys::BrotliEncoderIsFinished(encoder.0.as_ptr()) != 0 {
                return Some(());
            }
        }
    }
}
