'use strict';
// The cluster tier on Redis: a real redis-server started here on a free port (killed at the end)
// and three Rampart nodes as three child processes on 127.0.0.11-13, one port. Shared bans
// (box, blockIp, unblockIp, expiry, late joiner), every key with a TTL, clusterRateLimit over
// three nodes, and Redis frozen (SIGSTOP) then thawed (SIGCONT).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const h = require('./helpers');
const { startRedis, forkClusterNode } = require('./helpers/cluster');

// A real ClientHello (curl 7.88.1), from the shared fixtures next to the checkout.
const HELLO_FILE = path.join(__dirname, '..', '..', 'shared', 'fixtures', 'clienthello', 'curl_default.bin');

const PREFIX = 'rtest:';
const HOSTS = ['127.0.0.11', '127.0.0.12', '127.0.0.13', '127.0.0.14'];

let redis;
let echo;
let port;
const nodes = [];

const redisCli = (...args) => redis.cli(...args);

async function startNode(i, { protection, breaker } = {}) {
  const opts = {
    host: HOSTS[i],
    port,
    upstreamPort: echo.address().port,
    protection,
    cluster: {
      redis: { url: redis.url, keyPrefix: PREFIX, commandTimeoutMs: 100 },
      nodeId: `node-${'abcd'[i]}`,
      breaker: breaker || { failures: 3, openMs: 300 },
    },
  };
  // Started and connected (subscribed and answering) before a test relies on it.
  const node = { ...(await forkClusterNode(opts)), host: HOSTS[i], id: opts.cluster.nodeId };
  nodes.push(node);
  return node;
}

async function stopNodes() {
  while (nodes.length) {
    const n = nodes.pop();
    await n.stop();
  }
}

const admitted = (node, client) => h.admitted(port, client, { host: node.host });

/**
 * One admission decision as the client sees it, from `client` to `node`: the time from the TCP
 * connect to the first byte of the server's answer to a real ClientHello (admitted: the
 * ServerHello) or to the close (refused at accept). No TLS handshake on the client's side and
 * no upstream round trip are counted.
 */
function decision(node, client, hello) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: node.host, port, localAddress: client });
    let t0;
    let settled = false;
    const timer = setTimeout(() => finish(new Error(`no decision within 3000 ms from ${client}`)), 3000);
    function finish(err, admittedNow) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      if (err) reject(err);
      else resolve({ admitted: admittedNow, ms: performance.now() - t0 });
    }
    s.once('connect', () => {
      t0 = performance.now();
      s.write(hello);
    });
    s.once('data', () => finish(null, true));
    s.on('error', () => {});
    s.once('close', () => (t0 === undefined ? finish(new Error(`${client}: closed before connect`)) : finish(null, false)));
  });
}

test.before(async () => {
  if (!h.haveTool('redis-server')) return;
  port = await h.freePort();
  echo = await h.echoServer();
  redis = await startRedis();
});

test.after(async () => {
  await stopNodes();
  if (redis) redis.kill();
  if (echo) await h.closeServer(echo);
});

test.beforeEach(async () => {
  if (redis) await redisCli('FLUSHALL');
});

function needRedis(t) {
  return h.needTool(t, 'redis-server') && h.needTool(t, 'redis-cli', 'apt-get install redis-server');
}

test('a box on node A refuses the client on B and C within 500 ms', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const protection = { rateLimit: { connectionsPerSecond: 1, burst: 1 }, penaltyBox: { durationMs: 5000 } };
  const [a, b, c] = [await startNode(0, { protection }), await startNode(1, { protection }), await startNode(2, { protection })];
  const client = '127.0.5.1';
  assert.equal(await admitted(a, client), true);
  const t0 = performance.now();
  assert.equal(await admitted(a, client), false);
  const seen = {};
  await h.waitFor(
    async () => {
      for (const n of [b, c]) {
        if (seen[n.id] === undefined && (await n.call('blockedIps')).penaltyBoxed.includes(client)) seen[n.id] = performance.now() - t0;
      }
      return Object.keys(seen).length === 2;
    },
    { timeoutMs: 500, intervalMs: 2, what: 'the box on B and C' }
  );
  console.log(`# box A -> B ${seen[b.id].toFixed(1)} ms, A -> C ${seen[c.id].toFixed(1)} ms (from the refusal on A, polled)`);
  for (const n of [b, c]) {
    assert.equal(await admitted(n, client), false);
    const ev = (await n.call('events')).blocked;
    assert.deepEqual(
      ev.map((e) => [e.ip, e.reason]),
      [[client, 'penalty_boxed']]
    );
    const d = (await n.call('blockedIps', { detail: true })).penaltyBoxed;
    assert.deepEqual(
      d.map((e) => [e.ip, e.port, e.node, e.note]),
      [[client, port, a.id, `penalty box from node ${a.id}`]]
    );
    // Box deadlines are whole ms rounded up (src/protection/penalty.rs), on A and again on B, and
    // the published TTL is rounded up: at most 2 ms over durationMs, never less than it lost.
    assert.ok(d[0].remainingMs > 4000 && d[0].remainingMs <= 5002, `remainingMs ${d[0].remainingMs}`);
    const m = (await n.call('metrics')).cluster;
    assert.equal(m.bansReceived, 1);
    assert.equal(m.bansPublished, 0, 'a received ban is not published again');
    console.log(`# ${n.id} propagation delay (wall clocks): ${JSON.stringify(m.propagationDelayMs)}`);
  }
  const ma = (await a.call('metrics')).cluster;
  assert.equal(ma.bansPublished, 1);
  assert.equal(ma.bansReceived, 0, 'no echo back to the origin');
  const own = (await a.call('blockedIps', { detail: true })).penaltyBoxed;
  assert.deepEqual(
    own.map((e) => e.node),
    [a.id]
  );
  // Another client is unaffected everywhere.
  assert.equal(await admitted(b, '127.0.5.2'), true);
});

test('blockIp on one node, unblockIp on another; a ban expiring everywhere', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const [a, b, c] = [await startNode(0), await startNode(1), await startNode(2)];
  await a.call('blockIp', '127.0.6.0/24', { reason: 'abuse desk' });
  // B and C each get the block from Redis on their own: wait for both.
  await h.waitFor(async () => !(await admitted(c, '127.0.6.9')), { timeoutMs: 500, intervalMs: 5, what: 'block on C' });
  await h.waitFor(async () => !(await admitted(b, '127.0.6.9')), { timeoutMs: 500, intervalMs: 5, what: 'block on B' });
  const d = (await c.call('blockedIps', { detail: true })).dynamicBlocklist;
  assert.deepEqual(
    d.map((e) => [e.ip, e.note, e.node]),
    [['127.0.6.0/24', 'abuse desk', a.id]]
  );
  assert.equal(await b.call('unblockIp', '127.0.6.0/24'), true);
  await h.waitFor(async () => (await a.call('blockedIps')).dynamicBlocklist.length === 0 && (await c.call('blockedIps')).dynamicBlocklist.length === 0, {
    timeoutMs: 500,
    intervalMs: 5,
    what: 'unblock on A and C',
  });
  assert.equal(await admitted(a, '127.0.6.9'), true);
  assert.equal(await admitted(c, '127.0.6.9'), true);
  assert.equal((await redisCli('--scan', '--pattern', `${PREFIX}{bans}:block:*`)).stdout.toString().trim(), '');

  // A ban with a TTL ends on every node, and its key is gone from Redis.
  await b.call('blockIp', '127.0.7.1', { ttlMs: 1000 });
  await h.waitFor(
    async () =>
      (await a.call('blockedIps')).dynamicBlocklist.includes('127.0.7.1/32') && (await c.call('blockedIps')).dynamicBlocklist.includes('127.0.7.1/32'),
    { timeoutMs: 500, intervalMs: 5, what: 'ttl block everywhere' }
  );
  assert.equal(await admitted(a, '127.0.7.1'), false);
  const pttl = Number((await redisCli('PTTL', `${PREFIX}{bans}:block:*:127.0.7.1/32`)).stdout.toString().trim());
  assert.ok(pttl > 0 && pttl <= 1000, `PTTL ${pttl}`);
  await h.waitFor(
    async () => {
      for (const n of [a, b, c]) if ((await n.call('blockedIps')).dynamicBlocklist.length) return false;
      return true;
    },
    { timeoutMs: 2000, intervalMs: 20, what: 'expiry everywhere' }
  );
  for (const n of [a, b, c]) assert.equal(await admitted(n, '127.0.7.1'), true);
  assert.equal((await redisCli('EXISTS', `${PREFIX}{bans}:block:*:127.0.7.1/32`)).stdout.toString().trim(), '0');
});

test('a node started later loads the live bans; every key has a TTL', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const protection = { rateLimit: { connectionsPerSecond: 1, burst: 1 }, penaltyBox: { durationMs: 20000 } };
  const a = await startNode(0, { protection });
  await a.call('blockIp', '127.0.8.0/28', { ttlMs: 30000, port });
  await a.call('blockIp', '127.0.8.16/28');
  assert.equal(await admitted(a, '127.0.8.100'), true);
  assert.equal(await admitted(a, '127.0.8.100'), false);
  await h.waitFor(async () => (await a.call('metrics')).cluster.bansPublished === 3, { what: 'three bans published' });
  const d = await startNode(3);
  const got = await d.call('blockedIps', { detail: true });
  assert.deepEqual(got.dynamicBlocklist.map((e) => [e.ip, e.node]).sort(), [
    ['127.0.8.0/28', a.id],
    ['127.0.8.16/28', a.id],
  ]);
  assert.deepEqual(
    got.penaltyBoxed.map((e) => [e.ip, e.node]),
    [['127.0.8.100', a.id]]
  );
  assert.equal(await admitted(d, '127.0.8.1'), false);
  assert.equal(await admitted(d, '127.0.8.17'), false);
  assert.equal(await admitted(d, '127.0.8.100'), false);
  assert.equal((await d.call('metrics')).cluster.bansReceived, 3);
  // Every key under the prefix carries a TTL (PTTL -1 = none).
  const keys = (await redisCli('--scan', '--pattern', `${PREFIX}*`)).stdout.toString().trim().split('\n').filter(Boolean);
  assert.equal(keys.length, 3, keys.join(' '));
  for (const k of keys) {
    const pttl = Number((await redisCli('PTTL', k)).stdout.toString().trim());
    assert.ok(pttl > 0, `${k} PTTL ${pttl}`);
  }
});

test('clusterRateLimit 10/s over three nodes admits at most burst + rate × t + nodes × lease', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const protection = { clusterRateLimit: { connectionsPerSecond: 10, burst: 10 } };
  const ns = [await startNode(0, { protection }), await startNode(1, { protection }), await startNode(2, { protection })];
  const client = '127.0.9.1';
  const lease = 1; // default: ceil(10 / 10)
  const t0 = performance.now();
  let attempts = 0;
  await Promise.all(
    ns.map(async (n) => {
      while (performance.now() - t0 < 2000) {
        attempts++;
        await admitted(n, client);
      }
    })
  );
  const secs = (performance.now() - t0) / 1000;
  let accepted = 0;
  let refused = 0;
  for (const n of ns) {
    const m = await n.call('metrics');
    accepted += m.listeners[0].accepted;
    refused += m.listeners[0].blockedByReason.cluster_rate_limited || 0;
  }
  const bound = 10 + 10 * secs + ns.length * lease;
  console.log(
    `# clusterRateLimit: ${accepted} admitted, ${refused} refused of ${attempts} attempts in ${secs.toFixed(2)} s over 3 nodes (bound ${bound.toFixed(1)})`
  );
  assert.equal(accepted + refused, attempts);
  assert.ok(accepted <= bound, `${accepted} admitted > ${bound}`);
  assert.ok(accepted >= 10 + 10 * (secs - 0.5), `${accepted} admitted: the limit under-admits`);
  assert.ok(refused > 0);
  const keys = (await redisCli('--scan', '--pattern', `${PREFIX}rl:*`)).stdout.toString().trim().split('\n');
  assert.deepEqual(keys, [`${PREFIX}rl:{${port}:${client}}`]);
  assert.ok(Number((await redisCli('PTTL', keys[0])).stdout.toString().trim()) > 0);
});

test('Redis frozen mid-flood: local limits alone, one error per node; thawed: reconnected and reconciled', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  t.after(() => redis.signal('SIGCONT'));
  const protection = { rateLimit: { connectionsPerSecond: 0.5, burst: 5 }, clusterRateLimit: { connectionsPerSecond: 1000, burst: 1000 } };
  const ns = [await startNode(0, { protection }), await startNode(1, { protection }), await startNode(2, { protection })];
  if (!fs.existsSync(HELLO_FILE)) return h.skipOrFail(t, `fixture ${HELLO_FILE} not found`);
  const hello = fs.readFileSync(HELLO_FILE);
  const client = '127.0.10.1';
  const frozen = [];
  const before = [];
  const refusedInFlood = [];
  let frozenAt;
  let stopFlood = false;
  // Each flood connection from a new client (127.40-42.x.y), so every one is under its local
  // limits and goes through the clusterRateLimit lease check.
  const flood = Promise.all(
    ns.map(async (n, i) => {
      let k = 0;
      while (!stopFlood) {
        const src = `127.${40 + i}.${Math.floor(k / 250) % 250}.${(k % 250) + 1}`;
        k++;
        const d = await decision(n, src, hello);
        if (!d.admitted) refusedInFlood.push(src);
        (frozenAt === undefined ? before : frozen).push(d.ms);
      }
    })
  );
  await new Promise((r) => setTimeout(r, 300));
  redis.signal('SIGSTOP');
  frozenAt = performance.now();
  for (const n of ns) {
    await h.waitFor(async () => (await n.call('metrics')).cluster.breakerOpen, { timeoutMs: 3000, what: `${n.id} breaker open` });
  }
  // Local limits still hold: one client over its local rateLimit is refused on its node.
  const results = [];
  for (let i = 0; i < 7; i++) results.push(await admitted(ns[0], client));
  assert.deepEqual(results, [true, true, true, true, true, false, false]);
  // A ban made during the outage is kept and reconciled later.
  await ns[0].call('blockIp', '127.0.11.1', { ttlMs: 60000 });
  await new Promise((r) => setTimeout(r, 700));
  stopFlood = true;
  await flood;
  const q = (xs, f) => xs.slice().sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor(xs.length * f))];
  const frozenFor = ((performance.now() - frozenAt) / 1000).toFixed(1);
  console.log(
    `# decisions (connect to ServerHello) before the freeze: ${before.length}, p50 ${q(before, 0.5).toFixed(2)} ms, p99 ${q(before, 0.99).toFixed(2)} ms`
  );
  console.log(
    `# decisions while Redis was frozen (${frozenFor} s): ${frozen.length}, p50 ${q(frozen, 0.5).toFixed(2)} ms, p99 ${q(frozen, 0.99).toFixed(2)} ms, max ${q(frozen, 1).toFixed(2)} ms (load ${require('node:os')
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')})`
  );
  assert.deepEqual(refusedInFlood, [], 'every flood client is under its limits');
  assert.ok(frozen.length >= 100, `only ${frozen.length} decisions while frozen`);
  assert.ok(q(frozen, 0.99) < 50, `decision p99 ${q(frozen, 0.99)} ms while Redis was frozen`);
  for (const n of ns) {
    const errs = (await n.call('events')).error.filter((e) => e.code === 'cluster_unavailable');
    assert.equal(errs.length, 1, `${n.id}: ${JSON.stringify(errs)}`);
    assert.deepEqual([errs[0].port, errs[0].listener], [null, null]);
    const m = (await n.call('metrics')).cluster;
    assert.equal(m.breakerOpen, true);
    assert.equal(m.connected, false);
  }
  const thawed = performance.now();
  redis.signal('SIGCONT');
  for (const n of ns) {
    await h.waitFor(
      async () => {
        const m = (await n.call('metrics')).cluster;
        return m.connected && !m.breakerOpen;
      },
      { timeoutMs: 5000, intervalMs: 20, what: `${n.id} reconnected` }
    );
  }
  for (const n of ns.slice(1)) {
    await h.waitFor(async () => (await n.call('blockedIps')).dynamicBlocklist.includes('127.0.11.1/32'), {
      timeoutMs: 5000 - (performance.now() - thawed),
      intervalMs: 20,
      what: `${n.id} reconciled`,
    });
  }
  console.log(`# reconnected and reconciled ${(performance.now() - thawed).toFixed(0)} ms after SIGCONT`);
  const prom = await ns[1].call('prometheus');
  assert.match(prom, /^rampart_cluster_connected 1$/m);
  assert.match(prom, /^rampart_cluster_breaker_open 0$/m);
  assert.match(prom, /^rampart_cluster_bans_received_total [1-9]\d*$/m);
  assert.match(prom, /^rampart_cluster_errors_total [1-9]\d*$/m);
  assert.match(prom, /^rampart_cluster_ban_propagation_ms\{quantile="0.99"\} /m);
});

test('a node stopped and started again shares bans again', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const [a, b] = [await startNode(0), await startNode(1)];
  await b.call('restart');
  await h.waitFor(async () => (await b.call('metrics')).cluster.connected, { what: 'B connected again' });
  await b.call('blockIp', '127.0.12.1', { ttlMs: 5000 });
  await h.waitFor(async () => (await a.call('blockedIps')).dynamicBlocklist.includes('127.0.12.1/32'), {
    timeoutMs: 500,
    intervalMs: 5,
    what: 'ban from the restarted node',
  });
  await a.call('blockIp', '127.0.12.2', { ttlMs: 5000 });
  await h.waitFor(async () => (await b.call('blockedIps')).dynamicBlocklist.includes('127.0.12.2/32'), {
    timeoutMs: 500,
    intervalMs: 5,
    what: 'ban to the restarted node',
  });
});

test('a bad cluster config names every field', () => {
  const { RampartProxy, ConfigError } = require('..');
  const routes = [{ sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }];
  assert.throws(
    () =>
      new RampartProxy({
        listeners: [{ port: 9, protection: { clusterRateLimit: { connectionsPerSecond: 10, lease: 11 } } }],
        routes,
        cluster: { redis: { url: 'http://x', commandTimeoutMs: NaN }, nodeId: 'a b', breaker: { openMs: 0 } },
      }),
    (e) => {
      assert.ok(e instanceof ConfigError);
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['listeners[0].protection.clusterRateLimit.lease', 'cluster.redis.url', 'cluster.redis.commandTimeoutMs', 'cluster.nodeId', 'cluster.breaker.openMs']
      );
      return true;
    }
  );
  assert.throws(
    () => new RampartProxy({ listeners: [{ port: 9, protection: { clusterRateLimit: { connectionsPerSecond: 10 } } }], routes }),
    (e) => e instanceof ConfigError && e.errors.map((x) => x.path).join() === 'listeners[0].protection.clusterRateLimit'
  );
});

test('updateConfig adding clusterRateLimit without cluster is a ConfigError and changes nothing', async (t) => {
  const { ConfigError } = require('..');
  const p = await h.protectedProxy({ protection: { rateLimit: { connectionsPerSecond: 0.1, burst: 2 } } });
  t.after(() => p.close());
  assert.throws(
    () =>
      p.proxy.updateConfig({
        protection: [{ port: p.port, protection: { rateLimit: { connectionsPerSecond: 1000, burst: 1000 }, clusterRateLimit: { connectionsPerSecond: 5 } } }],
      }),
    (e) => {
      assert.ok(e instanceof ConfigError);
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['protection[0].protection.clusterRateLimit']
      );
      assert.match(e.errors[0].message, /needs the proxy's `cluster` config/);
      return true;
    }
  );
  // The old policy is still in force: burst 2, then refused.
  const got = [];
  for (let i = 0; i < 3; i++) got.push(await h.admitted(p.port, '127.0.13.1'));
  assert.deepEqual(got, [true, true, false]);
});

test('a prefix box received from another node is listed as a prefix box, with its origin', async (t) => {
  if (!needRedis(t)) return;
  t.after(stopNodes);
  const protection = { prefixLimit: { connectionsPerSecond: 1, burst: 2 }, penaltyBox: { durationMs: 5000 } };
  const [a, b] = [await startNode(0, { protection }), await startNode(1, { protection })];
  // Three clients of 127.0.14.0/24 on A: the third exhausts the prefix and boxes it.
  assert.equal(await admitted(a, '127.0.14.1'), true);
  assert.equal(await admitted(a, '127.0.14.2'), true);
  assert.equal(await admitted(a, '127.0.14.3'), false);
  const local = (await a.call('blockedIps', { detail: true })).penaltyBoxed;
  assert.deepEqual(
    local.map((e) => [e.ip, e.note, e.node]),
    [['127.0.14.0/24', 'prefix', a.id]]
  );
  await h.waitFor(async () => (await b.call('blockedIps')).penaltyBoxed.includes('127.0.14.0/24'), {
    timeoutMs: 500,
    intervalMs: 5,
    what: 'the prefix box on B',
  });
  const got = await b.call('blockedIps', { detail: true });
  assert.deepEqual(
    got.penaltyBoxed.map((e) => [e.ip, e.port, e.reason, e.note, e.node]),
    [['127.0.14.0/24', port, 'penalty_boxed', 'prefix', a.id]]
  );
  // A's prefix-box deadline is whole ms rounded up and the published TTL is rounded up: <= 1 ms over.
  assert.ok(got.penaltyBoxed[0].remainingMs > 4000 && got.penaltyBoxed[0].remainingMs <= 5001, `remainingMs ${got.penaltyBoxed[0].remainingMs}`);
  assert.deepEqual(got.dynamicBlocklist, []);
  // Any client of the prefix is refused on B as penalty_boxed; another prefix is not.
  assert.equal(await admitted(b, '127.0.14.9'), false);
  // The 'blocked' event reaches JS after the refusal (events are delivered asynchronously).
  await h.waitFor(async () => (await b.call('events')).blocked.length > 0, { timeoutMs: 1000, intervalMs: 5, what: "B's 'blocked' event" });
  assert.deepEqual(
    (await b.call('events')).blocked.map((e) => [e.ip, e.reason]),
    [['127.0.14.9', 'penalty_boxed']]
  );
  assert.equal(await admitted(b, '127.0.15.9'), true);
  assert.equal((await b.call('metrics')).cluster.bansPublished, 0, 'a received prefix box is not published again');
});
