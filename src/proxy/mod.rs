//! The data path after admission: routing, the first request head, upstream connect, PROXY
//! protocol, byte copy.

pub mod answers;
pub mod copy;
pub mod cpu;
pub mod forward_headers;
pub mod head;
pub mod keepalive;
pub mod protocol_check;
pub mod proxy_protocol;
pub mod routes;
pub mod suspend;
pub mod upstream;
