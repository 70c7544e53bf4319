#!/usr/bin/env node
'use strict';
// `npm run bench [-- --quick]`: end-to-end Rampart vs HAProxy and nginx on this machine.
//
// All proxies terminate TLS 1.3 (same ECDSA P-256 certificate, 2 worker threads/processes) in front of the
// same origin: one HAProxy process in `mode http` answering from memory (`http-request return`),
// bound on 127.0.0.10-13 and used round-robin by both proxies (four origin addresses multiply the
// ephemeral ports available to the proxy → origin connections). HAProxy runs `mode tcp` with
// `ssl crt` on the bind line; nginx runs its `stream` module (`listen ... ssl`, `proxy_pass`), as a
// child with its own config in the temp folder (master + 2 workers; CPU and RSS summed over them).
// Every measurement starts a fresh proxy; rounds alternate Rampart, HAProxy, nginx, Rampart, ...
// and the table gives the median with min–max over rounds and Rampart's ratio to the better peer.
// A missing nginx is reported (with the apt command) and its column skipped; HAProxy is also the
// origin, so it is required. The same run measures the floor (benches/floor.rs: a full TLS 1.3
// handshake and 64 KiB of records on a bare in-memory rustls pair, and a memcpy of the bytes).
//
// Scenarios: new TLS connections/s (one request per connection; full handshakes, and resumed);
// kept-alive requests/s and MiB/s at 64 and 512 connections, plus a bulk (64 KiB body) row; the
// same with protection on (limits never reached); a single-IP flood over the limits while another
// source address measures its success rate and latency; RSS with many idle TLS connections
// (handshake only, and after one request each). Upstream tracking (Rampart only, run when named in
// --only): keep-alive at 64 and 512 connections through a route with `protocol: 'http'` (requests
// parsed and tracked) with `concurrency: { mode: 'off' }` (measured, no limit), with the default
// adaptive limit, and with the adaptive limit held at 10,000 (HELD: the limiter runs every window
// but cannot cut, so no refusal changes the load), in the same rounds (ka64-http-off, ka64-http,
// ka64-http-held, and the same for ka512).
//
// Options: --quick (1 round, short runs), --rounds N, --duration S (every wrk run; default 10 s for
// the rows of one request per connection), --ka-duration S (the keep-alive rows ka*, bulk; default
// --duration when given, else 30 s: a shorter run's p99 at 512 connections is its handshake
// start-up, see BENCHMARKS.md "Where the time goes at 512"), --only a,b (scenario ids:
// hs-full, hs-resumed, ka64, ka512, bulk, hs-full-prot, ka64-prot, ka512-prot, flood, idle,
// idle-req; only when named: ka64-http-off, ka64-http, ka64-http-held, ka512-http-off,
// ka512-http, ka512-http-held), --idle N (idle connections; capped by RLIMIT_NOFILE), --json FILE (raw results),
// --peers haproxy,nginx (which peers to run; default: those installed), --no-floor,
// --merge a.json,b.json,... (no run: the table over every round of those --json files pooled, so
// three full runs give one median of their 9 rounds, plus each run's own ratio column),
// --threads N (worker threads/processes of every proxy alike, and wrk's threads; default 2),
// --pin (with taskset: the proxy under test on CPUs 0..N-1, wrk and the origin on the remaining
// CPUs, so `--threads 1 --pin` on 2 cores is the per-core comparison; stated in the output),
// --http-route (Rampart's route of every row gets `protocol: 'http'`), --concurrency off|adaptive
// (and that route's `concurrency.mode`; needs --http-route). Rows ka*-http* set their own route.
// --percentiles: wrk runs benches/percentiles.lua, and the keep-alive rows add p98, p99.9 and the
// maximum latency (a run's first second, while its connections handshake, is in its top 1-2 %).
// --compare DIR: A/B in the same run: a second Rampart column ("Rampart B") from the addon package
// in DIR (a copy of index.js, binding.js, symphony/, package.json and the .node of another build),
// same config, measured in the same rounds; the table adds "Rampart / B". The order of the proxies
// alternates every round (A, B, peers; then the reverse), so a drifting background load hits all.
// Env: RAMPART_PATH = directory of the addon package (default: the repo root).
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { fork } = require('node:child_process');
const L = require('./lib');
const { recordClientHello, legitProbe } = require('./clients');
const { NAME, BULK_BYTES, METRIC, table, protectionCost, floorLines } = require('./report');

// ---------- options ----------
const { flag, opt, list, rampartPath: RAMPART_PATH } = L.cli(__filename);
const QUICK = flag('--quick');
const ROUNDS = Number(opt('--rounds', QUICK ? 1 : 3));
const DURATION = Number(opt('--duration', QUICK ? 3 : 10));
/**
 * Seconds per wrk run of the keep-alive rows (ka*, bulk): --ka-duration, else --duration when
 * given, else 30. A keep-alive run starts with its connections' TLS handshakes, whose first
 * requests wrk times from the end of its own handshake and then multiplies (coordinated-omission
 * correction); in a 10 s run at 512 connections those samples reach the top 1 %, so its p99
 * measures the start-up, not the serving (BENCHMARKS.md, "Where the time goes at 512").
 */
const KA_DURATION = Number(opt('--ka-duration', opt('--duration', QUICK ? 3 : 30)));
/** A row's wrk run length, s: keep-alive rows KA_DURATION, one request per connection DURATION. */
const rowDuration = (wrk) => (wrk.close ? DURATION : KA_DURATION);
const ONLY = list('--only', null);
const IDLE_TARGET = Number(opt('--idle', QUICK ? 2000 : 50000));
const JSON_OUT = opt('--json', '');
const MERGE = list('--merge', null);
const THREADS = Number(opt('--threads', 2));
const PIN = flag('--pin');
/** --compare DIR: the "Rampart B" addon package, measured beside RAMPART_PATH's (null: none). */
const PERCENTILES = flag('--percentiles');
const COMPARE = opt('--compare', '') ? path.resolve(opt('--compare', '')) : null;
const NCPU = os.cpus().length;
if (!Number.isInteger(THREADS) || THREADS < 1) throw new Error(`--threads must be a positive integer, got ${opt('--threads', '')}`);
if (PIN && THREADS >= NCPU) throw new Error(`--pin needs more CPUs than --threads (${THREADS} of ${NCPU}): wrk and the origin need one of their own`);
/** taskset CPU lists with --pin: the proxies', and wrk's and the origin's; null otherwise. */
const cpuRange = (a, b) => (a === b ? `${a}` : `${a}-${b}`);
const CPUS = PIN ? { proxy: cpuRange(0, THREADS - 1), load: cpuRange(THREADS, NCPU - 1) } : { proxy: null, load: null };
/** wrk's threads: one per CPU it has when pinned, else as many as the proxies' workers. */
const WRK_THREADS = PIN ? NCPU - THREADS : THREADS;
/** --http-route / --concurrency: the route fields of every Rampart row without its own `route`. */
const ROUTE = {};
if (flag('--http-route')) ROUTE.protocol = 'http';
if (opt('--concurrency', '')) {
  const mode = opt('--concurrency', '');
  if (!['off', 'adaptive'].includes(mode)) throw new Error(`--concurrency must be off or adaptive, got ${mode}`);
  if (!ROUTE.protocol) throw new Error('--concurrency needs --http-route (an opaque route has no request to count)');
  ROUTE.concurrency = { mode };
}
/** The adaptive limiter with its limit held (min = max = initial): its cost without its refusals. */
const HELD = { mode: 'adaptive', minLimit: 10000, maxLimit: 10000, initialLimit: 10000, priorityShare: 0 };
const BODY_BYTES = 4096;
const SNI = 'localhost';

/** Protection that is on but never reached (scenario 3). */
const PROT_HIGH = { connectionsPerSecond: 100000, maxConcurrentPerIp: 100000 };
/** Protection the flood exceeds (scenario 4); the probe stays far below it. */
const PROT_FLOOD = { connectionsPerSecond: 100, maxConcurrentPerIp: 64 };
const FLOOD_CONCURRENCY = 256;
const PROBE_RATE = 20;

const track = L.childTracker();

const log = (...a) => console.error(...a);

// ---------- environment ----------
async function checkTools() {
  const tools = { haproxy: 'haproxy', wrk: 'wrk', openssl: 'openssl' };
  const missing = Object.keys(tools).filter((t) => !L.haveTool(t));
  if (missing.length) {
    // HAProxy is the origin of every row as well as a peer: without it nothing can be measured.
    console.error(`missing tools: ${missing.join(', ')}\n  apt-get install haproxy wrk nghttp2-client openssl`);
    process.exit(1);
  }
  const wanted = opt('--peers', 'haproxy,nginx').split(',').filter(Boolean);
  const peers = [];
  const peerNotes = [];
  if (wanted.includes('haproxy')) peers.push('haproxy');
  if (wanted.includes('nginx')) {
    if (!L.haveTool('nginx')) peerNotes.push('nginx: not installed, column skipped (apt-get install nginx libnginx-mod-stream)');
    else {
      const st = await L.nginxStream();
      if (st.ok) {
        peers.push('nginx');
        NGINX.loadModule = st.loadModule;
        NGINX.version = st.version;
      } else peerNotes.push(`nginx: ${st.why}, column skipped (apt-get install nginx libnginx-mod-stream)`);
    }
  }
  // A C compiler builds the 10-line LD_PRELOAD shim that makes wrk's OpenSSL client never offer a
  // saved session, so "full handshake" rows really do one ECDHE + one signature per connection.
  const cc = ['cc', 'gcc', 'clang'].find(L.haveTool);
  if (!cc) log('note: no C compiler (cc/gcc/clang): full-handshake rows are skipped (apt-get install gcc)');
  return { cc, peers, peerNotes };
}

/** nginx's stream module path (dynamic builds) and version, filled by checkTools. */
const NGINX = { loadModule: '', version: '' };
/** Both Rampart builds (A = RAMPART_PATH, B = --compare). */
const isRampart = (kind) => kind === 'rampart' || kind === 'rampartB';

async function buildShim(cc, dir) {
  const so = await L.buildNoResumeShim(cc, dir);
  if (so.error) {
    log(`note: could not build the no-resumption shim (${so.error}); full-handshake rows skipped`);
    return null;
  }
  return so.path;
}

function raiseNofile() {
  // Children inherit the soft limit; the hard limit needs CAP_SYS_RESOURCE to go up.
  const before = L.nofileLimits();
  const want = 1048576;
  const trySet = (soft, hard) => require('node:child_process').spawnSync('prlimit', ['--pid', String(process.pid), `--nofile=${soft}:${hard}`]).status === 0;
  if (before.hard < want && trySet(want, want)) return L.nofileLimits();
  if (before.soft < before.hard) trySet(before.hard, before.hard);
  return L.nofileLimits();
}

async function environment(ctx) {
  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1] || 'unknown';
  const haproxyV = (await L.run('haproxy', ['-v'])).stdout.split('\n')[0];
  const wrkV = ((await L.run('wrk', ['-v'])).stdout.match(/wrk \S+/) || ['wrk ?'])[0];
  const opensslV = (await L.run('openssl', ['version'])).stdout.trim();
  const addon = fs.readdirSync(RAMPART_PATH).find((f) => /^rampart\..*\.node$/.test(f));
  const addonPath = addon ? path.join(RAMPART_PATH, addon) : '(none)';
  let commit = '';
  const g = await L.run('git', ['-C', RAMPART_PATH, 'log', '-1', '--format=%h %s']);
  if (g.code === 0) commit = g.stdout.trim();
  return {
    cores: os.cpus().length,
    cpu,
    kernel: `${os.type()} ${os.release()}`,
    memGiB: (os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    haproxy: haproxyV,
    nginx: NGINX.version ? `nginx ${NGINX.version}${NGINX.loadModule ? ` (stream: ${NGINX.loadModule})` : ''}` : '(not used)',
    wrk: wrkV,
    openssl: opensslV,
    addon: addonPath,
    addonBuild: addon ? L.addonBuildKind(addonPath) : '',
    commit,
    nofile: ctx.nofile,
  };
}

async function negotiated(port) {
  const r = await L.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', SNI, '-brief'], { timeoutMs: 5000 });
  const t = r.stdout + r.stderr;
  const get = (re) => (re.exec(t) || [])[1] || '?';
  return `${get(/Protocol version:\s*(\S+)/)} ${get(/Ciphersuite:\s*(\S+)/)} ${get(/(?:Server|Peer) Temp Key:\s*([^\n]+)/)}`.trim();
}

// ---------- proxies ----------
function rampartConfig(ctx, protection, route = ROUTE) {
  const listener = {
    host: '127.0.0.1',
    port: ctx.rampartPort,
    defaultCert: { certChain: { file: ctx.certFile }, privateKey: { file: ctx.keyFile } },
  };
  if (protection) {
    // HAProxy's config has no counterpart of Rampart's pending-handshake guard (default 64 per
    // IP, which wrk's 512 simultaneous connects from 127.0.0.1 would hit): set to its maximum.
    listener.protection = {
      rateLimit: { connectionsPerSecond: protection.connectionsPerSecond, burst: protection.connectionsPerSecond },
      maxConcurrentPerIp: protection.maxConcurrentPerIp,
      slowHandshake: { maxPendingPerIp: 65535 },
    };
  }
  return {
    workerThreads: THREADS,
    listeners: [listener],
    routes: [{ sni: '', terminateTls: true, ...route, upstreams: ctx.upstreams.map((u) => ({ kind: 'tcp', ...u })) }],
  };
}

async function startProxy(ctx, kind, protection, route) {
  if (isRampart(kind)) {
    const pkg = kind === 'rampartB' ? COMPARE : RAMPART_PATH;
    const p = await L.startRampart(rampartConfig(ctx, protection, route), path.join(ctx.dir, 'rampart.json'), pkg, CPUS.proxy);
    track(p.child);
    return {
      ...p,
      port: ctx.rampartPort,
      active: async () => (await p.metrics()).activeConnections,
      stat: () => L.procStatTree(p.pid),
    };
  }
  if (kind === 'nginx') {
    const cfg = path.join(ctx.dir, 'nginx.conf');
    fs.writeFileSync(
      cfg,
      L.nginxConfig({
        dir: ctx.dir,
        port: ctx.nginxPort,
        certFile: ctx.certFile,
        keyFile: ctx.keyFile,
        upstreams: ctx.upstreams,
        workers: THREADS,
        maxconn: ctx.haMaxconn,
        loadModule: NGINX.loadModule,
        protection,
      })
    );
    const p = await L.startNginx(cfg, ctx.nginxPort, ctx.dir, THREADS, CPUS.proxy);
    track(p.child);
    return {
      ...p,
      port: ctx.nginxPort,
      // The stream module has no status page: count the established sockets on its port.
      active: async () => L.establishedOn(ctx.nginxPort),
      stat: () => L.procStatTree(p.pid),
    };
  }
  const cfg = path.join(ctx.dir, 'haproxy.cfg');
  const statsSocket = path.join(ctx.dir, 'haproxy.sock');
  fs.writeFileSync(
    cfg,
    L.haproxyConfig({
      port: ctx.haproxyPort,
      pem: ctx.pemFile,
      upstreams: ctx.upstreams,
      threads: THREADS,
      maxconn: ctx.haMaxconn,
      statsSocket,
      protection,
    })
  );
  const p = await L.startHaproxy(cfg, ctx.haproxyPort, '127.0.0.1', CPUS.proxy);
  track(p.child);
  return {
    ...p,
    port: ctx.haproxyPort,
    active: async () => Number((await L.haproxyInfo(statsSocket)).CurrConns),
    stat: () => L.procStatTree(p.pid),
  };
}

// ---------- measurements ----------
function wrkArgs(port, { conns, close, urlPath = '/' }) {
  const a = ['-t', String(WRK_THREADS), '-c', String(conns), '-d', `${rowDuration({ close })}s`, '--timeout', '10s', '--latency'];
  if (close) a.push('-H', 'Connection: close');
  if (PERCENTILES) a.push('-s', path.join(__dirname, 'percentiles.lua'));
  a.push(`https://127.0.0.1:${port}${urlPath}`);
  return a;
}

async function measureWrk(ctx, kind, row) {
  const p = await startProxy(ctx, kind, row.protection, row.route);
  try {
    const args = wrkArgs(p.port, row.wrk);
    const env = row.noResume ? { ...process.env, LD_PRELOAD: ctx.shim } : process.env;
    const s0 = p.stat();
    const t0 = Date.now();
    const r = await L.run(...L.pinned(CPUS.load, 'wrk', args), { env, timeoutMs: (rowDuration(row.wrk) + 30) * 1000 });
    const secs = (Date.now() - t0) / 1000;
    const s1 = p.stat();
    const w = L.parseWrk(r.stdout);
    if (!(w.requests > 0)) {
      // On an overloaded machine 512 handshakes may not finish within a --quick run: report the
      // row's cell as n/a (and say so) rather than abort every other row.
      if (r.code !== 0 || !/requests in/.test(r.stdout)) throw new Error(`wrk failed through ${kind}:\n${r.stdout}${r.stderr}`);
      log(`  note: wrk completed no request through ${kind} in ${rowDuration(row.wrk)} s (${row.id}); cell reported as n/a`);
      ctx.noResponse.push(`${row.id} ${kind}`);
      return { rps: NaN, mbps: NaN, p99Ms: NaN, errors: 0, cpuUsPerReq: NaN, cpuPct: NaN };
    }
    const cpuSec = (s1.cpuTicks - s0.cpuTicks) / L.CLK_TCK;
    // An HTTP route: what its upstream capacity saw (`routeMetrics[0].upstream`, at the end).
    const upstream = isRampart(kind) && (row.route || ROUTE).protocol ? (await p.metrics()).routeMetrics[0].upstream : undefined;
    ctx.commands[row.id] = `${row.noResume ? 'LD_PRELOAD=noresume.so ' : ''}wrk ${wrkArgs('PORT', row.wrk)
      .map((x) => (/\s/.test(x) ? `'${x}'` : x))
      .join(' ')}`;
    return {
      rps: w.rps,
      mbps: w.mbps,
      p99Ms: w.p99Ms,
      p98Ms: w.p98Ms,
      p999Ms: w.p999Ms,
      maxMs: w.maxMs,
      errors: w.errors + w.non2xx,
      cpuUsPerReq: (cpuSec * 1e6) / w.requests,
      cpuPct: (cpuSec / secs) * 100,
      upstream,
    };
  } finally {
    await p.stop();
  }
}

async function measureFlood(ctx, kind) {
  const secs = QUICK ? 6 : 15;
  const p = await startProxy(ctx, kind, PROT_FLOOD);
  const flood = track(
    fork(
      path.join(__dirname, 'attack-clients.js'),
      [
        'hsflood',
        JSON.stringify({ host: '127.0.0.1', port: p.port, sources: ['127.0.0.2'], concurrency: FLOOD_CONCURRENCY, hello: ctx.hello.toString('base64') }),
      ],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }
    )
  );
  const ask = (cmd) =>
    new Promise((resolve) => {
      flood.once('message', (m) => resolve(m.stats));
      flood.send({ cmd });
    });
  try {
    await L.sleep(1000);
    const f0 = await ask('stats');
    const s0 = p.stat();
    const t0 = Date.now();
    const probe = await legitProbe({
      host: '127.0.0.1',
      port: p.port,
      localAddress: '127.0.0.3',
      servername: SNI,
      rate: PROBE_RATE,
      durationMs: secs * 1000,
      minBytes: BODY_BYTES,
    });
    const dt = (Date.now() - t0) / 1000;
    const s1 = p.stat();
    const f1 = await ask('stop');
    const attempts = f1.attempts - f0.attempts;
    ctx.commands.flood = `attack-clients.js hsflood from 127.0.0.2 (${FLOOD_CONCURRENCY} in flight, recorded ClientHello, RST on answer) + legitProbe from 127.0.0.3 at ${PROBE_RATE}/s for ${secs} s`;
    return {
      okPct: (probe.ok / probe.attempts) * 100,
      p50Ms: L.quantile(probe.latenciesMs, 0.5),
      p99Ms: L.quantile(probe.latenciesMs, 0.99),
      floodPerSec: attempts / dt,
      refusedPct: ((f1.refused - f0.refused) / Math.max(1, f1.refused - f0.refused + f1.served - f0.served)) * 100,
      cpuPct: ((s1.cpuTicks - s0.cpuTicks) / L.CLK_TCK / dt) * 100,
    };
  } finally {
    await L.killWait(flood);
    await p.stop();
  }
}

async function measureIdle(ctx, kind, row) {
  const n = ctx.idleCount;
  const p = await startProxy(ctx, kind, null);
  const holders = [];
  try {
    await L.sleep(500);
    const base = p.stat().rssKb;
    const procs = 2;
    const t0 = Date.now();
    const dones = [];
    for (let k = 0; k < procs; k++) {
      const sources = Array.from({ length: 64 }, (_, j) => `127.1.${k}.${j + 1}`);
      const count = Math.floor(n / procs) + (k < n % procs ? 1 : 0);
      const c = track(
        fork(
          path.join(__dirname, 'clients.js'),
          [
            'idle',
            JSON.stringify({ host: '127.0.0.1', port: p.port, count, concurrency: 32, sources, servername: SNI, requestBytes: row.request ? BODY_BYTES : 0 }),
          ],
          { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }
        )
      );
      holders.push(c);
      dones.push(
        new Promise((resolve, reject) => {
          c.on('message', (m) => m && m.done && resolve(m));
          c.once('exit', (code) => reject(new Error(`idle client exited with ${code}`)));
        })
      );
    }
    const results = await Promise.all(dones);
    const established = results.reduce((a, r) => a + r.established, 0);
    const failed = results.reduce((a, r) => a + r.failed, 0);
    const setupSec = (Date.now() - t0) / 1000;
    // Wait until the proxy holds them all (its side of the handshake and the origin connect).
    const end = Date.now() + 15000;
    let active = await p.active();
    while (active < established && Date.now() < end) {
      await L.sleep(200);
      active = await p.active();
    }
    await L.sleep(1000);
    const rss = p.stat().rssKb;
    ctx.commands[row.id] =
      `clients.js idle: ${procs} processes × node:tls full handshakes, sources 127.1.{0,1}.1-64,${row.request ? ` one GET / (${BODY_BYTES} B body) each,` : ''} then held idle`;
    return {
      rssMiB: rss / 1024,
      baseMiB: base / 1024,
      kibPerConn: (rss - base) / Math.max(1, established),
      established,
      failed,
      active,
      setupSec,
    };
  } finally {
    for (const c of holders) await L.killWait(c, 'SIGKILL');
    await p.stop();
  }
}

// ---------- rows ----------
/** The latency metrics of the keep-alive rows: p99, and with --percentiles p98, p99.9 and max. */
const LATENCY = PERCENTILES ? ['p98Ms', 'p99Ms', 'p999Ms', 'maxMs'] : ['p99Ms'];
const ROWS = [
  {
    id: 'hs-full',
    title: 'new TLS conn/s, full handshake, 1 req/conn, 64 clients',
    wrk: { conns: 64, close: true },
    noResume: true,
    metrics: ['rps', 'cpuUsPerReq'],
  },
  { id: 'hs-resumed', title: 'new TLS conn/s, resumed session, 1 req/conn, 64 clients', wrk: { conns: 64, close: true }, metrics: ['rps', 'cpuUsPerReq'] },
  { id: 'ka64', title: `keep-alive, 64 conns, ${BODY_BYTES} B body`, wrk: { conns: 64 }, metrics: ['rps', 'mbps', ...LATENCY, 'cpuUsPerReq'] },
  { id: 'ka512', title: `keep-alive, 512 conns, ${BODY_BYTES} B body`, wrk: { conns: 512 }, metrics: ['rps', 'mbps', ...LATENCY, 'cpuUsPerReq'] },
  { id: 'bulk', title: `keep-alive, 64 conns, ${BULK_BYTES / 1024} KiB body`, wrk: { conns: 64, urlPath: '/bulk' }, metrics: ['mbps', 'cpuUsPerReq'] },
  {
    id: 'hs-full-prot',
    title: 'protection on: new TLS conn/s, full handshake',
    wrk: { conns: 64, close: true },
    noResume: true,
    protection: PROT_HIGH,
    metrics: ['rps', 'cpuUsPerReq'],
    baseline: 'hs-full',
  },
  {
    id: 'ka64-prot',
    title: 'protection on: keep-alive, 64 conns',
    wrk: { conns: 64 },
    protection: PROT_HIGH,
    metrics: ['rps', 'mbps', 'cpuUsPerReq'],
    baseline: 'ka64',
  },
  {
    id: 'ka512-prot',
    title: 'protection on: keep-alive, 512 conns',
    wrk: { conns: 512 },
    protection: PROT_HIGH,
    metrics: ['rps', 'mbps', 'cpuUsPerReq'],
    baseline: 'ka512',
  },
  ...[64, 512].flatMap((conns) => [
    {
      id: `ka${conns}-http-off`,
      title: `keep-alive, ${conns} conns, protocol http, concurrency off`,
      wrk: { conns },
      route: { protocol: 'http', concurrency: { mode: 'off' } },
      optIn: true,
      rampartOnly: true,
      metrics: ['rps', 'p99Ms', 'cpuUsPerReq'],
    },
    {
      id: `ka${conns}-http`,
      title: `keep-alive, ${conns} conns, protocol http, concurrency adaptive (default)`,
      wrk: { conns },
      route: { protocol: 'http' },
      optIn: true,
      rampartOnly: true,
      metrics: ['rps', 'p99Ms', 'cpuUsPerReq'],
      baseline: `ka${conns}-http-off`,
    },
    {
      id: `ka${conns}-http-held`,
      title: `keep-alive, ${conns} conns, protocol http, adaptive held at 10,000`,
      wrk: { conns },
      route: { protocol: 'http', concurrency: HELD },
      optIn: true,
      rampartOnly: true,
      metrics: ['rps', 'p99Ms', 'cpuUsPerReq'],
      baseline: `ka${conns}-http-off`,
    },
  ]),
  {
    id: 'flood',
    title: `flood: 127.0.0.2 over ${PROT_FLOOD.connectionsPerSecond} conn/s, probe 127.0.0.3 at ${PROBE_RATE}/s`,
    flood: true,
    metrics: ['okPct', 'p50Ms', 'p99Ms', 'floodPerSec', 'refusedPct', 'cpuPct'],
  },
  { id: 'idle', title: 'idle TLS connections (handshake only)', idle: true, metrics: ['rssMiB', 'kibPerConn', 'established'] },
  {
    id: 'idle-req',
    title: `idle TLS connections after one ${BODY_BYTES} B request each`,
    idle: true,
    request: true,
    metrics: ['rssMiB', 'kibPerConn', 'established'],
  },
];

// ---------- the floor ----------

/**
 * Runs benches/floor.rs (`cargo bench --bench floor`, release): the CPU of a full TLS 1.3
 * handshake and of 64 KiB of records on an in-memory rustls pair, and of a memcpy, as JSON.
 * Resolves null (with a note) when cargo is missing or the bench fails.
 */
async function measureFloor() {
  if (!L.haveTool('cargo')) {
    log('note: no cargo on PATH: the floor is skipped');
    return null;
  }
  log('floor: cargo bench --bench floor (builds it the first time)');
  const args = ['bench', '--quiet', '--bench', 'floor', '--', QUICK ? '--quick' : '--full'];
  const r = await L.run('cargo', args, { timeoutMs: 900000, cwd: path.join(__dirname, '..') });
  const line = r.stdout.split('\n').find((l) => l.startsWith('{'));
  if (r.code !== 0 || !line) {
    log(`note: the floor bench failed (${r.code}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`);
    return null;
  }
  const f = JSON.parse(line);
  f.command = `cargo bench --bench floor -- ${args[args.length - 1]}`;
  log(
    `floor: handshake server ${f.handshake.serverUs.toFixed(1)} µs (client+server ${f.handshake.totalUs.toFixed(1)} µs); per MiB: memcpy ${f.perMiB.memcpyUs.toFixed(1)} µs, TLS records (seal+open) ${f.perMiB.sealUs.toFixed(1)}+${f.perMiB.openUs.toFixed(1)} µs`
  );
  return f;
}

// ---------- --merge ----------

/**
 * Prints the table over every round of several `--json` files (same rows, same peers), each
 * run's Rampart / better-peer ratio beside the pooled one, and each run's load and floor.
 */
function merge(files) {
  const runs = files.map((f) => ({ file: f, ...JSON.parse(fs.readFileSync(f, 'utf8')) }));
  const peers = runs[0].peers;
  const ids = Object.keys(runs[0].results);
  const rows = ROWS.filter((r) => ids.includes(r.id));
  const pooled = {};
  for (const id of ids) {
    pooled[id] = Object.fromEntries(['rampart', 'rampartB', ...peers].map((k) => [k, runs.flatMap((r) => (r.results[id] && r.results[id][k]) || [])]));
  }
  const out = [`${runs.length} runs pooled (${ROUNDS_OF(runs)} rounds per cell): ${files.join(', ')}`];
  for (const r of runs) {
    out.push(
      `- ${r.file}: commit ${r.env.commit || '?'}, load before ${r.loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${r.loadAfter.map((x) => x.toFixed(2)).join(' ')}`
    );
  }
  out.push('', table(rows, pooled, peers), '', "per run (Rampart / better peer, each run's own medians):", '');
  // Each run's "Rampart / better peer" cell (its column moves when a run has a Rampart B).
  const perRun = runs.map((r) => {
    const t = table(rows, r.results, peers).split('\n');
    const at = t[0].split(' | ').indexOf('Rampart / better peer');
    return t.map((l) => l.split(' | ')[at]);
  });
  const lines = table(rows, pooled, peers).split('\n');
  out.push(`| scenario | metric | ${runs.map((_, i) => `run ${i + 1}`).join(' | ')} |`, `|---|---|${runs.map(() => '---|').join('')}`);
  for (let i = 2; i < lines.length; i++) {
    const c = lines[i].split(' | ');
    out.push(`${c[0]} | ${c[1]} | ${perRun.map((p) => p[i]).join(' | ')} |`);
  }
  const floors = runs.filter((r) => r.floor);
  if (floors.length) out.push('', ...floorLines(floors[0].floor, pooled));
  const pc = protectionCost(rows, pooled, ['rampart', ...peers]);
  if (pc.length) out.push('', 'protection cost (pooled medians):', '', ...pc);
  console.log(out.join('\n'));
}

const ROUNDS_OF = (runs) => runs.reduce((a, r) => a + Object.values(r.results)[0].rampart.length, 0);

// ---------- main ----------
async function main() {
  if (MERGE) return merge(MERGE);
  const started = Date.now();
  const { cc, peers, peerNotes } = await checkTools();
  const kinds = ['rampart', ...(COMPARE ? ['rampartB'] : []), ...peers];
  log(`peers: ${peers.length ? peers.map((k) => NAME[k]).join(', ') : 'none'}${peerNotes.length ? `; ${peerNotes.join('; ')}` : ''}`);
  const lim = raiseNofile();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-bench-'));
  const { generateSelfSignedCert } = require(RAMPART_PATH);
  const [cert, key] = generateSelfSignedCert([SNI, '127.0.0.1']);
  const ctx = {
    dir,
    certFile: path.join(dir, 'cert.pem'),
    keyFile: path.join(dir, 'key.pem'),
    pemFile: path.join(dir, 'bench.pem'),
    nofile: lim,
    commands: {},
    noResponse: [],
  };
  fs.writeFileSync(ctx.certFile, cert);
  fs.writeFileSync(ctx.keyFile, key);
  fs.writeFileSync(ctx.pemFile, cert + key);
  fs.writeFileSync(path.join(dir, 'body.bin'), Buffer.alloc(BODY_BYTES, 'r'));
  fs.writeFileSync(path.join(dir, 'bulk.bin'), Buffer.alloc(BULK_BYTES, 'b'));
  ctx.shim = cc ? await buildShim(cc, dir) : null;
  // Every process here holds up to two descriptors per proxied connection.
  ctx.haMaxconn = Math.max(1024, Math.floor((Math.min(lim.soft, 400000) - 500) / 2));
  ctx.idleCount = Math.min(IDLE_TARGET, Math.floor((Math.min(lim.soft, 400000) - 1000) / 2));
  ctx.hello = await recordClientHello(SNI);

  const originPort = await L.freePort();
  ctx.rampartPort = await L.freePort();
  ctx.haproxyPort = await L.freePort();
  ctx.nginxPort = await L.freePort();
  const originAddrs = ['127.0.0.10', '127.0.0.11', '127.0.0.12', '127.0.0.13'];
  ctx.upstreams = originAddrs.map((host) => ({ host, port: originPort }));
  const originCfg = path.join(dir, 'origin.cfg');
  fs.writeFileSync(
    originCfg,
    L.originConfig({ addrs: originAddrs, port: originPort, bodyFile: path.join(dir, 'body.bin'), bulkFile: path.join(dir, 'bulk.bin'), maxconn: ctx.haMaxconn })
  );
  const origin = await L.startHaproxy(originCfg, originPort, originAddrs[0], CPUS.load);
  track(origin.child);

  const env = await environment(ctx);
  const loadBefore = os.loadavg();
  log(
    `rampart bench: ${QUICK ? 'quick, ' : ''}${ROUNDS} round(s) × ${DURATION} s (keep-alive rows ${KA_DURATION} s), ${env.cores} cores, load ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`
  );
  log(`addon ${env.addon} (${env.addonBuild}); RLIMIT_NOFILE ${lim.soft}/${lim.hard} → ${ctx.idleCount} idle connections`);
  if (ctx.idleCount < IDLE_TARGET) {
    log(
      `note: ${IDLE_TARGET} idle connections need ~${2 * IDLE_TARGET} descriptors per proxy; the hard limit is ${lim.hard} and cannot be raised here (no CAP_SYS_RESOURCE), so ${ctx.idleCount} are used`
    );
  }
  const tlsInfo = {};
  for (const kind of kinds) {
    const p = await startProxy(ctx, kind, null);
    tlsInfo[kind] = await negotiated(p.port);
    await p.stop();
  }
  const tlsLine = kinds.map((k) => `${NAME[k]} ${tlsInfo[k]}`).join('; ');
  log(`negotiated: ${tlsLine}`);
  const floor = flag('--no-floor') ? null : await measureFloor();

  const rows = ROWS.filter((r) => (ONLY ? ONLY.includes(r.id) : !r.optIn) && !(r.noResume && !ctx.shim));
  // A protection row runs in the same rounds as its baseline row (off, on, then on, off, ...), so
  // drifting background load hits both alike and their difference is the protection's cost.
  const groups = [];
  for (const row of rows) {
    const g = row.baseline && groups.find((x) => x[0].id === row.baseline);
    if (g) g.push(row);
    else groups.push([row]);
  }
  const results = {};
  for (const row of rows) results[row.id] = Object.fromEntries(kinds.map((k) => [k, []]));
  for (const group of groups) {
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of round % 2 ? [...group].reverse() : group) {
        const order = row.rampartOnly ? kinds.filter(isRampart) : kinds;
        for (const kind of round % 2 ? [...order].reverse() : order) {
          let r;
          if (row.flood) r = await measureFlood(ctx, kind);
          else if (row.idle) r = await measureIdle(ctx, kind, row);
          else r = await measureWrk(ctx, kind, row);
          results[row.id][kind].push(r);
          const brief = row.metrics.map((m) => `${m}=${METRIC[m].fmt(r[m])}`).join(' ');
          const up = r.upstream
            ? ` upstream: limit ${r.upstream.limit}, refused ${r.upstream.refused}, answered ${r.upstream.answered}, latency ${r.upstream.latencyMs.toFixed(2)} ms (baseline ${r.upstream.baselineMs.toFixed(2)})`
            : '';
          log(`  ${row.id} round ${round + 1} ${kind}: ${brief}${r.errors ? ` errors=${r.errors}` : ''}${up}`);
        }
      }
    }
  }
  await origin.stop();
  const loadAfter = os.loadavg();
  const minutes = ((Date.now() - started) / 60000).toFixed(1);

  const out = [];
  out.push(
    `Rampart vs ${peers.map((k) => NAME[k]).join(' and ') || 'no peer'}, ${new Date().toISOString()}, ${QUICK ? 'quick' : 'full'} run: ${ROUNDS} round(s), ${DURATION} s per wrk run (keep-alive rows ${KA_DURATION} s), ${minutes} min total`
  );
  out.push(
    `machine: ${env.cores} cores (${env.cpu}), ${env.memGiB} GiB, ${env.kernel}; load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${loadAfter.map((x) => x.toFixed(2)).join(' ')}`
  );
  out.push(`versions: node ${env.node}; ${env.haproxy}; ${env.nginx}; ${env.wrk}; ${env.openssl}`);
  out.push(`peers: ${peers.map((k) => NAME[k]).join(', ') || 'none'}${peerNotes.length ? ` (${peerNotes.join('; ')})` : ''}`);
  out.push(`addon: ${env.addon} (${env.addonBuild})${env.commit ? `, commit ${env.commit}` : ''}`);
  if (COMPARE) out.push(`Rampart B (--compare): the addon package in ${COMPARE}, same config, same rounds`);
  out.push(`TLS negotiated: ${tlsLine}`);
  if (ROUTE.protocol) out.push(`Rampart's route (rows without their own): ${JSON.stringify(ROUTE)}`);
  out.push(
    `workers: Rampart workerThreads ${THREADS}, HAProxy nbthread ${THREADS}, nginx worker_processes ${THREADS} (CPU and RSS: master + workers); origin: HAProxy mode http, nbthread 1, http-request return, on ${originAddrs.join(', ')}; wrk -t ${WRK_THREADS}`
  );
  out.push(
    PIN ? `pinned (taskset): proxies on CPUs ${CPUS.proxy}, wrk and the origin on CPUs ${CPUS.load}` : 'not pinned: proxies, wrk and the origin share every CPU'
  );
  out.push('');
  out.push(table(rows, results, peers));
  out.push('');
  if (peers.includes('nginx') && rows.some((r) => r.protection || r.flood)) {
    out.push(
      `nginx protection rows: limit_conn per $binary_remote_addr = maxConcurrentPerIp (capped at nginx's 65535; checked before the TLS handshake); connectionsPerSecond n/a (stream has no limit_req), so nginx's flood row limits concurrency only`,
      ''
    );
  }
  if (floor) out.push(...floorLines(floor, results), '');
  const pc = protectionCost(rows, results, kinds);
  if (pc.length) out.push('protection cost (medians, same rounds):', '', ...pc, '');
  for (const id of ['idle', 'idle-req']) {
    const idle = results[id];
    if (!idle) continue;
    const est = (k) =>
      idle[k]
        .map(
          (r) =>
            `${r.established}/${ctx.idleCount} held, ${r.failed} failed, proxy reported ${r.active}, base RSS ${r.baseMiB.toFixed(1)} MiB, set up in ${r.setupSec.toFixed(1)} s`
        )
        .join('; ');
    for (const k of kinds) out.push(`${id}: ${NAME[k]} ${est(k)}`);
  }
  const errs = rows
    .filter((r) => results[r.id] && !r.flood && !r.idle)
    .flatMap((r) => kinds.map((k) => [r.id, k, results[r.id][k].reduce((a, x) => a + (x.errors || 0), 0)]))
    .filter((x) => x[2] > 0);
  if (ctx.noResponse.length) out.push(`no request completed within the run (cells n/a): ${ctx.noResponse.join(', ')}`);
  out.push(errs.length ? `wrk errors (socket errors + non-2xx): ${errs.map((e) => `${e[0]} ${e[1]} ${e[2]}`).join(', ')}` : 'wrk errors: none');
  out.push('');
  out.push('commands:');
  for (const [id, c] of Object.entries(ctx.commands)) out.push(`  ${id}: ${c}`);
  out.push(`configs: ${dir} (haproxy.cfg, nginx.conf, rampart.json and origin.cfg of the last run)`);
  console.log(out.join('\n'));
  if (JSON_OUT)
    fs.writeFileSync(
      JSON_OUT,
      JSON.stringify({ env, compare: COMPARE, peers, tlsInfo, floor, loadBefore, loadAfter, results, commands: ctx.commands }, null, 2)
    );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e && e.stack ? e.stack : e);
    process.exit(1);
  }
);
