//! The data path after admission: routing, upstream connect, PROXY protocol, byte copy.

pub mod copy;
pub mod proxy_protocol;
pub mod routes;
pub mod upstream;
