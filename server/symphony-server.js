'use strict';
/**
 * `rampart serve` (or `symphony-server`) with a symphony-server config file:
 * `{ version?, admin?, proxies: [{ listeners, routes, workerThreads?, readBufferSize?, ... }] }`
 * (docs/symphony.md). Each entry of `proxies` runs as one SymphonyProxy, known across reloads by
 * its sorted listener ports ("80,443").
 *
 * - Cert material may be inline (`certChain`, `privateKey`, `clientCaCert`) or files
 *   (`certChainFile`, `privateKeyFile`, `clientCaCertFile`), relative to the config file's
 *   directory. A route whose files cannot be read keeps its last-good material (or, new, is left
 *   out), logged; the others serve and rotate.
 * - Reload: SIGHUP, or a change of the config file or of a file it names. Per port set: the same
 *   listeners (certs included) → `updateConfig` of routes and protection; changed listeners → a
 *   new proxy started before the old one stops accepting (the old one's established connections
 *   run on for up to 5 s); a port set gone → its proxy stopped. A file that
 *   is not valid JSON, or a port set that fails, is logged and leaves what runs untouched.
 * - `status.json` (`--status PATH`, default `<config dir>/status.json`): `{ pid, version,
 *   startedAt, reloadedAt, configPath, ports }`, rewritten atomically (temp file + rename) after
 *   each reconcile; removed at shutdown only when it still names this process (a successor that
 *   started first keeps its file).
 * - `admin`: server/symphony-admin.js.
 * - Log lines: `<ISO time> [symphony-server] <message>`, errors on stderr.
 * - SIGTERM/SIGINT: every proxy stopped, status removed, exit 0.
 */
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { SymphonyProxy } = require('..');
const { SymphonyAdmin } = require('./symphony-admin');
const { DirWatcher } = require('./watch');

const { version } = JSON.parse(fs.readFileSync(require.resolve('../package.json'), 'utf8'));

/** ms a proxy replaced by a listener change keeps serving its established connections. */
const HANDOVER_DRAIN_MS = 5000;

/** True when `doc` has the symphony-server file's shape (a `proxies` array, no Rampart `proxy`). */
function isSymphonyServerConfig(doc) {
  return doc !== null && typeof doc === 'object' && Array.isArray(doc.proxies) && doc.proxy === undefined;
}

function log(msg) {
  process.stdout.write(`${new Date().toISOString()} [symphony-server] ${msg}\n`);
}
function logErr(msg) {
  process.stderr.write(`${new Date().toISOString()} [symphony-server] ${msg}\n`);
}

const resolvePath = (p, dir) => (path.isAbsolute(p) ? p : path.join(dir, p));

/** A digest of what `files` hold now (a missing file counts as its error code). */
function digestFiles(files) {
  const h = crypto.createHash('sha256');
  for (const f of files) {
    h.update(f).update('\0');
    try {
      h.update(fs.readFileSync(f));
    } catch (e) {
      h.update(`!${e.code}`);
    }
    h.update('\0');
  }
  return h.digest('hex');
}

/** `{ certChain, privateKey }` from inline PEM or files; throws naming what is missing. */
function resolveCert(c, dir, files) {
  const read = (p, enc) => {
    const abs = resolvePath(p, dir);
    files.add(abs);
    return fs.readFileSync(abs, enc);
  };
  const certChain = c.certChain ?? (c.certChainFile ? read(c.certChainFile, 'utf8') : undefined);
  const privateKey = c.privateKey ?? (c.privateKeyFile ? read(c.privateKeyFile, 'utf8') : undefined);
  if (certChain === undefined || privateKey === undefined) {
    throw new Error('cert requires both a chain (certChain/certChainFile) and a key (privateKey/privateKeyFile)');
  }
  return { certChain, privateKey };
}

function resolveMtls(m, dir, files) {
  let clientCaCert = m.clientCaCert;
  if (clientCaCert === undefined && m.clientCaCertFile) {
    const abs = resolvePath(m.clientCaCertFile, dir);
    files.add(abs);
    clientCaCert = fs.readFileSync(abs, 'utf8');
  }
  if (clientCaCert === undefined) throw new Error('mtls requires a client CA (clientCaCert/clientCaCertFile)');
  const out = { clientCaCert };
  if (m.requireClientCert !== undefined) out.requireClientCert = m.requireClientCert;
  return out;
}

/** The file fields of a cert/mtls object removed (what SymphonyProxy takes). */
function withCertMaterial(obj, key, value) {
  const out = { ...obj };
  if (value === undefined) delete out[key];
  else out[key] = value;
  return out;
}

/**
 * A `proxies[]` entry as a SymphonyProxy config. A listener's unreadable cert throws (the port
 * set is skipped). A route whose files cannot be read keeps the cert material it was last built
 * with (`lastGood`, by route name; say, a file missing for a moment during a rotation), or is left
 * out when it has none; both are logged. `lastGood` is updated with what was read.
 */
function toProxyConfig(spec, dir, files, lastGood, onUnreadable = null) {
  const listeners = (spec.listeners || []).map((l) => {
    let out = { ...l };
    if (l.defaultCert) out = withCertMaterial(out, 'defaultCert', resolveCert(l.defaultCert, dir, files));
    if (l.mtls) out = withCertMaterial(out, 'mtls', resolveMtls(l.mtls, dir, files));
    return out;
  });
  const routes = [];
  const seen = new Map();
  for (const r of spec.routes || []) {
    const name = r && r.sni;
    try {
      let out = { ...r };
      if (r.cert) out = withCertMaterial(out, 'cert', resolveCert(r.cert, dir, files));
      if (r.mtls) out = withCertMaterial(out, 'mtls', resolveMtls(r.mtls, dir, files));
      routes.push(out);
      seen.set(name, { cert: out.cert, mtls: out.mtls });
    } catch (e) {
      if (onUnreadable) {
        onUnreadable(name, e);
        continue;
      }
      const last = lastGood.get(name);
      if (last) {
        logErr(`failed to resolve cert material for route '${name}' — keeping its last-good cert: ${e.message}`);
        routes.push({ ...r, cert: last.cert, mtls: last.mtls });
        seen.set(name, last);
      } else {
        logErr(`failed to resolve cert material for route '${name}' — skipping route '${name}': ${e.message}`);
      }
    }
  }
  lastGood.clear();
  for (const [k, v] of seen) lastGood.set(k, v);
  const config = { ...spec, listeners, routes };
  return config;
}

/** Sorted listener ports: the identity of a port set across reloads. */
function portKey(listeners) {
  return (listeners || [])
    .map((l) => l.port)
    .sort((a, b) => a - b)
    .join(',');
}

/** The listener part of a config that a route update cannot change (protection presence only). */
function listenerSignature(config) {
  const { routes: _r, ...rest } = config;
  return JSON.stringify({ ...rest, listeners: config.listeners.map(({ protection, ...l }) => ({ ...l, hasProtection: protection != null })) });
}

class SymphonyServer {
  constructor({ configPath, statusPath }) {
    this.configPath = configPath;
    this.statusPath = statusPath;
    this.dir = path.dirname(configPath);
    this.active = new Map();
    this.retiring = new Set();
    this.lastGood = new Map();
    this.startedAt = '';
    this.reloadedAt = '';
    this.queue = Promise.resolve();
    this.watcher = null;
    this.admin = new SymphonyAdmin({ snapshot: () => this.snapshot(), log, logErr });
  }

  readConfig() {
    let text;
    try {
      text = fs.readFileSync(this.configPath, 'utf8');
    } catch (e) {
      logErr(`could not read config ${this.configPath}: ${e.message}`);
      return null;
    }
    try {
      const doc = JSON.parse(text);
      if (!isSymphonyServerConfig(doc)) {
        logErr('config has no "proxies" array — ignoring');
        return null;
      }
      return doc;
    } catch (e) {
      logErr(`config is not valid JSON (ignoring, keeping current routes): ${e.message}`);
      return null;
    }
  }

  /** Reconciles once after any reconcile already queued. */
  reconcile() {
    this.queue = this.queue.then(() => this.doReconcile()).catch((e) => logErr(`reconcile failed: ${e && e.stack ? e.stack : e}`));
    return this.queue;
  }

  async doReconcile() {
    const doc = this.readConfig();
    if (!doc) return;
    const files = new Set([this.configPath]);
    const seen = new Set();
    for (const spec of doc.proxies) {
      const key = portKey(spec && spec.listeners);
      seen.add(key);
      const existing = this.active.get(key);
      if (!this.lastGood.has(key)) this.lastGood.set(key, new Map());
      try {
        const config = toProxyConfig(spec, this.dir, files, this.lastGood.get(key));
        const sig = listenerSignature(config);
        if (existing && existing.sig === sig) {
          existing.proxy.updateConfig({
            routes: config.routes,
            protection: config.listeners.filter((l) => l.protection != null).map((l) => ({ port: l.port, protection: l.protection })),
          });
        } else {
          const proxy = new SymphonyProxy(config);
          proxy.on('error', (err, ctx) => {
            // A route left out because it failed to build (the engine's route isolation).
            if (err.route !== undefined) logErr(`proxy [${key}] skipping route '${err.route}': ${err.message}`);
            else logErr(`proxy [${key}] error${ctx && ctx.listener ? ` (${ctx.listener})` : ''}: ${err.message}`);
          });
          await proxy.start();
          if (existing) this.retire(key, existing.proxy);
          this.active.set(key, { proxy, sig });
          log(`proxy listening on ports [${key}]`);
        }
      } catch (e) {
        logErr(`failed to (re)configure proxy [${key}] — skipping, leaving any running listener in place: ${e.message}`);
      }
    }
    for (const [key, entry] of this.active) {
      if (seen.has(key)) continue;
      await entry.proxy.stop().catch((e) => logErr(`stopping removed proxy [${key}]: ${e.message}`));
      this.active.delete(key);
      this.lastGood.delete(key);
      log(`proxy on ports [${key}] removed`);
    }
    this.files = [...files];
    this.digest = digestFiles(this.files);
    if (this.watcher) this.watcher.set(this.files);
    this.reloadedAt = new Date().toISOString();
    this.writeStatus();
    const admin = doc.admin && typeof doc.admin === 'object' ? { ...doc.admin } : undefined;
    if (admin && admin.socketPath) admin.socketPath = resolvePath(admin.socketPath, this.dir);
    await this.admin.update(admin);
  }

  /**
   * Stops a replaced proxy: it accepts no more at once, its established connections keep running
   * for up to HANDOVER_DRAIN_MS (a recreate does not cut sessions), then what is left is closed.
   */
  retire(key, proxy) {
    const done = proxy
      .stop(HANDOVER_DRAIN_MS)
      .catch((e) => logErr(`stopping old proxy [${key}]: ${e.message}`))
      .finally(() => this.retiring.delete(done));
    this.retiring.add(done);
  }

  ports() {
    return [...this.active.keys()].flatMap((k) => k.split(',').map(Number));
  }

  /** The admin endpoint's snapshot. */
  snapshot() {
    return {
      pid: process.pid,
      version,
      startedAt: this.startedAt,
      reloadedAt: this.reloadedAt,
      proxies: [...this.active].map(([ports, { proxy }]) => ({ ports, metrics: proxy.metrics() })),
    };
  }

  writeStatus() {
    const status = { pid: process.pid, version, startedAt: this.startedAt, reloadedAt: this.reloadedAt, configPath: this.configPath, ports: this.ports() };
    try {
      const tmp = `${this.statusPath}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify(status, null, 2));
      fs.renameSync(tmp, this.statusPath);
    } catch (e) {
      logErr(`could not write status ${this.statusPath}: ${e.message}`);
    }
  }

  async start() {
    this.startedAt = new Date().toISOString();
    this.watcher = new DirWatcher({
      // The directory may hold other files (status.json, the admin socket): only a change of
      // what the config reads reloads.
      onChange: () => {
        if (this.files && digestFiles(this.files) !== this.digest) this.reconcile();
      },
      onError: (dir, err) => logErr(`could not watch ${dir}: ${err.message}`),
      debounceMs: 300,
    });
    await this.reconcile();
    this.watcher.set(this.files || [this.configPath]);
    log(`watching ${this.configPath} for changes`);
  }

  async stop() {
    if (this.watcher) this.watcher.close();
    await this.queue.catch(() => {});
    await this.admin.stop();
    for (const [key, entry] of this.active) await entry.proxy.stop().catch((e) => logErr(`stopping proxy [${key}]: ${e.message}`));
    this.active.clear();
    await Promise.all([...this.retiring]);
    // Only this process's status file: a successor started first has already written its own.
    try {
      const current = JSON.parse(fs.readFileSync(this.statusPath, 'utf8'));
      if (current.pid === process.pid) fs.unlinkSync(this.statusPath);
    } catch {
      // missing, unreadable or not ours: left alone
    }
  }
}

/**
 * Runs a symphony-server config until SIGTERM/SIGINT; resolves the exit status (0 after a
 * signal). `statusPath` defaults to `<config dir>/status.json`.
 */
async function serveSymphony({ configPath, statusPath }) {
  const abs = path.resolve(configPath);
  const status = statusPath ? path.resolve(statusPath) : path.join(path.dirname(abs), 'status.json');
  const server = new SymphonyServer({ configPath: abs, statusPath: status });
  log(`symphony-server (rampart v${version}) starting (pid ${process.pid})`);
  let wake;
  const stopped = new Promise((r) => (wake = r));
  const onTerm = () => wake('SIGTERM');
  const onInt = () => wake('SIGINT');
  const onHup = () => {
    log('received SIGHUP, reloading config');
    server.reconcile();
  };
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onInt);
  process.on('SIGHUP', onHup);
  await server.start();
  const signal = await stopped;
  log(`received ${signal}, shutting down`);
  await server.stop();
  process.off('SIGTERM', onTerm);
  process.off('SIGINT', onInt);
  process.off('SIGHUP', onHup);
  return 0;
}

/**
 * `rampart check` of a symphony-server file: every problem of every `proxies[i]` (each validated
 * by constructing its SymphonyProxy, never started) as `{ path, message }` with paths from the
 * top of the file (`proxies[0].routes[1].cert`), or of the file itself (path '').
 */
function checkSymphonyFile(file) {
  let doc;
  try {
    doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    return [{ path: '', message: e.code ? `cannot read ${file}: ${e.message}` : `not valid JSON: ${e.message}` }];
  }
  const dir = path.dirname(path.resolve(file));
  const errors = [];
  doc.proxies.forEach((spec, i) => {
    const at = `proxies[${i}]`;
    let config;
    try {
      const quiet = new Map();
      config = toProxyConfig(spec, dir, new Set(), quiet, (route, e) => errors.push({ path: `${at}.routes`, message: `route '${route}': ${e.message}` }));
    } catch (e) {
      errors.push({ path: `${at}.listeners`, message: e.message });
      return;
    }
    let proxy;
    try {
      proxy = new SymphonyProxy(config);
    } catch (e) {
      if (!Array.isArray(e.errors)) throw e;
      for (const x of e.errors) errors.push({ path: x.path ? `${at}.${x.path}` : at, message: x.message });
      return;
    }
    // Routes the engine leaves out and serves without (route isolation): problems all the same.
    for (const f of proxy.rampartMetrics().routeFailures || []) {
      for (const x of f.errors || []) errors.push({ path: `${at}.${x.path}`, message: x.message });
    }
  });
  return errors;
}

/** Reads `file` and tells whether it is a symphony-server config (false when unreadable: the caller reports it). */
function fileIsSymphonyServerConfig(file) {
  try {
    return isSymphonyServerConfig(JSON.parse(fs.readFileSync(file, 'utf8')));
  } catch {
    return false;
  }
}

module.exports = { serveSymphony, checkSymphonyFile, isSymphonyServerConfig, fileIsSymphonyServerConfig, version };
