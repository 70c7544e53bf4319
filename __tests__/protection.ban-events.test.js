'use strict';
// 'ban' events: a penalty box's start, extension, expiry and escalation on real sockets (short
// boxes), operator blocks (start, expiry, lift), and a box received from another node through a
// real redis-server on a free port (origin 'cluster' with the sender's nodeId).
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');

/** Collects 'ban' events of `proxy` for `ip`. */
function bans(proxy, ip) {
  const got = [];
  proxy.on('ban', (e) => {
    if (e.ip === ip) got.push(e);
  });
  return got;
}

/** `e` without its times, which are checked apart. */
const shape = ({ remainingMs, expiresAt, ...rest }) => rest;

/** remainingMs is within (0, max] and expiresAt is that far from now (± 1 s of scheduling). */
function assertDeadline(e, max) {
  assert.ok(e.remainingMs > 0 && e.remainingMs <= max, JSON.stringify(e));
  assert.ok(Math.abs(e.expiresAt - (Date.now() + e.remainingMs)) < 1000, JSON.stringify(e));
}

test('a penalty box reports start, extend, expire, then escalate at level 1 and expire', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      // One token every 5 s: every attempt after the first is over the limit.
      rateLimit: { connectionsPerSecond: 0.2, burst: 1 },
      penaltyBox: { durationMs: 2000, escalation: { factor: 2, maxDurationMs: 10000, memoryMs: 60000 } },
    },
  });
  t.after(() => p.close());
  const ip = '127.0.0.31';
  const got = bans(p.proxy, ip);
  const base = { origin: 'local', node: null, ip, port: p.port, listener: `127.0.0.1:${p.port}`, reason: 'rate_limited', note: null };
  const waitCount = (n, what) => h.waitFor(() => got.length >= n, { timeoutMs: 8000, what });

  assert.equal(await h.admitted(p.port, ip), true);
  assert.equal(await h.admitted(p.port, ip), false); // rate_limited: boxed 2 s
  await waitCount(1, 'start');
  assert.deepEqual(shape(got[0]), { action: 'start', ...base, level: 0 });
  assertDeadline(got[0], 2001);

  // A knock while boxed and over the limit moves the deadline.
  assert.equal(await h.admitted(p.port, ip), false);
  await waitCount(2, 'extend');
  assert.deepEqual(shape(got[1]), { action: 'extend', ...base, level: 0 });
  assertDeadline(got[1], 2001);
  assert.ok(got[1].expiresAt >= got[0].expiresAt, JSON.stringify(got));

  await waitCount(3, 'expire');
  assert.deepEqual(got[2], { action: 'expire', ...base, level: 0, remainingMs: 0, expiresAt: got[2].expiresAt });
  assert.ok(Math.abs(got[2].expiresAt - Date.now()) < 1000, JSON.stringify(got[2]));

  // Boxed again within memoryMs: level 1, 4 s.
  assert.equal(await h.admitted(p.port, ip), false);
  await waitCount(4, 'escalate');
  assert.deepEqual(shape(got[3]), { action: 'escalate', ...base, level: 1 });
  assertDeadline(got[3], 4001);
  assert.ok(got[3].remainingMs > 2500, JSON.stringify(got[3]));
  await waitCount(5, 'second expire');
  assert.deepEqual(shape(got[4]), { action: 'expire', ...base, level: 1 });
  assert.equal(got.length, 5);
});

test('blockIp reports an operator ban: start and expiry with a TTL, start and lift without', async (t) => {
  const p = await h.protectedProxy({});
  t.after(() => p.close());
  const timed = bans(p.proxy, '127.0.8.0/24');
  const open = bans(p.proxy, '127.0.7.7');
  const op = { origin: 'operator', node: null, reason: 'dynamic_blocked', level: 0 };

  p.proxy.blockIp('127.0.8.0/24', { reason: 'INC-7', ttlMs: 300 });
  await h.waitFor(() => timed.length >= 2, { timeoutMs: 5000, what: 'start and expire of the timed block' });
  assert.deepEqual(shape(timed[0]), { action: 'start', ...op, ip: '127.0.8.0/24', port: null, listener: null, note: 'INC-7' });
  assertDeadline(timed[0], 300);
  assert.deepEqual(timed[1], {
    action: 'expire',
    ...op,
    ip: '127.0.8.0/24',
    port: null,
    listener: null,
    note: 'INC-7',
    remainingMs: 0,
    expiresAt: timed[1].expiresAt,
  });

  p.proxy.blockIp('127.0.7.7', { port: p.port });
  await h.waitFor(() => open.length >= 1, { timeoutMs: 5000, what: 'start of the open block' });
  const at = { ...op, ip: '127.0.7.7', port: p.port, listener: `127.0.0.1:${p.port}`, note: null, remainingMs: null, expiresAt: null };
  assert.deepEqual(open[0], { action: 'start', ...at });
  assert.equal(await h.admitted(p.port, '127.0.7.7'), false);
  assert.equal(p.proxy.unblockIp('127.0.7.7', { port: p.port }), true);
  await h.waitFor(() => open.length >= 2, { timeoutMs: 5000, what: 'lift' });
  assert.deepEqual(open[1], { action: 'lift', ...at });
  assert.equal(timed.length, 2);
  assert.equal(open.length, 2);
});

test("a box from another node arrives as origin 'cluster' with that node's id", async (t) => {
  if (!h.needTool(t, 'redis-server', 'apt-get install redis-server')) return;
  const { startRedis } = require('./helpers/cluster');
  const { RampartProxy } = require('..');
  const redis = await startRedis();
  t.after(() => redis.kill());
  const echo = await h.echoServer();
  t.after(() => h.closeServer(echo));
  const port = await h.freePort();
  const protection = { rateLimit: { connectionsPerSecond: 0.2, burst: 1 }, penaltyBox: { durationMs: 3000 } };
  const node = (host, nodeId) =>
    new RampartProxy({
      listeners: [{ host, port, defaultCert: h.selfSigned(), protection }],
      routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
      cluster: { redis: { url: redis.url, keyPrefix: 'rban:' }, nodeId },
    });
  const a = node('127.0.0.41', 'node-a');
  const b = node('127.0.0.42', 'node-b');
  await a.start();
  t.after(() => a.stop());
  await b.start();
  t.after(() => b.stop());
  await h.waitFor(() => a.metrics().cluster.connected && b.metrics().cluster.connected, { timeoutMs: 5000, what: 'both nodes connected' });
  const client = '127.0.0.43';
  const onA = bans(a, client);
  const onB = bans(b, client);

  assert.equal(await h.admitted(port, client, { host: '127.0.0.41' }), true);
  assert.equal(await h.admitted(port, client, { host: '127.0.0.41' }), false);
  await h.waitFor(() => onA.length >= 1 && onB.length >= 1, { timeoutMs: 5000, what: 'the box on A and on B' });
  assert.deepEqual(shape(onA[0]), {
    action: 'start',
    origin: 'local',
    node: null,
    ip: client,
    port,
    listener: `127.0.0.41:${port}`,
    reason: 'rate_limited',
    note: null,
    level: 0,
  });
  assert.deepEqual(shape(onB[0]), {
    action: 'start',
    origin: 'cluster',
    node: 'node-a',
    ip: client,
    port,
    listener: `127.0.0.42:${port}`,
    reason: 'penalty_boxed',
    note: null,
    level: 0,
  });
  assertDeadline(onB[0], 3001);
});
