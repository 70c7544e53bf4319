#!/usr/bin/env node
'use strict';
// Syscalls per request of each proxy on one keep-alive row, counted with `strace -c -f` attached
// to the proxy (every thread; nginx: master + workers) while wrk runs: deterministic counts where
// timings on a shared machine are noise. strace slows the traced proxy, so only the counts per
// request mean anything, not the req/s it prints.
//
//   node benches/syscalls.js [--conns 64] [--duration 5] [--kinds rampart,haproxy,nginx] [--path /]
//   node benches/syscalls.js --perf [...]: `perf record -e cpu-clock -g` on the proxy instead of
//     strace; prints the top self-time symbols (perf report --no-children) per proxy; with
//     --load (and --pin) the load CPUs instead (`perf record -a -C`: wrk, the origin, the kernel).
//   node benches/syscalls.js --ctx [...]: no tracer; context switches (voluntary = the thread
//     slept and was woken, nonvoluntary = preempted) per request, summed over the proxy's threads
//     (/proc/<pid>/task/*/status), and the proxy's CPU µs per request.
//   node benches/syscalls.js --stat [...]: `perf stat` on the proxy's threads (kernel counters and
//     tracepoints, no per-event cost worth measuring): syscalls (raw_syscalls:sys_enter),
//     epoll_wait calls, context switches, wake-ups received (sched:sched_wakeup), CPU migrations
//     per request, CPU µs per request, and wrk's req/s and p99 in the same run; with --pin also
//     `perf stat -a` on the load CPUs (wrk, the origin and their kernel work): syscalls,
//     epoll_wait calls, context switches, wake-ups and softirqs per request, and the
//     inter-processor interrupts the proxy's CPUs received (/proc/interrupts RES and CAL).
//   node benches/syscalls.js --sched [...]: `perf sched record -a`, then `perf sched latency -p`:
//     for the proxy's threads, wrk and the origin, how many times each was switched in per
//     request and how long it waited between being woken and running (average, maximum); and
//     the run time of every other process (other jobs on a shared machine) per request.
//   node benches/syscalls.js --epoll [...]: `perf record` of the proxy's epoll_wait entries and
//     exits: the share of time its threads spent waiting inside epoll_wait (idle), the busy
//     periods (from an epoll_wait's return to the next call: the longest a ready event can wait
//     inside the proxy before its handler runs), p50/p99/max, and the gaps of more than 5 ms in
//     which the proxy sent nothing at all (write/writev/sendto), summed.
//   --close (one request per connection: `Connection: close`; "per request" is then per
//     connection), --no-resume (with --close: wrk never resumes a session, every connection is a
//     full handshake, as run.js's hs-full row), --threads N (workers of every proxy, default 2), --pin (with taskset: the proxy on CPUs
//     0..N-1, wrk and the origin on the rest, as `benches/run.js --pin`), --wrk-threads N,
//     --events a,b (--stat: more perf events, e.g. uprobes on tokio's scheduler added with
//     `perf probe -x rampart.*.node`, printed as counts per request after the table).
//
// Same origin, certificate and proxy configs as benches/run.js (benches/lib.js). Needs strace, wrk,
// haproxy (and nginx with its stream module for the nginx column).
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const L = require('./lib');

const { flag, opt, rampartPath: RAMPART_PATH } = L.cli(__filename);
const CONNS = Number(opt('--conns', 64));
const DURATION = Number(opt('--duration', 5));
const KINDS = opt('--kinds', 'rampart,haproxy,nginx').split(',');
const URL_PATH = opt('--path', '/');
const PERF = flag('--perf');
/** `--perf --load` (with --pin): profile the load CPUs (wrk, the origin, their kernel work) instead of the proxy. */
const PERF_LOAD = PERF && flag('--load');
const CTX = flag('--ctx');
const STAT = flag('--stat');
const SCHED = flag('--sched');
const EPOLL = flag('--epoll');
const THREADS = Number(opt('--threads', 2));
const PIN = flag('--pin');
const NCPU = os.cpus().length;
if (!Number.isInteger(THREADS) || THREADS < 1) throw new Error(`--threads must be a positive integer, got ${opt('--threads', '')}`);
if (PERF_LOAD && !PIN) throw new Error('--perf --load needs --pin (the load CPUs are the ones wrk and the origin are pinned to)');
if (PIN && THREADS >= NCPU) throw new Error(`--pin needs more CPUs than --threads (${THREADS} of ${NCPU})`);
const range = (a, b) => (a === b ? `${a}` : `${a}-${b}`);
/** taskset CPU lists with --pin (null: not pinned). */
const CPUS = PIN ? { proxy: range(0, THREADS - 1), load: range(THREADS, NCPU - 1) } : { proxy: null, load: null };
const WRK_THREADS = Number(opt('--wrk-threads', PIN ? NCPU - THREADS : 2));
const EXTRA_EVENTS = opt('--events', '').split(',').filter(Boolean);
const extraLines = [];
/** Rows of the load CPUs' counters (`--stat --pin`). */
const loadLines = [];
const LOAD_EVENTS = 'context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,sched:sched_wakeup,irq:softirq_entry';

/** `--close`: one request per connection (`Connection: close`); `--no-resume`: full handshakes. */
const CLOSE = flag('--close');
const NO_RESUME = flag('--no-resume');
if (NO_RESUME && !CLOSE) throw new Error('--no-resume needs --close (a keep-alive run makes one handshake per connection anyway)');
/** wrk's environment: the no-resumption shim preloaded with --no-resume (set in main). */
const wrkEnv = { env: process.env };

/**
 * wrk's command line against `port` for `durationS` (with --latency, so the p99 is in its report;
 * with --close one request per connection).
 */
const wrkCmd = (port, durationS = DURATION) =>
  L.pinned(CPUS.load, 'wrk', [
    '-t',
    String(WRK_THREADS),
    '-c',
    String(CONNS),
    '-d',
    `${durationS}s`,
    '--timeout',
    '10s',
    '--latency',
    ...(CLOSE ? ['-H', 'Connection: close'] : []),
    `https://127.0.0.1:${port}${URL_PATH}`,
  ]);

/** Loopback TCP segments sent so far, machine-wide (/proc/net/snmp `Tcp: OutSegs`). */
function tcpOutSegs() {
  const lines = fs
    .readFileSync('/proc/net/snmp', 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('Tcp:'));
  const names = lines[0].split(/\s+/);
  return Number(lines[1].split(/\s+/)[names.indexOf('OutSegs')]);
}

/** Busy jiffies (everything but idle and iowait) of each CPU in `cpus` (a taskset list) summed. */
/** The CPU numbers of a taskset list (`0`, `0-1`, `0,2-3`). */
function cpuSet(cpus) {
  const want = new Set();
  for (const part of cpus.split(',')) {
    const [a, b] = part.split('-').map(Number);
    for (let c = a; c <= (Number.isFinite(b) ? b : a); c++) want.add(c);
  }
  return want;
}

/**
 * Inter-processor interrupts received so far by the CPUs `cpus` (a taskset list), from
 * /proc/interrupts: `{ res, cal }` (rescheduling: a wake-up from another CPU; function call:
 * a queued wake-up or other cross-CPU work).
 */
function ipis(cpus) {
  const want = cpuSet(cpus);
  const out = { res: 0, cal: 0 };
  for (const line of fs.readFileSync('/proc/interrupts', 'utf8').split('\n')) {
    const m = /^\s*(RES|CAL):((?:\s+\d+)+)/.exec(line);
    if (!m) continue;
    m[2]
      .trim()
      .split(/\s+/)
      .forEach((n, cpu) => {
        if (want.has(cpu)) out[m[1].toLowerCase()] += Number(n);
      });
  }
  return out;
}

function busyTicks(cpus) {
  const want = cpuSet(cpus);
  let t = 0;
  for (const line of fs.readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)/.exec(line);
    if (!m || !want.has(Number(m[1]))) continue;
    const f = m[2].trim().split(/\s+/).map(Number);
    t += f.reduce((a, b) => a + b, 0) - f[3] - f[4];
  }
  return t;
}

/**
 * `perf script -F tid,time,event` of epoll_wait entries/exits and sends → `{ calls, idlePct,
 * busy: { p50, p99, max } (ms), silent: { count, ms } }`: per thread, the time inside epoll_wait
 * over the recorded span, the busy periods between a return and the next call, and the gaps
 * over 5 ms between two sends of any thread.
 */
function epollPeriods(text) {
  const byTid = new Map();
  const sends = [];
  let first = Infinity;
  let last = -Infinity;
  for (const line of text.split('\n')) {
    const m = /^\s*(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+)/.exec(line);
    if (!m) continue;
    const t = Number(m[2]) * 1000;
    first = Math.min(first, t);
    last = Math.max(last, t);
    if (m[4] !== 'epoll_wait') {
      sends.push(t);
      continue;
    }
    const st = byTid.get(m[1]) || { enter: null, exit: null, idle: 0, busy: [], calls: 0 };
    byTid.set(m[1], st);
    if (m[3] === 'enter') {
      st.calls++;
      if (st.exit !== null) st.busy.push(t - st.exit);
      st.enter = t;
    } else {
      if (st.enter !== null) st.idle += t - st.enter;
      st.exit = t;
    }
  }
  const busy = [...byTid.values()].flatMap((x) => x.busy);
  // Only the threads that poll (the workers) count towards the idle share.
  const pollers = [...byTid.values()].filter((x) => x.calls > 10);
  const idle = pollers.reduce((a, x) => a + x.idle, 0);
  sends.sort((a, b) => a - b);
  const gaps = [];
  for (let i = 1; i < sends.length; i++) if (sends[i] - sends[i - 1] > 5) gaps.push(sends[i] - sends[i - 1]);
  return {
    calls: pollers.reduce((a, x) => a + x.calls, 0),
    idlePct: (100 * idle) / Math.max(1e-9, (last - first) * pollers.length),
    busy: { p50: L.quantile(busy, 0.5), p99: L.quantile(busy, 0.99), max: Math.max(...busy) },
    silent: { count: gaps.length, ms: gaps.reduce((a, b) => a + b, 0) },
  };
}

/** Every thread id of `pids` (/proc/<pid>/task). */
const threadIds = (pids) => pids.flatMap((pid) => fs.readdirSync(`/proc/${pid}/task`).map(Number));

/** `perf stat -x,` output → `{ event: count }`. */
function parsePerfStat(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const f = line.split(',');
    if (f.length > 3 && /^[\d.]+$/.test(f[0])) out[f[2]] = Number(f[0]);
  }
  return out;
}

/**
 * `perf sched latency -p` output (one row per thread, `comm:tid`) → `{ switches, runMs, avgMs,
 * maxMs }` over the rows that `pick(comm, tid)` accepts (avg weighted by switches).
 */
function parseSchedLatency(text, pick) {
  let switches = 0;
  let runMs = 0;
  let weighted = 0;
  let maxMs = 0;
  for (const line of text.split('\n')) {
    const m = /^\s*(\S.*?):(\d+)\s*\|\s*([\d.]+) ms\s*\|\s*(\d+)\s*\|\s*avg:\s*([\d.]+) ms\s*\|\s*max:\s*([\d.]+) ms/.exec(line);
    if (!m || !pick(m[1], Number(m[2]))) continue;
    const n = Number(m[4]);
    switches += n;
    runMs += Number(m[3]);
    weighted += n * Number(m[5]);
    maxMs = Math.max(maxMs, Number(m[6]));
  }
  return { switches, runMs, avgMs: switches ? weighted / switches : NaN, maxMs };
}

/** Summed context switches and CPU ticks over every thread of `pids`. */
function switches(pids) {
  const out = { vol: 0, invol: 0, ticks: 0 };
  for (const pid of pids) {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      const st = fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      out.vol += Number((/voluntary_ctxt_switches:\s+(\d+)/.exec(st) || [])[1] || 0);
      out.invol += Number((/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(st) || [])[1] || 0);
    }
    out.ticks += L.procStat(pid).cpuTicks;
  }
  return out;
}

/** Children pids of `pid` (/proc/<pid>/task/<tid>/children). */
function childPids(pid) {
  const out = [];
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const k = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
    if (k) out.push(...k.split(/\s+/).map(Number));
  }
  return out;
}

/** Parses `strace -c` output: `{ total, by: { name: calls } }` (errors counted in calls). */
function parseStraceC(text) {
  const by = {};
  let total = 0;
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    // % time, seconds, usecs/call, calls, [errors], syscall
    if (f.length >= 5 && /^[\d.]+$/.test(f[0]) && /^\d+$/.test(f[3])) {
      const name = f[f.length - 1];
      if (name === 'total') continue;
      by[name] = Number(f[3]);
      total += Number(f[3]);
    }
  }
  return { total, by };
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-syscalls-'));
  if (NO_RESUME) {
    const cc = ['cc', 'gcc', 'clang'].find(L.haveTool);
    const so = cc ? await L.buildNoResumeShim(cc, dir) : { error: 'no C compiler (cc, gcc, clang)' };
    if (so.error) throw new Error(`--no-resume: cannot build the no-resumption shim: ${so.error}`);
    wrkEnv.env = { ...process.env, LD_PRELOAD: so.path };
  }
  const { generateSelfSignedCert } = require(RAMPART_PATH);
  const [cert, key] = generateSelfSignedCert(['localhost', '127.0.0.1']);
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  const pemFile = path.join(dir, 'bench.pem');
  fs.writeFileSync(certFile, cert);
  fs.writeFileSync(keyFile, key);
  fs.writeFileSync(pemFile, cert + key);
  fs.writeFileSync(path.join(dir, 'body.bin'), Buffer.alloc(4096, 'r'));
  fs.writeFileSync(path.join(dir, 'bulk.bin'), Buffer.alloc(65536, 'b'));
  const originPort = await L.freePort();
  const addrs = ['127.0.0.10', '127.0.0.11', '127.0.0.12', '127.0.0.13'];
  const upstreams = addrs.map((host) => ({ host, port: originPort }));
  fs.writeFileSync(
    path.join(dir, 'origin.cfg'),
    L.originConfig({ addrs, port: originPort, bodyFile: path.join(dir, 'body.bin'), bulkFile: path.join(dir, 'bulk.bin'), maxconn: 4000 })
  );
  const origin = await L.startHaproxy(path.join(dir, 'origin.cfg'), originPort, addrs[0], CPUS.load);
  const st = KINDS.includes('nginx') ? await L.nginxStream() : { ok: false };
  const rows = [];
  try {
    for (const kind of KINDS) {
      const port = await L.freePort();
      let p;
      if (kind === 'rampart') {
        const cfg = {
          workerThreads: THREADS,
          listeners: [{ host: '127.0.0.1', port, defaultCert: { certChain: { file: certFile }, privateKey: { file: keyFile } } }],
          routes: [{ sni: '', terminateTls: true, upstreams: upstreams.map((u) => ({ kind: 'tcp', ...u })) }],
        };
        p = await L.startRampart(cfg, path.join(dir, 'rampart.json'), RAMPART_PATH, CPUS.proxy);
      } else if (kind === 'haproxy') {
        fs.writeFileSync(
          path.join(dir, 'haproxy.cfg'),
          L.haproxyConfig({ port, pem: pemFile, upstreams, threads: THREADS, maxconn: 4000, statsSocket: path.join(dir, 'ha.sock') })
        );
        p = await L.startHaproxy(path.join(dir, 'haproxy.cfg'), port, '127.0.0.1', CPUS.proxy);
      } else if (kind === 'nginx') {
        if (!st.ok) {
          console.error(`nginx skipped: ${st.why || 'not installed'} (apt-get install nginx libnginx-mod-stream)`);
          continue;
        }
        const cfg = path.join(dir, 'nginx.conf');
        fs.writeFileSync(cfg, L.nginxConfig({ dir, port, certFile, keyFile, upstreams, workers: THREADS, maxconn: 4000, loadModule: st.loadModule }));
        p = await L.startNginx(cfg, port, dir, THREADS, CPUS.proxy);
      } else throw new Error(`unknown kind ${kind}`);
      try {
        const pids = kind === 'nginx' ? childPids(p.pid) : [p.pid];
        if (CTX) {
          const a = switches(pids);
          const w = await L.run(...wrkCmd(port), wrkEnv);
          const b = switches(pids);
          const parsed = L.parseWrk(w.stdout);
          const per = (x) => (x / parsed.requests).toFixed(3);
          const line = `| ${kind} | ${parsed.rps.toFixed(0)} | ${per(b.vol - a.vol)} | ${per(b.invol - a.invol)} | ${(((b.ticks - a.ticks) * 1e4) / parsed.requests).toFixed(1)} |`;
          rows.push(line);
          console.error(line);
          continue;
        }
        if (EPOLL) {
          await L.run(...wrkCmd(port, 2), wrkEnv);
          const out = path.join(dir, `epoll-${kind}.data`);
          const events = ['epoll_wait', 'write', 'writev', 'sendto'].map((e) => `syscalls:sys_enter_${e}`).join(',');
          const tr = spawn('perf', ['record', '-o', out, '-e', `${events},syscalls:sys_exit_epoll_wait`, '-t', threadIds(pids).join(',')], { stdio: 'ignore' });
          await L.sleep(300);
          const w = await L.run(...wrkCmd(port), { ...wrkEnv, timeoutMs: (DURATION + 30) * 1000 });
          tr.kill('SIGINT');
          await new Promise((r) => tr.once('exit', r));
          const parsed = L.parseWrk(w.stdout);
          const sc = await L.run('perf', ['script', '-i', out, '-F', 'tid,time,event'], { timeoutMs: 300000 });
          const e = epollPeriods(sc.stdout);
          const us = (x) => (x * 1000).toFixed(0);
          const line = `| ${kind} | ${parsed.rps.toFixed(0)} | ${parsed.p50Ms.toFixed(1)} | ${parsed.p99Ms.toFixed(1)} | ${(e.calls / parsed.requests).toFixed(3)} | ${e.idlePct.toFixed(1)} % | ${us(e.busy.p50)} / ${us(e.busy.p99)} / ${e.busy.max.toFixed(1)} | ${e.silent.count} (${e.silent.ms.toFixed(0)} ms) |`;
          rows.push(line);
          console.error(line);
          continue;
        }
        if (STAT || SCHED) {
          // Warm-up (connections, handshakes, buffers), then the measured run.
          await L.run(...wrkCmd(port, 2), wrkEnv);
          const tids = threadIds(pids);
          const out = path.join(dir, `${STAT ? 'stat' : 'sched'}-${kind}.${STAT ? 'txt' : 'data'}`);
          const events = [
            'task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,sched:sched_wakeup',
            ...EXTRA_EVENTS,
          ].join(',');
          const tr = STAT
            ? spawn('perf', ['stat', '-x,', '-o', out, '-e', events, '-t', tids.join(',')], { stdio: 'ignore' })
            : spawn('perf', ['sched', 'record', '-o', out, '-a'], { stdio: 'ignore' });
          // Pinned: the same counters on the load CPUs (wrk, the origin and their kernel work),
          // to see whether a proxy makes the bottleneck side do more per request.
          const loadOut = path.join(dir, `stat-load-${kind}.txt`);
          const loadTr = STAT && PIN ? spawn('perf', ['stat', '-x,', '-o', loadOut, '-a', '-C', CPUS.load, '-e', LOAD_EVENTS], { stdio: 'ignore' }) : null;
          await L.sleep(300);
          const seg0 = tcpOutSegs();
          const ipi0 = PIN ? ipis(CPUS.proxy) : null;
          const load0 = PIN ? busyTicks(CPUS.load) : 0;
          const w = await L.run(...wrkCmd(port), { ...wrkEnv, timeoutMs: (DURATION + 30) * 1000 });
          const segs = tcpOutSegs() - seg0;
          const ipi1 = PIN ? ipis(CPUS.proxy) : null;
          const loadTicks = PIN ? busyTicks(CPUS.load) - load0 : NaN;
          for (const t of [tr, loadTr].filter(Boolean)) {
            t.kill('SIGINT');
            await new Promise((r) => t.once('exit', r));
          }
          const parsed = L.parseWrk(w.stdout);
          const per = (x) => (x / parsed.requests).toFixed(3);
          if (loadTr) {
            const c = parsePerfStat(fs.readFileSync(loadOut, 'utf8'));
            loadLines.push(
              `| ${kind} | ${parsed.rps.toFixed(0)} | ${per(c['raw_syscalls:sys_enter'])} | ${per(c['syscalls:sys_enter_epoll_wait'])} | ${per(c['context-switches'])} | ${per(c['sched:sched_wakeup'])} | ${per(c['irq:softirq_entry'])} | ${per(ipi1.res - ipi0.res)} / ${per(ipi1.cal - ipi0.cal)} |`
            );
          }
          let line;
          if (STAT) {
            const c = parsePerfStat(fs.readFileSync(out, 'utf8'));
            const cpuUs = (c['task-clock'] * 1000) / parsed.requests; // task-clock is in ms
            // The load CPUs' busy time per request (wrk, the origin, their softirqs), in µs.
            const loadUs = ((loadTicks / L.CLK_TCK) * 1e6) / parsed.requests;
            if (EXTRA_EVENTS.length) extraLines.push(`${kind}: ${EXTRA_EVENTS.map((e) => `${e} ${per(c[e] || 0)}`).join(', ')} per request`);
            line = `| ${kind} | ${parsed.rps.toFixed(0)} | ${parsed.p50Ms.toFixed(1)} | ${parsed.p99Ms.toFixed(1)} | ${per(segs)} | ${loadUs.toFixed(1)} | ${per(c['raw_syscalls:sys_enter'])} | ${per(c['syscalls:sys_enter_epoll_wait'])} | ${per(c['context-switches'])} | ${per(c['sched:sched_wakeup'])} | ${per(c['cpu-migrations'])} | ${cpuUs.toFixed(1)} |`;
          } else {
            const rep = await L.run('perf', ['sched', 'latency', '-p', '-i', out, '--sort', 'max'], { timeoutMs: 300000 });
            const set = new Set(tids);
            const originTids = new Set(threadIds([origin.pid]));
            const cell = (x) => `${per(x.switches)} / ${(x.avgMs * 1000).toFixed(0)} / ${x.maxMs.toFixed(1)}`;
            const px = parseSchedLatency(rep.stdout, (_, t) => set.has(t));
            const wrk = parseSchedLatency(rep.stdout, (c) => c === 'wrk');
            const og = parseSchedLatency(rep.stdout, (_, t) => originTids.has(t));
            const other = parseSchedLatency(rep.stdout, (c, t) => !set.has(t) && !originTids.has(t) && c !== 'wrk' && !/^(perf|swapper)/.test(c));
            line = `| ${kind} | ${parsed.rps.toFixed(0)} | ${parsed.p99Ms.toFixed(1)} | ${cell(px)} | ${cell(wrk)} | ${cell(og)} | ${(((other.runMs / 1000) * 1e6) / parsed.requests).toFixed(1)} |`;
          }
          rows.push(line);
          console.error(line);
          continue;
        }
        const out = path.join(dir, `${PERF ? 'perf' : 'strace'}-${kind}.${PERF ? 'data' : 'txt'}`);
        const tr = PERF
          ? spawn('perf', ['record', '-e', 'cpu-clock', '-g', '-o', out, ...(PERF_LOAD ? ['-a', '-C', CPUS.load] : ['-p', pids.join(',')])], {
              stdio: 'ignore',
            })
          : spawn('strace', ['-c', '-f', '-o', out, ...pids.flatMap((x) => ['-p', String(x)])], { stdio: 'ignore' });
        await L.sleep(500);
        const w = await L.run(...wrkCmd(port), { ...wrkEnv, timeoutMs: (DURATION + 30) * 1000 });
        tr.kill('SIGINT');
        await new Promise((r) => tr.once('exit', r));
        const parsed = L.parseWrk(w.stdout);
        if (PERF) {
          const report = async (extra) => {
            const rep = await L.run('perf', ['report', '-i', out, '--no-children', '--stdio', '-g', 'none', '-n', ...extra]);
            const samples = Number((/# Samples: (\d+)/.exec(rep.stdout) || [])[1]) || 0;
            return {
              samples,
              lines: rep.stdout
                .split('\n')
                .filter((l) => /^\s+[\d.]+%/.test(l))
                .map((l) => l.replace(/\s+-\s+-\s*$/, '')),
            };
          };
          const byDso = await report(['--sort', 'dso', '--percent-limit', '1']);
          const user = await report(['--sort', PERF_LOAD ? 'comm,dso,symbol' : 'dso,symbol', '--percent-limit', '0.7']);
          // cpu-clock samples at the default 4000 Hz: 250 µs each.
          const usPerReq = (byDso.samples * 250) / parsed.requests;
          console.log(
            `${kind}: ${parsed.requests} requests, ${parsed.rps.toFixed(0)} req/s under perf, ${byDso.samples} samples ≈ ${usPerReq.toFixed(1)} µs CPU/req\nby object:\n${byDso.lines.join('\n')}\ntop symbols:\n${user.lines.join('\n')}\n`
          );
          continue;
        }
        const sc = parseStraceC(fs.readFileSync(out, 'utf8'));
        const per = (n) => (n / parsed.requests).toFixed(2);
        const top = Object.entries(sc.by)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([k, v]) => `${k} ${per(v)}`)
          .join(', ');
        rows.push(`| ${kind} | ${parsed.requests} | ${per(sc.total)} | ${top} |`);
        console.error(`${kind}: ${parsed.requests} requests, ${per(sc.total)} syscalls/req: ${top}`);
      } finally {
        await p.stop();
      }
    }
  } finally {
    await origin.stop();
  }
  const setup = `${CLOSE ? `one request per connection${NO_RESUME ? ' (full handshakes)' : ''}` : 'keep-alive'} ${CONNS} conns, GET ${URL_PATH}, ${THREADS} worker(s) per proxy, wrk -t ${WRK_THREADS} -d ${DURATION}s${PIN ? `, pinned: proxy on CPUs ${CPUS.proxy}, wrk + origin on ${CPUS.load}` : ''}, load ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`;
  if (STAT) {
    console.log(`perf stat on the proxy's threads per request, ${setup}`);
    console.log(
      '| proxy | req/s | p50 ms | p99 ms | TCP segments/req (all loopback) | load CPUs µs/req (wrk + origin) | syscalls/req | epoll_wait/req | context switches/req | wake-ups/req | migrations/req | proxy CPU µs/req |'
    );
    console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
    console.log(rows.join('\n'));
    if (extraLines.length) console.log(`\n${extraLines.join('\n')}`);
    if (loadLines.length) {
      console.log(`\nperf stat -a -C ${CPUS.load} (the load CPUs: wrk, the origin, their kernel work) per request`);
      console.log(
        '| proxy | req/s | syscalls/req | epoll_wait/req | context switches/req | wake-ups/req | softirqs/req | IPIs to the proxy CPUs/req (rescheduling / function call) |'
      );
      console.log('|---|---|---|---|---|---|---|---|');
      console.log(loadLines.join('\n'));
    }
    return;
  }
  if (EPOLL) {
    console.log(`epoll_wait and sends of the proxy's threads (perf record), ${setup}`);
    console.log(
      '| proxy | req/s | p50 ms | p99 ms | epoll_wait/req | time inside epoll_wait (idle) | busy periods p50 µs / p99 µs / max ms | gaps > 5 ms without a send (their sum) |'
    );
    console.log('|---|---|---|---|---|---|---|---|');
    console.log(rows.join('\n'));
    return;
  }
  if (SCHED) {
    console.log(`perf sched record -a, then perf sched latency -p; each cell: switch-ins per request / wake-up → running avg µs / max ms; ${setup}`);
    console.log("| proxy | req/s | p99 ms | proxy threads | wrk | origin | other processes' run time µs/req |");
    console.log('|---|---|---|---|---|---|---|');
    console.log(rows.join('\n'));
    return;
  }
  if (CTX) {
    console.log(`context switches per request, ${setup}`);
    console.log('| proxy | req/s | voluntary/req | nonvoluntary/req | CPU µs/req |');
    console.log('|---|---|---|---|---|');
    console.log(rows.join('\n'));
    return;
  }
  console.log(`syscalls per request, ${setup}, ${PERF ? 'perf record' : 'strace -c -f'} on the proxy`);
  console.log('| proxy | requests (under strace) | syscalls/req | top syscalls per request |');
  console.log('|---|---|---|---|');
  console.log(rows.join('\n'));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e && e.stack ? e.stack : e);
    process.exit(1);
  }
);
