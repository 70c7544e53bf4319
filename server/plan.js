'use strict';
/**
 * What a reload has to do: compare the running ProxyConfig with the new one.
 *
 * - Routes and per-port protection are hot: they go through `updateConfig` (all-or-nothing, per-IP
 *   state kept).
 * - Everything else (listeners added, removed or changed, `workerThreads`, `blockedEvents`, any
 *   ProxyConfig field this module does not know) is a listener change: a new RampartProxy.
 * - Certificate rotation should not cost a listener change. When every listener carries the same
 *   `defaultCert` (the common case: one certificate for the service), `runConfig` copies it into
 *   each terminating route that has no `cert` of its own. A route cert is hot, so a new
 *   certificate then goes through `updateConfig`; the listeners' own `defaultCert` is left out of
 *   the comparison (no route uses it any more). Listeners with different `defaultCert`s keep them,
 *   and changing one is a listener change.
 */

/** JSON with sorted keys: equal configs give equal strings whatever the key order. */
function stable(v) {
  if (Array.isArray(v)) return `[${v.map(stable).join(',')}]`;
  // A Buffer (an OCSP response): its bytes.
  if (ArrayBuffer.isView(v)) return JSON.stringify(`bytes:${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64')}`);
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .filter((k) => v[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${stable(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v === undefined ? null : v);
}

/** Two OCSP responses (Buffers or absent) hold the same bytes. */
function sameBytes(a, b) {
  if (a === undefined || a === null || b === undefined || b === null) return (a ?? null) === (b ?? null);
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function sameCert(a, b) {
  return a && b && a.certChain === b.certChain && a.privateKey === b.privateKey && sameBytes(a.ocspResponse, b.ocspResponse);
}

/**
 * The config to run: `proxy` with the shared `defaultCert` copied into terminating routes without
 * a `cert` (see the module note). Returns `{ config, sharedCert }` (`sharedCert` true when copied).
 */
function runConfig(proxy) {
  const config = structuredClone(proxy);
  const listeners = Array.isArray(config.listeners) ? config.listeners : [];
  // `mode: 'http'` listeners have no certificate: they neither share nor break the shared one.
  const isTls = (l) => !l || l.mode === undefined || l.mode === null || l.mode === 'tls';
  const tlsListeners = listeners.filter(isTls);
  const first = tlsListeners[0] && tlsListeners[0].defaultCert;
  const shared = tlsListeners.length > 0 && listeners.every((l) => (isTls(l) ? sameCert(l.defaultCert, first) : !l.defaultCert));
  if (shared && Array.isArray(config.routes)) {
    for (const r of config.routes) {
      if (r && r.terminateTls !== false && (r.cert === undefined || r.cert === null)) {
        r.cert = { certChain: first.certChain, privateKey: first.privateKey };
        if (first.ocspResponse !== undefined && first.ocspResponse !== null) r.cert.ocspResponse = first.ocspResponse;
      }
    }
  }
  return { config, sharedCert: shared };
}

/** The part of a run config that only a new proxy can change. */
function listenerShape(run) {
  const { routes, ...rest } = run.config;
  rest.listeners = (rest.listeners || []).map((l) => {
    const { protection, ...shape } = l;
    if (run.sharedCert) delete shape.defaultCert;
    return shape;
  });
  return stable(rest);
}

/** Port → the protection of its first listener (listeners of one port share one policy). */
function protectionByPort(config) {
  const out = new Map();
  for (const l of config.listeners || []) {
    if (!out.has(l.port)) out.set(l.port, l.protection === undefined ? null : l.protection);
  }
  return out;
}

/** Unique listener ports, in config order. */
function ports(config) {
  return [...new Set((config.listeners || []).map((l) => l.port))];
}

/** 'routes' and/or 'certificates' (route certs, including a shared defaultCert copied into them). */
function routeChanges(a, b) {
  const bare = (routes) => stable((routes || []).map((r) => ({ ...r, cert: undefined })));
  const certs = (routes) => stable((routes || []).map((r) => r.cert));
  const out = [];
  if (bare(a) !== bare(b)) out.push('routes');
  if (certs(a) !== certs(b)) out.push('certificates');
  return out.length ? out : ['routes'];
}

/**
 * `{ restart, update, changed }`: `restart` when a listener change needs a new proxy, else
 * `update` is the `updateConfig` argument (or null when nothing changed); `changed` names what
 * differs, for the log (`listeners`, `routes`, `protection:443`).
 */
function plan(prev, next) {
  if (listenerShape(prev) !== listenerShape(next)) {
    const changed = ['listeners'];
    if (stable(prev.config.routes) !== stable(next.config.routes)) changed.push(...routeChanges(prev.config.routes, next.config.routes));
    return { restart: true, update: null, changed };
  }
  const update = {};
  const changed = [];
  if (stable(prev.config.routes) !== stable(next.config.routes)) {
    update.routes = next.config.routes;
    changed.push(...routeChanges(prev.config.routes, next.config.routes));
  }
  const before = protectionByPort(prev.config);
  const protection = [];
  for (const [port, p] of protectionByPort(next.config)) {
    if (stable(before.get(port)) !== stable(p)) {
      protection.push({ port, protection: p });
      changed.push(`protection:${port}`);
    }
  }
  if (protection.length) update.protection = protection;
  return { restart: false, update: changed.length ? update : null, changed };
}

module.exports = { runConfig, plan, ports, stable };
