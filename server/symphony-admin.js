'use strict';
/**
 * The admin endpoint of a symphony-server config file (`admin: { socketPath?, socketMode?, port?,
 * host? }`), as symphony-server answers it (docs/symphony.md):
 *
 *   GET /metrics       Prometheus text (0.0.4) in Symphony's metric names (`symphony_*`)
 *   GET /metrics.json  the snapshot `{ pid, version, startedAt, reloadedAt, proxies: [{ ports, metrics }] }`
 *   GET /health        `{ ok, pid, version, ports }`
 *
 * Any other method is 405 (`allow: GET, HEAD`), any other path 404; a query string is ignored.
 * Binds a Unix socket (mode `socketMode`, default 0o660), a TCP port on `host` (default
 * 127.0.0.1), or both. It never stops the proxies from serving: a bind that fails is logged and
 * tried again every 5 s; a socket file left by a killed process is removed only once a connect
 * to it is refused (ECONNREFUSED: nobody listens), never on any other probe error. Shutdown does
 * not unlink the socket path (the next binder reclaims it): see `stop()`.
 */
const http = require('node:http');
const net = require('node:net');
const fs = require('node:fs');

const RETRY_MS = 5000;

/**
 * A Prometheus label value: `\` and `"` escaped, and every line break (CR, LF, CRLF) written as
 * `\n` (exposition format 0.0.4 has no escape for CR; a raw one would split the line for some
 * parsers).
 */
function escapeLabel(value) {
  return String(value)
    .replace(/\\/g, '\\\\')
    .replace(/"/g, '\\"')
    .replace(/\r\n|\r|\n/g, '\\n');
}

/** Samples grouped by metric name, each name under one HELP/TYPE pair, in first-seen order. */
class Exposition {
  constructor() {
    this.families = new Map();
  }

  sample(name, type, help, value, labels = {}) {
    let f = this.families.get(name);
    if (!f) {
      f = { type, help, lines: [] };
      this.families.set(name, f);
    }
    const pairs = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
    f.lines.push(`${name}${pairs.length ? `{${pairs.join(',')}}` : ''} ${value}`);
  }

  toString() {
    const out = [];
    for (const [name, f] of this.families) out.push(`# HELP ${name} ${f.help}`, `# TYPE ${name} ${f.type}`, ...f.lines);
    return `${out.join('\n')}\n`;
  }
}

/**
 * Prometheus text of a snapshot, in Symphony's names and labels (`proxy`, `listener`, `mode`,
 * `reason`, `outcome`, `route`, `group`). Blocked and error counts only under their `reason`;
 * per route four samples plus one per non-zero error reason.
 */
function renderPrometheus(snapshot) {
  const out = new Exposition();
  out.sample('symphony_build_info', 'gauge', 'Always 1; the version is carried in the label.', 1, { version: snapshot.version });
  out.sample('symphony_start_time_seconds', 'gauge', 'Unix time the server process started.', Date.parse(snapshot.startedAt) / 1000);
  out.sample('symphony_config_reload_time_seconds', 'gauge', 'Unix time of the last successful config reconcile.', Date.parse(snapshot.reloadedAt) / 1000);
  for (const { ports, metrics: m } of snapshot.proxies) {
    const proxy = { proxy: ports };
    out.sample('symphony_routes', 'gauge', 'Routes in the live table, including the default route.', m.routes, proxy);
    out.sample('symphony_routes_failing', 'gauge', 'Routes whose build failed and were dropped.', m.failingRoutes, proxy);
    out.sample('symphony_half_closed_connections', 'gauge', 'Connections with one direction closed.', m.halfClosedConnections, proxy);
    out.sample('symphony_suspended_pending', 'gauge', 'Connections held awaiting resolveConnection().', m.pendingSuspended, proxy);
    out.sample('symphony_suspended_total', 'counter', 'Suspended connections by how they ended.', m.suspendedResolved, { ...proxy, outcome: 'resolved' });
    out.sample('symphony_suspended_total', 'counter', 'Suspended connections by how they ended.', m.suspendedUnresolved, { ...proxy, outcome: 'unresolved' });
    for (const l of m.listeners) {
      const tags = { ...proxy, listener: l.address, mode: l.mode };
      out.sample('symphony_listener_active_connections', 'gauge', 'Connections currently being proxied.', l.activeConnections, tags);
      out.sample('symphony_listener_accepted_total', 'counter', 'Connections accepted for proxying.', l.accepted, tags);
      out.sample('symphony_listener_bytes_received_total', 'counter', 'Bytes read from clients (client → upstream).', l.bytesReceived, tags);
      out.sample('symphony_listener_bytes_sent_total', 'counter', 'Bytes written to clients (upstream → client).', l.bytesSent, tags);
      for (const { reason, count } of l.blockedByReason) {
        out.sample('symphony_listener_blocked_total', 'counter', 'Connections rejected before proxying, by reason.', count, { ...tags, reason });
      }
      for (const { reason, count } of l.errorsByReason) {
        out.sample('symphony_listener_errors_total', 'counter', 'Connections that failed, by reason.', count, { ...tags, reason });
      }
    }
    for (const r of m.routeMetrics) {
      const tags = { ...proxy, route: r.route, group: r.metricsGroup === undefined ? '' : r.metricsGroup };
      out.sample('symphony_route_active_connections', 'gauge', 'Connections currently proxied on the route.', r.activeConnections, tags);
      out.sample('symphony_route_connections_total', 'counter', 'Connections routed to the route.', r.connections, tags);
      out.sample('symphony_route_bytes_received_total', 'counter', "Bytes read from the route's clients.", r.bytesReceived, tags);
      out.sample('symphony_route_bytes_sent_total', 'counter', "Bytes written to the route's clients.", r.bytesSent, tags);
      for (const { reason, count } of r.errorsByReason) {
        out.sample('symphony_route_errors_total', 'counter', 'Route connections that failed, by reason.', count, { ...tags, reason });
      }
    }
  }
  return out.toString();
}

/** True when something accepts on `socketPath`; false only when the connect is refused. */
function socketIsLive(socketPath) {
  return new Promise((resolve) => {
    const probe = net.connect(socketPath);
    const done = (live) => {
      probe.destroy();
      resolve(live);
    };
    probe.once('connect', () => done(true));
    // EACCES and the like prove nothing about a listener: only ECONNREFUSED counts as stale.
    probe.once('error', (e) => done(e.code !== 'ECONNREFUSED'));
  });
}

/** The admin listeners of one server process; `update(config)` rebinds when the config changed. */
class SymphonyAdmin {
  /** `snapshot()` gives the MetricsSnapshot; `log`/`logErr` write the server's log lines. */
  constructor({ snapshot, log, logErr }) {
    this.snapshot = snapshot;
    this.log = log;
    this.logErr = logErr;
    this.servers = [];
    this.signature = '';
    this.config = null;
    this.retryTimer = null;
    this.stopped = false;
  }

  async update(config) {
    if (this.stopped) return;
    const signature = JSON.stringify(config || null);
    if (signature === this.signature) return;
    this.signature = signature;
    this.config = config || null;
    await this.closeServers();
    if (config && (config.socketPath || config.port !== undefined)) await this.bind();
  }

  /**
   * Stops answering. The unix socket is not closed (Node's close unlinks its path, which could be
   * a successor's by then): its connections are closed and the listening socket is left to the
   * process exit, after which a connect is refused and the next binder reclaims the path.
   */
  async stop() {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const servers = this.servers;
    this.servers = servers.filter((s) => typeof s.address() !== 'string');
    for (const s of servers) {
      if (typeof s.address() !== 'string') continue;
      s.closeAllConnections();
      s.unref();
    }
    await this.closeServers();
  }

  scheduleRetry() {
    if (this.stopped || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.bind().catch((e) => this.logErr(`admin endpoint: ${e.message}`));
    }, RETRY_MS);
    this.retryTimer.unref();
  }

  async bind() {
    const config = this.config;
    if (this.stopped || !config) return;
    await this.closeServers();
    const targets = [];
    if (config.socketPath) targets.push({ describe: config.socketPath, socketPath: config.socketPath });
    if (config.port !== undefined) {
      const host = config.host || '127.0.0.1';
      targets.push({ describe: `${host}:${config.port}`, port: config.port, host });
    }
    for (const target of targets) {
      try {
        this.servers.push(await this.listenOne(target, config));
        this.log(`admin endpoint listening on ${target.describe}`);
      } catch (e) {
        this.logErr(`could not bind admin endpoint on ${target.describe} (retrying): ${e.message}`);
        await this.closeServers();
        this.scheduleRetry();
        return;
      }
    }
  }

  async listenOne(target, config) {
    const server = http.createServer((req, res) => this.handle(req, res));
    server.keepAliveTimeout = 0;
    const attempt = () =>
      new Promise((resolve, reject) => {
        const onError = (e) => {
          server.removeListener('listening', onListening);
          reject(e);
        };
        const onListening = () => {
          server.removeListener('error', onError);
          if (target.socketPath) {
            try {
              fs.chmodSync(target.socketPath, config.socketMode ?? 0o660);
            } catch (e) {
              this.logErr(`could not set permissions on ${target.describe}: ${e.message}`);
            }
          }
          server.on('error', (e) => this.logErr(`admin endpoint error (${target.describe}): ${e.message}`));
          resolve(server);
        };
        server.once('error', onError);
        server.once('listening', onListening);
        if (target.socketPath) server.listen(target.socketPath);
        else server.listen(target.port, target.host);
      });
    try {
      return await attempt();
    } catch (e) {
      if (e.code !== 'EADDRINUSE' || !target.socketPath || (await socketIsLive(target.socketPath))) throw e;
      this.log(`removing stale admin socket ${target.socketPath}`);
      fs.unlinkSync(target.socketPath);
      return attempt();
    }
  }

  handle(req, res) {
    const path = (req.url || '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    try {
      const snapshot = this.snapshot();
      if (path === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(renderPrometheus(snapshot));
      } else if (path === '/metrics.json') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(snapshot));
      } else if (path === '/health') {
        const ports = snapshot.proxies.flatMap((p) => p.ports.split(',').map(Number));
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true, pid: snapshot.pid, version: snapshot.version, ports }));
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      }
    } catch (e) {
      this.logErr(`admin request failed: ${e.message}`);
      res.writeHead(500, { 'content-type': 'text/plain' }).end('internal error\n');
    }
  }

  async closeServers() {
    const servers = this.servers;
    this.servers = [];
    await Promise.all(
      servers.map(
        (s) =>
          new Promise((resolve) => {
            s.close(() => resolve());
            s.closeAllConnections();
          })
      )
    );
  }
}

module.exports = { SymphonyAdmin, renderPrometheus };
