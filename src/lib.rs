//! Rampart: a TLS-terminating, SNI-routing TCP proxy with a per-IP connection-protection engine and
//! an XDP kernel filter, packaged as a Node.js addon (napi-rs).
//!
//! Only [`napi`] touches JavaScript values; every other module is plain Rust and is covered by
//! `cargo test` without Node.

pub mod capacity;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod events;
pub mod gcra;
pub mod http2;
pub mod listener;
pub mod metrics;
pub mod napi;
pub mod protection;
pub mod proxy;
pub mod server;
pub mod shared;
pub mod tls;
pub mod xdp;
