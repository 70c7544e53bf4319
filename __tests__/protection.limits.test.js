'use strict';
// Per-IP rate limits, penalty box, concurrency: exact reasons, exact IPs, readmission proven by a
// real TLS round trip; several source addresses each with their own state.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const h = require('./helpers');

test('rate limit, then the penalty box, then readmission after durationMs', async (t) => {
  const p = await h.protectedProxy({
    protection: { rateLimit: { connectionsPerSecond: 1, burst: 3 }, penaltyBox: { durationMs: 1500 } },
  });
  t.after(() => p.close());
  for (let i = 0; i < 3; i++) assert.equal(await h.admitted(p.port, '127.0.0.2'), true, `attempt ${i + 1}`);
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  await h.waitFor(() => p.events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason, e.port, e.observed]),
    [
      ['127.0.0.2', 'rate_limited', p.port, false],
      ['127.0.0.2', 'penalty_boxed', p.port, false],
    ]
  );
  assert.deepEqual(p.proxy.blockedIps().penaltyBoxed, ['127.0.0.2']);
  const detail = p.proxy.blockedIps({ detail: true }).penaltyBoxed;
  assert.equal(detail.length, 1);
  assert.equal(detail[0].ip, '127.0.0.2');
  assert.equal(detail[0].port, p.port);
  assert.equal(detail[0].reason, 'penalty_boxed');
  // The deadline is kept in whole ms, rounded up (never shorter than durationMs, at most 1 ms
  // longer), and remainingMs is rounded up too: read within that ms of the box, it is 1501.
  assert.ok(detail[0].remainingMs > 0 && detail[0].remainingMs <= 1501, `remainingMs ${detail[0].remainingMs}`);
  // Another source address has its own state.
  assert.equal(await h.admitted(p.port, '127.0.0.3'), true);
  // Quiet until the box expires, then a real TLS round trip is served again.
  await h.waitFor(() => p.proxy.blockedIps().penaltyBoxed.length === 0, { timeoutMs: 4000, intervalMs: 50, what: 'box expiry' });
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  const m = p.proxy.metrics().listeners[0];
  assert.equal(m.blockedByReason.rate_limited, 1);
  assert.equal(m.blockedByReason.penalty_boxed, 1);
  assert.equal(m.accepted, 5);
});

test('maxConcurrentPerIp refuses the third simultaneous connection with too_many_connections', async (t) => {
  const p = await h.protectedProxy({ protection: { maxConcurrentPerIp: 2 } });
  t.after(() => p.close());
  const open = [];
  for (let i = 0; i < 2; i++) {
    const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2', servername: 'x', rejectUnauthorized: false });
    c.on('error', () => {});
    await new Promise((r) => c.once('secureConnect', r));
    open.push(c);
  }
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  assert.equal(await h.admitted(p.port, '127.0.0.3'), true);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.equal(p.events[0].reason, 'too_many_connections');
  assert.equal(p.events[0].ip, '127.0.0.2');
  assert.deepEqual(p.proxy.blockedIps().concurrencyLimited, ['127.0.0.2']);
  for (const c of open) c.destroy();
  await h.waitFor(() => p.proxy.metrics().activeConnections === 0, { what: 'connections closed' });
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
});

test('sustained (per-minute) limit is independent of the per-second one', async (t) => {
  const p = await h.protectedProxy({
    protection: { rateLimit: { connectionsPerSecond: 100 }, sustained: { connectionsPerMinute: 2, burst: 2 } },
  });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.equal(p.events[0].reason, 'rate_limited');
  assert.deepEqual(p.proxy.blockedIps().rateLimited, ['127.0.0.2']);
  assert.deepEqual(p.proxy.blockedIps().penaltyBoxed, []);
});

test('IPv6 clients in one /64 share state; IPv4 on a :: listener is reported as IPv4', async (t) => {
  if (!h.isRoot) {
    h.skipOrFail(t, 'needs root to add 2001:db8:1:2::a and ::b to lo');
    return;
  }
  const addrs = ['2001:db8:1:2::a', '2001:db8:1:2::b', '2001:db8:1:3::a'];
  for (const a of addrs) await h.run('ip', ['-6', 'addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad']);
  t.after(async () => {
    for (const a of addrs) await h.run('ip', ['-6', 'addr', 'del', `${a}/128`, 'dev', 'lo']);
  });
  // One connection per 10 s: two TLS round trips on a loaded machine can take more than a second.
  const p = await h.protectedProxy({ host: '::', protection: { rateLimit: { connectionsPerSecond: 0.1, burst: 1 } } });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '2001:db8:1:2::a', { host: '::1' }), true);
  assert.equal(await h.admitted(p.port, '2001:db8:1:2::b', { host: '::1' }), false);
  assert.equal(await h.admitted(p.port, '2001:db8:1:3::a', { host: '::1' }), true);
  // IPv4 over the dual-stack listener
  assert.equal(await h.admitted(p.port, '127.0.0.5', { host: '127.0.0.1' }), true);
  assert.equal(await h.admitted(p.port, '127.0.0.5', { host: '127.0.0.1' }), false);
  assert.deepEqual(p.proxy.blockedIps().rateLimited, ['127.0.0.5', '2001:db8:1:2::/64']);
  await h.waitFor(() => p.events.length === 2, { what: 'blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [
      ['2001:db8:1:2::b', 'rate_limited'],
      ['127.0.0.5', 'rate_limited'],
    ]
  );
});

test('raising a rate limit with updateConfig readmits a limited client at once', async (t) => {
  const p = await h.protectedProxy({ protection: { rateLimit: { connectionsPerSecond: 0.1, burst: 1 } } });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  assert.deepEqual(p.proxy.blockedIps().rateLimited, ['127.0.0.2']);
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { rateLimit: { connectionsPerSecond: 1000, burst: 1000 } } }] });
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  assert.deepEqual(p.proxy.blockedIps().rateLimited, []);
});
