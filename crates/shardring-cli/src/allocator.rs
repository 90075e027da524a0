//! The process's memory allocator: jemalloc, with purging tuned so that memory goes back to the
//! system soon after clients leave.
//!
//! Chosen for the proxy's memory per client connection (BENCHMARKS.md, "proxy: memory per client
//! connection", where glibc's malloc and mimalloc were measured beside it). Each client connection
//! costs two allocations aligned to 128 bytes (tokio's task and its socket's registration): glibc's
//! `memalign` pads each, which put an idle client over 1 KB; jemalloc serves them from its size
//! classes exactly. And glibc keeps the memory of clients that left (its free chunks sit between live
//! ones); jemalloc purges unused pages, which the proxy asks it to do
//! every half second ([`return_memory_while_idle`]).

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once when it starts (the `_rjem_` prefix is tikv-jemalloc-sys's): a page
/// left unused is purged after about a second (the default, ten seconds and then ten more as "muzzy"
/// pages, kept the memory of a burst of clients resident long after it ended).
// SAFETY: jemalloc declares this symbol `const char *` (a weak definition that this one replaces)
// and reads it once, at its initialisation, as a NUL-terminated string it never writes; it points to
// a 'static constant that ends in NUL.
#[allow(unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 37] = b"dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// How often the proxy asks jemalloc to purge: with [`MALLOC_CONF`]'s one-second decay, memory that
/// clients left is back with the system within about 1.5 s.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Returns to the system, every [`PURGE_EVERY`], the pages that have been unused for longer than the
/// decay time; runs until dropped (spawn it on the proxy's control runtime).
///
/// Without it jemalloc purges only as a thread allocates or frees, so the memory of a burst of
/// clients that left stays resident while the proxy idles. jemalloc's own answer, its background
/// thread, makes the process multi-threaded, and glibc then takes its slower, cancellable path on
/// every system call, a cost on every request with one worker (BENCHMARKS.md, "proxy:
/// memory per client connection"). A timer on a thread the proxy already runs costs a wake-up every
/// half second instead.
pub async fn return_memory_while_idle() {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        purge_decayed_pages();
    }
}

/// Asks every arena of jemalloc to purge the pages whose decay time has passed (its
/// `arena.<MALLCTL_ARENAS_ALL>.decay` control).
fn purge_decayed_pages() {
    /// `MALLCTL_ARENAS_ALL` is 4096 in jemalloc 5, the version tikv-jemalloc-sys builds.
    const DECAY_ALL_ARENAS: &std::ffi::CStr = c"arena.4096.decay";
    // SAFETY: `mallctl` reads the NUL-terminated name (a 'static literal) and, for this control,
    // which neither reads nor writes a value, requires the four value pointers and length to be
    // null and zero, as they are; it synchronises with the allocator's other threads itself.
    #[allow(unsafe_code)]
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            DECAY_ALL_ARENAS.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if status != 0 {
        tracing::debug!(status, "the allocator refused to purge");
    }
}
