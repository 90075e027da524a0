//! Benchmarks live in `benches/`; this crate holds their shared helpers.
