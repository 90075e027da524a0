//! The process's memory allocator: jemalloc, with purging tuned so that memory goes back to the
//! system soon after clients leave.
//!
//! Chosen for the proxy's memory per client connection (BENCHMARKS.md, "proxy: memory per client
//! connection", where glibc's malloc and mimalloc were measured beside it). Each client connection
//! costs two allocations aligned to 128 bytes (tokio's task and its socket's registration): glibc's
//! `memalign` pads each, which put an idle client over 1 KB; jemalloc serves them from its size
//! classes exactly. And glibc keeps the memory of clients that left (its free chunks sit between live
//! ones); jemalloc purges unused pages, in a background thread that the proxy starts
//! ([`return_memory_in_background`]).

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

/// Starts jemalloc's background purging thread, so that freed memory goes back to the system while
/// the proxy is idle (without it, purging happens only as a thread allocates). Called once the
/// process is what it will stay: a fork (`-d`) stops jemalloc's background threads in the child.
pub fn return_memory_in_background() {
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "cannot start the allocator's background thread: memory freed by clients that left is returned to the system later");
    }
}
