'use strict';
/**
 * The incident page of the admin API (docs/admin-api.md: Incident page): `GET /` and `GET /ui` serve
 * `ui.html` (read once, when this module loads), which polls `GET /ui.json` every second.
 *
 * `ui.json` is built here from what the other routes show: `metrics()` (listeners, routes and
 * their `upstream` health when the addon reports it, XDP, cluster), `blockedIps({ detail: true })`
 * (the refused addresses and prefixes, at most TOP_BLOCKED, boxed ones first) and, per listener,
 * the connections and refusals per second by reason over the last HISTORY_SECONDS, sampled from
 * `metrics()` once a second by a History started with the admin API. Sampling reads counters
 * only: nothing is added to the proxy's connection path.
 */
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

/** Seconds of per-second samples kept per listener. */
const HISTORY_SECONDS = 300;
/** Sampling period (ms). */
const SAMPLE_MS = 1000;
/** Refused addresses and prefixes listed at most. */
const TOP_BLOCKED = 100;
/** blockedIps() lists in the order the page shows them. */
const BLOCKED_LISTS = ['penaltyBoxed', 'dynamicBlocklist', 'rateLimited', 'concurrencyLimited', 'cidrBlocklist'];

const html = fs.readFileSync(path.join(__dirname, 'ui.html'), 'utf8');
const inline = (tag) =>
  [...html.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g'))].map((m) => `'sha256-${crypto.createHash('sha256').update(m[1]).digest('base64')}'`);

/** Response headers of the page: its inline script and style allowed by hash, nothing else but same-origin fetches. */
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': `default-src 'none'; script-src ${inline('script').join(' ')}; style-src ${inline('style').join(' ')}; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/** A counter's increase between two reads; a smaller value means it restarted (a new proxy after a reload). */
const delta = (now, before) => (now >= before ? now - before : now);

/**
 * Per-listener samples of `metrics()`: every `SAMPLE_MS`, the connections accepted and refused
 * by reason since the previous sample (counts; the page divides by `ms` for rates). Listeners are keyed by `address`; one that
 * is gone from `metrics()` (a reload removed it) is dropped.
 */
class History {
  /** `metrics`: () => metrics() of the running proxy (throws when none runs: the sample is skipped). */
  constructor(metrics, { seconds = HISTORY_SECONDS, now = Date.now } = {}) {
    this.metrics = metrics;
    this.seconds = seconds;
    this.now = now;
    /** address → { t, accepted, byReason } of the previous sample. */
    this.prev = new Map();
    /** address → [{ t, ms, accepted, refused: { reason: count } }] over the `ms` before `t`, oldest first. */
    this.series = new Map();
    this.timer = null;
  }

  start() {
    this.sample();
    this.timer = setInterval(() => this.sample(), SAMPLE_MS);
    this.timer.unref();
    return this;
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  /** Takes one sample now. */
  sample() {
    let m;
    try {
      m = this.metrics();
    } catch {
      return; // no proxy running (between a failed handover and its rollback): a gap in the chart
    }
    const t = this.now();
    const seen = new Set();
    for (const l of m.listeners) {
      seen.add(l.address);
      const prev = this.prev.get(l.address);
      this.prev.set(l.address, { t, accepted: l.accepted, byReason: { ...l.blockedByReason } });
      if (!prev || t <= prev.t) continue;
      const refused = {};
      for (const [reason, n] of Object.entries(l.blockedByReason)) {
        const d = delta(n, prev.byReason[reason] || 0);
        if (d > 0) refused[reason] = d;
      }
      let points = this.series.get(l.address);
      if (!points) this.series.set(l.address, (points = []));
      points.push({ t, ms: t - prev.t, accepted: delta(l.accepted, prev.accepted), refused });
      while (points.length && points[0].t < t - this.seconds * 1000) points.shift();
    }
    for (const address of [...this.prev.keys()]) {
      if (!seen.has(address)) {
        this.prev.delete(address);
        this.series.delete(address);
      }
    }
  }
}

/** The refused addresses and prefixes of `blockedIps({ detail: true })`: `{ total, entries }`, at most TOP_BLOCKED entries. */
function topBlocked(detail) {
  const entries = [];
  let total = 0;
  for (const list of BLOCKED_LISTS) {
    const rows = (detail[list] || []).slice().sort((a, b) => (b.remainingMs ?? Infinity) - (a.remainingMs ?? Infinity));
    total += rows.length;
    for (const r of rows) {
      if (entries.length >= TOP_BLOCKED) break;
      entries.push({
        ip: r.ip,
        prefix: r.ip.includes('/'),
        port: r.port,
        list,
        reason: r.reason,
        remainingMs: r.remainingMs ?? null,
        note: r.note ?? null,
        node: r.node ?? null,
      });
    }
  }
  return { total, entries };
}

/**
 * The page's state: `{ now, version, pid, reloadedAt, server, seconds, listeners, blocked,
 * routes, xdp, cluster, eventsDropped }` (docs/admin-api.md: Incident page).
 */
function uiState({ supervisor, history, version }) {
  const m = supervisor.metrics();
  const xdp = supervisor.xdpStatus();
  const listeners = m.listeners.map((l) => ({
    address: l.address,
    port: l.port,
    activeConnections: l.activeConnections,
    accepted: l.accepted,
    blocked: l.blocked,
    blockedByReason: Object.fromEntries(Object.entries(l.blockedByReason).filter(([, n]) => n > 0)),
    shadowByReason: Object.fromEntries(Object.entries(l.shadowByReason).filter(([, n]) => n > 0)),
    errors: l.errors,
    trackedIps: l.trackedIps,
    defenseActive: l.defenseActive === 1,
    series: history.series.get(l.address) || [],
  }));
  return {
    now: Date.now(),
    version,
    pid: process.pid,
    reloadedAt: supervisor.reloadedAt ? supervisor.reloadedAt.toISOString() : null,
    server: m.server || null,
    seconds: history.seconds,
    listeners,
    blocked: topBlocked(supervisor.blockedIps({ detail: true })),
    routes: m.routeMetrics.map((r) => ({
      route: r.route,
      metricsGroup: r.metricsGroup,
      activeConnections: r.activeConnections,
      connections: r.connections,
      errors: r.errors,
      upstream: r.upstream || null,
    })),
    xdp:
      xdp.attached || xdp.configured || xdp.lastError
        ? {
            attached: xdp.attached,
            interface: xdp.interface,
            mode: xdp.mode,
            dropped: xdp.counters.dropped,
            passed: xdp.counters.passed,
            banned: xdp.counters.banned,
            bannedIps: xdp.bannedIps.length,
            lastError: xdp.lastError || null,
          }
        : null,
    cluster: m.cluster || null,
    eventsDropped: m.eventsDropped,
  };
}

module.exports = { html, PAGE_HEADERS, History, uiState, topBlocked, HISTORY_SECONDS, TOP_BLOCKED };
