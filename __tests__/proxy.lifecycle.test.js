'use strict';
// start/stop, hot route swap, maxConnections, 'error' events.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const { RampartProxy, ConfigError } = require('..');
const h = require('./helpers');

const up = (s) => [{ kind: 'tcp', host: '127.0.0.1', port: s.address().port }];

test('start() rejects for a port already in use and leaves no listener open', async () => {
  const blocker = await h.listen(net.createServer());
  const free = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port: free },
      { host: '127.0.0.1', port: blocker.address().port },
    ],
    routes: [],
  });
  await assert.rejects(proxy.start(), (e) => {
    assert.equal(e.code, 'EADDRINUSE');
    assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${blocker.address().port}`));
    return true;
  });
  assert.equal(await h.tcpProbe({ port: free }), 'refused');
  await h.closeServer(blocker);
  // and it can start once the port is free
  await proxy.start();
  assert.equal(await h.tcpProbe({ port: free, timeoutMs: 100 }), 'open');
  await proxy.stop();
});

test('stop() resolves with every socket closed', async () => {
  const cap = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(cap), terminateTls: true }],
  });
  await proxy.start();
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  c.write('hold');
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length === 4, { what: 'upstream data' });
  const clientClosed = new Promise((r) => c.once('close', r));
  await proxy.stop({ drainMs: 50 });
  await h.waitFor(() => cap.captured[0].closed, { what: 'the upstream to see the close' });
  await clientClosed;
  assert.equal(await h.tcpProbe({ port }), 'refused');
  assert.equal(proxy.metrics().activeConnections, 0);
  await h.closeServer(cap);
});

test('updateConfig({ routes }) moves new connections while an open one keeps streaming', async (t) => {
  const oldUp = await h.echoServer({ tag: 'O' });
  const newUp = await h.echoServer({ tag: 'N' });
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(oldUp), terminateTls: true }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(oldUp);
    await h.closeServer(newUp);
  });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  // An open connection on the old route.
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'a.test', rejectUnauthorized: false });
  c.on('error', () => {});
  let got = '';
  c.on('data', (d) => (got += d.toString()));
  await new Promise((r) => c.once('secureConnect', r));
  c.write('1');
  await h.waitFor(() => got === 'O1', { what: 'first echo' });

  proxy.updateConfig({ routes: [{ sni: '', upstreams: up(newUp), terminateTls: true }] });
  const r = await h.tlsRoundTrip({ port, servername: 'a.test', payload: Buffer.from('x'), expect: 2 });
  assert.equal(r.data.toString(), 'Nx');
  c.write('2');
  await h.waitFor(() => got === 'O12', { what: 'old connection still streaming' });

  // An invalid update names the route and changes nothing.
  assert.throws(
    () =>
      proxy.updateConfig({
        routes: [
          { sni: 'ok.test', upstreams: up(oldUp), terminateTls: true },
          { sni: 'bad.test', upstreams: up(oldUp), terminateTls: true, cert: { certChain: 'not a pem', privateKey: 'nope' } },
          { sni: 'kind.test', upstreams: [{ kind: 'udp', host: 'x', port: 1 }], terminateTls: true },
        ],
      }),
    (e) => {
      assert.ok(e instanceof ConfigError);
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['routes[1].cert', 'routes[2].upstreams[0].kind']
      );
      assert.match(e.errors[0].message, /certChain holds no CERTIFICATE block/);
      assert.equal(e.errors[1].message, "must be one of 'tcp', 'uds', got \"udp\"");
      return true;
    }
  );
  const r2 = await h.tlsRoundTrip({ port, servername: 'ok.test', payload: Buffer.from('y'), expect: 2 });
  assert.equal(r2.data.toString(), 'Ny');
  c.destroy();
  assert.deepEqual(errors, []);
});

test('maxConnections: 2 refuses the third concurrent connection on that listener only', async (t) => {
  const echo = await h.echoServer();
  const [p1, p2] = await h.freePorts(2);
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port: p1, maxConnections: 2, defaultCert: h.selfSigned() },
      { host: '127.0.0.1', port: p2, defaultCert: h.selfSigned() },
    ],
    routes: [{ sni: '', upstreams: up(echo), terminateTls: true }],
  });
  await proxy.start();
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  const open = [];
  for (let i = 0; i < 2; i++) {
    const c = tls.connect({ port: p1, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
    c.on('error', () => {});
    await new Promise((r) => c.once('secureConnect', r));
    open.push(c);
  }
  await assert.rejects(h.tlsRoundTrip({ port: p1, servername: 'x' }));
  const other = await h.tlsRoundTrip({ port: p2, servername: 'x', payload: Buffer.from('ok') });
  assert.equal(other.data.toString(), 'ok');
  await h.waitFor(() => events.length === 1, { what: 'blocked event' });
  assert.deepEqual(events[0], {
    ip: '127.0.0.1',
    port: p1,
    listener: `127.0.0.1:${p1}`,
    reason: 'max_connections',
    ja3: '',
    ja4: '',
    observed: false,
    detail: '',
  });
  const m = proxy.metrics();
  assert.equal(m.listeners[0].blockedByReason.max_connections, 1);
  assert.equal(m.listeners[1].blockedByReason.max_connections, 0);
  for (const c of open) c.destroy();
  await h.waitFor(() => proxy.metrics().activeConnections === 0, { what: 'gauges back to zero' });
  // a slot is free again
  const again = await h.tlsRoundTrip({ port: p1, servername: 'x', payload: Buffer.from('ok') });
  assert.equal(again.data.toString(), 'ok');
});

test("an unreachable upstream is an 'error' event, never an exception", async (t) => {
  const port = await h.freePort();
  const dead = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: dead }], terminateTls: true }],
  });
  await proxy.start();
  t.after(() => proxy.stop());
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await assert.rejects(h.tlsRoundTrip({ port, servername: 'x' }));
  await h.waitFor(() => errors.length === 1, { what: 'error event' });
  assert.equal(errors[0].code, 'upstream_connect_failed');
  assert.equal(errors[0].ip, '127.0.0.1');
  assert.match(errors[0].message, new RegExp(`upstream 127\\.0\\.0\\.1:${dead}: .*refused`, 'i'));
  assert.equal(proxy.metrics().listeners[0].errorsByReason.upstream_connect_failed, 1);
});

test('idleTimeoutMs closes a connection with no bytes either way, and only then', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, idleTimeoutMs: 400, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(echo), terminateTls: true }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  let got = '';
  c.on('data', (d) => (got += d));
  await new Promise((r) => c.once('secureConnect', r));
  const opened = Date.now();
  // Traffic every 150 ms keeps it open past the timeout...
  for (let i = 0; i < 5; i++) {
    c.write('k');
    await h.waitFor(() => got.length === i + 1, { what: 'echo' });
    await new Promise((r) => setTimeout(r, 150));
  }
  assert.ok(Date.now() - opened > 600);
  // ...then silence closes it.
  const quietFrom = Date.now();
  await new Promise((r) => c.once('close', r));
  const quiet = Date.now() - quietFrom;
  assert.ok(quiet >= 200 && quiet < 2000, `closed after ${quiet} ms of silence`);
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.idle_timeout === 1, { what: 'idle_timeout count' });
  assert.equal(proxy.metrics().activeConnections, 0);
});

test('concurrent stop() calls share one stop; start() waits for a draining stop', async () => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(echo), terminateTls: true }],
  });
  await proxy.start();
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  const clientClosed = new Promise((r) => c.once('close', r));
  let closes = 0;
  proxy.on('close', () => closes++);
  const t0 = Date.now();
  const first = proxy.stop({ drainMs: 400 });
  const second = proxy.stop();
  await second;
  assert.ok(Date.now() - t0 >= 350, `second stop resolved after ${Date.now() - t0} ms, during the drain`);
  await first;
  await clientClosed;
  assert.equal(closes, 1);
  // stop() on a stopped proxy: resolves, emits nothing
  await proxy.stop();
  assert.equal(closes, 1);
  // start() right after a stop() that is still draining waits for it, then serves.
  await proxy.start();
  const c2 = tls.connect({ port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
  c2.on('error', () => {});
  await new Promise((r) => c2.once('secureConnect', r));
  const stopping = proxy.stop({ drainMs: 200 });
  const restarted = proxy.start();
  await stopping;
  await restarted;
  const r = await h.tlsRoundTrip({ port, servername: 'x', payload: Buffer.from('again') });
  assert.equal(r.data.toString(), 'again');
  await proxy.stop();
  await h.closeServer(echo);
});

test("stop(1500), Symphony's stop(timeoutMs): new connections refused at once, one in flight works 1 s into the drain and is closed by its end", async () => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(echo), terminateTls: true }],
  });
  for (const [bad, shown] of [
    [-1, '-1'],
    [NaN, 'NaN'],
    ['5000', '"5000"'],
  ]) {
    await assert.rejects(proxy.stop(bad), (e) => {
      assert.ok(e instanceof ConfigError);
      assert.deepEqual(e.errors, [{ path: 'drainMs', message: `must be a finite number >= 0, got ${shown}` }]);
      return true;
    });
  }
  await proxy.start();
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  const clientClosed = new Promise((r) => c.once('close', () => r(Date.now())));
  const t0 = Date.now();
  const stopping = proxy.stop(1500);
  await h.waitFor(async () => (await h.tcpProbe({ port })) === 'refused', { what: 'the listener to close' });
  await new Promise((r) => setTimeout(r, t0 + 1000 - Date.now()));
  const echoed = new Promise((r) => c.once('data', (d) => r(d.toString())));
  c.write('in-the-drain');
  assert.equal(await echoed, 'in-the-drain');
  assert.ok(Date.now() - t0 >= 1000, 'the reply came 1 s into the drain');
  await stopping;
  const took = Date.now() - t0;
  assert.ok(took >= 1450 && took < 3000, `stop(1500) resolved after ${took} ms`);
  const closedAt = await clientClosed;
  assert.ok(closedAt - t0 >= 1450, `the client was closed ${closedAt - t0} ms into the drain`);
  await h.closeServer(echo);
});

test("a throwing 'ready' or 'close' listener neither rejects start()/stop() nor crashes", async () => {
  const port = await h.freePort();
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: [] });
  proxy.on('ready', () => {
    throw new Error('ready listener bug');
  });
  proxy.on('close', () => {
    throw new Error('close listener bug');
  });
  const warnings = [];
  const onWarn = (w) => warnings.push(w.message);
  process.on('warning', onWarn);
  await proxy.start();
  await proxy.stop();
  await h.waitFor(() => warnings.length === 2, { what: 'two warnings' });
  process.off('warning', onWarn);
  assert.match(warnings[0], /'ready' listener threw: Error: ready listener bug/);
  assert.match(warnings[1], /'close' listener threw: Error: close listener bug/);
});

test('each of workerThreads is a thread of its own (rampart-w0, rampart-w1, ...) while started, and stop() ends them', async (t) => {
  /** The names of this process's threads that are connection workers, sorted. */
  const workers = () => h.workerThreads().map((w) => w.name);
  const cap = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    workerThreads: 3,
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(cap), terminateTls: true }],
  });
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  assert.deepEqual(workers(), [], 'no worker before start()');
  await proxy.start();
  // A thread names itself once it runs: poll for the three names.
  await h.waitFor(() => workers().length === 3, { what: 'three named workers' });
  assert.deepEqual(workers(), ['rampart-w0', 'rampart-w1', 'rampart-w2']);
  // Served while the workers run: 12 connections, spread over the workers' sockets by the kernel.
  const clients = [];
  for (let i = 0; i < 12; i++) {
    const s = tls.connect({ port, servername: 'localhost', rejectUnauthorized: false });
    await new Promise((res, rej) => s.once('secureConnect', res).once('error', rej));
    s.write(`ping ${i}`);
    clients.push(s);
  }
  await h.waitFor(() => cap.captured.filter((e) => /^ping \d+$/.test(e.data.toString())).length === 12);
  for (const s of clients) s.destroy();
  await proxy.stop();
  // stop() joins the workers; an exited thread leaves /proc a moment after its join returns.
  await h.waitFor(() => workers().length === 0, { timeoutMs: 1000, what: 'no worker thread after stop()' });
});

test('unreferenced stopped proxies are garbage-collected with their runtime threads', async () => {
  const v8 = require('node:v8');
  const vm = require('node:vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const threads = () => Number(/Threads:\s+(\d+)/.exec(require('node:fs').readFileSync('/proc/self/status', 'utf8'))[1]);
  const port = await h.freePort();
  {
    // warm up libuv's thread pool (stop() runs there), so it is part of the baseline
    const w = new RampartProxy({ workerThreads: 1, listeners: [{ host: '127.0.0.1', port }], routes: [] });
    await w.start();
    await w.stop();
  }
  for (let k = 0; k < 5; k++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  const before = threads();
  let finalized = 0;
  const registry = new FinalizationRegistry(() => finalized++);
  for (let i = 0; i < 20; i++) {
    const p = new RampartProxy({ workerThreads: 2, listeners: [{ host: '127.0.0.1', port }], routes: [] });
    if (i % 2 === 0) {
      await p.start();
      await p.stop();
    }
    registry.register(p, i);
  }
  assert.ok(threads() > before + 10, `threads ${before} -> ${threads()}`);
  for (let k = 0; k < 100 && !(finalized >= 19 && threads() <= before + 4); k++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  // The last proxy made can stay reachable from the loop's own frame; every other one is freed.
  assert.ok(finalized >= 19, `finalized ${finalized} of 20`);
  assert.ok(threads() <= before + 4, `threads ${before} -> ${threads()}`);
});

test('half-close: the client ends its side, the upstream still answers, then closes', async (t) => {
  const net = require('node:net');
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    let got = '';
    s.on('data', (d) => (got += d));
    s.on('end', () => s.end(`got:${got}`));
    s.on('error', () => {});
  });
  await h.listen(server);
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [{ sni: '', upstreams: up(server), terminateTls: true }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(server);
  });
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false, allowHalfOpen: true });
  c.on('error', () => {});
  let reply = '';
  c.on('data', (d) => (reply += d));
  await new Promise((r) => c.once('secureConnect', r));
  c.end('request');
  await new Promise((r) => c.once('end', r));
  assert.equal(reply, 'got:request');
});
