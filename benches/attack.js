#!/usr/bin/env node
'use strict';
// `npm run bench:attack [-- options]`: the attacks no single client reveals that loopback can play, each
// for 15 s against a fresh proxy with a legitimate probe beside it, Rampart (the docs'
// recommended protection) and HAProxy (its best equivalent: stick tables on src and
// src,ipmask(24), a penalty flag, `rate-limit sessions`, `timeout http-request`) in the same run.
//
// Rows: no attack (the probe's baseline); a single-IP handshake flood; an IP-diverse handshake
// flood (4,000 sources in 127.1.0.0/16, each far under every per-client limit); an IP-diverse
// post-TLS slowloris (2,000 sources × 4 connections trickling a request head); a pre-TLS slow
// handshake (500 sources × 8 connections sending their ClientHello a byte a second); a
// garbage-bytes flood; an HTTP request flood (TLS keep-alive `GET /` from 4,000 sources in
// 127.1.0.0/16, each far under every per-client limit); an HTTP/2 rapid reset spread over 8
// sources × 4 connections, each connection under the per-connection reset limit.
//
// The origin does `--work-ms` of CPU per request (default 1, as a Node app rendering a page), so
// the request floods show what reaches the application: attack requests/s at the origin (marked
// `X-Attack`) and the origin's in-flight peak (requests taken in and not yet answered). The two
// request-flood rows run Rampart twice — with the plain protection a new user writes (PLAIN) and
// with the recommended one (RECOMMENDED) — and HAProxy with its capacity tools
// (haproxyCapacityConfig: `maxconn` on the server, a queue with `timeout queue`, a priority class
// for the probe's addresses, an `http_req_rate` stick table).
//
// The probe: from 127.0.0.2 a new TLS connection + `GET /` every 50 ms, and from 127.0.0.3 one
// HTTP/2 connection with a `GET /` every 50 ms. It starts 1 s before the attack (so on Rampart it
// is a regular, known-good client, as a site's users are) and stops with it. Per row: offered
// volume, probe success and p99 (vs the no-attack p99), upstream requests/s, proxy peak RSS and
// CPU, refusals by reason, and Rampart's upstream capacity: each route's learned limit (at the
// end, and its lowest while the attack ran; HAProxy: its `maxconn`) and the `upstream_overloaded`
// refusals (the listener's count: refused at accept, 503 answers, HTTP/2 sheds; and the routes'
// refused requests). Targets: success ≥ 99 %, p99 ≤ 2 × baseline + 20 ms,
// RSS ≤ 512 MiB.
//
// With --preroll S (> 1) the probe's clients first run for S − 1 s unmeasured, so on Rampart they
// are known-good long enough before the attack to be in its priority class (known-good since
// 10 s before the overload began); the measured window is the same 1 s + the attack.
// Options: --duration S (default 15), --preroll S (default 1), --only id,id (baseline, hs-single, hs-diverse, slowloris,
// slowhs, garbage, req-flood, h2-reset-spread, baseline-end), --work-ms MS (origin CPU per
// request, default 1; 0 = answer at once), --no-haproxy, --no-pin, --trace (every 500 ms of a
// Rampart row: the origin's counts and each route's capacity, on stderr), --json FILE, --write (replace
// the section in BENCHMARKS.md between `<!-- attack:begin -->` and `<!-- attack:end -->`; with
// --section NAME, between `<!-- NAME:begin -->` and `<!-- NAME:end -->`).
// Pinning (default with ≥ 2 CPUs and `taskset`): the attacker runs on CPUs 1.., and everything
// defended — the proxy, the origin and the probe (this process) — on CPU 0, so a row measures
// what the attack does to the proxy, not the attacker's own CPU taking the probe's (on a real
// deployment the attacker is on other machines). Both proxies get the same pinning.
// Env: RAMPART_PATH = directory of the addon package (default: the repo root).
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const http2 = require('node:http2');
const { fork, execFileSync } = require('node:child_process');
const L = require('./lib');
const { recordClientHello, legitProbe } = require('./clients');

const { flag, opt, list, rampartPath: RAMPART_PATH } = L.cli(__filename);
const DURATION = Number(opt('--duration', 15));
const ONLY = list('--only', null);
const WITH_HAPROXY = !flag('--no-haproxy');
const JSON_OUT = opt('--json', '');
const WORK_MS = Number(opt('--work-ms', 1));
const TRACE = flag('--trace');
const THREADS = 2;
const PIN = !flag('--no-pin') && os.cpus().length >= 2 && L.haveTool('taskset');
const DEFENDED_CPUS = '0';
const ATTACKER_CPUS = `1-${os.cpus().length - 1}`;

/** Pins every thread of `pid` (and the threads it starts later) to `cpus` (a taskset list). */
function pin(pid, cpus) {
  if (PIN) execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
}
const PROBE_RATE = 20; // every 50 ms
const PREROLL_MS = 1000;
/** The probe's unmeasured run before its measured window (--preroll S: S − 1 s). */
const WARM_MS = Math.max(0, Number(opt('--preroll', 1)) * 1000 - PREROLL_MS);
const log = (...a) => console.error(...a);

/** The recommended protection (docs/operating.md: Recommended starting values). */
const RECOMMENDED = {
  rateLimit: { connectionsPerSecond: 20, burst: 40 },
  sustained: { connectionsPerMinute: 600 },
  penaltyBox: { durationMs: 300000, escalation: { factor: 2, maxDurationMs: 86400000 } },
  maxConcurrentPerIp: 64,
  tlsHandshakeTimeoutMs: 10000,
  slowHandshake: { maxPendingPerIp: 16, minBytesPerSecond: 64 },
  prefixLimit: { connectionsPerSecond: 200, burst: 400, maxConcurrent: 2000 },
  listenerLimit: { connectionsPerSecond: 500, burst: 1000, maxPendingHandshakes: 2000 },
  knownGoodTtlMs: 3600000,
  defense: { mode: 'auto', sigma: 3, minConnectionsPerSecond: 200, holdMs: 30000, factor: 0.25 },
  slowRequest: { headTimeoutMs: 10000 },
  requestLimit: { requestsPerSecond: 50, burst: 200 },
};

/** The plain protection a new user writes (the first example of docs/protection.md): a per-client rate. */
const PLAIN = { rateLimit: { connectionsPerSecond: 20 } };

/** The addresses of the probe (known clients: HAProxy's priority class). */
const PROBE_ADDRS = ['127.0.0.2', '127.0.0.3'];

const track = L.childTracker();

/** `n` addresses from 127.<b>.0.0 on, `perNet` in each /24 (host parts .1 on), /24s in order. */
function sources(b, n, perNet) {
  return Array.from({ length: n }, (_, i) => {
    const net = Math.floor(i / perNet);
    return `127.${b + Math.floor(net / 256)}.${net % 256}.${(i % perNet) + 1}`;
  });
}

/** Deterministic shuffle, so consecutive attempts come from different /24s. */
function shuffle(xs) {
  let seed = 42;
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    const j = seed % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

function rows(hello) {
  const all = [
    { id: 'baseline', name: 'no attack' },
    {
      id: 'hs-single',
      name: 'single-IP handshake flood (256 in flight from 127.0.50.1)',
      mode: 'hsflood',
      opts: { sources: ['127.0.50.1'], concurrency: 256, hello },
    },
    {
      id: 'hs-diverse',
      name: 'IP-diverse handshake flood (4,000 sources spread over the 256 /24s of 127.1.0.0/16, 256 in flight: each source and each /24 under its limits)',
      mode: 'hsflood',
      opts: { sources: shuffle(sources(1, 4000, 16)), concurrency: 256, hello },
    },
    {
      id: 'slowloris',
      name: 'IP-diverse post-TLS slowloris (2,000 sources in 200 /24s × 4 connections, a header line every 2 s)',
      mode: 'slowloris',
      opts: { sources: sources(2, 2000, 10), perSource: 4, intervalMs: 2000, inflight: 256, servername: 'localhost' },
    },
    {
      id: 'slowhs',
      name: 'pre-TLS slow handshake (500 sources in 100 /24s × 8 connections, a ClientHello byte a second)',
      mode: 'slowhs',
      opts: { sources: sources(4, 500, 5), perSource: 8, intervalMs: 1000, inflight: 200, hello },
    },
    {
      id: 'garbage',
      name: 'garbage-bytes flood (100 sources, 256 in flight, 512 random bytes each)',
      mode: 'garbage',
      opts: { sources: sources(5, 100, 100), concurrency: 256, bytes: 512 },
    },
    {
      id: 'req-flood',
      name: 'HTTP request flood (512 TLS keep-alive connections from 4,000 sources in the 256 /24s of 127.1.0.0/16, each a `GET /` at most every 250 ms, 20 per connection, then the next source: each source and /24 far under every per-client limit)',
      mode: 'reqflood',
      kinds: ['rampart-plain', 'rampart', 'haproxy-capacity'],
      opts: { sources: shuffle(sources(1, 4000, 16)), conns: 512, intervalMs: 250, requestsPerConn: 20, servername: 'localhost' },
    },
    {
      id: 'h2-reset-spread',
      name: 'HTTP/2 rapid reset spread (8 sources in 8 /24s × 4 connections, each a HEADERS + RST_STREAM pair 40 times a second: under the per-connection limit of 50/s)',
      mode: 'h2reset',
      kinds: ['rampart-plain', 'rampart', 'haproxy-capacity'],
      opts: { sources: sources(6, 8, 1), perSource: 4, resetsPerSecond: 40, batchMs: 100, servername: 'h2.local' },
    },
    { id: 'baseline-end', name: 'no attack, again at the end' },
  ];
  return ONLY ? all.filter((r) => ONLY.includes(r.id)) : all;
}

// ---------- processes ----------
function forkReady(script, args) {
  const child = track(fork(path.join(__dirname, script), args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  const ask = (cmd) =>
    new Promise((resolve) => {
      const on = (m) => {
        if (m && m.stats) {
          child.off('message', on);
          resolve(m.stats);
        }
      };
      child.on('message', on);
      child.send({ cmd });
    });
  return { child, ask };
}

async function startOrigin(ctx) {
  const o = forkReady('attack-origin.js', [JSON.stringify({ h1Port: ctx.h1Port, h2Port: ctx.h2Port, workMs: WORK_MS })]);
  await new Promise((r) => o.child.once('message', r));
  return o;
}

function rampartConfig(ctx, protection) {
  return {
    workerThreads: THREADS,
    listeners: [
      {
        host: '127.0.0.1',
        port: ctx.port,
        defaultCert: { certChain: { file: ctx.certFile }, privateKey: { file: ctx.keyFile } },
        protection,
      },
    ],
    routes: [
      { sni: 'h2.local', http2: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: ctx.h2Port }] },
      { sni: '', protocol: 'http', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: ctx.h1Port }] },
    ],
  };
}

/** HAProxy's best equivalent of RECOMMENDED (2.6 has no known-good notion nor a minimum byte rate). */
function haproxyConfig(ctx) {
  return `global
  nbthread ${THREADS}
  maxconn 9000
  stats socket ${ctx.statsSocket} level admin
defaults
  mode http
  timeout connect 5s
  timeout client 10s
  timeout server 30s
  timeout http-request 10s
  timeout http-keep-alive 10s
backend st_src
  stick-table type ip size 1m expire 300s store conn_rate(1s),conn_cur,gpc0
backend st_net
  stick-table type ip size 1m expire 300s store conn_rate(1s),conn_cur,gpc0
frontend fe
  bind 127.0.0.1:${ctx.port} ssl crt ${ctx.pemFile} alpn h2,http/1.1
  maxconn 9000
  rate-limit sessions 500
  # Per source first (a flag set on excess = the penalty box, kept while the source keeps coming
  # back within 300 s), then per /24 only for connections the source rules let through, like
  # Rampart's order. HAProxy's rate counters have no separate burst: the thresholds are the
  # bursts (40 per source, 400 per /24 in any second), a little more lenient than Rampart's GCRA.
  tcp-request connection track-sc0 src table st_src
  tcp-request connection reject if { sc0_get_gpc0(st_src) gt 0 }
  tcp-request connection sc-inc-gpc0(0) if { sc0_conn_rate(st_src) gt 40 }
  tcp-request connection reject if { sc0_conn_rate(st_src) gt 40 } || { sc0_conn_cur(st_src) gt 64 }
  tcp-request connection track-sc1 src,ipmask(24) table st_net
  tcp-request connection reject if { sc1_get_gpc0(st_net) gt 0 }
  tcp-request connection sc-inc-gpc0(1) if { sc1_conn_rate(st_net) gt 400 }
  tcp-request connection reject if { sc1_conn_rate(st_net) gt 400 } || { sc1_conn_cur(st_net) gt 2000 }
  default_backend be
backend be
  server o1 127.0.0.1:${ctx.h1Port}
`;
}

/**
 * haproxyConfig plus HAProxy's tools for the application's capacity, for the request floods:
 * `maxconn 20` on the server line (the origin does 1 ms of CPU per request: 20 in flight is
 * already ~20 ms of queue inside it) with the excess in HAProxy's queue for at most `timeout
 * queue` (then 503), the probe's addresses dequeued first (`set-priority-class`: HAProxy's
 * nearest to known clients), and a per-source request budget (`http_req_rate(10s)` over 500, i.e.
 * 50/s: above the probe's 20/s, far above each attacking source's) answered 429.
 */
function haproxyCapacityConfig(ctx) {
  return haproxyConfig(ctx)
    .replace(
      'backend st_src\n',
      `backend st_req
  stick-table type ip size 1m expire 60s store http_req_rate(10s)
backend st_src
`
    )
    .replace(
      '  default_backend be\n',
      `  http-request track-sc2 src table st_req
  http-request deny deny_status 429 if { sc2_http_req_rate(st_req) gt 500 }
  default_backend be
`
    )
    .replace(
      `  server o1 127.0.0.1:${ctx.h1Port}\n`,
      `  timeout queue 5s
  http-request set-priority-class int(-10) if { src ${PROBE_ADDRS.join(' ')} }
  server o1 127.0.0.1:${ctx.h1Port} maxconn 20
`
    );
}

/** `routeMetrics[].upstream` of a metrics() snapshot: { 'h2.local' | 'default': { limit, inFlight, refused, refusedPriority } }. */
function upstreamOf(m) {
  const out = {};
  for (const r of m.routeMetrics || []) {
    if (r.upstream)
      out[r.route || 'default'] = {
        limit: r.upstream.limit,
        inFlight: r.upstream.inFlight,
        refused: r.upstream.refused,
        refusedPriority: r.upstream.refusedPriority,
        latencyMs: r.upstream.latencyMs,
        queued: r.upstream.queued,
        inFlightPriority: r.upstream.inFlightPriority,
      };
  }
  return out;
}

/** HAProxy frontend counters from `show stat` (CSV). */
function haproxyStat(sock) {
  return new Promise((resolve, reject) => {
    const s = require('node:net').connect(sock);
    let d = '';
    s.on('data', (x) => (d += x));
    s.on('error', reject);
    s.on('end', () => {
      const lines = d.trim().split('\n');
      const head = lines[0].replace(/^# /, '').split(',');
      const fe = lines.map((l) => l.split(',')).find((f) => f[0] === 'fe' && f[1] === 'FRONTEND') || [];
      const o = {};
      for (const [i, k] of head.entries()) o[k] = Number(fe[i]) || 0;
      resolve(o);
    });
    s.write('show stat\n');
  });
}

async function startProxy(ctx, kind) {
  if (kind.startsWith('rampart')) {
    const protection = kind === 'rampart-plain' ? PLAIN : RECOMMENDED;
    const p = await L.startRampart(rampartConfig(ctx, protection), path.join(ctx.dir, 'rampart.json'), RAMPART_PATH);
    track(p.child);
    return {
      pid: p.pid,
      stop: p.stop,
      async refusals() {
        const all = await p.metrics();
        const m = all.listeners[0];
        const out = {};
        for (const [r, n] of Object.entries(m.blockedByReason)) if (n) out[r] = n;
        for (const [r, n] of Object.entries(m.errorsByReason)) if (n) out[`err:${r}`] = n;
        out.knownGood = m.knownGoodClients;
        out.defense = m.defenseActive;
        out.routes = upstreamOf(all);
        return out;
      },
      /** Each route's upstream capacity now: { route: { limit, inFlight, refused } }. */
      async upstream() {
        return upstreamOf(await p.metrics());
      },
    };
  }
  fs.writeFileSync(path.join(ctx.dir, 'haproxy.cfg'), kind === 'haproxy-capacity' ? haproxyCapacityConfig(ctx) : haproxyConfig(ctx));
  const p = await L.startHaproxy(path.join(ctx.dir, 'haproxy.cfg'), ctx.port);
  track(p.child);
  return {
    pid: p.pid,
    stop: p.stop,
    maxconn: kind === 'haproxy-capacity' ? 20 : null,
    async refusals() {
      const s = await haproxyStat(ctx.statsSocket);
      const out = {};
      for (const [k, label] of [
        ['dcon', 'denied_conn'],
        ['dses', 'denied_sess'],
        ['dreq', 'denied_req'],
        ['ereq', 'req_errors'],
        ['hrsp_4xx', 'http_4xx'],
        ['hrsp_5xx', 'http_5xx'],
      ]) {
        if (s[k]) out[label] = s[k];
      }
      return out;
    },
  };
}

// ---------- probes ----------
/** One HTTP/2 connection from `localAddress`, a GET every 1000/rate ms; reconnects after a failure. */
function h2Probe({ port, localAddress, rate, durationMs, timeoutMs = 5000 }) {
  return new Promise((resolve) => {
    const res = { attempts: 0, ok: 0, latenciesMs: [], sessions: 0 };
    let session = null;
    let pending = 0;
    let ended = false;
    const connect = () => {
      res.sessions++;
      session = http2.connect(`https://127.0.0.1:${port}`, {
        createConnection: () =>
          tls.connect({ host: '127.0.0.1', port, servername: 'h2.local', ALPNProtocols: ['h2'], localAddress, rejectUnauthorized: false }),
      });
      session.on('error', () => {});
      const mine = session;
      session.on('close', () => {
        if (session === mine) session = null;
      });
    };
    const one = () => {
      res.attempts++;
      if (!session || session.destroyed) connect();
      pending++;
      const t0 = process.hrtime.bigint();
      let settled = false;
      let status = 0;
      let bytes = 0;
      const settle = (ok) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (ok) {
          res.ok++;
          res.latenciesMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
        }
        pending--;
        if (ended && pending === 0) finish();
      };
      const timer = setTimeout(() => settle(false), timeoutMs);
      let req;
      try {
        req = session.request({ ':path': '/', ':method': 'GET' });
      } catch {
        session = null;
        return settle(false);
      }
      req.on('response', (h) => (status = h[':status']));
      req.on('data', (d) => (bytes += d.length));
      req.on('end', () => settle(status === 200 && bytes > 0));
      req.on('error', () => settle(false));
      req.end();
    };
    const finish = () => {
      if (session) session.close();
      resolve(res);
    };
    const iv = setInterval(one, 1000 / rate);
    one();
    setTimeout(() => {
      clearInterval(iv);
      ended = true;
      if (pending === 0) finish();
    }, durationMs);
  });
}

// ---------- one measurement ----------
async function measure(ctx, kind, row) {
  const p = await startProxy(ctx, kind);
  pin(p.pid, DEFENDED_CPUS);
  const s0 = L.procStat(p.pid);
  let peakRssKb = s0.rssKb;
  const sampler = setInterval(() => {
    try {
      peakRssKb = Math.max(peakRssKb, L.procStat(p.pid).rssKb);
    } catch {}
  }, 250);
  // Rampart: each route's lowest limit and highest in-flight while the row runs (every 500 ms).
  const lows = {};
  let sampling = Promise.resolve();
  const traceT0 = Date.now();
  let traceLast = {};
  let tracePeak = 0;
  const upSampler = p.upstream
    ? setInterval(() => {
        sampling = p.upstream().then(async (u) => {
          if (TRACE) {
            const o = await ctx.origin.ask('stats');
            tracePeak = Math.max(tracePeak, o.inFlightPeak);
            const ms = Date.now() - traceT0;
            const routes = Object.entries(u).map(
              ([r, x]) => `${r} ${x.inFlight}/${x.limit} (prio ${x.inFlightPriority}, refused ${x.refusedPriority}) lat ${x.latencyMs} queued ${x.queued}`
            );
            log(
              `  trace ${ms} ms: origin attack ${o.attackRequests - (traceLast.attackRequests || 0)} served ${o.served - (traceLast.served || 0)} in flight ${o.inFlight} (peak ${o.inFlightPeak}); ${routes.join('; ')}`
            );
            traceLast = o;
          }
          for (const [route, x] of Object.entries(u)) {
            const l = (lows[route] = lows[route] || { minLimit: Infinity, maxInFlight: 0 });
            if (x.limit !== null) l.minLimit = Math.min(l.minLimit, x.limit);
            l.maxInFlight = Math.max(l.maxInFlight, x.inFlight);
          }
        });
      }, 500)
    : null;
  const probeMs = PREROLL_MS + DURATION * 1000;
  if (WARM_MS > 0) {
    await Promise.all([
      legitProbe({
        host: '127.0.0.1',
        port: ctx.port,
        localAddress: '127.0.0.2',
        servername: 'localhost',
        rate: PROBE_RATE,
        durationMs: WARM_MS,
        minBytes: 64,
      }),
      h2Probe({ port: ctx.port, localAddress: '127.0.0.3', rate: PROBE_RATE, durationMs: WARM_MS }),
    ]);
  }
  const o0 = await ctx.origin.ask('stats');
  const h1 = legitProbe({
    host: '127.0.0.1',
    port: ctx.port,
    localAddress: '127.0.0.2',
    servername: 'localhost',
    rate: PROBE_RATE,
    durationMs: probeMs,
    minBytes: 64,
  });
  const h2 = h2Probe({ port: ctx.port, localAddress: '127.0.0.3', rate: PROBE_RATE, durationMs: probeMs });
  await L.sleep(PREROLL_MS);
  const t0 = Date.now();
  const c0 = L.procStat(p.pid);
  let attack = null;
  if (row.mode) {
    attack = forkReady('attack-clients.js', [row.mode, JSON.stringify({ host: '127.0.0.1', port: ctx.port, ...row.opts })]);
    pin(attack.child.pid, ATTACKER_CPUS);
  }
  await L.sleep(DURATION * 1000);
  const c1 = L.procStat(p.pid);
  const secs = (Date.now() - t0) / 1000;
  const offered = attack ? await attack.ask('stop') : null;
  const [r1, r2] = await Promise.all([h1, h2]);
  if (TRACE) {
    const slow = r1.phasesMs.map((ph, i) => [r1.latenciesMs[i], ph]).sort((a, b) => b[0] - a[0]);
    log(
      `  trace: slowest probe requests, ms [TCP connect, TLS handshake, response]: ${slow
        .slice(0, 6)
        .map(([t, ph]) => `${t.toFixed(1)} ${JSON.stringify(ph)}`)
        .join(', ')}`
    );
  }
  clearInterval(sampler);
  if (upSampler) clearInterval(upSampler);
  await sampling;
  const o1 = await ctx.origin.ask('stats');
  const refusals = await p.refusals();
  await p.stop();
  await L.sleep(300);
  const q = (xs) => (xs.length ? L.quantile(xs, 0.99) : NaN);
  return {
    kind,
    row: row.id,
    secs,
    offered,
    mode: row.mode,
    h1: {
      attempts: r1.attempts,
      ok: r1.ok,
      p99: q(r1.latenciesMs),
      p50: r1.latenciesMs.length ? L.quantile(r1.latenciesMs, 0.5) : NaN,
      latenciesMs: r1.latenciesMs.map((x) => Math.round(x * 10) / 10),
    },
    h2: { attempts: r2.attempts, ok: r2.ok, p99: q(r2.latenciesMs), sessions: r2.sessions },
    upstreamRps: (o1.h1Requests + o1.h2Requests - o0.h1Requests - o0.h2Requests) / ((probeMs + 300) / 1000),
    upstreamConns: o1.h1Connections - o0.h1Connections + (o1.h2Sessions - o0.h2Sessions),
    attackRps: (o1.attackRequests - o0.attackRequests) / ((probeMs + 300) / 1000),
    originServedRps: (o1.served - o0.served) / ((probeMs + 300) / 1000),
    originPeak: Math.max(o1.inFlightPeak, tracePeak),
    rssMiB: peakRssKb / 1024,
    cpuPct: ((c1.cpuTicks - c0.cpuTicks) / L.CLK_TCK / secs) * 100,
    refusals,
    lows,
    maxconn: p.maxconn || null,
  };
}

// ---------- report ----------
const pct = (ok, n) => (n ? `${((100 * ok) / n).toFixed(2)} %` : '–');
const ms = (x) => (Number.isFinite(x) ? `${x.toFixed(1)}` : '–');
function offeredText(r) {
  const o = r.offered;
  if (!o) return '–';
  const n = (x) => x.toLocaleString('en-US');
  if (r.mode === 'hsflood' || r.mode === 'garbage') return `${n(o.attempts)} conns (${n(Math.round(o.attempts / r.secs))}/s)`;
  if (r.mode === 'reqflood') {
    const st =
      Object.entries(o.status)
        .map(([k, v]) => `${k}: ${n(v)}`)
        .join(', ') || 'none';
    return `${n(o.requests)} reqs (${n(Math.round(o.requests / r.secs))}/s; answered ${st}; ${n(o.timeouts)} timed out) on ${n(o.attempts)} conns (${n(o.refused)} refused)`;
  }
  if (r.mode === 'h2reset')
    return `${n(o.streams)} reset streams (${n(Math.round(o.streams / r.secs))}/s) on ${n(o.attempts)} conns (${n(o.goaway)} GOAWAY, ${n(o.refused)} refused)`;
  return `${n(o.attempts)} conns (${n(o.established)} established, ${n(o.open)} held at the end)`;
}
function refusalText(x) {
  return (
    Object.entries(x)
      .filter(([k, v]) => v && !['knownGood', 'defense', 'routes', 'upstream_overloaded'].includes(k))
      .map(([k, v]) => `${k} ${v.toLocaleString('en-US')}`)
      .join(', ') || '–'
  );
}

/** Which proxy a measured kind is ('rampart-plain' → 'rampart', 'haproxy-capacity' → 'haproxy'). */
const proxyOf = (kind) => kind.split('-')[0];

/** The probe's no-attack p99 for `kind`'s proxy: the mean of the rows without attack (first and last). */
function baseP99(base, kind) {
  const xs = base[proxyOf(kind)] || [];
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
}

/** Rampart: each route's limit at the end (lowest while the row ran); HAProxy: `maxconn`. */
function limitText(r) {
  if (r.maxconn) return `maxconn ${r.maxconn}`;
  const routes = r.refusals.routes || {};
  const cells = Object.entries(routes).map(([route, x]) => {
    const low = r.lows[route] && Number.isFinite(r.lows[route].minLimit) ? r.lows[route].minLimit : null;
    return `${route} ${x.limit === null ? 'off' : x.limit}${low !== null && low !== x.limit ? ` (low ${low})` : ''}`;
  });
  return cells.join(', ') || '–';
}

/**
 * Rampart: `blockedByReason.upstream_overloaded` of the listener (the routes' refused requests;
 * of which of priority clients).
 */
function overloadedText(r) {
  if (!r.kind.startsWith('rampart')) return '–';
  const sum = (k) => Object.values(r.refusals.routes || {}).reduce((a, x) => a + x[k], 0);
  const n = (x) => x.toLocaleString('en-US');
  return `${n(r.refusals.upstream_overloaded || 0)} (${n(sum('refused'))}; ${n(sum('refusedPriority'))})`;
}

function table(results, base) {
  const out = [];
  out.push(
    '| attack | proxy | offered | probe TLS+GET ok | p99 (target) | probe h2 ok | h2 p99 | upstream req/s | attack req/s at origin | origin in-flight peak | upstream conns | peak RSS | CPU | learned limit | upstream_overloaded (requests; priority) | refusals |'
  );
  out.push('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|');
  for (const r of results) {
    const target = 2 * baseP99(base, r.kind) + 20;
    const flagMiss = r.h1.ok / r.h1.attempts < 0.99 || r.h1.p99 > target ? ' ✗' : '';
    const extra = r.kind.startsWith('rampart') && r.refusals.defense ? ' (defense on)' : '';
    out.push(
      `| ${r.row} | ${r.kind} | ${offeredText(r)} | ${pct(r.h1.ok, r.h1.attempts)} of ${r.h1.attempts}${flagMiss} | ${ms(r.h1.p99)} ms (${ms(target)}) | ${pct(r.h2.ok, r.h2.attempts)} of ${r.h2.attempts} | ${ms(r.h2.p99)} ms | ${r.upstreamRps.toFixed(1)} | ${r.attackRps.toFixed(1)} | ${r.originPeak} | ${r.upstreamConns} | ${r.rssMiB.toFixed(0)} MiB | ${r.cpuPct.toFixed(0)} % | ${limitText(r)} | ${overloadedText(r)} | ${refusalText(r.refusals)}${extra} |`
    );
  }
  return out.join('\n');
}

async function main() {
  for (const t of ['openssl', ...(WITH_HAPROXY ? ['haproxy'] : [])]) {
    if (!L.haveTool(t)) {
      console.error(`missing tool: ${t} (apt-get install haproxy openssl, or --no-haproxy)`);
      process.exit(1);
    }
  }
  const { generateSelfSignedCert } = require(RAMPART_PATH);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-attack-'));
  const [cert, key] = generateSelfSignedCert(['localhost', 'h2.local']);
  const ctx = {
    dir,
    certFile: path.join(dir, 'cert.pem'),
    keyFile: path.join(dir, 'key.pem'),
    pemFile: path.join(dir, 'haproxy.pem'),
    statsSocket: path.join(dir, 'haproxy.sock'),
    port: await L.freePort(),
    h1Port: await L.freePort(),
    h2Port: await L.freePort(),
  };
  fs.writeFileSync(ctx.certFile, cert);
  fs.writeFileSync(ctx.keyFile, key);
  fs.writeFileSync(ctx.pemFile, cert + key);
  pin(process.pid, DEFENDED_CPUS);
  ctx.origin = await startOrigin(ctx);
  pin(ctx.origin.child.pid, DEFENDED_CPUS);
  const hello = (await recordClientHello('localhost')).toString('base64');
  const kindsOf = (row) => (row.kinds || ['rampart', 'haproxy']).filter((k) => WITH_HAPROXY || !k.startsWith('haproxy'));
  const load0 = os.loadavg();
  const results = [];
  const base = {};
  for (const row of rows(hello)) {
    for (const kind of kindsOf(row)) {
      log(`${row.id} / ${kind} ...`);
      const r = await measure(ctx, kind, row);
      results.push(r);
      if (row.id.startsWith('baseline')) (base[kind] = base[kind] || []).push(r.h1.p99);
      log(
        `  probe ${pct(r.h1.ok, r.h1.attempts)} p99 ${ms(r.h1.p99)} ms, h2 ${pct(r.h2.ok, r.h2.attempts)} p99 ${ms(r.h2.p99)} ms; upstream ${r.upstreamRps.toFixed(1)} req/s (attack ${r.attackRps.toFixed(1)}, served ${r.originServedRps.toFixed(1)}/s, in flight peak ${r.originPeak}); RSS ${r.rssMiB.toFixed(0)} MiB; CPU ${r.cpuPct.toFixed(0)} %; ${refusalText(r.refusals)}; offered ${JSON.stringify(r.offered)}`
      );
    }
  }
  const load1 = os.loadavg();
  const out = [];
  const env = `${os.cpus().length} × ${(os.cpus()[0] || {}).model || 'cpu'}, ${os.type()} ${os.release()}, Node ${process.version}${WITH_HAPROXY ? `, ${(await L.run('haproxy', ['-v'])).stdout.split('\n')[0]}` : ''}`;
  out.push(
    `Measured ${new Date().toISOString().slice(0, 10)} on ${env}; load average before ${load0.map((x) => x.toFixed(2)).join(', ')}, after ${load1.map((x) => x.toFixed(2)).join(', ')}. Each row: a fresh proxy, ${DURATION} s of attack; probe from 1 s before${WARM_MS ? ` (its clients warmed up for ${WARM_MS / 1000} s more, unmeasured)` : ''}; ${PIN ? `attacker pinned to CPUs ${ATTACKER_CPUS}, proxy, origin and probe to CPU ${DEFENDED_CPUS}` : 'no CPU pinning'}; origin CPU per request ${WORK_MS} ms.`
  );
  out.push('');
  out.push(table(results, base));
  out.push('');
  out.push(
    `- Probe p99 without attack (mean of the first and last row): Rampart ${ms(baseP99(base, 'rampart'))} ms${WITH_HAPROXY ? `, HAProxy ${ms(baseP99(base, 'haproxy'))} ms` : ''}; the target column is 2 × that + 20 ms.`
  );
  for (const row of rows(hello).filter((r) => !r.id.startsWith('baseline'))) {
    const r = results.find((x) => x.row === row.id && x.kind === 'rampart');
    const h = results.find((x) => x.row === row.id && proxyOf(x.kind) === 'haproxy');
    const line = [`- **${row.id}**: ${row.name}.`];
    if (r && h) {
      const succ = (x) => x.h1.ok / x.h1.attempts;
      line.push(`Probe success Rampart/HAProxy = ${(succ(r) / Math.max(succ(h), 1e-9)).toFixed(2)}, p99 ratio = ${(r.h1.p99 / h.h1.p99).toFixed(2)}.`);
    }
    out.push(line.join(' '));
  }
  const text = out.join('\n');
  console.log(text);
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(results, null, 2));
  if (flag('--write')) {
    const file = path.join(__dirname, '..', 'BENCHMARKS.md');
    const md = fs.readFileSync(file, 'utf8');
    const section = opt('--section', 'attack');
    const [begin, endMark] = [`<!-- ${section}:begin -->`, `<!-- ${section}:end -->`];
    const start = md.indexOf(begin);
    const end = md.indexOf(endMark);
    if (start >= 0 && end > start) {
      fs.writeFileSync(file, `${md.slice(0, start)}${begin}\n${text}\n${md.slice(end)}`);
      log('BENCHMARKS.md updated');
    } else log(`BENCHMARKS.md has no ${begin} / ${endMark} markers; not written`);
  }
  await L.killWait(ctx.origin.child);
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
