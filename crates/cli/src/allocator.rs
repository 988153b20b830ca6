//! glibc's malloc, set for a server that runs for weeks.
//!
//! By default glibc raises its mmap threshold each time a large block is freed (up to
//! 32 MiB), so the compressors' contexts and the bodies that come and go end up inside
//! the heaps, which keep their high-water mark; and it gives up to 8 heaps per core to
//! the threads that allocate (the blocking pool has dozens). Under the soak, `serve
//! --origin`'s live heap levelled off at ~170 MB while its RSS grew past 700 MB in 30
//! minutes, with glibc and with jemalloc alike (docs/benchmarks.md, "Soak"). A fixed
//! threshold gives every block of 128 KiB or more its own mapping, returned when freed,
//! and one heap per core bounds what the rest can hold.

/// Blocks at least this large are mapped on their own (glibc's initial threshold).
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Applies the settings; call before the runtime starts its threads. A setting the
/// operator made in the environment (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_ARENA_MAX`, or
/// any `GLIBC_TUNABLES`) is left as they made it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    let set_by_operator = |name: &str| {
        std::env::var_os(name).is_some() || std::env::var_os("GLIBC_TUNABLES").is_some()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arenas = i32::try_from(cores).unwrap_or(i32::MAX);
    let mut applied = true;
    if !set_by_operator("MALLOC_MMAP_THRESHOLD_") {
        applied &= mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
    if !set_by_operator("MALLOC_ARENA_MAX") {
        applied &= mallopt(libc::M_ARENA_MAX, arenas);
    }
    if !applied {
        eprintln!("wirefold: warning: malloc settings not applied; memory may grow with load");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mallopt(parameter: i32, value: i32) -> bool {
    #[allow(unsafe_code, reason = "FFI: mallopt only sets malloc's parameters")]
    // SAFETY: mallopt takes two integers and touches nothing of ours; it may be called
    // at any time, here before any thread but this one exists.
    let status = unsafe { libc::mallopt(parameter, value) };
    status == 1
}

/// Other allocators and platforms keep their own behaviour.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
