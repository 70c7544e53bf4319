'use strict';
/**
 * `require('rampart').SymphonyProxy`: Symphony's (HarperFast/symphony) class on Rampart's engine,
 * so a Symphony user changes one `require` (docs/symphony.md). A thin layer over RampartProxy: the
 * same native proxy, with Symphony's defaults, `metrics()` shape, reason names, events, `stop(ms)`
 * and error behaviour. RampartProxy keeps its own API.
 *
 * What the layer translates:
 * - config: Symphony's route-identity limits are checked first with Symphony's wording
 *   (`metricsGroup exceeds 128 UTF-8 bytes`, ...); Symphony's route rules are the engine's
 *   (`symphonyRouteRules: true`: `xForwardedFor` with `http2`, `'h2'` upstreams alone or on a
 *   passthrough route, the header carriers' `protocol: 'http'`); a route whose upstreams are all
 *   UDS sends a PROXY v1 header unless it says otherwise (Symphony's default); Symphony's memory-only knobs
 *   are accepted and dropped (DROPPED_FIELDS); copy-buffer sizes out of range are clamped with a
 *   warning (clampedBuffers); a `mode: 'http'` listener redirects every Host
 *   (withSymphonyHttpListener); everything else is passed as it is (Rampart accepts Symphony's
 *   fields). A few engine messages are reworded as Symphony words them (WORDING).
 * - `metrics()`: symphony/metrics.js.
 * - events: `'blocked'` `{ ip, reason, listener, ja3, ja4 }`; `'suspended'` as is; `'error'`
 *   `(err: Error, ctx: { listener? })` for what Symphony reports as errors (SYMPHONY_ERRORS). A
 *   per-connection failure is counted in `metrics()` as in Symphony and emitted as
 *   `'connectionError'` `{ reason, message, ip, listener }` (Symphony has no such event; nothing is
 *   dropped silently). An `'error'` nobody listens to becomes a process warning rather than a throw
 *   (never a crash from a background event).
 * - `port: 0` listeners: a kernel-picked port at `start()` (standInPorts, _bindZeroPorts).
 * - `resolveConnection(id, route?)`: a missing route rejects; otherwise it calls through. The
 *   engine closes a held connection whose route is not valid and emits `'error'`
 *   `resolve_route_invalid`, which arrives here as Symphony's `'error'` (a ConfigError whose
 *   `errors` are the event's `route.*` problems, in Symphony's words; ctx `{ listener }`). For an
 *   id no connection holds, the engine's checks that need no listener (checkResolveRoute).
 * - route isolation: the engine's `'error'` `route_failed` (a route left out, or serving its last
 *   good certificate) is Symphony's `'error'` with `err.route`, `err.index`, `err.errors` (in
 *   Symphony's words) and `err.lastGoodCert`; `metrics().failingRoutes` is the engine's count.
 *   Routes Symphony's route-build rules set apart are the engine's route failures like any
 *   other; in the constructor every route may be set apart so (the proxy then serves none, as
 *   Symphony's: the engine's rule with `symphonyRouteRules`); in updateConfig that fails whole.
 * - `stop(timeoutMs = 100)`: drains for `timeoutMs`, then closes what is left.
 */
const net = require('node:net');
const { RampartProxy, ConfigError } = require('../index.js');
const { symphonyMetrics, errorName } = require('./metrics');

/** Bytes of `s` as UTF-8. */
const utf8Bytes = (s) => Buffer.byteLength(s, 'utf8');
// eslint-disable-next-line no-control-regex
// biome-ignore lint/suspicious/noControlCharactersInRegex: it is the set of control characters a header value may not hold
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Codes of the engine's 'error' events that Symphony reports as `'error'`: proxy-wide failures, a
 * route left out because it failed to build, a suspended connection's route that is not valid, an
 * upstream answering in the wrong protocol. Every other code is a per-connection failure
 * (`'connectionError'`).
 */
const SYMPHONY_ERRORS = new Set([
  'xdp_sync_failed',
  'cluster_unavailable',
  'cluster_message_rejected',
  'route_failed',
  'resolve_route_invalid',
  'upstream_protocol_mismatch',
]);

/**
 * Symphony fields that tune only how Symphony spends memory, accepted so a Symphony config loads
 * and dropped (docs/symphony.md says why each has no counterpart): name → its check.
 */
const DROPPED_FIELDS = {
  lazyCopyBufferThreshold: (v) => (Number.isSafeInteger(v) && v >= 0 ? null : `must be an integer >= 0, got ${JSON.stringify(v)}`),
};

/** Symphony's copy-buffer bounds, bytes: an integer outside them is clamped (and warned about). */
const MIN_COPY_BUFFER = 512;
const MAX_COPY_BUFFER = 1_048_576;
const BUFFER_FIELDS = ['readBufferSize', 'clientReadBufferSize', 'upstreamReadBufferSize'];

/**
 * `config`'s copy-buffer sizes as Symphony takes them: an integer outside [512, 1048576] is
 * clamped to the nearest bound (a 0 would read into an empty buffer), and each clamp is emitted
 * as a process warning in Symphony's words (`readBufferSize 0 is outside [512, 1048576]; using
 * 512`). Anything that is not an integer is left for the engine to refuse. Returns the fields to
 * override (empty when nothing was clamped).
 */
function clampedBuffers(config) {
  const out = {};
  for (const field of BUFFER_FIELDS) {
    const n = config[field];
    if (!Number.isSafeInteger(n)) continue;
    const clamped = Math.min(MAX_COPY_BUFFER, Math.max(MIN_COPY_BUFFER, n));
    if (clamped === n) continue;
    out[field] = clamped;
    process.emitWarning(`${field} ${n} is outside [${MIN_COPY_BUFFER}, ${MAX_COPY_BUFFER}]; using ${clamped}`, {
      code: 'SYMPHONY_BUFFER_CLAMPED',
    });
  }
  return out;
}

/**
 * Symphony's HTTP listener redirects every request that is not an ACME challenge to https,
 * whatever its Host: each `mode: 'http'` listener gets `redirectUnknownHosts: true` unless it
 * says otherwise (RampartProxy's default answers 404 for a Host no route serves).
 */
function withSymphonyHttpListener(l) {
  if (!l || typeof l !== 'object' || l.mode !== 'http' || Object.hasOwn(l, 'redirectUnknownHosts')) return l;
  return { ...l, redirectUnknownHosts: true };
}

/** Suspended ids remembered for the 'error' context of a failed resolve (oldest dropped first). */
const MAX_REMEMBERED_SUSPENDED = 4096;

/**
 * Symphony's route-identity checks, in Symphony's words (Rampart words them differently): `sni`
 * at most 255 UTF-8 bytes, `metricsGroup` at most 128, neither with control characters.
 */
function identityErrors(routes, prefix) {
  const errors = [];
  if (!Array.isArray(routes)) return errors;
  routes.forEach((r, i) => {
    if (!r || typeof r !== 'object') return;
    const at = `${prefix}[${i}]`;
    if (typeof r.sni === 'string') {
      if (utf8Bytes(r.sni) > 255) errors.push({ path: `${at}.sni`, message: 'route SNI exceeds 255 UTF-8 bytes' });
      else if (CONTROL.test(r.sni)) errors.push({ path: `${at}.sni`, message: 'route SNI must not contain control characters' });
    }
    if (typeof r.metricsGroup === 'string') {
      if (utf8Bytes(r.metricsGroup) > 128) errors.push({ path: `${at}.metricsGroup`, message: 'metricsGroup exceeds 128 UTF-8 bytes' });
      else if (CONTROL.test(r.metricsGroup)) errors.push({ path: `${at}.metricsGroup`, message: 'metricsGroup must not contain control characters' });
    }
  });
  return errors;
}

/**
 * Engine messages reworded as Symphony words them (same path, same facts): `[path, message,
 * replacement]`, `path` null for any path.
 */
const WORDING = [
  [null, /^no listener on port (\d+)/, 'port $1 matches no listener'],
  // forwardFingerprint's header carrier on a passthrough route: Symphony calls it "no carrier".
  [
    null,
    /^sets HTTP request headers: needs terminateTls: true/,
    'no carrier for the fingerprint header: it sets HTTP request headers and needs terminateTls: true',
  ],
  [/\.ja4Blocklist\[\d+\]$/, /^/, 'invalid ja4Blocklist entry: '],
  [/\.ja3Blocklist\[\d+\]$/, /^/, 'invalid ja3Blocklist entry: '],
  [/^tcpKeepalive\.idleMs$/, /^/, 'idleMs must be a number of ms (whole seconds, at least 1000): '],
  [/^tcpKeepalive\.intervalMs$/, /^/, 'intervalMs must be a number of ms (whole seconds, at least 1000): '],
  [/^tcpKeepalive\.retries$/, /^must be an integer in \[1, 127\]/, 'retries must be in [1, 127], an integer'],
  [/^halfCloseTimeoutMs$/, /^/, 'halfCloseTimeoutMs must be a number of ms (0 = none): '],
];

/** `e` (a ConfigError) with Symphony's wording where it has its own; other errors as they are. */
function symphonyWording(e) {
  if (!(e instanceof ConfigError)) return e;
  let changed = false;
  const errors = e.errors.map((x) => {
    for (const [path, re, to] of WORDING) {
      if ((path === null || path.test(x.path)) && re.test(x.message)) {
        changed = true;
        return { ...x, message: x.message.replace(re, to) };
      }
    }
    return x;
  });
  return changed ? new ConfigError(errors) : e;
}

/**
 * An engine `'error'` payload Symphony reports as `'error'`, as the Error it emits: `code` the
 * engine's. `route_failed` and `resolve_route_invalid` are ConfigErrors whose `errors` (and the
 * message) carry Symphony's wording; `route_failed` also has `route`, `index`, `lastGoodCert`.
 */
function symphonyError(p) {
  const problems = Array.isArray(p.errors) ? p.errors : [];
  let err;
  if (problems.length === 0) {
    err = new Error(p.message);
  } else {
    err = symphonyWording(new ConfigError(problems));
    let message = p.message;
    problems.forEach((x, i) => {
      const worded = err.errors[i];
      if (worded.message !== x.message) message = message.replace(`${x.path}: ${x.message}`, `${worded.path}: ${worded.message}`);
    });
    err.message = message;
  }
  err.code = p.code;
  for (const field of ['route', 'index', 'lastGoodCert']) if (p[field] !== undefined) err[field] = p[field];
  return err;
}

/** Largest connection id (the engine's ids are u64). */
const MAX_ID = (1n << 64n) - 1n;

/** Whether the string `id` is one the engine could have given: the decimal form of a u64. */
function isConnectionId(id) {
  return /^[0-9]{1,20}$/.test(id) && BigInt(id) <= MAX_ID;
}

/** A TCP port free on `host` now (the kernel's pick; the socket is closed before it resolves). */
function freePort(host) {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * `listeners` with each `port: 0` (Symphony: the kernel picks one at start) given a stand-in
 * port until start: the highest ports no other listener uses. Returns `{ listeners, zero }`,
 * `zero` listing `{ index, port }` of the stand-ins.
 */
function standInPorts(listeners) {
  const zero = [];
  if (!Array.isArray(listeners)) return { listeners, zero };
  const used = new Set(listeners.map((l) => l && l.port));
  let next = 65535;
  const out = listeners.map((l, index) => {
    if (!l || typeof l !== 'object' || l.port !== 0) return l;
    while (used.has(next)) next -= 1;
    used.add(next);
    zero.push({ index, port: next });
    return { ...l, port: next };
  });
  return { listeners: out, zero };
}

/** Per route name (lower case), whether the route set `metricsGroup`. */
function groupsOf(routes) {
  const out = new Map();
  if (!Array.isArray(routes)) return out;
  for (const r of routes) {
    if (r && typeof r.sni === 'string') out.set(r.sni.toLowerCase(), typeof r.metricsGroup === 'string');
  }
  return out;
}

class SymphonyProxy extends RampartProxy {
  /** Validates everything; throws ConfigError (Symphony's wording for its route-identity limits). */
  constructor(config) {
    const isObject = config !== null && typeof config === 'object' && !Array.isArray(config);
    const errors = isObject ? identityErrors(config.routes, 'routes') : [];
    let translated = config;
    let zero = [];
    if (isObject) {
      const ports = standInPorts(config.listeners);
      zero = ports.zero;
      translated = {
        udsSourceAddressHeader: 'proxyProtocol',
        ...config,
        symphonyRouteRules: true,
        ...clampedBuffers(config),
        listeners: Array.isArray(ports.listeners) ? ports.listeners.map(withSymphonyHttpListener) : ports.listeners,
      };
      // Symphony's route rules are what SymphonyProxy is: the field may say so, nothing else.
      if (Object.hasOwn(config, 'symphonyRouteRules') && config.symphonyRouteRules !== true) {
        errors.push({
          path: 'symphonyRouteRules',
          message: `SymphonyProxy always applies Symphony's route rules (true or left out), got ${typeof config.symphonyRouteRules === 'string' ? JSON.stringify(config.symphonyRouteRules) : String(config.symphonyRouteRules)}`,
        });
      }
      for (const [field, check] of Object.entries(DROPPED_FIELDS)) {
        if (!Object.hasOwn(config, field)) continue;
        const problem = check(config[field]);
        if (problem) errors.push({ path: field, message: problem });
        delete translated[field];
      }
    }
    if (errors.length) {
      // Every problem at once: the engine's own, checked on a proxy that is dropped unstarted,
      // without route isolation (the config fails whole, so the routes it would set apart are
      // listed too).
      const whole = typeof translated.isolateRoutes === 'boolean' || translated.isolateRoutes === undefined;
      try {
        new RampartProxy(whole ? { ...translated, isolateRoutes: false } : translated);
      } catch (e) {
        const own = new Set(errors.map((x) => x.path));
        if (e instanceof ConfigError) errors.push(...symphonyWording(e).errors.filter((x) => !own.has(x.path)));
      }
      throw new ConfigError(errors);
    }
    try {
      super(translated);
    } catch (e) {
      throw symphonyWording(e);
    }
    // What the engine runs, kept to rebuild it with the real ports of `port: 0` listeners.
    this._config = translated;
    this._zero = zero;
    this._zeroIndexes = zero.map((z) => z.index);
    this._modes = (config.listeners || []).map((l) => (l && l.mode) || 'tls');
    this._groups = groupsOf(config.routes);
    this._resolved = 0;
    this._suspendedAt = new Map();
    this._repeatedRouteFailures = 0;
    this._started = false;
  }

  /** Engine events in Symphony's shapes (see the module note). */
  _dispatch(name, json) {
    let p;
    try {
      p = JSON.parse(json);
    } catch {
      return;
    }
    if (name === 'blocked') {
      // A `protection.shadow` refusal admitted the connection: not a Symphony refusal.
      if (p.shadow) return;
      this._safeEmit('blocked', { ip: p.ip, reason: p.reason, listener: p.listener, ja3: p.ja3, ja4: p.ja4 });
    } else if (name === 'suspended') {
      this._suspendedAt.set(p.id, p.listener);
      if (this._suspendedAt.size > MAX_REMEMBERED_SUSPENDED) this._suspendedAt.delete(this._suspendedAt.keys().next().value);
      this._safeEmit('suspended', p);
    } else if (name === 'error') {
      if (p.code === 'route_failed' && this._repeatedRouteFailures > 0) {
        // The rebuild at start (port: 0) reporting again what was reported for this config.
        this._repeatedRouteFailures -= 1;
        return;
      }
      if (SYMPHONY_ERRORS.has(p.code)) {
        this._emitError(symphonyError(p), p.listener ? { listener: p.listener } : {});
      } else {
        this._safeEmit('connectionError', { reason: errorName(p.code), message: p.message, ip: p.ip, listener: p.listener });
      }
    } else {
      this._safeEmit(name, p);
    }
  }

  /** `'error'` (err, ctx); with no listener it goes to stderr (never thrown from a background event). */
  _emitError(err, ctx) {
    if (this.listenerCount('error') === 0) {
      process.emitWarning(`symphony: ${err.message}${ctx.listener ? ` (${ctx.listener})` : ''}`, { code: err.code || 'SYMPHONY_ERROR' });
      return;
    }
    this._safeEmit('error', err, ctx);
  }

  /** Binds every listener; a second call while running does nothing (Symphony). */
  async start() {
    if (this._started) return;
    this._started = true;
    try {
      if (this._zero.length) await this._bindZeroPorts();
      await super.start();
    } catch (e) {
      this._started = false;
      throw e;
    }
  }

  /**
   * Gives each `port: 0` listener a port the kernel picks now and rebuilds the (never started)
   * engine with them, with the routes and protection in force.
   */
  async _bindZeroPorts() {
    const listeners = [...this._config.listeners];
    const taken = new Set(listeners.map((l) => l.port));
    for (const z of this._zero) {
      const l = listeners[z.index];
      let port = await freePort(l.host || '0.0.0.0');
      while (taken.has(port)) port = await freePort(l.host || '0.0.0.0');
      taken.add(port);
      listeners[z.index] = { ...l, port };
    }
    const config = { ...this._config, listeners };
    this._replaceNative(config);
    // Its route failures were reported when this config was given (constructor, updateConfig):
    // the rebuilt engine's own reports of them are dropped (_dispatch).
    this._repeatedRouteFailures += super.metrics().routeFailures.length;
    this._config = config;
    this._zero = [];
  }

  /** The port a `protection[].port` means: 0 names the first `port: 0` listener. */
  _portOf(port) {
    if (port !== 0) return port;
    return this._zeroIndexes.length ? this._config.listeners[this._zeroIndexes[0]].port : port;
  }

  /**
   * Stops accepting; connections still open after `timeoutMs` (ms, default 100, Symphony's) are
   * closed; resolves when every socket is closed, then emits 'close'.
   */
  async stop(timeoutMs = 100) {
    // RampartProxy#stop(number) is the same once the engine takes a number; { drainMs } works on both.
    await super.stop({ drainMs: timeoutMs });
    this._started = false;
  }

  /** Replaces the route table and/or per-port protection, all or nothing (throws ConfigError). */
  updateConfig(update) {
    const u = update && typeof update === 'object' ? update : {};
    const own = identityErrors(u.routes, 'routes');
    if (own.length) throw new ConfigError(own);
    let translated = u;
    if (Array.isArray(u.protection)) {
      translated = { ...translated, protection: u.protection.map((p) => (p && typeof p === 'object' ? { ...p, port: this._portOf(p.port) } : p)) };
    }
    try {
      super.updateConfig(translated);
    } catch (e) {
      throw symphonyWording(e);
    }
    if (u.routes !== undefined) this._groups = groupsOf(u.routes);
    // Kept for a rebuild at start (port: 0 listeners): the routes and protection now in force.
    const next = { ...this._config };
    if (translated.routes !== undefined) next.routes = translated.routes;
    if (Array.isArray(translated.protection)) {
      next.listeners = next.listeners.map((l) => {
        const p = translated.protection.find((x) => x.port === l.port);
        if (!p) return l;
        const out = { ...l };
        if (p.protection === null) delete out.protection;
        else out.protection = p.protection;
        return out;
      });
    }
    this._config = next;
  }

  /**
   * Proxies a held connection with `route` (Symphony's `{ upstream, terminateTls, cert?, mtls?,
   * ... }`), or closes it when `route` is null or left out. A route that is not valid closes
   * the connection and emits `'error'` (a ConfigError, `code` 'resolve_route_invalid', `errors`
   * naming each `route.*` problem; ctx `{ listener }`); nothing throws for it. Returns true when
   * a held connection took the decision (closing it for a route that is not valid included),
   * false for an unknown, expired or resolved id (then only the rules that need no listener are
   * checked: checkResolveRoute, Symphony's protocol rules included). A
   * string id that is not a decimal u64 emits `'error'` (`code` 'invalid_connection_id', as
   * Symphony reports it) and returns false.
   */
  resolveConnection(id, route) {
    if (typeof id === 'string' && !isConnectionId(id)) {
      // Symphony reports an id that no 'suspended' event could have carried, never throws (an
      // id that is not a string is a programming error: the engine's ConfigError, as Symphony's
      // binding throws).
      const err = new Error(`invalid connection id ${JSON.stringify(id)}: an id is the decimal string of a 'suspended' event's id`);
      err.code = 'invalid_connection_id';
      this._emitError(err, {});
      return false;
    }
    const listener = this._suspendedAt.get(id);
    this._suspendedAt.delete(id);
    if (route === undefined || route === null) return super.resolveConnection(id, null);
    // A route the engine refuses closes the connection and comes back as 'error'
    // resolve_route_invalid (_dispatch); metrics() then counts it unresolved, not resolved.
    const took = super.resolveConnection(id, route);
    if (took) {
      this._resolved += 1;
      return took;
    }
    // No held connection: the engine checked nothing; the checks that need no listener still
    // report, as Symphony validates every route given.
    const problems = this.checkResolveRoute(route);
    if (problems.length) {
      const err = symphonyWording(new ConfigError(problems));
      err.code = 'resolve_route_invalid';
      this._emitError(err, listener ? { listener } : {});
    }
    return took;
  }

  /** Symphony's `ProxyMetrics` (symphony/metrics.js). The engine's own shape: `rampartMetrics()`. */
  metrics() {
    const m = symphonyMetrics(super.metrics(), { modes: this._modes, groups: this._groups, resolved: this._resolved });
    // Before start a `port: 0` listener has no port yet: its address ends in ':0'.
    for (const z of this._zero) {
      const l = m.listeners[z.index];
      if (l && l.address.endsWith(`:${z.port}`)) l.address = `${l.address.slice(0, -String(z.port).length)}0`;
    }
    return m;
  }

  /** RampartProxy's metrics() shape (route failures included, as the engine counts them). */
  rampartMetrics() {
    return super.metrics();
  }
}

module.exports = { SymphonyProxy };
