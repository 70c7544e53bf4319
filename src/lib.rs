//! Rampart: a TLS-terminating, SNI-routing TCP proxy with a per-IP connection-protection engine and
//! an XDP kernel filter, packaged as a Node.js addon (napi-rs).
//!
//! Only [`napi`] touches JavaScript values; every other module is plain Rust and is covered by
//! `cargo test` without Node.
//!
//! Visibility: a module is `pub(crate)` unless the integration tests (`tests/`) or the criterion
//! benches (`benches/`), which see the crate from outside, use it; those stay `pub`, inner modules
//! included only where the outside uses them:
//!
//! - `capacity`: `tests/protection_priority.rs` (the priority seasoning);
//! - `clock`: `benches/cluster_admission.rs` (`now_ns`);
//! - `cluster`: `benches/cluster_admission.rs` (a `Cluster` and its nodes);
//! - `config`: tests and benches build policies and updates as the addon does
//!   (`config::{protection, cluster, update, proxy, error}`);
//! - `events`: `tests/protection_ban_events.rs` (`events::ban`);
//! - `gcra`: `tests/xdp_test_run.rs` (a ban rate);
//! - `metrics`: `tests/metrics_families.rs` (every family rendered, declared in the docs, the
//!   dashboard and index.d.ts: `metrics::{families, family, route, upstream}`);
//! - `server`: `tests/metrics_families.rs` (`server::ProxyMetrics`, the whole `metrics()` shape);
//! - `http2`: `tests/http2_guard.rs`, `tests/fuzz_streams.rs`, `benches/http2_guard.rs`;
//! - `protection`: the engine's tests and `benches/{admission,rescale,cluster_admission}.rs`
//!   (`protection::{engine, dynamic, policy}`);
//! - `proxy`: `tests/fuzz_parsers.rs`, `tests/fuzz_streams.rs`
//!   (`proxy::{head, proxy_protocol, forward_headers}`);
//! - `tls`: `tests/fingerprints.rs`, `tests/clienthello_prop.rs`, `tests/tls_pq.rs`,
//!   `benches/floor.rs`;
//! - `xdp`: `tests/xdp_test_run.rs` (`xdp::{abi, manager}`).

pub mod capacity;
pub mod clock;
pub mod cluster;
pub mod config;
pub(crate) mod conn;
pub mod events;
pub mod gcra;
pub mod http2;
pub(crate) mod listener;
pub mod metrics;
// The `#[napi]` items are the addon's exports: napi-derive requires them `pub` (so
// `unreachable_pub` does not apply) and registers them only outside `cfg(test)`, so the lib's
// unit-test build sees some of them (and what only they use) as unused.
#[cfg_attr(test, allow(dead_code))]
#[allow(unreachable_pub)]
pub(crate) mod napi;
pub mod protection;
pub mod proxy;
pub mod server;
pub(crate) mod shared;
pub mod tls;
pub mod xdp;
