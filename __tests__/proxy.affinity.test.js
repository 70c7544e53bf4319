'use strict';
// Symphony's upstream-level balancing fields (README: Upstream protocols, balancing): `ipAffinity`
// / `ipAffinityTtlMs` given on the upstreams keep a client on its upstream across reconnects, and
// `pid` / `tid` weight least connections by each worker's CPU use (read from procfs off the
// connection path), so a busy worker gets no new connection while an idle one is free. Real TLS
// clients, unix-socket workers in this process and in child processes.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { RampartProxy } = require('..');
const h = require('./helpers');

const dirs = [];
test.after(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** A fresh unix socket path (its directory removed after the file's tests). */
function sockPath(name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-aff-'));
  dirs.push(dir);
  return path.join(dir, `${name}.sock`);
}

/** One TLS round trip through the proxy from `localAddress`: the tag of the worker that served it. */
async function served(port, localAddress = '127.0.0.1') {
  const r = await h.tlsRoundTrip({ port, servername: 'localhost', payload: Buffer.from('.'), expect: 2, localAddress });
  return r.data.toString()[0];
}

/** Waits until the route has no open connection on any upstream (a pick sees every count at 0). */
function idle(proxy) {
  return h.waitFor(() => proxy.metrics().routeMetrics[0].upstreams.every((u) => u.activeConnections === 0), { what: 'connections closed' });
}

test('upstream-level ipAffinity keeps each client on its upstream across reconnects until the TTL', async (t) => {
  const paths = ['a', 'b', 'c'].map(sockPath);
  const workers = await Promise.all(['A', 'B', 'C'].map((tag, i) => h.echoServer({ tag, path: paths[i] })));
  const port = await h.freePort();
  // Symphony's shape: the affinity is given on each upstream (the set shares one).
  const upstreams = paths.map((p) => ({ kind: 'uds', path: p, ipAffinity: true, ipAffinityTtlMs: 400 }));
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: 'localhost', upstreams }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const w of workers) await h.closeServer(w);
  });
  const seq = async (ip, n) => {
    const out = [];
    for (let i = 0; i < n; i++) {
      out.push(await served(port, ip));
      await idle(proxy);
    }
    return out.join('');
  };
  // Every count is 0 at each pick: without affinity each connection would take the next in turn.
  assert.equal(await seq('127.0.0.1', 4), 'AAAA');
  assert.equal(await seq('127.0.0.2', 3), 'BBB');
  assert.equal(await seq('127.0.0.1', 2), 'AA');
  // Past the TTL the client is balanced again (the next in turn), then sticks there.
  await new Promise((r) => setTimeout(r, 450));
  assert.equal(await seq('127.0.0.1', 3), 'CCC');
  assert.deepEqual(
    proxy.metrics().routeMetrics[0].upstreams,
    paths.map((p) => ({ upstream: `unix:${p}`, activeConnections: 0, cpuPermille: null }))
  );
});

/**
 * A worker in its own process serving a unix socket (it writes `tag`, then echoes); `busy` spins
 * its main thread (the one serving the socket) in 20 ms slices. Resolves `{ child, pid }` once
 * listening.
 */
async function worker(t, tag, busy) {
  const p = sockPath(tag);
  const code = `
    const net = require('node:net');
    const [path, tag, busy] = process.argv.slice(1);
    net.createServer((c) => { c.on('error', () => {}); c.write(tag); c.pipe(c); })
      .listen(path, () => process.stdout.write('ready\\n'));
    if (busy === 'busy') {
      const spin = () => { const end = Date.now() + 20; while (Date.now() < end); setImmediate(spin); };
      spin();
    }`;
  const child = spawn(process.execPath, ['-e', code, p, tag, busy ? 'busy' : 'idle'], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  await h.waitFor(() => out.includes('ready'), { what: `worker ${tag} listening` });
  return { path: p, pid: child.pid };
}

test('pid/tid weighting: least connections sends new connections to the idle worker, not the busy one', async (t) => {
  const busy = await worker(t, 'B', true);
  const calm = await worker(t, 'I', false);
  const port = await h.freePort();
  // A node process's main thread has tid = pid. The busy worker comes first: without its CPU
  // weight, ties (all counts 0) would alternate between the two.
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: 'localhost', upstreams: [busy, calm].map((w) => ({ kind: 'uds', path: w.path, pid: w.pid, tid: w.pid })) }],
  });
  await proxy.start();
  t.after(() => proxy.stop());
  const cpu = () => proxy.metrics().routeMetrics[0].upstreams.map((u) => u.cpuPermille);
  // Sampled every ~250 ms by the background task: the busy one spins, the idle one sleeps.
  await h.waitFor(
    () => {
      const [b, i] = cpu();
      return b !== null && i !== null && b > i + 200;
    },
    { what: 'CPU use sampled', timeoutMs: 10000 }
  );
  const got = [];
  for (let n = 0; n < 6; n++) {
    got.push(await served(port));
    await idle(proxy);
  }
  assert.equal(got.join(''), 'IIIIII');
  const [b, i] = cpu();
  assert.ok(b > i, `busy ${b}‰ > idle ${i}‰`);
});

test('without pid the same set alternates (ties in turn), so the weighting is what chose', async (t) => {
  const a = await worker(t, 'X', false);
  const b = await worker(t, 'Y', false);
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: 'localhost', upstreams: [a, b].map((w) => ({ kind: 'uds', path: w.path })) }],
  });
  await proxy.start();
  t.after(() => proxy.stop());
  const got = [];
  for (let n = 0; n < 4; n++) {
    got.push(await served(port));
    await idle(proxy);
  }
  assert.equal(got.join(''), 'XYXY');
});
