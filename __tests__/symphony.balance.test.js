'use strict';
// Symphony drop-in, upstream sets (docs/config.md: routes[].balance, ipAffinity): least-connections balancing (the
// default for a set of Unix-socket upstreams, as in Symphony) exact over 3 UDS upstreams and 6
// held connections; roundRobin on request.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** A held TLS connection through the proxy; resolves `{ socket, tag }` (the upstream's tag). */
function hold(port, servername) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false });
    s.once('data', (d) => resolve({ socket: s, tag: d.toString() })); // the upstream writes its tag at once
    s.once('error', reject);
  });
}

test('least connections over 3 UDS upstreams: exact placement of held connections', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-lc-'));
  const socks = ['u0', 'u1', 'u2'].map((n) => path.join(dir, `${n}.sock`));
  const ups = await Promise.all(socks.map((p, i) => h.echoServer({ tag: `u${i}`, path: p })));
  const port = await h.freePort();
  const upstreams = socks.map((p) => ({ kind: 'uds', path: p }));
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [
      { sni: 'lc.test', upstreams },
      { sni: 'rr.test', upstreams, balance: 'roundRobin' },
    ],
    workerThreads: 1,
  });
  await proxy.start();
  const held = [];
  t.after(async () => {
    for (const c of held) c.socket.destroy();
    await proxy.stop();
    for (const u of ups) await h.closeServer(u);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const count = (tags) => {
    const m = {};
    for (const x of tags) m[x] = (m[x] || 0) + 1;
    return m;
  };
  for (let i = 0; i < 6; i++) held.push(await hold(port, 'lc.test'));
  assert.deepEqual(count(held.map((c) => c.tag)), { u0: 2, u1: 2, u2: 2 });
  // Close both connections on u0: the next two go to u0 (fewest open), whatever the turn.
  const onU0 = held.filter((c) => c.tag === 'u0');
  for (const c of onU0) c.socket.destroy();
  const routeActive = () => proxy.metrics().routeMetrics[0].activeConnections;
  await h.waitFor(() => routeActive() === 4, { what: 'the two closed connections to be released' });
  const a = await hold(port, 'lc.test');
  const b = await hold(port, 'lc.test');
  held.push(a, b);
  assert.deepEqual([a.tag, b.tag], ['u0', 'u0']);
  // Now 2/2/2 again; with both u1 connections closed the next one must be u1.
  for (const c of held.filter((c) => c.tag === 'u1')) c.socket.destroy();
  await h.waitFor(() => routeActive() === 4, { what: 'u1 released' });
  const c = await hold(port, 'lc.test');
  held.push(c);
  assert.equal(c.tag, 'u1');
  // roundRobin: each new connection starts at the next upstream in turn, whatever is open.
  const rr = [];
  for (let i = 0; i < 3; i++) rr.push(await hold(port, 'rr.test'));
  held.push(...rr);
  assert.deepEqual(
    rr.map((x) => x.tag),
    ['u0', 'u1', 'u2']
  );
});

test('balance is validated', () => {
  assert.throws(
    () =>
      new RampartProxy({
        listeners: [{ port: 9 }],
        routes: [{ sni: '', terminateTls: false, balance: 'random', upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] }],
      }),
    (e) =>
      e.errors.length === 1 &&
      e.errors[0].path === 'routes[0].balance' &&
      e.errors[0].message === "must be one of 'leastConnections', 'roundRobin', got \"random\""
  );
});

test('ipAffinity: a client IP keeps its upstream while least connections would move it', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-aff-'));
  const socks = ['u0', 'u1', 'u2'].map((n) => path.join(dir, `${n}.sock`));
  const ups = await Promise.all(socks.map((p, i) => h.echoServer({ tag: `u${i}`, path: p })));
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: '', upstreams: socks.map((p) => ({ kind: 'uds', path: p })), ipAffinity: true, ipAffinityTtlMs: 60000 }],
    workerThreads: 1,
  });
  await proxy.start();
  const held = [];
  t.after(async () => {
    for (const c of held) c.socket.destroy();
    await proxy.stop();
    for (const u of ups) await h.closeServer(u);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const holdFrom = (localAddress) =>
    new Promise((resolve, reject) => {
      const s = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', localAddress, rejectUnauthorized: false });
      s.once('data', (d) => resolve({ socket: s, tag: d.toString() }));
      s.once('error', reject);
    });
  // Three held connections from one IP: least connections alone would spread them; affinity
  // keeps all three on the first one's upstream.
  for (let i = 0; i < 3; i++) held.push(await holdFrom('127.0.0.2'));
  const tags = held.map((c) => c.tag);
  assert.deepEqual(tags, [tags[0], tags[0], tags[0]]);
  // Another IP gets least connections: not the loaded upstream.
  const other = await holdFrom('127.0.0.3');
  held.push(other);
  assert.notEqual(other.tag, tags[0]);
  const again = await holdFrom('127.0.0.3');
  held.push(again);
  assert.equal(again.tag, other.tag, 'and keeps it');
});
