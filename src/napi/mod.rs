//! The napi boundary: the only module that touches JavaScript values.
//!
//! `index.js` passes configs as JSON text (with NaN/Infinity and Buffers encoded, see
//! [`crate::config`]) and receives JSON text back, so this layer converts and delegates to
//! [`crate::server::Proxy`]; no logic lives here. Errors: a config problem throws an `Error`
//! whose message is `RAMPART_CONFIG_ERROR` + the JSON list of `{ path, message }` (index.js turns
//! it into a `ConfigError`); a bind failure throws with `code` set (`EADDRINUSE`, ...).

use crate::config::proxy::parse_proxy_config;
use crate::config::ConfigError;
use crate::events::EventSink;
use crate::server::Proxy;
use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use serde_json::Value;
use std::sync::Arc;

/// Prefix of the message of a thrown config error (followed by JSON).
pub const CONFIG_ERROR_PREFIX: &str = "RAMPART_CONFIG_ERROR";

fn config_error(e: ConfigError) -> Error {
    let list: Vec<Value> = e
        .issues
        .iter()
        .map(|i| serde_json::json!({ "path": i.path, "message": i.message }))
        .collect();
    Error::new(
        Status::InvalidArg,
        format!("{CONFIG_ERROR_PREFIX}{}", Value::Array(list)),
    )
}

fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::new(Status::InvalidArg, format!("bad JSON: {e}")))
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
    /// `onEvent(name, payloadJson)` receives `'blocked'`, `'blockedSummary'` and `'error'`.
    #[napi(constructor)]
    pub fn new(config_json: String, on_event: EventFn) -> Result<Self> {
        let v = parse_json(&config_json)?;
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
        let proxy = Proxy::new(cfg, sink).map_err(|e| Error::from_reason(e.to_string()))?;
        Ok(NativeProxy {
            inner: Arc::new(proxy),
        })
    }

    /// Binds every listener and starts serving. Throws with `code` (`EADDRINUSE`, ...) if any
    /// listener cannot bind; then nothing is left listening.
    #[napi]
    pub fn start(&self) -> Result<()> {
        self.inner
            .start()
            .map_err(|e| Error::new(Status::GenericFailure, format!("{}|{}", e.code, e.message)))
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
    pub fn update_config(&self, update_json: String) -> Result<()> {
        let v = parse_json(&update_json)?;
        self.inner.update_config(&v).map_err(config_error)
    }

    /// `blockedIps` as JSON (`port` 0 = every listener).
    #[napi]
    pub fn blocked_ips(&self, port: u32, detail: bool) -> String {
        let p = (port > 0 && port <= 65535).then_some(port as u16);
        self.inner.blocked_ips(p, detail).to_string()
    }

    /// `blockIp(cidr, optsJson)`.
    #[napi]
    pub fn block_ip(&self, cidr: String, opts_json: String) -> Result<()> {
        let v = parse_json(&opts_json)?;
        self.inner.block_ip(&cidr, &v).map_err(config_error)
    }

    /// `unblockIp(cidr, optsJson)` → whether an entry was removed.
    #[napi]
    pub fn unblock_ip(&self, cidr: String, opts_json: String) -> Result<bool> {
        let v = parse_json(&opts_json)?;
        self.inner.unblock_ip(&cidr, &v).map_err(config_error)
    }

    /// `metrics()` as JSON.
    #[napi]
    pub fn metrics(&self) -> String {
        serde_json::to_string(&self.inner.metrics()).unwrap_or_else(|_| "{}".into())
    }

    /// Prometheus text exposition (format 0.0.4).
    #[napi]
    pub fn prometheus(&self) -> String {
        self.inner.metrics().prometheus()
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
        crate::xdp_sync::status_json(&self.inner.xdp_status()).to_string()
    }
}

/// Background half of `attachXdp()` / `detachXdp()`.
pub struct XdpTask {
    proxy: Arc<Proxy>,
    attach: Option<(String, String)>,
}

impl Task for XdpTask {
    type Output = String;
    type JsValue = String;
    fn compute(&mut self) -> Result<String> {
        match &self.attach {
            Some((iface, mode)) => {
                let mode = match mode.as_str() {
                    "native" => crate::xdp::XdpMode::Native,
                    "generic" => crate::xdp::XdpMode::Generic,
                    _ => crate::xdp::XdpMode::Auto,
                };
                self.proxy
                    .attach_xdp(iface, mode)
                    .map(|st| crate::xdp_sync::status_json(&st).to_string())
                    .map_err(Error::from_reason)
            }
            None => self
                .proxy
                .detach_xdp()
                .map(|_| String::new())
                .map_err(Error::from_reason),
        }
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
