'use strict';
/**
 * The running proxy of `rampart serve` and every change made to it: first start, reloads, dynamic
 * blocks, XDP, shutdown. One change at a time (reloads and block/unblock calls are queued).
 *
 * A reload loads the file (`config-file.js`) and asks `plan.js` what changed:
 * - routes / protection only: one `updateConfig` (all-or-nothing; per-IP state kept);
 * - a listener change: a handover. A new RampartProxy is built with the new config, the old
 *   proxy's `blockIp` entries are copied into it (remaining time as `ttlMs`, note as `reason`),
 *   and it is started while the old one still listens (SO_REUSEPORT lets both hold a port); then
 *   XDP moves to it and the old proxy stops with `drainMs` in the background. If the new proxy
 *   cannot bind a port the old one holds (EADDRINUSE), the handover falls back to stopping the
 *   old proxy first and retrying for up to 2 s (logged as `handover: 'stop-first'` with the
 *   reason); if that fails too, the old config is started again on a fresh proxy.
 * - an invalid file, or a new proxy that cannot start, changes nothing and is logged.
 */
const fs = require('node:fs');
const { RampartProxy } = require('..');
const { loadConfigFile, configWarnings } = require('./config-file');
const { runConfig, plan, ports, stable } = require('./plan');

const PROXY_EVENTS = ['blocked', 'blockedSummary', 'error', 'defense', 'ban', 'suspended'];
/** How long a stop-first handover retries binding while the old proxy lets go of its ports. */
const REBIND_MS = 2000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function errorInfo(e) {
  return { message: e && e.message ? e.message : String(e), code: e && e.code ? e.code : undefined };
}

/**
 * `blockIp` entries of `proxy` as blocks to re-apply, exactly as its engine holds them
 * (`dynamicBlocks()`: canonical CIDR, port scope, remaining time, reason). Blocks received from
 * another cluster node are left out: the new proxy's cluster tier loads them from Redis itself,
 * still attributed to their node.
 */
function snapshotBlocks(proxy) {
  return proxy
    .dynamicBlocks()
    .filter((b) => b.node === undefined)
    .map((b) => ({ cidr: b.cidr, port: b.port, remainingMs: b.remainingMs, note: b.reason }));
}

/** Applies `blocks` to `proxy`; returns `{ carried, dropped: [{ cidr, port, why }] }`. */
function applyBlocks(proxy, blocks, portsOf) {
  let carried = 0;
  const dropped = [];
  for (const b of blocks) {
    if (b.port !== null && !portsOf.includes(b.port)) {
      dropped.push({ cidr: b.cidr, port: b.port, why: 'the port has no listener any more' });
      continue;
    }
    const opts = {};
    if (b.remainingMs !== undefined) {
      if (b.remainingMs <= 0) continue; // expired meanwhile
      opts.ttlMs = Math.max(1, Math.ceil(b.remainingMs));
    }
    if (b.note !== undefined && b.note !== null) opts.reason = b.note;
    if (b.port !== null) opts.port = b.port;
    try {
      proxy.blockIp(b.cidr, opts);
      carried++;
    } catch (e) {
      dropped.push({ cidr: b.cidr, port: b.port, why: errorInfo(e).message });
    }
  }
  return { carried, dropped };
}

/** Starts `proxy`, retrying EADDRINUSE for `ms` (the old proxy is letting go of the port). */
async function startRetrying(proxy, ms) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      await proxy.start();
      return;
    } catch (e) {
      if (e.code !== 'EADDRINUSE' || Date.now() > end) throw e;
      await sleep(1);
    }
  }
}

/**
 * Whether an EADDRINUSE from the new proxy's start() is about a port the old proxy holds (the
 * addon names the address at the end of its message), rather than one another process holds.
 */
function heldByOld(err, oldPorts, newPorts) {
  const m = /:(\d+)\s*$/.exec(err.message || '');
  if (m) return oldPorts.includes(Number(m[1]));
  return oldPorts.some((p) => newPorts.includes(p));
}

/** `net.ipv4.tcp_migrate_req` (0/1), or null when unknown. */
function tcpMigrateReq() {
  try {
    return Number(fs.readFileSync('/proc/sys/net/ipv4/tcp_migrate_req', 'utf8').trim());
  } catch {
    return null;
  }
}

class Supervisor {
  /**
   * @param {{ log: { event(name: string, payload?: object): void }, configPath: string,
   *           onFatal?: (err: Error) => void }} opts `onFatal`: no proxy runs any more (a failed
   *           stop-first handover whose rollback failed too); the server should exit 1.
   */
  constructor({ log, configPath, onFatal = () => {} }) {
    this.log = log;
    this.onFatal = onFatal;
    this.configPath = configPath;
    this.proxy = null;
    /** `{ loaded, run }` of the config the proxy runs. */
    this.current = null;
    /** The last load attempt's inputs and hash (what the watcher compares against). */
    this.seen = null;
    this.draining = new Set();
    this.queue = Promise.resolve();
    this.stopping = false;
    this.reloads = { success: 0, failure: 0 };
    this.lastReloadOk = true;
    this.reloadedAt = null;
    this.xdpError = null;
  }

  /** Runs `fn` after every change queued before it. */
  exclusive(fn) {
    const p = this.queue.then(fn, fn);
    this.queue = p.then(
      () => undefined,
      () => undefined
    );
    return p;
  }

  _makeProxy(config) {
    const proxy = new RampartProxy(config);
    for (const name of PROXY_EVENTS) proxy.on(name, (payload) => this.log.event(name, payload));
    return proxy;
  }

  /** First start from a valid load (`loadConfigFile` with no errors). Throws when a listener cannot bind. */
  async start(loaded) {
    const run = runConfig(loaded.proxy);
    const proxy = this._makeProxy(run.config);
    await proxy.start();
    this.proxy = proxy;
    this.current = { loaded, run };
    this.seen = { paths: loaded.inputs.map((i) => i.path), hash: loaded.hash };
    this.reloadedAt = new Date();
    this.warn(loaded);
    const xdp = await this._attachXdp(proxy, loaded.xdp);
    return { ports: ports(run.config), xdp };
  }

  /** Logs a `warning` event (one line each) for what `configWarnings` finds in `loaded`. */
  warn(loaded) {
    for (const w of configWarnings(loaded)) this.log.event('warning', w);
  }

  get running() {
    return Boolean(this.proxy) && !this.stopping;
  }

  ports() {
    return this.current ? ports(this.current.run.config) : [];
  }

  /** The admin section in force (null before the first start or without one). */
  adminConfig() {
    return (this.current && this.current.loaded.admin) || null;
  }

  /** The admin token in force (null: none; changes over the API are refused). */
  token() {
    const a = this.current && this.current.loaded.admin;
    return a && a.token ? a.token : null;
  }

  drainMs() {
    return this.current ? this.current.loaded.drainMs : 0;
  }

  /** Every file the watcher should follow: the running config's and the last attempt's. */
  watchedFiles() {
    const out = new Set([this.configPath]);
    if (this.current) for (const i of this.current.loaded.inputs) out.add(i.path);
    if (this.seen) for (const p of this.seen.paths) out.add(p);
    return [...out];
  }

  // --- XDP -------------------------------------------------------------------------------------

  async _attachXdp(proxy, cfg) {
    if (!cfg) {
      this.xdpError = null;
      return null;
    }
    try {
      const st = await proxy.attachXdp({ interface: cfg.interface, mode: cfg.mode });
      this.xdpError = null;
      return { attached: true, interface: st.interface, mode: st.mode };
    } catch (e) {
      const info = errorInfo(e);
      this.xdpError = { code: info.code || 'ERR_RAMPART_XDP', message: info.message };
      this.log.event('error', { code: 'xdp_attach_failed', message: info.message, cause: info.code, interface: cfg.interface });
      return { attached: false, interface: cfg.interface, error: info.message };
    }
  }

  async _detachXdp(proxy) {
    if (!proxy.xdpStatus().attached) return;
    try {
      await proxy.detachXdp();
    } catch (e) {
      const info = errorInfo(e);
      this.log.event('error', { code: 'xdp_detach_failed', message: info.message, cause: info.code });
    }
  }

  /** After an in-place reload: re-attach when the xdp section changed or a previous attach failed. */
  async _syncXdp(prevCfg, nextCfg) {
    const attached = this.proxy.xdpStatus().attached;
    if (stable(prevCfg) === stable(nextCfg) && (attached || !nextCfg)) return undefined;
    await this._detachXdp(this.proxy);
    return this._attachXdp(this.proxy, nextCfg);
  }

  xdpStatus() {
    const cfg = this.current && this.current.loaded.xdp;
    return { ...this.proxy.xdpStatus(), configured: cfg || null, lastError: this.xdpError };
  }

  // --- reload ----------------------------------------------------------------------------------

  /**
   * Reloads the config file. Resolves `{ ok: true, applied: 'none' | 'update' | 'restart',
   * changed }`, or `{ ok: false, errors }` (invalid file) / `{ ok: false, error, code }` (a new
   * proxy could not start); in both failure cases the running config is unchanged.
   */
  reload(trigger) {
    return this.exclusive(async () => {
      try {
        return await this._reload(trigger);
      } catch (e) {
        // A bug on the way (the file loader never throws): the running config stays, the
        // failure is counted and logged, and the caller gets it as a failed reload.
        const info = errorInfo(e);
        return this._failed(
          trigger,
          { error: info.message, code: info.code || 'ERR_RELOAD' },
          `reload failed: ${info.message}; the running config is unchanged`
        );
      }
    });
  }

  /** True when a file read by the last load attempt now reads differently. */
  filesChanged() {
    if (!this.seen) return false;
    const { readInputs, hashInputs } = require('./config-file');
    return hashInputs(readInputs(this.seen.paths)) !== this.seen.hash;
  }

  async _reload(trigger) {
    if (this.stopping) return { ok: false, error: 'shutting down', code: 'ERR_STOPPING' };
    const t0 = Date.now();
    const loaded = loadConfigFile(this.configPath);
    this.seen = { paths: loaded.inputs.map((i) => i.path), hash: loaded.hash };
    if (loaded.errors.length) {
      return this._failed(trigger, { errors: loaded.errors }, 'invalid config; the running config is unchanged');
    }
    const prev = this.current;
    const run = runConfig(loaded.proxy);
    const p = plan(prev.run, run);
    const changed = [...p.changed];
    const entry = { trigger, ok: true, applied: 'none', changed };
    try {
      if (p.restart) {
        Object.assign(entry, await this._handover(loaded, run));
        entry.applied = 'restart';
      } else if (p.update) {
        this.proxy.updateConfig(p.update);
        entry.applied = 'update';
      }
    } catch (e) {
      if (Array.isArray(e.errors)) {
        const errors = e.errors.map((x) => ({ path: x.path ? `proxy.${x.path}` : 'proxy', message: x.message }));
        return this._failed(trigger, { errors }, 'the new config was refused; the running config is unchanged');
      }
      const info = errorInfo(e);
      const detail = { error: info.message, code: info.code };
      if (e.rolledBack) detail.rolledBack = e.rolledBack;
      return this._failed(trigger, detail, info.message);
    }
    if (!p.restart) {
      const xdp = await this._syncXdp(prev.loaded.xdp, loaded.xdp);
      if (xdp !== undefined) entry.xdp = xdp;
    }
    if (stable(prev.loaded.xdp) !== stable(loaded.xdp)) changed.push('xdp');
    if (prev.loaded.drainMs !== loaded.drainMs) changed.push('drainMs');
    const pa = prev.loaded.admin;
    const na = loaded.admin;
    if ((pa && pa.token) !== (na && na.token)) changed.push('admin.token');
    const addr = (a) => (a ? stable({ host: a.host, port: a.port, socketPath: a.socketPath }) : 'none');
    if (addr(pa) !== addr(na)) entry.notApplied = ['admin listen address (restart to apply)'];
    this.current = { loaded, run };
    this.reloadedAt = new Date();
    this.reloads.success++;
    this.warn(loaded);
    this.lastReloadOk = true;
    entry.ports = ports(run.config);
    entry.durationMs = Date.now() - t0;
    this.log.event('reload', entry);
    return { ok: true, applied: entry.applied, changed };
  }

  _failed(trigger, detail, message) {
    this.reloads.failure++;
    this.lastReloadOk = false;
    this.log.event('reload', { trigger, ok: false, message, ...detail });
    return { ok: false, message, ...detail };
  }

  /** Replaces the proxy for a listener change (see the module note). */
  async _handover(loaded, run) {
    const old = this.proxy;
    const oldRun = this.current.run;
    const drainMs = loaded.drainMs;
    const blocks = snapshotBlocks(old);
    const fresh = this._makeProxy(run.config);
    const out = { handover: 'overlap', ...applyBlocksSummary(applyBlocks(fresh, blocks, ports(run.config))) };
    try {
      await fresh.start();
    } catch (e) {
      if (e.code !== 'EADDRINUSE' || !heldByOld(e, ports(oldRun.config), ports(run.config))) throw e; // the old proxy keeps running untouched
      out.handover = 'stop-first';
      out.fallbackReason = `the new listeners could not bind beside the old ones (${e.message}); stopped the old proxy first, so connections in that gap were refused`;
      this._retire(old, drainMs);
      try {
        await startRetrying(fresh, REBIND_MS);
      } catch (e2) {
        await this._rollback(oldRun, blocks, e2);
        e2.rolledBack = `${out.fallbackReason}; the new proxy still could not start, so the old config runs again on a fresh proxy (penalty boxes and rate usage start afresh)`;
        throw e2;
      }
      await this._detachXdp(old);
      this.proxy = fresh;
      out.xdp = await this._attachXdp(fresh, loaded.xdp);
      if (out.xdp === null) delete out.xdp;
      return out;
    }
    await this._detachXdp(old);
    this.proxy = fresh;
    out.xdp = await this._attachXdp(fresh, loaded.xdp);
    if (out.xdp === null) delete out.xdp;
    const migrate = tcpMigrateReq();
    if (migrate !== null) out.tcpMigrateReq = migrate;
    if (migrate === 0) out.hint = 'net.ipv4.tcp_migrate_req is 0: connections still queued in the old listeners are reset when they close; set it to 1';
    this._retire(old, drainMs);
    return out;
  }

  /** After a failed stop-first handover: the old config again, on a fresh proxy. */
  async _rollback(oldRun, blocks, cause) {
    const back = this._makeProxy(oldRun.config);
    applyBlocks(back, blocks, ports(oldRun.config));
    try {
      await startRetrying(back, REBIND_MS);
    } catch (e) {
      this.proxy = null;
      this.log.event('error', {
        code: 'rollback_failed',
        message: `neither the new nor the old config could bind: ${errorInfo(cause).message}; then ${errorInfo(e).message}`,
      });
      this.onFatal(e);
      throw e;
    }
    const old = this.proxy;
    await this._detachXdp(old);
    this.proxy = back;
    await this._attachXdp(back, this.current.loaded.xdp);
  }

  /** Stops `proxy` with `drainMs` in the background; `stop()` waits for it. */
  _retire(proxy, drainMs) {
    const p = proxy
      .stop({ drainMs })
      .catch((e) => this.log.event('error', { code: 'stop_failed', ...errorInfo(e) }))
      .finally(() => this.draining.delete(p));
    this.draining.add(p);
  }

  // --- blocks ----------------------------------------------------------------------------------

  block(cidr, opts) {
    return this.exclusive(() => this.proxy.blockIp(cidr, opts));
  }

  unblock(cidr, opts) {
    return this.exclusive(() => this.proxy.unblockIp(cidr, opts));
  }

  blockedIps(opts) {
    return this.proxy.blockedIps(opts);
  }

  explain(ip) {
    return this.proxy.explain(ip);
  }

  metrics() {
    return {
      ...this.proxy.metrics(),
      server: {
        reloads: { ...this.reloads },
        lastReloadSuccessful: this.lastReloadOk,
        reloadedAt: this.reloadedAt && this.reloadedAt.toISOString(),
      },
    };
  }

  /** The proxy's Prometheus text plus the server's own series. */
  prometheus() {
    const lines = [
      '# HELP rampart_config_reloads_total Config reloads (SIGHUP, file change, POST /reload) by result.',
      '# TYPE rampart_config_reloads_total counter',
      `rampart_config_reloads_total{result="success"} ${this.reloads.success}`,
      `rampart_config_reloads_total{result="failure"} ${this.reloads.failure}`,
      '# HELP rampart_config_last_reload_successful 1 when the last reload was applied, 0 when it was refused (the previous config keeps running).',
      '# TYPE rampart_config_last_reload_successful gauge',
      `rampart_config_last_reload_successful ${this.lastReloadOk ? 1 : 0}`,
      '# HELP rampart_config_last_reload_success_timestamp_seconds When the running config was applied (Unix time).',
      '# TYPE rampart_config_last_reload_success_timestamp_seconds gauge',
      `rampart_config_last_reload_success_timestamp_seconds ${this.reloadedAt ? this.reloadedAt.getTime() / 1000 : 0}`,
    ];
    const xdp = this.current && this.current.loaded.xdp;
    if (xdp) {
      lines.push(
        '# HELP rampart_server_xdp_attached 1 when the XDP filter named in the config file is attached.',
        '# TYPE rampart_server_xdp_attached gauge',
        `rampart_server_xdp_attached{interface=${JSON.stringify(xdp.interface)}} ${this.proxy.xdpStatus().attached ? 1 : 0}`
      );
    }
    return `${this.proxy.prometheus()}${lines.join('\n')}\n`;
  }

  // --- shutdown --------------------------------------------------------------------------------

  /** Stops the proxy (and any still draining) with `drainMs`; resolves when every socket closed. */
  async stop(drainMs = this.drainMs()) {
    this.stopping = true;
    await Promise.race([this.queue, sleep(REBIND_MS + 1000)]);
    const all = [...this.draining];
    if (this.proxy) all.push(this.proxy.stop({ drainMs }));
    await Promise.allSettled(all);
  }
}

function applyBlocksSummary({ carried, dropped }) {
  const out = { blocksCarried: carried };
  if (dropped.length) out.blocksDropped = dropped;
  return out;
}

module.exports = { Supervisor, snapshotBlocks, applyBlocks };
