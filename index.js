'use strict';
/**
 * Rampart: a TLS-terminating, SNI-routing TCP proxy with a per-IP connection-protection engine
 * and an XDP kernel filter, as a Node.js addon. See docs/integrating.md and index.d.ts for the API.
 */
const { EventEmitter } = require('node:events');
const { monitorEventLoopDelay, performance } = require('node:perf_hooks');

/** How often the event-loop delay is reported to the native side (`overload.eventLoopDelayMs`), ms. */
const LOOP_DELAY_SAMPLE_MS = 100;
const binding = require('./binding.js');
const { NativeProxy, generateSelfSignedCert } = binding;

/** `code` of the native error that carries a config problem list (its message is the JSON list). */
const CONFIG_ERROR_CODE = 'ERR_RAMPART_CONFIG';

/**
 * Thrown by the constructor, `updateConfig`, `blockIp` and `unblockIp` when input is invalid.
 * `errors` lists every problem as `{ path, message }`; nothing was applied.
 */
class ConfigError extends Error {
  constructor(errors) {
    const shown = errors.slice(0, 20).map((e) => `${e.path}: ${e.message}`);
    if (errors.length > shown.length) shown.push(`... and ${errors.length - shown.length} more (see err.errors)`);
    super(`invalid config (${errors.length} problem${errors.length === 1 ? '' : 's'}): ${shown.join('; ')}`);
    this.name = 'ConfigError';
    this.code = 'ERR_RAMPART_CONFIG';
    this.errors = errors;
  }
}

/**
 * Deepest nesting of arrays and objects in a value passed to the native side (the value itself is
 * level 1); src/config refuses deeper values with a ConfigError naming their path.
 */
const MAX_CONFIG_DEPTH = binding.MAX_CONFIG_DEPTH;

/** A plain object or array (not a Buffer, typed array or object with toJSON): a nesting level. */
function isContainer(v) {
  return v !== null && typeof v === 'object' && !ArrayBuffer.isView(v) && typeof v.toJSON !== 'function';
}

/**
 * `'safe'` when plain JSON.stringify would lose nothing (no NaN/Infinity, Buffer, bigint or lone
 * surrogate inside), `'encode'` when the replacer is needed, `'deep'` when a container sits past
 * MAX_CONFIG_DEPTH (a cycle counts as infinitely deep). Iterative: any depth is safe to walk.
 */
function scan(root) {
  const stack = [root];
  const depths = [1];
  let out = 'safe';
  while (stack.length) {
    const v = stack.pop();
    const depth = depths.pop();
    if (v === null) continue;
    const t = typeof v;
    if (t === 'string') {
      if (!v.isWellFormed()) out = 'encode';
    } else if (t === 'number') {
      if (!Number.isFinite(v)) out = 'encode';
    } else if (t === 'bigint') {
      out = 'encode';
    } else if (t === 'object') {
      if (!isContainer(v)) {
        out = 'encode';
        continue;
      }
      if (depth > MAX_CONFIG_DEPTH) return 'deep';
      const children = Array.isArray(v) ? v : Object.values(v);
      for (let i = children.length - 1; i >= 0; i--) {
        stack.push(children[i]);
        depths.push(depth + 1);
      }
    }
  }
  return out;
}

/**
 * A copy of `root` in which every container at level MAX_CONFIG_DEPTH + 1 is an empty array, so
 * that encoding stays shallow and the native side names the first such path.
 */
function cutDeep(root) {
  const copy = (v) => (Array.isArray(v) ? [] : {});
  if (!isContainer(root)) return root;
  const out = copy(root);
  const stack = [[root, out, 1]];
  while (stack.length) {
    const [src, dst, depth] = stack.pop();
    for (const k of Object.keys(src)) {
      const v = src[k];
      if (!isContainer(v)) dst[k] = v;
      else if (depth >= MAX_CONFIG_DEPTH) dst[k] = [];
      else {
        dst[k] = copy(v);
        stack.push([v, dst[k], depth + 1]);
      }
    }
  }
  return out;
}

/** JSON.stringify that keeps what JSON loses: non-finite numbers and Buffers (see src/config). */
function encode(value) {
  // A function or symbol has no JSON text (JSON.stringify gives undefined, which the native side
  // cannot take): it goes as a value the native side names, so the caller gets its ConfigError
  // ("must be an object, got a function") rather than a failed string conversion.
  if (typeof value === 'function' || typeof value === 'symbol') return JSON.stringify({ $nonFinite: `a ${typeof value}` });
  let v0 = value === undefined ? null : value;
  let kind = scan(v0);
  if (kind === 'deep') {
    v0 = cutDeep(v0);
    kind = scan(v0);
  }
  if (kind === 'safe') return JSON.stringify(v0);
  return JSON.stringify(v0, function replacer(key, v) {
    const raw = this[key];
    if (typeof raw === 'number' && !Number.isFinite(raw)) return { $nonFinite: String(raw) };
    if (Buffer.isBuffer(raw) || raw instanceof Uint8Array) {
      return { $buffer: Buffer.from(raw).toString('latin1') };
    }
    if (typeof raw === 'bigint') return { $nonFinite: `${raw}n` };
    if (typeof raw === 'string' && !raw.isWellFormed()) return { $invalidString: raw.toWellFormed() };
    return v;
  });
}

function translate(err) {
  if (err && err.code === CONFIG_ERROR_CODE) return new ConfigError(JSON.parse(err.message));
  return err;
}

/** The XDP task's JSON answer: the status, or an Error with the native `code`. */
function xdpResult(json) {
  const r = JSON.parse(json);
  if (r.error) {
    const err = new Error(r.error.message);
    err.code = r.error.code;
    throw err;
  }
  return r.status;
}

function call(fn) {
  try {
    return fn();
  } catch (e) {
    throw translate(e);
  }
}

/** The native event callback: holds the proxy weakly (built outside the class so it closes over nothing else). */
function dispatcher(ref) {
  return (...args) => {
    // napi delivers the (name, json) tuple as one array argument
    const [name, json] = Array.isArray(args[0]) ? args[0] : args;
    const proxy = ref.deref();
    if (proxy) proxy._dispatch(name, json);
  };
}

/** Started proxies, kept reachable until stopped (like the event loop keeps a listening server). */
const RUNNING = new Set();

/**
 * The proxy. Events: `'blocked'` ({ ip, port, listener, reason, ja3, ja4, observed }),
 * `'blockedSummary'` ({ intervalMs, total, byReason, topIps }), `'error'` ({ code, message, ip,
 * port, listener }), `'suspended'` ({ id, sni, peerIp, peerPort, listener }: call
 * `resolveConnection(id, route | null)`), `'ban'` ({ action, origin, node, ip, port, listener,
 * reason, note, level, remainingMs, expiresAt }), `'ready'` (after start), `'close'` (after stop). A listener that throws is
 * caught and reported on stderr; it never crashes the process.
 */
class RampartProxy extends EventEmitter {
  /**
   * @param {import('./index').ProxyConfig} config validated in full; throws ConfigError.
   */
  constructor(config) {
    super();
    this._keepAlive = null;
    this._running = false;
    this._stopping = null;
    // The native side holds the event callback strongly; the callback holds this proxy only
    // weakly, so an unreferenced, stopped proxy (and its runtime threads) can be collected.
    const json = encode(config);
    const onEvent = dispatcher(new WeakRef(this));
    try {
      this._native = new NativeProxy(json, onEvent);
    } catch (e) {
      throw translate(e);
    }
    // Validated natively: a number when `overload.eventLoopDelayMs` is set.
    this._loopDelay = config.overload && config.overload.eventLoopDelayMs != null ? { histogram: null, timer: null } : null;
  }

  /**
   * Replaces the native proxy (never started) by one built from `config` (validated in full;
   * throws ConfigError and keeps the old one). For SymphonyProxy, which learns the ports of
   * `port: 0` listeners only at start.
   */
  _replaceNative(config) {
    if (this._running || this._stopping) throw new Error('rampart: _replaceNative on a running proxy');
    try {
      this._native = new NativeProxy(encode(config), dispatcher(new WeakRef(this)));
    } catch (e) {
      throw translate(e);
    }
  }

  /** Feeds this process's event-loop delay (the max of each 100 ms) to every route's capacity. */
  _watchLoopDelay(on) {
    const w = this._loopDelay;
    if (!w) return;
    if (on && !w.timer) {
      w.histogram = monitorEventLoopDelay({ resolution: 10 });
      w.histogram.enable();
      // The histogram misses a block before its own first tick; the sampler's lateness does not.
      let last = performance.now();
      w.timer = setInterval(() => {
        const now = performance.now();
        const late = now - last - LOOP_DELAY_SAMPLE_MS;
        last = now;
        this._native.reportEventLoopDelay(Math.max(w.histogram.max / 1e6, late));
        w.histogram.reset();
      }, LOOP_DELAY_SAMPLE_MS);
      w.timer.unref();
    } else if (!on && w.timer) {
      clearInterval(w.timer);
      w.histogram.disable();
      w.timer = null;
      w.histogram = null;
    }
  }

  _dispatch(name, json) {
    let payload;
    try {
      payload = JSON.parse(json);
    } catch {
      return;
    }
    if (name === 'error' && this.listenerCount('error') === 0) return; // never an unhandled 'error'
    this._safeEmit(name, payload);
  }

  _safeEmit(name, ...args) {
    try {
      this.emit(name, ...args);
    } catch (e) {
      process.emitWarning(`rampart: a '${name}' listener threw: ${e && e.stack ? e.stack : e}`);
    }
  }

  /**
   * Binds every listener. Rejects with the OS error (`code` = 'EADDRINUSE', ...); then nothing is
   * left listening. Waits for a `stop()` still draining. A started proxy stays alive (and keeps
   * the process alive) until `stop()`, like a listening `net.Server`.
   */
  async start() {
    if (this._stopping) await this._stopping;
    // Throws an Error whose `code` is the OS code ('EADDRINUSE', ...).
    this._native.start();
    this._running = true;
    RUNNING.add(this);
    // The native runtime does not hold Node's event loop open; this handle does, while serving.
    if (!this._keepAlive) this._keepAlive = setInterval(() => {}, 1 << 30);
    this._watchLoopDelay(true);
    this._safeEmit('ready');
  }

  /**
   * Stops accepting at once; after `drainMs` (ms, default 0) closes the connections still open;
   * resolves when every socket is closed. `stop(5000)` is `stop({ drainMs: 5000 })` (Symphony's
   * `stop(timeoutMs)`). Concurrent calls share one stop; on a proxy that is not running it
   * resolves at once and emits nothing.
   */
  async stop(opts = {}) {
    // A number is the drain itself; anything else but an options object (or nothing) is refused as one.
    const isOpts = opts === undefined || opts === null || (typeof opts === 'object' && !Array.isArray(opts));
    const drainMs = !isOpts ? opts : opts && opts.drainMs !== undefined ? opts.drainMs : 0;
    if (typeof drainMs !== 'number' || !Number.isFinite(drainMs) || drainMs < 0) {
      const shown = typeof drainMs === 'string' ? JSON.stringify(drainMs) : String(drainMs);
      throw new ConfigError([{ path: 'drainMs', message: `must be a finite number >= 0, got ${shown}` }]);
    }
    if (this._stopping) return this._stopping;
    if (!this._running) return undefined;
    this._stopping = (async () => {
      try {
        await this._native.stop(drainMs);
      } finally {
        this._running = false;
        RUNNING.delete(this);
        this._watchLoopDelay(false);
        if (this._keepAlive) {
          clearInterval(this._keepAlive);
          this._keepAlive = null;
        }
        this._stopping = null;
      }
      this._safeEmit('close');
    })();
    return this._stopping;
  }

  /** All-or-nothing update of `routes` and/or per-port `protection` (null removes). Throws ConfigError. */
  updateConfig(update) {
    call(() => this._native.updateConfig(encode(update)));
  }

  /** Blocked clients and ranges; `{ port }` filters one listener, `{ detail: true }` gives objects. */
  blockedIps(opts = {}) {
    const port = opts && opts.port !== undefined ? opts.port : 0;
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new ConfigError([{ path: 'opts.port', message: `must be a port number, got ${String(port)}` }]);
    }
    return JSON.parse(call(() => this._native.blockedIps(port, Boolean(opts && opts.detail))));
  }

  /** Blocks a CIDR (or bare IP) for `ttlMs` ms (forever without), on `port` or every listener. */
  blockIp(cidr, opts = {}) {
    if (typeof cidr !== 'string' || !cidr.isWellFormed()) {
      throw new ConfigError([{ path: 'cidr', message: `must be a string, got ${typeof cidr}` }]);
    }
    call(() => this._native.blockIp(cidr, encode(opts)));
  }

  /**
   * Why is this address refused (or not)? Its state on every listener across the engine's tiers
   * and the verdict its next connection would get there, plus the kernel's bans covering it
   * (docs/protection.md: explain). Throws a ConfigError at `ip` for anything but one IPv4/IPv6 address.
   */
  explain(ip) {
    if (typeof ip !== 'string') {
      throw new ConfigError([{ path: 'ip', message: `must be a string, got ${typeof ip}` }]);
    }
    return JSON.parse(call(() => this._native.explain(ip)));
  }

  /**
   * Every live `blockIp` entry exactly as the engine holds it: `[{ cidr, port, remainingMs?,
   * reason?, node? }]` (canonical CIDR; `port` null for every listener; `remainingMs` absent for
   * a block until `unblockIp`; `node` when it came from another cluster node).
   */
  dynamicBlocks() {
    return JSON.parse(this._native.dynamicBlocks());
  }

  /** Removes a `blockIp` entry; returns true when one was removed. */
  unblockIp(cidr, opts = {}) {
    if (typeof cidr !== 'string' || !cidr.isWellFormed()) {
      throw new ConfigError([{ path: 'cidr', message: `must be a string, got ${typeof cidr}` }]);
    }
    return call(() => this._native.unblockIp(cidr, encode(opts)));
  }

  /**
   * Decides for a connection held by a suspended route (the `id` of its `'suspended'` event):
   * `route` (a `routes[]`-shaped object with `upstream` or `upstreams`) serves it as if that
   * route had matched; `null` closes it. A route that is not valid never throws (this is called
   * in async 'suspended' listeners): the connection is closed and emits `'error'`
   * (`resolve_route_invalid`, each `route.*` problem in `errors` as `{ path, message }`). Returns true when a held
   * connection took the decision, false when `id` is unknown, expired or already resolved
   * (nothing happens). Only a non-string `id` or a missing `route` argument throws.
   */
  resolveConnection(id, route) {
    if (typeof id !== 'string') {
      throw new ConfigError([{ path: 'id', message: `must be the string id of a 'suspended' event, got ${typeof id}` }]);
    }
    if (route === undefined) {
      throw new ConfigError([{ path: 'route', message: 'is required: a route object, or null to close the connection' }]);
    }
    return this._native.resolveConnection(id, encode(route));
  }

  /**
   * The problems resolveConnection would find in `route` without a held connection (every
   * field and the route's own rules; not whether a listener has the `defaultCert` a terminating
   * route without `cert` needs): `[{ path, message }]`, paths under `route`; `[]` when none.
   * @param {import('./index').ResolveRoute | null} route
   */
  checkResolveRoute(route) {
    return JSON.parse(this._native.checkResolveRoute(encode(route === undefined ? null : route)));
  }

  /** Counters: connections, bytes, blocks and errors per reason, per listener. */
  metrics() {
    return JSON.parse(this._native.metrics());
  }

  /** Prometheus text exposition format 0.0.4. */
  prometheus() {
    return this._native.prometheus();
  }

  /**
   * Loads the XDP filter on `interface` (`mode` 'auto' = native, then generic; 'native';
   * 'generic') and syncs the config, `blockIp` entries and boxed IPs into its maps. Resolves with
   * `xdpStatus()`; rejects naming the cause (no CAP_BPF/CAP_NET_ADMIN, interface missing, object
   * not built because clang was missing).
   */
  async attachXdp(opts) {
    const o = opts || {};
    const errs = [];
    if (typeof o.interface !== 'string' || o.interface === '')
      errs.push({ path: 'interface', message: `must be an interface name, got ${String(o.interface)}` });
    const mode = o.mode === undefined ? 'auto' : o.mode;
    if (!['auto', 'native', 'generic'].includes(mode))
      errs.push({ path: 'mode', message: `must be one of 'auto', 'native', 'generic', got ${String(o.mode)}` });
    if (errs.length) throw new ConfigError(errs);
    return xdpResult(await this._native.attachXdp(o.interface, mode));
  }

  /** Removes the XDP program and its pinned maps (a no-op when not attached). */
  async detachXdp() {
    xdpResult(await this._native.detachXdp());
  }

  /** `{ attached, interface, mode, counters: { passed, dropped: { cidr, dynamic, penalty, synFlood, unparsed }, banned, banExtended }, bannedIps, errors, banQueueOverflow }`. */
  xdpStatus() {
    return JSON.parse(this._native.xdpStatus());
  }
}

/**
 * Fingerprints of a raw ClientHello (Buffer of the TLS records as sent, from the first record
 * header): `{ sni, alpn, ja3, ja3String, ja4, ja4R }`, or null when it is not a complete hello.
 */
function fingerprintClientHello(hello) {
  if (!Buffer.isBuffer(hello)) throw new TypeError('fingerprintClientHello expects a Buffer');
  const out = binding.fingerprintClientHello(hello);
  return out == null ? null : JSON.parse(out);
}

module.exports = { RampartProxy, ConfigError, generateSelfSignedCert, fingerprintClientHello, MAX_CONFIG_DEPTH };
// Symphony's class on this engine (symphony/proxy.js); required after the exports above, which it uses.
module.exports.SymphonyProxy = require('./symphony/proxy').SymphonyProxy;
