'use strict';
// The prefix tier (prefixLimit): many sources of one /24, each far under every per-client limit,
// share one budget; with a penalty box the whole prefix is boxed and listed as a CIDR.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');

const SOURCES = 40;
const BURST = 10;
const src = (i) => `127.0.5.${i}`;

test('40 sources of one /24 at one connection each meet prefix_rate_limited after exactly the burst', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      rateLimit: { connectionsPerSecond: 5, burst: 5 },
      prefixLimit: { connectionsPerSecond: 0.01, burst: BURST },
    },
  });
  t.after(() => p.close());
  const got = [];
  for (let i = 1; i <= SOURCES; i++) got.push(await h.admitted(p.port, src(i)));
  assert.deepEqual(got, [...Array(BURST).fill(true), ...Array(SOURCES - BURST).fill(false)]);
  await h.waitFor(() => p.events.length === SOURCES - BURST, { what: 'blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason, e.port, e.observed]),
    Array.from({ length: SOURCES - BURST }, (_, k) => [src(BURST + 1 + k), 'prefix_rate_limited', p.port, false])
  );
  // Another /24 has a budget of its own.
  assert.equal(await h.admitted(p.port, '127.0.6.1'), true);
  const m = p.proxy.metrics().listeners[0];
  assert.equal(m.accepted, BURST + 1);
  assert.equal(m.blockedByReason.prefix_rate_limited, SOURCES - BURST);
  assert.equal(m.blockedByReason.rate_limited, 0);
  assert.equal(m.trackedPrefixes, 2);
  // The prefix is listed as a CIDR; none of its clients is (each is under its own limits).
  assert.deepEqual(p.proxy.blockedIps().rateLimited, ['127.0.5.0/24']);
  const [d] = p.proxy.blockedIps({ detail: true }).rateLimited;
  assert.equal(d.reason, 'prefix_rate_limited');
  assert.ok(d.remainingMs > 0, `remainingMs ${d.remainingMs}`);
  assert.match(p.proxy.prometheus(), /rampart_blocked_connections_total\{listener="[^"]+",reason="prefix_rate_limited"\} 30/);
});

test('with a penalty box the whole prefix is boxed, its clients get penalty_boxed and it is listed as a CIDR', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      prefixLimit: { connectionsPerSecond: 0.01, burst: 3, maxConcurrent: 100 },
      penaltyBox: { durationMs: 60000 },
    },
  });
  t.after(() => p.close());
  for (let i = 1; i <= 3; i++) assert.equal(await h.admitted(p.port, src(i)), true);
  assert.equal(await h.admitted(p.port, src(4)), false);
  // A source never seen before, in the same /24: boxed with its prefix.
  assert.equal(await h.admitted(p.port, src(99)), false);
  assert.equal(await h.admitted(p.port, '127.0.55.1'), true);
  await h.waitFor(() => p.events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [
      [src(4), 'prefix_rate_limited'],
      [src(99), 'penalty_boxed'],
    ]
  );
  assert.deepEqual(p.proxy.blockedIps().penaltyBoxed, ['127.0.5.0/24']);
  const boxed = p.proxy.blockedIps({ detail: true }).penaltyBoxed;
  assert.equal(boxed.length, 1);
  assert.deepEqual([boxed[0].ip, boxed[0].port, boxed[0].reason, boxed[0].note], ['127.0.5.0/24', p.port, 'penalty_boxed', 'prefix']);
  assert.ok(boxed[0].remainingMs > 59000 && boxed[0].remainingMs <= 60000, `remainingMs ${boxed[0].remainingMs}`);
  // Per-port listing too.
  assert.deepEqual(p.proxy.blockedIps({ port: p.port }).penaltyBoxed, ['127.0.5.0/24']);
});

test('prefixLimit.maxConcurrent counts the open connections of every client of the prefix', async (t) => {
  const tls = require('node:tls');
  const p = await h.protectedProxy({ protection: { prefixLimit: { maxConcurrent: 2 } } });
  t.after(() => p.close());
  const open = [];
  for (const a of [src(1), src(2)]) {
    const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: a, servername: 'x', rejectUnauthorized: false });
    c.on('error', () => {});
    await new Promise((r) => c.once('secureConnect', r));
    open.push(c);
  }
  assert.equal(await h.admitted(p.port, src(3)), false);
  assert.equal(await h.admitted(p.port, '127.0.56.1'), true);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason], [src(3), 'prefix_too_many_connections']);
  assert.deepEqual(p.proxy.blockedIps().concurrencyLimited, ['127.0.5.0/24']);
  open[0].destroy();
  await h.waitFor(() => p.proxy.metrics().activeConnections === 1, { what: 'one connection closed' });
  assert.equal(await h.admitted(p.port, src(3)), true);
  open[1].destroy();
  await h.waitFor(() => p.proxy.metrics().activeConnections === 0, { what: 'all closed' });
});
