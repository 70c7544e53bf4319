//! The data path after admission: routing, the first request head, upstream connect, PROXY
//! protocol, byte copy.

pub(crate) mod answers;
// `proxy_pair`, `CopyOptions::idle` and `CLIENT_TO_UPSTREAM_BUF` / `UPSTREAM_TO_CLIENT_BUF` have
// had no caller since every copy takes its buffers from `CopyOptions` (`socket.*ReadBuffer`);
// they are left for the copy loop's next change to remove rather than edited beside it.
#[allow(dead_code)]
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
