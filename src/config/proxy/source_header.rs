//! The header a route sends its upstream before any application byte (`sourceAddressHeader`)
//! and the proxy-wide default of routes with a Unix-socket upstream (`udsSourceAddressHeader`;
//! docs/config.md).

use crate::config::error::Issues;
use crate::config::value::{self as v, field};
use serde_json::Value;

/// The header sent to the upstream before any application byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceAddressHeader {
    /// Nothing.
    None,
    /// PROXY protocol v1 (text line).
    ProxyV1,
    /// PROXY protocol v2 (binary).
    ProxyV2,
    /// `'xForwardedFor'`: an `X-Forwarded-For: <client ip>` and `X-Forwarded-Proto: https`
    /// request header on every HTTP/1.1 request (docs/proxy.md: Forwarded request headers).
    XForwardedFor,
}

/// What a route that leaves a field out gets, set once for the proxy (docs/config.md: Proxy:
/// listeners and routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDefaults {
    /// `udsSourceAddressHeader`: the `sourceAddressHeader` of a route with a unix-socket upstream
    /// that sets none (`None` unless set; Symphony's default is `'proxyProtocol'`, v1). A route
    /// with only TCP upstreams that sets none sends nothing.
    pub uds_source_address_header: SourceAddressHeader,
}

impl Default for RouteDefaults {
    fn default() -> Self {
        RouteDefaults {
            uds_source_address_header: SourceAddressHeader::None,
        }
    }
}

/// `udsSourceAddressHeader` (top level of the config): `'none'` (default), `'proxyProtocol'` or
/// `'proxyProtocolV2'`.
pub fn parse_route_defaults(
    obj: &serde_json::Map<String, Value>,
    issues: &mut Issues,
) -> RouteDefaults {
    let uds = field(obj, "udsSourceAddressHeader")
        .and_then(|s| {
            v::one_of(
                s,
                "udsSourceAddressHeader",
                &["none", "proxyProtocol", "proxyProtocolV2"],
                issues,
            )
        })
        .map_or(SourceAddressHeader::None, |s| match s {
            "proxyProtocol" => SourceAddressHeader::ProxyV1,
            "proxyProtocolV2" => SourceAddressHeader::ProxyV2,
            _ => SourceAddressHeader::None,
        });
    RouteDefaults {
        uds_source_address_header: uds,
    }
}
