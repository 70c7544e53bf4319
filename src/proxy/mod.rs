//! The data path after admission: routing, the first request head, upstream connect, PROXY
//! protocol, byte copy.

pub(crate) mod answers;
pub(crate) mod copy;
pub(crate) mod cpu;
pub mod forward_headers;
pub mod head;
pub(crate) mod keepalive;
pub(crate) mod protocol_check;
pub mod proxy_protocol;
pub(crate) mod routes;
pub(crate) mod suspend;
pub(crate) mod upstream;
