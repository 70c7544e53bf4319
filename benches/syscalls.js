#!/usr/bin/env node
'use strict';
// Syscalls per request of each proxy on one keep-alive row, counted with `strace -c -f` attached
// to the proxy (every thread; nginx: master + workers) while wrk runs: deterministic counts where
// timings on a shared machine are noise. strace slows the traced proxy, so only the counts per
// request mean anything, not the req/s it prints.
//
//   node benches/syscalls.js [--conns 64] [--duration 5] [--kinds rampart,haproxy,nginx] [--path /]
//   node benches/syscalls.js --perf [...]: `perf record -e cpu-clock -g` on the proxy instead of
//     strace; prints the top self-time symbols (perf report --no-children) per proxy.
//   node benches/syscalls.js --ctx [...]: no tracer; context switches (voluntary = the thread
//     slept and was woken, nonvoluntary = preempted) per request, summed over the proxy's threads
//     (/proc/<pid>/task/*/status), and the proxy's CPU µs per request.
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
const CTX = flag('--ctx');

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
  const origin = await L.startHaproxy(path.join(dir, 'origin.cfg'), originPort, addrs[0]);
  const st = KINDS.includes('nginx') ? await L.nginxStream() : { ok: false };
  const rows = [];
  try {
    for (const kind of KINDS) {
      const port = await L.freePort();
      let p;
      if (kind === 'rampart') {
        const cfg = {
          workerThreads: 2,
          listeners: [{ host: '127.0.0.1', port, defaultCert: { certChain: { file: certFile }, privateKey: { file: keyFile } } }],
          routes: [{ sni: '', terminateTls: true, upstreams: upstreams.map((u) => ({ kind: 'tcp', ...u })) }],
        };
        p = await L.startRampart(cfg, path.join(dir, 'rampart.json'), RAMPART_PATH);
      } else if (kind === 'haproxy') {
        fs.writeFileSync(
          path.join(dir, 'haproxy.cfg'),
          L.haproxyConfig({ port, pem: pemFile, upstreams, threads: 2, maxconn: 4000, statsSocket: path.join(dir, 'ha.sock') })
        );
        p = await L.startHaproxy(path.join(dir, 'haproxy.cfg'), port);
      } else if (kind === 'nginx') {
        if (!st.ok) {
          console.error(`nginx skipped: ${st.why || 'not installed'} (apt-get install nginx libnginx-mod-stream)`);
          continue;
        }
        const cfg = path.join(dir, 'nginx.conf');
        fs.writeFileSync(cfg, L.nginxConfig({ dir, port, certFile, keyFile, upstreams, workers: 2, maxconn: 4000, loadModule: st.loadModule }));
        p = await L.startNginx(cfg, port, dir, 2);
      } else throw new Error(`unknown kind ${kind}`);
      try {
        const pids = kind === 'nginx' ? childPids(p.pid) : [p.pid];
        if (CTX) {
          const a = switches(pids);
          const w = await L.run('wrk', ['-t', '2', '-c', String(CONNS), '-d', `${DURATION}s`, `https://127.0.0.1:${port}${URL_PATH}`]);
          const b = switches(pids);
          const parsed = L.parseWrk(w.stdout);
          const per = (x) => (x / parsed.requests).toFixed(3);
          const line = `| ${kind} | ${parsed.rps.toFixed(0)} | ${per(b.vol - a.vol)} | ${per(b.invol - a.invol)} | ${(((b.ticks - a.ticks) * 1e4) / parsed.requests).toFixed(1)} |`;
          rows.push(line);
          console.error(line);
          continue;
        }
        const out = path.join(dir, `${PERF ? 'perf' : 'strace'}-${kind}.${PERF ? 'data' : 'txt'}`);
        const tr = PERF
          ? spawn('perf', ['record', '-e', 'cpu-clock', '-g', '-o', out, '-p', pids.join(',')], { stdio: 'ignore' })
          : spawn('strace', ['-c', '-f', '-o', out, ...pids.flatMap((x) => ['-p', String(x)])], { stdio: 'ignore' });
        await L.sleep(500);
        const w = await L.run('wrk', ['-t', '2', '-c', String(CONNS), '-d', `${DURATION}s`, `https://127.0.0.1:${port}${URL_PATH}`]);
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
          const user = await report(['--sort', 'dso,symbol', '--percent-limit', '0.7']);
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
  if (CTX) {
    console.log(`context switches per request, keep-alive ${CONNS} conns, GET ${URL_PATH}, wrk -t 2 -d ${DURATION}s, load ${os.loadavg()[0].toFixed(2)}`);
    console.log('| proxy | req/s | voluntary/req | nonvoluntary/req | CPU µs/req |');
    console.log('|---|---|---|---|---|');
    console.log(rows.join('\n'));
    return;
  }
  console.log(`syscalls per request, keep-alive ${CONNS} conns, GET ${URL_PATH}, wrk -t 2 -d ${DURATION}s, strace -c -f on the proxy`);
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
