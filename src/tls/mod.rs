//! TLS: ClientHello peek parsing, JA3/JA4 fingerprints, and rustls termination configs.

pub mod certs;
pub mod clienthello;
pub mod ja3;
pub mod ja4;
pub mod options;
pub mod sessions;
pub mod tickets;
