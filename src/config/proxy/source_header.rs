//! The header a route sends its upstream before any application byte (`sourceAddressHeader`),
//! and the proxy-wide settings of every route the proxy parses (docs/config.md): the default of
//! routes with a Unix-socket upstream (`udsSourceAddressHeader`) and Symphony's route rules
//! (`symphonyRouteRules`).

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

/// What a route that leaves a field out gets, and which rules it is held to, set once for the
/// proxy (docs/config.md: Proxy: listeners and routes): the constructor's routes, those of
/// `updateConfig` and `resolveConnection`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDefaults {
    /// `udsSourceAddressHeader`: the `sourceAddressHeader` of a route with a unix-socket upstream
    /// that sets none (`None` unless set; Symphony's default is `'proxyProtocol'`, v1). A route
    /// with only TCP upstreams that sets none sends nothing.
    pub uds_source_address_header: SourceAddressHeader,
    /// `symphonyRouteRules` (default false): Symphony's route rules apply
    /// ([`super::route`]'s `symphony` module: `xForwardedFor` with `http2`, `'h2'` upstreams
    /// alone or on a passthrough route, as route-build failures; the header carriers'
    /// `protocol: 'http'`), and a constructor whose every route one of them sets apart serves
    /// none instead of failing.
    pub symphony_route_rules: bool,
}

impl Default for RouteDefaults {
    fn default() -> Self {
        RouteDefaults {
            uds_source_address_header: SourceAddressHeader::None,
            symphony_route_rules: false,
        }
    }
}

/// `udsSourceAddressHeader` (top level of the config): `'none'` (default), `'proxyProtocol'` or
/// `'proxyProtocolV2'`; `symphonyRouteRules`: a boolean (default false).
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
    let symphony_route_rules = field(obj, "symphonyRouteRules")
        .and_then(|b| v::boolean(b, "symphonyRouteRules", issues))
        .unwrap_or(false);
    RouteDefaults {
        uds_source_address_header: uds,
        symphony_route_rules,
    }
}
