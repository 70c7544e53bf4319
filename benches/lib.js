'use strict';
// Plumbing for the bench scripts (run.js, attack.js, h2.js, syscalls.js): command line, child processes,
// HAProxy/nginx configs, /proc readings, wrk output, statistics.
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { spawn, fork } = require('node:child_process');

const proc = require('../__tests__/helpers/proc');
const { haveTool, freePort } = proc;

/** `proc.run` with the benches' defaults (2 min) and its output as strings. */
async function run(cmd, args, { timeoutMs = 120000, env, cwd } = {}) {
  const r = await proc.run(cmd, args, { timeoutMs, env, cwd });
  return { code: r.code, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves once `host:port` accepts a TCP connection (polls every 20 ms). */
async function waitPort(port, host = '127.0.0.1', timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise((r) => {
      const s = net.connect({ port, host });
      s.on('connect', () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
    if (ok) return;
    if (Date.now() > end) throw new Error(`nothing listens on ${host}:${port} after ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** `{ rssKb, cpuTicks }` of a process from /proc (cpuTicks = utime + stime, in clock ticks). */
function procStat(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number((/VmRSS:\s+(\d+)/.exec(status) || [])[1] || 0);
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { rssKb, cpuTicks: Number(f[11]) + Number(f[12]) };
}

/**
 * `{ rssKb, cpuTicks }` summed over `pid` and its child processes (nginx: master + workers), from
 * /proc/<pid>/task/<tid>/children. RSS is the plain sum, so pages the workers share with the
 * master (code, the configuration) are counted once per process.
 */
function procStatTree(pid) {
  const pids = [pid];
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (kids) pids.push(...kids.split(/\s+/).map(Number));
    }
  } catch {
    // the process is gone: its own reading below throws the error the caller sees
  }
  const out = { rssKb: 0, cpuTicks: 0, processes: 0 };
  for (const p of pids) {
    let s;
    try {
      s = procStat(p);
    } catch (e) {
      if (p === pid) throw e;
      continue; // a child that just exited
    }
    out.rssKb += s.rssKb;
    out.cpuTicks += s.cpuTicks;
    out.processes++;
  }
  return out;
}

/** Clock ticks per second (USER_HZ); 100 on every Linux build in practice. */
const CLK_TCK = 100;

/** Soft and hard RLIMIT_NOFILE of this process. */
function nofileLimits() {
  const m = /Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/.exec(fs.readFileSync('/proc/self/limits', 'utf8'));
  const n = (x) => (x === 'unlimited' ? Infinity : Number(x));
  return { soft: n(m[1]), hard: n(m[2]) };
}

/** Kills a child and waits for it to exit. */
function killWait(child, signal = 'SIGTERM', timeoutMs = 5000) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    child.kill(signal);
  });
}

// ---------- HAProxy ----------

/**
 * HAProxy as the shared origin ("upstream") server: `mode http`, answering every request from
 * memory with `http-request return` (no disk, no backend), bound on each of `addrs`.
 */
function originConfig({ addrs, port, bodyFile, bulkFile, maxconn, threads = 1 }) {
  return `global
  nbthread ${threads}
  maxconn ${maxconn}
  tune.bufsize 131072
defaults
  mode http
  timeout client 60s
  timeout server 60s
  timeout connect 5s
  timeout http-keep-alive 60s
frontend origin
${addrs.map((a) => `  bind ${a}:${port}`).join('\n')}
  http-request return status 200 content-type application/octet-stream file ${bulkFile} if { path /bulk }
  http-request return status 200 content-type application/octet-stream file ${bodyFile}
`;
}

/**
 * HAProxy as the proxy under test: `mode tcp`, TLS terminated on the bind line, round-robin over
 * the same origin addresses Rampart uses. `protection` mirrors Rampart's
 * `{ rateLimit: { connectionsPerSecond }, maxConcurrentPerIp }` with a stick table tracking
 * conn_rate(1s) and conn_cur per source IP and `tcp-request connection reject` rules (checked at
 * accept, before the TLS handshake, like Rampart's admission).
 */
function haproxyConfig({ port, pem, upstreams, threads, maxconn, statsSocket, protection }) {
  const prot = protection
    ? `  stick-table type ip size 1m expire 30s store conn_rate(1s),conn_cur
  tcp-request connection track-sc0 src
  tcp-request connection reject if { sc_conn_rate(0) gt ${protection.connectionsPerSecond} }
  tcp-request connection reject if { sc_conn_cur(0) gt ${protection.maxConcurrentPerIp} }
`
    : '';
  return `global
  nbthread ${threads}
  maxconn ${maxconn}
  stats socket ${statsSocket} level admin
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:${port} ssl crt ${pem} alpn http/1.1
  maxconn ${maxconn}
${prot}  default_backend be
backend be
  balance roundrobin
${upstreams.map((u, i) => `  server o${i} ${u.host}:${u.port}`).join('\n')}
`;
}

/**
 * `[cmd, args]` run under `taskset -c cpus` (which execs it: the pid is the command's), or as it
 * is when `cpus` is null.
 */
function pinned(cpus, cmd, args) {
  return cpus ? ['taskset', ['-c', cpus, cmd, ...args]] : [cmd, args];
}

/**
 * Starts `haproxy -db -f cfg` (foreground, one process), on the CPUs `cpus` (a taskset list) when
 * given; resolves `{ pid, child, stop() }`.
 */
async function startHaproxy(cfgPath, port, host = '127.0.0.1', cpus = null) {
  const check = await run('haproxy', ['-c', '-q', '-f', cfgPath]);
  if (check.code !== 0) throw new Error(`haproxy config ${cfgPath} rejected:\n${check.stdout}${check.stderr}`);
  const child = spawn(...pinned(cpus, 'haproxy', ['-db', '-f', cfgPath]), { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => (log += d));
  const exited = new Promise((r) => child.once('exit', r));
  await Promise.race([
    waitPort(port, host),
    exited.then(() => {
      throw new Error(`haproxy exited: ${log}`);
    }),
  ]);
  return { pid: child.pid, child, stop: () => killWait(child, 'SIGTERM'), log: () => log };
}

/** `show info` (or another command) on an HAProxy stats socket, as `{ Name: value }`. */
function haproxyInfo(sockPath, cmd = 'show info') {
  return new Promise((resolve, reject) => {
    const s = net.connect(sockPath);
    let d = '';
    s.on('data', (x) => (d += x));
    s.on('error', reject);
    s.on('end', () => {
      const out = {};
      for (const line of d.split('\n')) {
        const i = line.indexOf(':');
        if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
      }
      resolve(out);
    });
    s.write(`${cmd}\n`);
  });
}

// ---------- nginx ----------

/**
 * How this nginx gets its `stream` module: `{ ok, loadModule }` (`loadModule` = path of
 * ngx_stream_module.so for a dynamic build, '' when built in), or `{ ok: false, why }`.
 */
async function nginxStream() {
  const v = await run('nginx', ['-V']);
  if (v.code !== 0) return { ok: false, why: `nginx -V failed: ${v.stderr.trim()}` };
  const t = v.stdout + v.stderr;
  const version = (/nginx version: (\S+)/.exec(t) || [])[1] || 'nginx ?';
  if (/--with-stream(\s|$)/.test(t)) return { ok: true, loadModule: '', version };
  if (!/--with-stream=dynamic/.test(t)) return { ok: false, why: 'this nginx is built without the stream module', version };
  const prefix = (/--prefix=(\S+)/.exec(t) || [])[1] || '/usr/share/nginx';
  const modulesPath = (/--modules-path=(\S+)/.exec(t) || [])[1];
  const candidates = [modulesPath, path.join(prefix, 'modules'), '/usr/lib/nginx/modules', '/usr/lib64/nginx/modules']
    .filter(Boolean)
    .map((d) => path.join(d, 'ngx_stream_module.so'));
  const found = candidates.find((f) => fs.existsSync(f));
  if (!found) return { ok: false, why: `stream is a dynamic module and ngx_stream_module.so is not installed (apt-get install libnginx-mod-stream)`, version };
  return { ok: true, loadModule: found, version };
}

/**
 * nginx as the proxy under test: `stream` module, TLS 1.3 terminated on the listen line (same
 * certificate and key files as Rampart), round-robin over the same origin addresses, 2 worker
 * processes (Rampart: 2 worker threads, HAProxy: nbthread 2). Session resumption as the others
 * offer it: tickets on (one key for all workers, made by the master) and a shared session cache.
 * `protection` maps Rampart's `maxConcurrentPerIp` to `limit_conn` per `$binary_remote_addr`
 * (checked in the preaccess phase, before the TLS handshake; capped at nginx's maximum, 65535);
 * `connectionsPerSecond` has no
 * equivalent in `stream` (`limit_req` is HTTP-only) and is left out.
 */
function nginxConfig({ dir, port, certFile, keyFile, upstreams, workers, maxconn, loadModule, protection }) {
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  const prot = protection
    ? `  limit_conn_zone $binary_remote_addr zone=perip:16m;
  limit_conn_log_level info;
`
    : '';
  // nginx caps limit_conn at 65535 ("connection limit must be less 65536").
  const protServer = protection ? `    limit_conn perip ${Math.min(protection.maxConcurrentPerIp, 65535)};\n` : '';
  return `${loadModule ? `load_module ${loadModule};\n` : ''}${root ? 'user root;\n' : ''}daemon off;
master_process on;
worker_processes ${workers};
worker_rlimit_nofile ${2 * maxconn + 1000};
pid ${path.join(dir, 'nginx.pid')};
error_log ${path.join(dir, 'nginx-error.log')} warn;
events {
  worker_connections ${2 * maxconn + 100};
  multi_accept on;
}
stream {
${prot}  upstream origin {
${upstreams.map((u) => `    server ${u.host}:${u.port};`).join('\n')}
  }
  server {
    listen 127.0.0.1:${port} ssl;
    ssl_certificate ${certFile};
    ssl_certificate_key ${keyFile};
    ssl_protocols TLSv1.3;
    ssl_session_tickets on;
    ssl_session_cache shared:BENCH:32m;
    ssl_session_timeout 10m;
    ssl_handshake_timeout 10s;
    tcp_nodelay on;
    proxy_connect_timeout 5s;
    proxy_timeout 60s;
${protServer}    proxy_pass origin;
  }
}
`;
}

/**
 * Starts `nginx -p dir -c cfg -e errlog` (master in the foreground); resolves `{ pid, child,
 * stop() }` once it listens and all `workers` worker processes are forked (the master listens
 * before it forks them, and their CPU must be in the first reading).
 */
async function startNginx(cfgPath, port, dir, workers = 1, cpus = null) {
  const errLog = path.join(dir, 'nginx-error.log');
  const base = ['-p', dir, '-e', errLog, '-c', cfgPath];
  const check = await run('nginx', ['-t', '-q', ...base]);
  if (check.code !== 0) throw new Error(`nginx config ${cfgPath} rejected:\n${check.stdout}${check.stderr}`);
  const child = spawn(...pinned(cpus, 'nginx', base), { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => (log += d));
  const exited = new Promise((r) => child.once('exit', r));
  await Promise.race([
    waitPort(port),
    exited.then(() => {
      throw new Error(`nginx exited: ${log}`);
    }),
  ]);
  const end = Date.now() + 10000;
  while (procStatTree(child.pid).processes < workers + 1) {
    if (Date.now() > end) throw new Error(`nginx did not fork ${workers} workers in 10 s: ${log}`);
    await sleep(20);
  }
  // SIGTERM = fast shutdown (the master stops its workers and exits).
  return { pid: child.pid, child, stop: () => killWait(child, 'SIGTERM'), log: () => log };
}

/** Established TCP connections whose local port is `port` (from /proc/net/tcp, IPv4). */
function establishedOn(port) {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  let n = 0;
  for (const line of fs.readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length > 3 && f[3] === '01' && f[1].endsWith(`:${hex}`)) n++;
  }
  return n;
}

// ---------- Rampart ----------

/**
 * Forks benches/rampart-server.js with `config` (written to `cfgPath`); resolves `{ pid, child,
 * metrics(), stop() }` once it listens.
 */
async function startRampart(config, cfgPath, rampartPath, cpus = null) {
  fs.writeFileSync(cfgPath, JSON.stringify(config));
  // Pinned: `taskset -c cpus node rampart-server.js` (taskset execs node, which keeps the IPC fd).
  const pin = cpus ? { execPath: 'taskset', execArgv: ['-c', cpus, process.execPath] } : {};
  const child = fork(path.join(__dirname, 'rampart-server.js'), [cfgPath], {
    ...pin,
    env: { ...process.env, RAMPART_PATH: rampartPath },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ready = await new Promise((resolve, reject) => {
    child.once('message', (m) => (m && m.ready ? resolve(m) : reject(new Error(`rampart-server: ${m && m.error}`))));
    child.once('exit', (c) => reject(new Error(`rampart-server exited with ${c}`)));
  });
  const metrics = () =>
    new Promise((resolve) => {
      const on = (m) => {
        if (m && m.metrics) {
          child.off('message', on);
          resolve(m.metrics);
        }
      };
      child.on('message', on);
      child.send({ cmd: 'metrics' });
    });
  const stop = async () => {
    if (child.connected) child.send({ cmd: 'stop' });
    await new Promise((r) => {
      if (child.exitCode !== null || child.signalCode !== null) return r();
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      child.once('exit', () => {
        clearTimeout(t);
        r();
      });
    });
  };
  return { pid: ready.pid, child, metrics, stop };
}

// ---------- wrk ----------

const UNITS = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 };

function parseLatencyMs(s) {
  const m = /([\d.]+)(us|ms|s)/.exec(s || '');
  if (!m) return NaN;
  return Number(m[1]) * { us: 1e-3, ms: 1, s: 1e3 }[m[2]];
}

/**
 * Parses wrk's report: `{ rps, mbps (MiB/s), requests, errors, non2xx, p50Ms, p99Ms, p98Ms,
 * p999Ms, maxMs }` (p50/p99 need `--latency`; p98, p99.9 and max need benches/percentiles.lua,
 * NaN otherwise). `errors` sums
 * the "Socket errors" line (connect, read, write, timeout).
 */
function parseWrk(out) {
  const rps = Number((/Requests\/sec:\s+([\d.]+)/.exec(out) || [])[1]);
  const tm = /Transfer\/sec:\s+([\d.]+)([KMG]?B)/.exec(out);
  const mbps = tm ? (Number(tm[1]) * UNITS[tm[2]]) / UNITS.MB : NaN;
  const requests = Number((/(\d+) requests in/.exec(out) || [])[1]);
  const se = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = se ? se.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  const non2xx = Number((/Non-2xx or 3xx responses: (\d+)/.exec(out) || [0, 0])[1]);
  const p99Ms = parseLatencyMs((/^\s+99%\s+(\S+)/m.exec(out) || [])[1]);
  const p50Ms = parseLatencyMs((/^\s+50%\s+(\S+)/m.exec(out) || [])[1]);
  // benches/percentiles.lua's line, when wrk ran it.
  const pct = (name) => Number((new RegExp(`^PCT .*\\b${name.replace('.', '\\.')}=([\\d.]+)`, 'm').exec(out) || [])[1]);
  return { rps, mbps, requests, errors, non2xx, p50Ms, p99Ms, p98Ms: pct('p98'), p999Ms: pct('p99.9'), maxMs: pct('max') };
}

// ---------- the addon ----------

/** ELF section names of a shared object (64-bit little-endian), [] if it is not one. */
function elfSections(buf) {
  if (buf.length < 64 || buf.readUInt32BE(0) !== 0x7f454c46 || buf[4] !== 2) return [];
  const shoff = Number(buf.readBigUInt64LE(0x28));
  const shentsize = buf.readUInt16LE(0x3a);
  const shnum = buf.readUInt16LE(0x3c);
  const strOff = Number(buf.readBigUInt64LE(shoff + buf.readUInt16LE(0x3e) * shentsize + 0x18));
  const names = [];
  for (let i = 0; i < shnum; i++) {
    const at = strOff + buf.readUInt32LE(shoff + i * shentsize);
    names.push(buf.toString('latin1', at, buf.indexOf(0, at)));
  }
  return names;
}

/** Whether the addon at `file` is a release build (no `.debug_info`), as a sentence. */
function addonBuildKind(file) {
  try {
    const debug = elfSections(fs.readFileSync(file)).includes('.debug_info');
    return debug ? 'has .debug_info: a debug build? figures not representative' : 'release (no .debug_info)';
  } catch (e) {
    return `unreadable: ${e.message}`;
  }
}

// ---------- statistics ----------

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** The q-quantile (0..1) by nearest rank. */
function quantile(xs, q) {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}

/**
 * The IPC of a bench's attack child (a forked process): `{ cmd: 'stats' }` is answered with
 * `{ stats }` (a copy of `st`); `{ cmd: 'stop' }` calls `onStop`, answers the final `{ stats }` and
 * exits; the parent going away exits too.
 */
function answerStats(st, onStop) {
  process.on('message', (m) => {
    if (m && m.cmd === 'stats') process.send({ stats: { ...st } });
    if (m && m.cmd === 'stop') {
      onStop();
      process.send({ stats: { ...st } });
      setTimeout(() => process.exit(0), 50);
    }
  });
  process.on('disconnect', () => process.exit(0));
}

// ---------- command line and child processes ----------

/**
 * A bench script's command line (`process.argv` after the script name): `flag(name)` (given?),
 * `opt(name, dflt)` (the word after `name`, or `dflt`), `list(name, dflt)` (that word split on
 * commas; `dflt` when absent or empty), `argv`, and `rampartPath` (`RAMPART_PATH` resolved, default
 * the repo root). `--help`/`-h` prints the script's header comment (the `//` lines after
 * `'use strict';`, without their `// `) and exits 0.
 */
function cli(file) {
  const argv = process.argv.slice(2);
  const flag = (n) => argv.includes(n);
  const opt = (n, dflt) => {
    const i = argv.indexOf(n);
    return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
  };
  const list = (n, dflt) => (opt(n, '') ? opt(n, '').split(',') : dflt);
  if (flag('--help') || flag('-h')) {
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    const from = lines.findIndex((l) => /^'use strict';/.test(l)) + 1;
    const to = lines.findIndex((l, i) => i >= from && !l.startsWith('//'));
    console.log(
      lines
        .slice(from, to)
        .map((l) => l.replace(/^\/\/ ?/, ''))
        .join('\n')
    );
    process.exit(0);
  }
  const rampartPath = path.resolve(process.env.RAMPART_PATH || path.join(__dirname, '..'));
  return { argv, flag, opt, list, rampartPath };
}

/**
 * The child processes a bench starts: `track(child)` returns `child` and remembers it until it
 * exits; every one still running is SIGKILLed when this process exits, including on SIGINT (exit
 * 130) and SIGTERM (exit 143). Call once per process.
 */
function childTracker() {
  const children = new Set();
  process.on('exit', () => {
    for (const c of children) c.kill('SIGKILL');
  });
  process.on('SIGINT', () => process.exit(130));
  process.on('SIGTERM', () => process.exit(143));
  return (child) => {
    children.add(child);
    child.once('exit', () => children.delete(child));
    return child;
  };
}

/**
 * An LD_PRELOAD library for OpenSSL clients (wrk) that never offers a saved TLS session, so every
 * connection is a full handshake (one ECDHE and one signature on the server).
 */
const NO_RESUME_C = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
/* Never offer a saved TLS session: SSL_set_session always sets none, SSL_clear forgets it. */
int SSL_set_session(void *s, void *sess) {
  static int (*real)(void *, void *);
  if (!real) real = (int (*)(void *, void *))dlsym(RTLD_NEXT, "SSL_set_session");
  (void)sess;
  return real(s, NULL);
}
int SSL_clear(void *s) {
  static int (*real)(void *);
  static int (*set)(void *, void *);
  if (!real) real = (int (*)(void *))dlsym(RTLD_NEXT, "SSL_clear");
  if (!set) set = (int (*)(void *, void *))dlsym(RTLD_NEXT, "SSL_set_session");
  set(s, NULL);
  return real(s);
}
`;

/**
 * Builds the no-resumption shim (NO_RESUME_C) with the C compiler `cc` into `dir`: `{ path }`, or
 * `{ error }` (the compiler's message).
 */
async function buildNoResumeShim(cc, dir) {
  const src = path.join(dir, 'noresume.c');
  const so = path.join(dir, 'noresume.so');
  fs.writeFileSync(src, NO_RESUME_C);
  const r = await run(cc, ['-shared', '-fPIC', '-O2', '-o', so, src, '-ldl']);
  return r.code === 0 ? { path: so } : { error: r.stderr.trim() };
}

module.exports = {
  addonBuildKind,
  buildNoResumeShim,
  answerStats,
  cli,
  pinned,
  childTracker,
  sleep,
  run,
  haveTool,
  freePort,
  waitPort,
  procStat,
  procStatTree,
  CLK_TCK,
  nofileLimits,
  killWait,
  originConfig,
  haproxyConfig,
  startHaproxy,
  haproxyInfo,
  nginxStream,
  nginxConfig,
  startNginx,
  establishedOn,
  startRampart,
  parseWrk,
  median,
  quantile,
};
