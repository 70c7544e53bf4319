#!/usr/bin/env node
'use strict';
// `npm run bench:h2 [-- --quick]`: the HTTP/2 guard: its cost, and the rapid-reset and CONTINUATION floods.
//
// Rampart (benches/rampart-server.js, its own process, workerThreads 2) terminates TLS with ALPN
// h2 on one route (`http2: true`) in front of an h2c origin: one HAProxy process, `mode http`,
// `bind ... proto h2`, answering every request from memory, on 127.0.0.10-13 (round-robin).
//
// cost: h2load -c 64 -m 32 -D <s> through the route, `protection: { http2: { enabled: true } }`
//   (the guard with its defaults, its per-client budgets and stream cap out of h2load's reach:
//   its 64 connections share one address) against `{ enabled: false }`, alternating
//   in the same rounds (off, on, then on, off, ...), a fresh proxy per run; req/s and the proxy's
//   CPU per request (/proc/<pid>/stat).
// capacity (only with --only capacity): the same h2load through the route with `protocol: 'http'`
//   and the guard on (it counts the streams) with its per-client budgets and per-connection
//   stream cap out of h2load's reach (`clientFactor: 1000, maxStreamsPerConnection: 2^30`: its 64
//   connections from one address open 2,048 streams at once, over the default per-client burst),
//   `concurrency: { mode: 'off' }` (streams measured, no limit) against the default adaptive
//   limit and the adaptive limit held at 10,000 (min = max = initial: the limiter runs but cannot
//   cut), rotating the order in the same rounds: upstream tracking's cost.
// rapid, continuation: 16 connections (from 127.0.1.1-16) sending HEADERS + RST_STREAM pairs,
//   and 8 (127.0.2.1-8) sending HEADERS + empty CONTINUATION frames, each reconnecting as soon as
//   it is closed; meanwhile a probe from 127.0.0.3 opens a new h2 connection + GET / every
//   1000/rate ms (success = 200 and the body within 5 s). Each attack runs with the defaults
//   (a source is boxed after 3 violations in 60 s) and with boxing out of reach
//   (`boxAfterViolations: 1000`: every attack connection is handshaken, cut by the guard and
//   closed); a probe without attack gives the baseline latency.
//
// Options: --quick (1 round, 3 s h2load, 6 s attacks), --rounds N, --duration S (h2load),
// --warm-up S (h2load's --warm-up-time: S s of load before the measured -D, the proxy's CPU too),
// --attack S, --only cost,attack,capacity (default cost,attack), --json FILE. Env: RAMPART_PATH (default: the repo root).
// Internal: node benches/h2.js attack '<json>' (the attack child process).
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const http2 = require('node:http2');
const { fork } = require('node:child_process');
const L = require('./lib');
const H = require('../__tests__/helpers/h2');

const { flag, opt, list, rampartPath: RAMPART_PATH } = L.cli(__filename);
const QUICK = flag('--quick');
const ROUNDS = Number(opt('--rounds', QUICK ? 1 : 3));
const DURATION = Number(opt('--duration', QUICK ? 3 : 10));
const ATTACK_SECS = Number(opt('--attack', QUICK ? 6 : 15));
const WARM_UP = Number(opt('--warm-up', 0));
const ONLY = list('--only', ['cost', 'attack']);
const JSON_OUT = opt('--json', '');
const THREADS = 2;
const SNI = 'localhost';
const PROBE_RATE = 20;
const BODY = 'x'.repeat(64);

const log = (...a) => console.error(...a);
const track = L.childTracker();

// ---------- the attack child ----------

/**
 * Keeps `conns` raw HTTP/2 connections (over TLS, ALPN h2) attacking: each sends `payload` (the
 * preface, a SETTINGS and the flood) and is opened again as soon as it closes. Counts attempts,
 * `served` (TLS handshake completed), `calm` (a GOAWAY ENHANCE_YOUR_CALM came back) and `refused`
 * (closed before the handshake finished: refused at accept, e.g. penalty-boxed).
 */
function attack({ host, port, sources, kind }) {
  const flood =
    kind === 'rapid'
      ? Array.from({ length: 1000 }, (_, i) => Buffer.concat([H.headers(2 * i + 1), H.rst(2 * i + 1)]))
      : [H.headers(1, { endHeaders: false }), ...Array.from({ length: 2000 }, () => H.continuation(1))];
  const payload = Buffer.concat([H.PREFACE, H.settings(), ...flood]);
  const st = { attempts: 0, served: 0, calm: 0, refused: 0 };
  let stopped = false;
  const one = (src) => {
    if (stopped) return;
    st.attempts++;
    let served = false;
    let done = false;
    let buf = Buffer.alloc(0);
    const s = tls.connect({ host, port, servername: SNI, localAddress: src, ALPNProtocols: ['h2'], rejectUnauthorized: false });
    const finish = () => {
      if (done) return;
      done = true;
      if (!served) st.refused++;
      s.destroy();
      setImmediate(() => one(src));
    };
    s.on('secureConnect', () => {
      served = true;
      st.served++;
      s.write(payload);
    });
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      // GOAWAY: type 0x7, error code in the last 4 bytes of its 8-byte payload.
      for (let i = 0; i + 17 <= buf.length; ) {
        const len = buf.readUIntBE(i, 3);
        if (buf[i + 3] === 0x7 && buf.readUInt32BE(i + 13) === H.ENHANCE_YOUR_CALM) {
          st.calm++;
          return finish();
        }
        i += 9 + len;
      }
    });
    s.on('error', finish);
    s.on('close', finish);
    s.setTimeout(5000, finish);
  };
  for (const src of sources) one(src);
  L.answerStats(st, () => (stopped = true));
}

// ---------- the legit probe ----------

/**
 * Open loop: every 1000/rate ms a new h2 connection from `localAddress` and one GET /. Resolves
 * `{ attempts, ok, latenciesMs }` (successful ones: connect start to the end of the body).
 */
function h2Probe({ host, port, localAddress, rate, durationMs, timeoutMs = 5000 }) {
  return new Promise((resolve) => {
    const res = { attempts: 0, ok: 0, latenciesMs: [], fails: {} };
    let pending = 0;
    let ended = false;
    const maybeDone = () => ended && pending === 0 && resolve(res);
    const one = () => {
      res.attempts++;
      pending++;
      const t0 = process.hrtime.bigint();
      let settled = false;
      let status = 0;
      let body = '';
      let why = 'timeout';
      const session = http2.connect(`https://${SNI}:${port}`, {
        createConnection: () => tls.connect({ host, port, servername: SNI, localAddress, ALPNProtocols: ['h2'], rejectUnauthorized: false }),
      });
      const settle = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (status === 200 && body === BODY) {
          res.ok++;
          res.latenciesMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
        } else {
          const k = status ? `status ${status}` : why;
          res.fails[k] = (res.fails[k] || 0) + 1;
        }
        session.destroy();
        pending--;
        maybeDone();
      };
      const timer = setTimeout(settle, timeoutMs);
      const fail = (e) => {
        why = (e && (e.code || e.message)) || 'closed';
        settle();
      };
      session.on('error', fail);
      session.on('close', () => fail(null));
      const req = session.request({ ':path': '/' });
      req.on('response', (h) => (status = h[':status']));
      req.on('data', (d) => (body += d));
      req.on('end', settle);
      req.on('error', fail);
    };
    const iv = setInterval(one, 1000 / rate);
    one();
    setTimeout(() => {
      clearInterval(iv);
      ended = true;
      maybeDone();
    }, durationMs);
  });
}

// ---------- setup ----------

function originConfig({ addrs, port, maxconn }) {
  return `global
  nbthread 1
  maxconn ${maxconn}
defaults
  mode http
  timeout client 60s
  timeout server 60s
  timeout connect 5s
frontend origin
${addrs.map((a) => `  bind ${a}:${port} proto h2`).join('\n')}
  http-request return status 200 content-type text/plain string ${BODY}
`;
}

/** `route`: extra fields of the route (the capacity rows: `protocol`, `concurrency`). */
function rampartConfig(ctx, http2Guard, route = {}) {
  return {
    workerThreads: THREADS,
    listeners: [
      {
        host: '127.0.0.1',
        port: ctx.port,
        defaultCert: { certChain: { file: ctx.certFile }, privateKey: { file: ctx.keyFile } },
        // The only field that differs between the rows: `http2`. The pending-handshake guard
        // (64 per source by default) is raised so the attack rows measure the HTTP/2 guard.
        protection: { http2: http2Guard, slowHandshake: { maxPendingPerIp: 65535 } },
      },
    ],
    routes: [{ sni: '', terminateTls: true, http2: true, ...route, upstreams: ctx.upstreams.map((u) => ({ kind: 'tcp', ...u })) }],
  };
}

async function startRampart(ctx, http2Guard, route) {
  const p = await L.startRampart(rampartConfig(ctx, http2Guard, route), path.join(ctx.dir, 'rampart.json'), RAMPART_PATH);
  track(p.child);
  return p;
}

function parseH2load(out) {
  const f = /finished in ([\d.]+)s, ([\d.]+) req\/s/.exec(out) || [];
  const r = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(out) || [];
  const s2xx = Number((/status codes: (\d+) 2xx/.exec(out) || [])[1]);
  return { secs: Number(f[1]), rps: Number(f[2]), requests: Number(r[1]), succeeded: Number(r[4]), failed: Number(r[5]), errored: Number(r[6]), s2xx };
}

/** `guard`: true/false (`http2.enabled`) or a whole `http2` config. */
async function measureCost(ctx, guard, route) {
  const p = await startRampart(ctx, typeof guard === 'boolean' ? { enabled: guard } : guard, route);
  try {
    const warm = WARM_UP > 0 ? [`--warm-up-time=${WARM_UP}`] : [];
    const args = ['-c', '64', '-m', '32', '-D', String(DURATION), ...warm, `https://127.0.0.1:${ctx.port}/`];
    ctx.commands.cost = `h2load ${args.join(' ')}`;
    const running = L.run('h2load', args, { timeoutMs: (DURATION + WARM_UP + 30) * 1000 });
    // The proxy's CPU from the end of h2load's warm-up (unmeasured by h2load too).
    if (WARM_UP > 0) await L.sleep(WARM_UP * 1000);
    const s0 = L.procStat(p.pid);
    const r = await running;
    const s1 = L.procStat(p.pid);
    const h = parseH2load(r.stdout);
    if (!(h.succeeded > 0)) throw new Error(`h2load got nothing through Rampart:\n${r.stdout}${r.stderr}`);
    const all = await p.metrics();
    const m = all.listeners[0];
    const up = all.routeMetrics[0].upstream;
    const cpuSec = (s1.cpuTicks - s0.cpuTicks) / L.CLK_TCK;
    const floodDetail = Object.fromEntries(Object.entries(m.h2FloodByDetail).filter(([, v]) => v));
    return {
      ...h,
      cpuUsPerReq: (cpuSec * 1e6) / h.succeeded,
      cpuPct: (cpuSec / h.secs) * 100,
      floods: m.blockedByReason.h2_flood,
      floodDetail,
      refused: up.refused,
      limit: up.limit,
      answered: up.answered,
    };
  } finally {
    await p.stop();
  }
}

async function measureAttack(ctx, row) {
  const p = await startRampart(ctx, row.http2);
  let child;
  try {
    if (row.kind) {
      child = track(
        fork(__filename, ['attack', JSON.stringify({ host: '127.0.0.1', port: ctx.port, sources: row.sources, kind: row.kind })], {
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        })
      );
    }
    const ask = (cmd) =>
      new Promise((resolve) => {
        child.once('message', (m) => resolve(m.stats));
        child.send({ cmd });
      });
    await L.sleep(1000);
    const a0 = child ? await ask('stats') : null;
    const m0 = (await p.metrics()).listeners[0];
    const s0 = L.procStat(p.pid);
    const t0 = Date.now();
    const probe = await h2Probe({ host: '127.0.0.1', port: ctx.port, localAddress: '127.0.0.3', rate: PROBE_RATE, durationMs: ATTACK_SECS * 1000 });
    const dt = (Date.now() - t0) / 1000;
    const s1 = L.procStat(p.pid);
    const m1 = (await p.metrics()).listeners[0];
    const a1 = child ? await ask('stop') : null;
    const d = (k) => (a1 ? (a1[k] - a0[k]) / dt : NaN);
    const detail = row.detail ? m1.h2FloodByDetail[row.detail] - m0.h2FloodByDetail[row.detail] : 0;
    const errors = {};
    for (const [k, v] of Object.entries(m1.errorsByReason)) if (v > m0.errorsByReason[k]) errors[k] = v - m0.errorsByReason[k];
    return {
      probeFails: probe.fails,
      proxyErrors: errors,
      okPct: (probe.ok / probe.attempts) * 100,
      p50Ms: L.quantile(probe.latenciesMs, 0.5),
      p99Ms: L.quantile(probe.latenciesMs, 0.99),
      attemptsPerSec: d('attempts'),
      cutPerSec: d('calm'),
      refusedPerSec: d('refused'),
      floodsPerSec: (m1.blockedByReason.h2_flood - m0.blockedByReason.h2_flood) / dt,
      detailPct: m1.blockedByReason.h2_flood > m0.blockedByReason.h2_flood ? (detail / (m1.blockedByReason.h2_flood - m0.blockedByReason.h2_flood)) * 100 : NaN,
      boxedPerSec: (m1.blockedByReason.penalty_boxed - m0.blockedByReason.penalty_boxed) / dt,
      cpuPct: ((s1.cpuTicks - s0.cpuTicks) / L.CLK_TCK / dt) * 100,
      rssMiB: s1.rssKb / 1024,
    };
  } finally {
    if (child) await L.killWait(child);
    await p.stop();
  }
}

// ---------- report ----------

const fmt = (d) => (x) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');
function cell(xs, f) {
  const v = xs.filter((x) => Number.isFinite(x));
  if (!v.length) return { med: NaN, text: 'n/a' };
  const med = L.median(v);
  return { med, text: v.length > 1 ? `${f(med)} (${f(Math.min(...v))}–${f(Math.max(...v))})` : f(med) };
}

async function main() {
  for (const t of ['haproxy', 'h2load']) {
    if (!L.haveTool(t)) {
      console.error(`missing tool: ${t}\n  apt-get install haproxy nghttp2-client`);
      process.exit(2);
    }
  }
  const started = Date.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-h2bench-'));
  const { generateSelfSignedCert } = require(RAMPART_PATH);
  const [cert, key] = generateSelfSignedCert([SNI, '127.0.0.1']);
  const ctx = { dir, certFile: path.join(dir, 'cert.pem'), keyFile: path.join(dir, 'key.pem'), commands: {} };
  fs.writeFileSync(ctx.certFile, cert);
  fs.writeFileSync(ctx.keyFile, key);
  const originPort = await L.freePort();
  ctx.port = await L.freePort();
  const addrs = ['127.0.0.10', '127.0.0.11', '127.0.0.12', '127.0.0.13'];
  ctx.upstreams = addrs.map((host) => ({ host, port: originPort }));
  const lim = L.nofileLimits();
  const originCfg = path.join(dir, 'origin.cfg');
  fs.writeFileSync(originCfg, originConfig({ addrs, port: originPort, maxconn: Math.max(1024, Math.floor((lim.soft - 100) / 2)) }));
  const origin = await L.startHaproxy(originCfg, originPort, addrs[0]);
  track(origin.child);
  const commit = (await L.run('git', ['-C', RAMPART_PATH, 'log', '-1', '--format=%h %s'])).stdout.trim();
  const loadBefore = os.loadavg();
  log(`rampart h2 bench: ${ROUNDS} round(s) × ${DURATION} s h2load, attacks ${ATTACK_SECS} s, load ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);

  const out = [];
  const results = { cost: { off: [], on: [] }, capacity: { off: [], on: [], held: [] }, attack: {} };
  if (ONLY.includes('capacity')) {
    const routes = {
      off: { protocol: 'http', concurrency: { mode: 'off' } },
      on: { protocol: 'http' },
      held: { protocol: 'http', concurrency: { mode: 'adaptive', minLimit: 10000, maxLimit: 10000, initialLimit: 10000, priorityShare: 0 } },
    };
    const keys = Object.keys(routes);
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of keys.map((_, i) => keys[(i + round) % keys.length])) {
        const r = await measureCost(ctx, { clientFactor: 1000, maxStreamsPerConnection: 2 ** 30 }, routes[k]);
        results.capacity[k].push(r);
        log(
          `  capacity round ${round + 1} concurrency ${k}: ${r.rps.toFixed(0)} req/s, ${r.cpuUsPerReq.toFixed(2)} µs/req, failed ${r.failed + r.errored}, limit ${r.limit}, refused ${r.refused}, answered ${r.answered}`
        );
      }
    }
  }
  if (ONLY.includes('cost')) {
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 ? [true, false] : [false, true];
      for (const enabled of order) {
        // h2load's 64 connections come from one address: the per-client budgets (`clientFactor`)
        // and the per-connection stream cap would close them — out of reach, so the row measures
        // the guard's inspection cost, as before those limits existed.
        const r = await measureCost(ctx, enabled ? { enabled, clientFactor: 1000, maxStreamsPerConnection: 2 ** 30 } : false);
        results.cost[enabled ? 'on' : 'off'].push(r);
        log(
          `  cost round ${round + 1} guard ${enabled ? 'on ' : 'off'}: ${r.rps.toFixed(0)} req/s, ${r.cpuUsPerReq.toFixed(2)} µs/req, failed ${r.failed + r.errored}, h2_flood ${r.floods} ${JSON.stringify(r.floodDetail)}`
        );
      }
    }
  }
  const attackRows = [
    { id: 'baseline', title: 'no attack (probe only)', http2: { enabled: true } },
    {
      id: 'rapid',
      title: 'rapid reset, 16 conns, defaults (boxed after 3)',
      kind: 'rapid',
      detail: 'rapid_reset',
      http2: { enabled: true },
      sources: Array.from({ length: 16 }, (_, i) => `127.0.1.${i + 1}`),
    },
    {
      id: 'rapid-nobox',
      title: 'rapid reset, 16 conns, boxAfterViolations 1000',
      kind: 'rapid',
      detail: 'rapid_reset',
      http2: { boxAfterViolations: 1000 },
      sources: Array.from({ length: 16 }, (_, i) => `127.0.1.${i + 1}`),
    },
    {
      id: 'cont',
      title: 'CONTINUATION flood, 8 conns, defaults (boxed after 3)',
      kind: 'continuation',
      detail: 'continuation',
      http2: { enabled: true },
      sources: Array.from({ length: 8 }, (_, i) => `127.0.2.${i + 1}`),
    },
    {
      id: 'cont-nobox',
      title: 'CONTINUATION flood, 8 conns, boxAfterViolations 1000',
      kind: 'continuation',
      detail: 'continuation',
      http2: { boxAfterViolations: 1000 },
      sources: Array.from({ length: 8 }, (_, i) => `127.0.2.${i + 1}`),
    },
  ];
  if (ONLY.includes('attack')) {
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of attackRows) {
        const r = await measureAttack(ctx, row);
        (results.attack[row.id] = results.attack[row.id] || []).push(r);
        log(
          `  ${row.id} round ${round + 1}: probe ${r.okPct.toFixed(1)}% p99 ${r.p99Ms.toFixed(1)} ms, attack ${r.attemptsPerSec.toFixed(0)} conn/s, cut ${r.cutPerSec.toFixed(0)}/s, refused ${r.refusedPerSec.toFixed(0)}/s, proxy CPU ${r.cpuPct.toFixed(0)}%${Object.keys(r.probeFails).length ? `, probe failures ${JSON.stringify(r.probeFails)}` : ''}${Object.keys(r.proxyErrors).length ? `, proxy errors ${JSON.stringify(r.proxyErrors)}` : ''}`
        );
      }
    }
  }
  await origin.stop();
  const loadAfter = os.loadavg();

  out.push(
    `Rampart HTTP/2 guard, ${new Date().toISOString()}, ${QUICK ? 'quick' : 'full'} run: ${ROUNDS} round(s), h2load ${DURATION} s, attacks ${ATTACK_SECS} s, ${((Date.now() - started) / 60000).toFixed(1)} min`
  );
  out.push(
    `machine: ${os.cpus().length} cores (${os.cpus()[0].model}), load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}`
  );
  out.push(
    `versions: node ${process.version}; ${(await L.run('haproxy', ['-v'])).stdout.split('\n')[0]}; ${(await L.run('h2load', ['--version'])).stdout.trim()}; commit ${commit}`
  );
  out.push('');
  if (results.cost.on.length) {
    const f0 = fmt(0);
    const f2 = fmt(2);
    const rows = [
      ['req/s', 'rps', f0],
      ['proxy CPU µs/req', 'cpuUsPerReq', f2],
      ['proxy CPU % (of 1 core)', 'cpuPct', f0],
      ['failed + errored requests', 'failed', f0],
    ];
    out.push('| h2load -c 64 -m 32 | guard off (`enabled: false`) | guard on (defaults) | on/off |', '|---|---|---|---|');
    for (const [label, k, f] of rows) {
      const get = (x) => (k === 'failed' ? x.failed + x.errored : x[k]);
      const off = cell(results.cost.off.map(get), f);
      const on = cell(results.cost.on.map(get), f);
      out.push(`| ${label} | ${off.text} | ${on.text} | ${off.med ? (on.med / off.med).toFixed(3) : '–'} |`);
    }
    const med = (m, k) => L.median(results.cost[m].map((x) => x[k]));
    out.push('');
    out.push(
      `guard cost (medians, same rounds): ${((1 - med('on', 'rps') / med('off', 'rps')) * 100).toFixed(1)}% req/s, ${((med('on', 'cpuUsPerReq') / med('off', 'cpuUsPerReq') - 1) * 100).toFixed(1)}% proxy CPU per request; h2_flood during the guard-on runs: ${results.cost.on.reduce((a, x) => a + x.floods, 0)}`
    );
    out.push('');
  }
  if (results.capacity.on.length) {
    const rows = [
      ['req/s', 'rps', fmt(0)],
      ['proxy CPU µs/req', 'cpuUsPerReq', fmt(2)],
      ['proxy CPU % (of 1 core)', 'cpuPct', fmt(0)],
      ['failed + errored requests', 'failed', fmt(0)],
      ['refused for capacity (upstream.refused)', 'refused', fmt(0)],
    ];
    out.push(
      "| h2load -c 64 -m 32, `protocol: 'http'` | `concurrency: { mode: 'off' }` | adaptive (default) | adaptive held at 10,000 | adaptive/off | held/off |",
      '|---|---|---|---|---|---|'
    );
    for (const [label, k, f] of rows) {
      const get = (x) => (k === 'failed' ? x.failed + x.errored : x[k]);
      const [off, on, held] = ['off', 'on', 'held'].map((m) => cell(results.capacity[m].map(get), f));
      const ratio = (x) => (off.med ? (x.med / off.med).toFixed(3) : '–');
      out.push(`| ${label} | ${off.text} | ${on.text} | ${held.text} | ${ratio(on)} | ${ratio(held)} |`);
    }
    const med = (m, k) => L.median(results.capacity[m].map((x) => x[k]));
    const cost = (m) =>
      `${((1 - med(m, 'rps') / med('off', 'rps')) * 100).toFixed(1)}% req/s, ${((med(m, 'cpuUsPerReq') / med('off', 'cpuUsPerReq') - 1) * 100).toFixed(1)}% proxy CPU per request`;
    out.push('');
    out.push(
      `tracking cost vs off (medians, same rounds): adaptive ${cost('on')} (its limit at the end of each run: ${results.capacity.on.map((x) => x.limit).join(', ')}); held ${cost('held')}`
    );
    out.push('');
  }
  if (Object.keys(results.attack).length) {
    const cols = [
      ['probe success %', 'okPct', fmt(1)],
      ['probe p50 ms', 'p50Ms', fmt(1)],
      ['probe p99 ms', 'p99Ms', fmt(1)],
      ['attack conn/s', 'attemptsPerSec', fmt(0)],
      ['cut by GOAWAY calm /s', 'cutPerSec', fmt(0)],
      ['refused at accept /s', 'refusedPerSec', fmt(0)],
      ['penalty_boxed /s', 'boxedPerSec', fmt(0)],
      ['h2_flood /s (detail %)', 'floodsPerSec', fmt(0)],
      ['proxy CPU %', 'cpuPct', fmt(0)],
      ['proxy RSS MiB', 'rssMiB', fmt(0)],
    ];
    out.push(`| scenario (probe: new h2 connection + GET every ${1000 / PROBE_RATE} ms from 127.0.0.3) | ${cols.map((c) => c[0]).join(' | ')} |`);
    out.push(`|---|${cols.map(() => '---').join('|')}|`);
    for (const row of attackRows) {
      const rs = results.attack[row.id];
      if (!rs) continue;
      const cells = cols.map(([, k, f]) => {
        const c = cell(
          rs.map((x) => x[k]),
          f
        );
        if (k === 'floodsPerSec' && row.detail) return `${c.text} (${fmt(0)(L.median(rs.map((x) => x.detailPct)))}% ${row.detail})`;
        return c.text;
      });
      out.push(`| ${row.title} | ${cells.join(' | ')} |`);
    }
    out.push('');
  }
  out.push('commands:');
  out.push(`  cost: ${ctx.commands.cost || '(not run)'} (a fresh proxy per run; rampart.json: ${path.join(dir, 'rampart.json')})`);
  out.push('  attack: node benches/h2.js attack (forked) + h2Probe in benches/h2.js');
  out.push(`  origin: ${originCfg}`);
  console.log(out.join('\n'));
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify({ loadBefore, loadAfter, commit, results }, null, 2));
}

if (process.argv[2] === 'attack') {
  attack(JSON.parse(process.argv[3]));
} else {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(e && e.stack ? e.stack : e);
      process.exit(1);
    }
  );
}
