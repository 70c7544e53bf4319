'use strict';
// The cluster tier and the kernel (root): a kernel SYN ban on one node reaches the others.
// Two network namespaces joined by a veth pair; in the proxy's namespace a redis-server (started
// here, killed at the end), node A with XDP attached natively on its veth end and
// `xdp.synPerSecond`, and node B (no XDP) on a loopback address of the same namespace, same port.
// A SYN flood from the client namespace (hping3, one source) makes A's kernel ban the source on
// its own; A publishes the ban (key kind `syn`), B applies it as a box of that client.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const { vethPair } = require('./helpers/netns');
const { startRedis, forkClusterNode } = require('./helpers/cluster');

const PROXY = '198.18.2.1';
const FLOODER = '198.18.2.2';
const NODE_B = '127.0.0.12';
const PORT = 8443;
const PREFIX = 'rktest:';
const pair = vethPair({ tag: 'c', after: test.after, proxy: PROXY, clients: [FLOODER] });
const { nsProxy: NS_P, nsClient: NS_C } = pair;

async function setup() {
  for (const tool of ['hping3', 'redis-server', 'redis-cli']) {
    if (!h.haveTool(tool)) return `${tool} not found on PATH (apt-get install ${tool === 'hping3' ? 'hping3' : 'redis-server'})`;
  }
  return pair.setup();
}

test('a kernel SYN ban on node A reaches node B; nothing is echoed', async (t) => {
  const why = await setup();
  if (why) return h.skipOrFail(t, why);
  const redis = await startRedis({ netns: NS_P });
  t.after(() => redis.kill());
  const cli = redis.cli;
  const cluster = (nodeId) => ({ redis: { url: redis.url, keyPrefix: PREFIX }, nodeId, breaker: { failures: 3, openMs: 300 } });
  const protection = { xdp: { synPerSecond: 10, synBurst: 10 }, penaltyBox: { durationMs: 5000 } };

  const { p: a } = await pair.startProxy(t, { host: PROXY, port: PORT, plainPort: 9000, protection, cluster: cluster('node-a') });
  const upstream = 9; // node B's route is never used: nothing connects to it
  const b = await forkClusterNode({ host: NODE_B, port: PORT, upstreamPort: upstream, protection, cluster: cluster('node-b') }, { netns: NS_P });
  t.after(() => b.stop());
  await h.waitFor(async () => (await a.call('metrics')).cluster.connected, { timeoutMs: 5000, what: 'node-a connected' });

  // 100 SYN/s from one source for 1.5 s against 10/s: the kernel bans it after its burst.
  const t0 = performance.now();
  const flood = h.run('ip', ['netns', 'exec', NS_C, 'hping3', '-q', '-S', '-p', String(PORT), '-i', 'u10000', '-c', '150', '-a', FLOODER, PROXY], {
    timeoutMs: 15000,
  });
  // Polled together: when A's kernel counts its ban, and when B lists it.
  let bannedAt;
  let seenAt;
  await h.waitFor(
    async () => {
      const [st, list] = await Promise.all([a.call('status'), b.call('blockedIps')]);
      const now = performance.now();
      if (bannedAt === undefined && st.counters.banned >= 1) bannedAt = now;
      if (seenAt === undefined && list.penaltyBoxed.includes(FLOODER)) seenAt = now;
      return bannedAt !== undefined && seenAt !== undefined;
    },
    { timeoutMs: 3000, intervalMs: 2, what: 'the kernel ban on A, then on B' }
  );
  const delay = seenAt - bannedAt;
  console.log(
    `# kernel SYN ban: counted on A ${(bannedAt - t0).toFixed(0)} ms after hping3 was started, listed on B ${delay.toFixed(0)} ms later (polled over IPC; load ${require('node:os').loadavg()[0].toFixed(2)})`
  );
  assert.ok(delay < 500, `kernel ban A -> B ${delay} ms`);
  await flood;

  const st = await a.call('status');
  assert.ok(st.counters.banned >= 1, `kernel bans ${st.counters.banned}`);
  const own = (await a.call('blocked', { detail: true })).penaltyBoxed;
  assert.deepEqual(
    own.map((e) => [e.ip, e.port, e.note, e.node]),
    [[FLOODER, PORT, 'banned in the kernel by xdp.synPerSecond', 'node-a']]
  );
  const got = (await b.call('blockedIps', { detail: true })).penaltyBoxed;
  assert.deepEqual(
    got.map((e) => [e.ip, e.port, e.reason, e.note, e.node]),
    [[FLOODER, PORT, 'penalty_boxed', 'kernel SYN ban from node node-a', 'node-a']]
  );
  assert.ok(got[0].remainingMs > 0 && got[0].remainingMs <= 5000, `remainingMs ${got[0].remainingMs}`);
  const key = `${PREFIX}{bans}:syn:${PORT}:${FLOODER}/32`;
  const pttl = Number((await cli('PTTL', key)).stdout.toString().trim());
  assert.ok(pttl > 0 && pttl <= 5000, `${key} PTTL ${pttl}`);
  const ma = (await a.call('metrics')).cluster;
  const mb = (await b.call('metrics')).cluster;
  assert.ok(ma.bansPublished >= 1, `A published ${ma.bansPublished}`);
  assert.equal(mb.bansReceived, ma.bansPublished, 'every publication received once');
  assert.equal(mb.bansPublished, 0, 'B does not publish what it received');
  assert.equal(ma.bansReceived, 0, 'no echo back to A');
});
