//! The napi boundary: the only module that touches JavaScript values.
//!
//! `index.js` passes configs as JSON text (with NaN/Infinity and Buffers encoded, see
//! [`crate::config`]) and receives JSON text back, so this layer converts and delegates to
//! [`crate::server::Proxy`]; no logic lives here. Errors carry their JS `code` as napi 3's string
//! status: a config problem throws `code: 'ERR_RAMPART_CONFIG'` with the JSON list of
//! `{ path, message }` as its message (index.js turns it into a `ConfigError`); a bind failure
//! throws with the OS code (`EADDRINUSE`, ...); an XDP failure rejects with the code of its
//! [`XdpError`] variant. (`#[napi]` recognises only a literal `Result<T, S>` return type, so
//! the status type `String` is spelled out at each method.)

use crate::cluster::message::BanKind;
use crate::cluster::Cluster;
use crate::config::proxy::{parse_proxy_config, parse_resolve_route};
use crate::config::update::{parse_block, parse_explain_ip, parse_unblock, parse_update};
use crate::config::value::{parse_bounded, ParseError, MAX_DEPTH};
use crate::config::ConfigError;
use crate::events::EventSink;
use crate::protection::{BlockReason, BlockedIps};
use crate::server::{AttachError, ExplainReport, Proxy};
use crate::xdp::{XdpError, XdpMode};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use serde_json::Value;
use std::sync::Arc;

/// JS `code` of a thrown config error; its message is the JSON list of `{ path, message }`.
pub const CONFIG_ERROR_CODE: &str = "ERR_RAMPART_CONFIG";

fn coded(code: &str, message: impl ToString) -> Error<String> {
    Error::new(code.to_string(), message)
}

/// `issues` as the JSON list `[{ path, message }]` a JS ConfigError carries.
fn issues_json(issues: &[crate::config::ConfigIssue]) -> String {
    serde_json::to_string(issues).unwrap_or_else(|_| "[]".into())
}

fn config_error(e: ConfigError) -> Error<String> {
    coded(CONFIG_ERROR_CODE, issues_json(&e.issues))
}

/// Deepest nesting of arrays and objects a config value may have (the value itself is level 1);
/// index.js cuts deeper values at the next level so that the refusal names their path.
#[napi]
pub const MAX_CONFIG_DEPTH: u32 = MAX_DEPTH as u32;

/// The JSON text of a value from JS, nested at most [`MAX_DEPTH`] levels; a deeper one is a
/// config error whose path starts at `root`.
fn parse_json(text: &str, root: &str) -> Result<Value, String> {
    parse_bounded(text, root).map_err(|e| match e {
        ParseError::Json(e) => coded("ERR_INVALID_ARG_VALUE", format!("bad JSON: {e}")),
        ParseError::TooDeep(e) => config_error(e),
    })
}

/// `resolveConnection`'s route (`route_json`) parsed against `listener` (the held
/// connection's; `None`: only the checks that need no listener) with the proxy's `defaults`:
/// `Ok(None)` for `null` (close the connection), the route, or every problem (paths under
/// `route`).
fn parse_resolution(
    route_json: &str,
    listener: Option<&crate::config::proxy::ListenerConfig>,
    defaults: crate::config::proxy::RouteDefaults,
) -> std::result::Result<Option<crate::config::proxy::RouteConfig>, Vec<crate::config::ConfigIssue>>
{
    match parse_bounded(route_json, "route") {
        Ok(Value::Null) => Ok(None),
        Ok(v) => parse_resolve_route(&v, listener, defaults)
            .map(Some)
            .map_err(|e| e.issues),
        Err(ParseError::TooDeep(e)) => Err(e.issues),
        Err(ParseError::Json(e)) => Err(vec![crate::config::ConfigIssue {
            path: "route".into(),
            message: format!("bad JSON: {e}"),
        }]),
    }
}

/// The JS `code` of an XDP failure.
fn xdp_code(e: &XdpError) -> &'static str {
    match e {
        XdpError::ObjectMissing { .. } => "ERR_RAMPART_XDP_NOT_BUILT",
        XdpError::PermissionDenied { .. } => "EPERM",
        XdpError::InterfaceMissing { .. } => "ENODEV",
        XdpError::BpfFs { .. } => "ERR_RAMPART_BPFFS",
        XdpError::StalePins { .. } => "ERR_RAMPART_XDP_STALE_PINS",
        XdpError::Busy { .. } => "EBUSY",
        XdpError::Load { .. } => "ERR_RAMPART_XDP_LOAD",
        XdpError::InvalidPolicy { .. } => "ERR_RAMPART_XDP_POLICY",
        XdpError::Map { .. } => "ERR_RAMPART_XDP_MAP",
    }
}

/// `blockedIps()` as JSON: bare `ip` lists, or `{ ip, port, reason, remainingMs?, note? }`
/// objects with `detail` (docs/protection.md: blockedIps()).
fn explain_json(ip: std::net::IpAddr, r: &ExplainReport, cluster: Option<&Cluster>) -> Value {
    use crate::clock::ns_to_ms_ceil;
    let origin = |reason: BlockReason, what: &str, port: u16| {
        cluster.and_then(|c| match c.origin(reason, what, port) {
            (node, Some(_)) => Some(node),
            (_, None) => None,
        })
    };
    let listeners: Vec<Value> = r
        .listeners
        .iter()
        .map(|(port, x)| {
            let key = x.key.to_string();
            let dynamic: Vec<Value> = x
                .dynamic
                .iter()
                .map(|d| {
                    let cidr = d.net.to_string();
                    let mut o = serde_json::json!({ "cidr": cidr, "port": d.port });
                    if let Some(note) = &d.note {
                        o["reason"] = (**note).into();
                    }
                    if let Some(node) = origin(BlockReason::DynamicBlocked, &cidr, *port) {
                        o["node"] = node.into();
                    }
                    o
                })
                .collect();
            let boxed = x.boxed.map(|(ms, note)| {
                let mut o = serde_json::json!({ "remainingMs": ms, "level": x.box_level });
                if let Some(note) = note {
                    o["note"] = note.into();
                }
                if let Some(node) = origin(BlockReason::PenaltyBoxed, &key, *port) {
                    o["node"] = node.into();
                }
                o
            });
            let prefix = x.prefix.as_ref().map(|p| {
                serde_json::json!({
                    "cidr": p.cidr.to_string(), "tracked": p.tracked,
                    "penaltyBoxMs": p.boxed_ms, "retryAfterMs": p.rate_limited_ms,
                    "active": p.active, "maxConcurrent": p.max_concurrent,
                })
            });
            serde_json::json!({
                "port": port,
                "key": key,
                "verdict": x.verdict.map(|v| v.as_str()),
                "shadowVerdict": x.shadow_verdict.map(|v| v.as_str()),
                "observe": x.observe,
                "protected": x.protected,
                "allowlisted": x.allowlisted,
                "blocklisted": x.blocklisted,
                "dynamicBlocks": dynamic,
                "penaltyBox": boxed,
                "escalationLevel": x.box_level,
                "retryAfterMs": x.rate_limited_ms,
                "active": x.active,
                "maxConcurrent": x.max_concurrent,
                "pendingHandshakes": x.pending,
                "knownGoodMs": x.known_good_ms,
                "tracked": x.tracked,
                "prefix": prefix,
                "defenseActive": x.defense_active,
            })
        })
        .collect();
    let kernel = r.kernel.as_ref().map(|bans| {
        bans.iter()
            .map(|(port, reason, ns)| {
                serde_json::json!({
                    "port": port, "reason": reason.as_str(),
                    "remainingMs": ns_to_ms_ceil(*ns),
                })
            })
            .collect::<Vec<_>>()
    });
    serde_json::json!({ "ip": ip.to_string(), "listeners": listeners, "kernel": kernel })
}

fn blocked_json(b: &BlockedIps, detail: bool, cluster: Option<&Cluster>) -> Value {
    let mut out = serde_json::Map::new();
    for (name, list) in b.lists() {
        let v = if detail {
            list.iter()
                .map(|l| {
                    let mut o = serde_json::json!({
                        "ip": l.entry.ip, "port": l.port, "reason": l.entry.reason.as_str()
                    });
                    if let Some(ms) = l.entry.remaining_ms {
                        o["remainingMs"] = ms.into();
                    }
                    if let Some(note) = &l.entry.note {
                        o["note"] = note.as_str().into();
                    }
                    if let Some(c) = cluster {
                        let (node, kind) = c.origin(l.entry.reason, &l.entry.ip, l.port);
                        // A received prefix box keeps the local prefix box's note (`prefix`).
                        let note = match kind {
                            Some(BanKind::Box) => Some(format!("penalty box from node {node}")),
                            Some(BanKind::Syn) => Some(format!("kernel SYN ban from node {node}")),
                            _ => None,
                        };
                        if let Some(n) = note {
                            o["note"] = n.into();
                        }
                        o["node"] = node.into();
                    }
                    o
                })
                .collect()
        } else {
            let mut ips: Vec<&str> = list.iter().map(|l| l.entry.ip.as_str()).collect();
            ips.sort_unstable();
            ips.dedup();
            Value::from(ips)
        };
        out.insert(name.into(), v);
    }
    Value::Object(out)
}

type EventFn = ThreadsafeFunction<(String, String), (), (String, String), Status, false, true>;

/// The native half of `RampartProxy` (index.js wraps it in an EventEmitter).
#[napi]
pub struct NativeProxy {
    inner: Arc<Proxy>,
}

#[napi]
impl NativeProxy {
    /// `new NativeProxy(configJson, onEvent)`: validates the whole config (throws a config
    /// error listing every problem) and builds the runtime; binds nothing yet.
    /// `onEvent(name, payloadJson)` receives `'blocked'`, `'blockedSummary'`, `'error'`,
    /// `'defense'`, `'overload'`, `'ban'` and `'suspended'`.
    #[napi(constructor)]
    pub fn new(config_json: String, on_event: EventFn) -> Result<Self, String> {
        let v = parse_json(&config_json, "")?;
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let cfg = parse_proxy_config(&v, cpus).map_err(config_error)?;
        let tsfn = Arc::new(on_event);
        let sink: EventSink = Arc::new(move |name: &'static str, json: String| {
            tsfn.call(
                (name.to_string(), json),
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        });
        let proxy = Proxy::new(cfg, sink).map_err(|e| coded("ERR_RAMPART_RUNTIME", e))?;
        Ok(NativeProxy {
            inner: Arc::new(proxy),
        })
    }

    /// Binds every listener and starts serving. Throws with `code` (`EADDRINUSE`, ...) if any
    /// listener cannot bind; then nothing is left listening.
    #[napi]
    pub fn start(&self) -> Result<(), String> {
        self.inner.start().map_err(|e| coded(&e.code, e.message))
    }

    /// Stops accepting, closes what is left after `drainMs` (ms), resolves when every socket is
    /// closed. Runs on the libuv thread pool.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn stop(&self, drain_ms: f64) -> AsyncTask<StopTask> {
        AsyncTask::new(StopTask {
            proxy: self.inner.clone(),
            drain_ms: if drain_ms.is_finite() && drain_ms > 0.0 {
                drain_ms as u64
            } else {
                0
            },
        })
    }

    /// `updateConfig(JSON)`: all-or-nothing; throws a config error listing every problem.
    #[napi]
    pub fn update_config(&self, update_json: String) -> Result<(), String> {
        let v = parse_json(&update_json, "")?;
        let u = parse_update(
            &v,
            &self.inner.listener_configs(),
            self.inner.route_defaults(),
            self.inner.cluster().is_some(),
            self.inner.isolate_routes(),
        )
        .map_err(config_error)?;
        self.inner.update_config(u).map_err(config_error)
    }

    /// `blockedIps` as JSON (`port` 0 = every listener).
    #[napi]
    pub fn blocked_ips(&self, port: u32, detail: bool) -> Result<String, String> {
        let p = (port > 0 && port <= 65535).then_some(port as u16);
        let cluster = self.inner.cluster().map(|c| &**c);
        let blocked = self.inner.blocked_ips(p).map_err(config_error)?;
        Ok(blocked_json(&blocked, detail, cluster).to_string())
    }

    /// `blockIp(cidr, optsJson)`.
    #[napi]
    pub fn block_ip(&self, cidr: String, opts_json: String) -> Result<(), String> {
        let v = parse_json(&opts_json, "opts")?;
        let req = parse_block(&cidr, &v, &self.inner.listener_configs()).map_err(config_error)?;
        self.inner.block_ip(req);
        Ok(())
    }

    /// `unblockIp(cidr, optsJson)` → whether an entry was removed.
    #[napi]
    pub fn unblock_ip(&self, cidr: String, opts_json: String) -> Result<bool, String> {
        let v = parse_json(&opts_json, "opts")?;
        let req = parse_unblock(&cidr, &v, &self.inner.listener_configs()).map_err(config_error)?;
        Ok(self.inner.unblock_ip(req))
    }

    /// `explain(ip)` as JSON (docs/protection.md: Why is this address refused? `explain(ip)`): the
    /// client's state on every listener, the verdict its next connection would get, the kernel's
    /// bans covering it; a ConfigError at `ip` for anything but one address.
    #[napi]
    pub fn explain(&self, ip: String) -> Result<String, String> {
        let ip = parse_explain_ip(&ip).map_err(config_error)?;
        let report = self.inner.explain(ip);
        Ok(explain_json(ip, &report, self.inner.cluster().map(|c| &**c)).to_string())
    }

    /// `dynamicBlocks()` as JSON: `[{ cidr, port (null: every listener), remainingMs (absent:
    /// until unblockIp), reason?, node? (the cluster node it came from, when not this one) }]`.
    #[napi]
    pub fn dynamic_blocks(&self) -> String {
        let (now, rules) = self.inner.dynamic_blocks();
        let cluster = self.inner.cluster();
        let list: Vec<Value> = rules
            .iter()
            .map(|r| {
                let cidr = r.net.to_string();
                let mut o = serde_json::json!({ "cidr": cidr, "port": r.port });
                if let Some(t) = r.expires_ns {
                    o["remainingMs"] = crate::clock::ns_to_ms_ceil(t.saturating_sub(now)).into();
                }
                if let Some(note) = &r.note {
                    o["reason"] = (**note).into();
                }
                if let Some(c) = cluster {
                    let (node, kind) =
                        c.origin(BlockReason::DynamicBlocked, &cidr, r.port.unwrap_or(0));
                    if kind.is_some() {
                        o["node"] = node.into();
                    }
                }
                o
            })
            .collect();
        Value::Array(list).to_string()
    }

    /// `metrics()` as JSON.
    #[napi]
    pub fn metrics(&self) -> String {
        serde_json::to_string(&self.inner.metrics()).unwrap_or_else(|_| "{}".into())
    }

    /// `resolveConnection(id, routeJson)` (docs/proxy.md: Suspended routes): `routeJson` is `null`
    /// (close the held connection) or a route, validated in full against the connection's
    /// listener. Never throws: a route that is not valid closes the connection, which reports
    /// it as `'error'` (`resolve_route_invalid`, every problem in `errors` as `{ path, message }`
    /// and spelled out in the message; inside an async
    /// `'suspended'` listener a throw would be an unhandled rejection). Returns whether a held
    /// connection took the decision: false for an unknown, expired or already resolved id (a
    /// no-op: nothing is validated; [`Self::check_resolve_route`] validates without one).
    #[napi]
    pub fn resolve_connection(&self, id: String, route_json: String) -> bool {
        use crate::proxy::suspend::Resolution;
        let Ok(id) = id.parse::<u64>() else {
            return false;
        };
        let Some(listener) = self.inner.suspended_listener(id) else {
            return false;
        };
        let resolution =
            match parse_resolution(&route_json, Some(&listener), self.inner.route_defaults()) {
                Ok(None) => Resolution::Close,
                Ok(Some(r)) => Resolution::Route(Box::new(r)),
                Err(issues) => Resolution::Invalid(issues),
            };
        self.inner.resolve_connection(id, resolution)
    }

    /// `checkResolveRoute(routeJson)`: the problems `resolveConnection` would find in a route
    /// that need no held connection (every field, and the route's own rules; not its listener's:
    /// whether a terminating route without `cert` has a listener `defaultCert`), as the JSON list
    /// `[{ path, message }]` (paths under `route`), `[]` when there are none (also for `null`).
    #[napi]
    pub fn check_resolve_route(&self, route_json: String) -> String {
        let issues = parse_resolution(&route_json, None, self.inner.route_defaults())
            .err()
            .unwrap_or_default();
        issues_json(&issues)
    }

    /// This process's event-loop delay (ms, the max of the last 100 ms; index.js samples it when
    /// `overload.eventLoopDelayMs` is set): above that threshold every route counts as
    /// overloaded. A non-finite or negative value counts as 0.
    #[napi]
    pub fn report_event_loop_delay(&self, delay_ms: f64) {
        self.inner.report_event_loop_delay(delay_ms);
    }

    /// Prometheus text exposition (format 0.0.4). Throws only if the snapshot fails to
    /// serialise (none does).
    #[napi]
    pub fn prometheus(&self) -> Result<String> {
        (self.inner.prometheus()).map_err(|e| Error::from_reason(format!("prometheus(): {e}")))
    }
}

#[napi]
impl NativeProxy {
    /// `attachXdp(interface, mode)`: resolves with the status JSON; rejects naming the cause
    /// (missing capability, interface, object not built). Runs on the libuv thread pool.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn attach_xdp(&self, interface: String, mode: String) -> AsyncTask<XdpTask> {
        AsyncTask::new(XdpTask {
            proxy: self.inner.clone(),
            attach: Some((interface, mode)),
        })
    }

    /// `detachXdp()`: removes the program and its pins.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn detach_xdp(&self) -> AsyncTask<XdpTask> {
        AsyncTask::new(XdpTask {
            proxy: self.inner.clone(),
            attach: None,
        })
    }

    /// `xdpStatus()` as JSON.
    #[napi]
    pub fn xdp_status(&self) -> String {
        serde_json::to_string(&self.inner.xdp_status()).unwrap_or_else(|_| "{}".into())
    }
}

/// Background half of `attachXdp()` / `detachXdp()`. Resolves with JSON: `{ "status": XdpStatus }`
/// or `{ "error": { "code", "message" } }` (index.js rejects with the latter: an async task's
/// rejection cannot carry a string status).
pub struct XdpTask {
    proxy: Arc<Proxy>,
    attach: Option<(String, String)>,
}

impl Task for XdpTask {
    type Output = String;
    type JsValue = String;
    fn compute(&mut self) -> Result<String> {
        let failure = |code: &str, message: String| {
            serde_json::json!({ "error": { "code": code, "message": message } }).to_string()
        };
        Ok(match &self.attach {
            Some((iface, mode)) => {
                let mode = match mode.as_str() {
                    "native" => XdpMode::Native,
                    "generic" => XdpMode::Generic,
                    _ => XdpMode::Auto,
                };
                match self.proxy.attach_xdp(iface, mode) {
                    Ok(st) => serde_json::json!({ "status": st }).to_string(),
                    Err(e) => {
                        let code = match &e {
                            AttachError::AlreadyAttached(_) => "ERR_RAMPART_XDP_ATTACHED",
                            AttachError::Xdp(x) | AttachError::PolicySync(x) => xdp_code(x),
                        };
                        failure(code, e.to_string())
                    }
                }
            }
            None => match self.proxy.detach_xdp() {
                Ok(()) => serde_json::json!({ "status": null }).to_string(),
                Err(e) => failure(xdp_code(&e), e.to_string()),
            },
        })
    }
    fn resolve(&mut self, _env: Env, out: String) -> Result<String> {
        Ok(out)
    }
}

/// Background half of `stop()`.
pub struct StopTask {
    proxy: Arc<Proxy>,
    drain_ms: u64,
}

impl Task for StopTask {
    type Output = ();
    type JsValue = ();
    fn compute(&mut self) -> Result<()> {
        self.proxy.stop(self.drain_ms);
        Ok(())
    }
    fn resolve(&mut self, _env: Env, _out: ()) -> Result<()> {
        Ok(())
    }
}

/// Generates a self-signed ECDSA P-256 certificate for `hosts` (DNS names or IP literals):
/// returns `[certPem, keyPem]`. For demos and tests.
#[napi]
pub fn generate_self_signed_cert(hosts: Vec<String>) -> Result<Vec<String>> {
    let (c, k) = crate::tls::certs::self_signed(&hosts).map_err(Error::from_reason)?;
    Ok(vec![c, k])
}

/// Fingerprints of one raw ClientHello (the TLS records as sent on TCP, from the first record
/// header): `{ sni, alpn, ja3, ja3String, ja4, ja4R }` as JSON, or `null` when the bytes are not a
/// complete ClientHello. JA3 per the Salesforce definition, JA4 per FoxIO's JA4 spec.
#[napi]
pub fn fingerprint_client_hello(hello: Buffer) -> Option<String> {
    use crate::tls::clienthello::{parse_client_hello, HelloParse};
    match parse_client_hello(&hello) {
        HelloParse::Complete(h) => Some(
            serde_json::json!({
                "sni": h.sni,
                "alpn": h.alpn.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>(),
                "ja3": h.ja3(),
                "ja3String": h.ja3_string(),
                "ja4": h.ja4(),
                "ja4R": h.ja4_r(),
            })
            .to_string(),
        ),
        _ => None,
    }
}
