'use strict';
// The cluster tier and the kernel (root): a kernel SYN ban on one node reaches the others.
// Two network namespaces joined by a veth pair; in the proxy's namespace a redis-server (started
// here, killed at the end), node A with XDP attached natively on its veth end and
// `xdp.synPerSecond`, and node B (no XDP) on a loopback address of the same namespace, same port.
// A SYN flood from the client namespace (hping3, one source) makes A's kernel ban the source on
// its own; A publishes the ban (key kind `syn`), B applies it as a box of that client.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn, fork } = require('node:child_process');
const h = require('./helpers');
const { startXdpProxy } = require('./helpers/xdp-child');

const id = process.pid % 100000;
const NS_P = `rampart-cp${id}`;
const NS_C = `rampart-cc${id}`;
const VP = `rcp${id}`;
const VC = `rcc${id}`;
const PROXY = '198.18.2.1';
const FLOODER = '198.18.2.2';
const NODE_B = '127.0.0.12';
const PORT = 8443;
const PREFIX = 'rktest:';

async function sh(...args) {
  const r = await h.run('ip', args);
  if (r.code !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

let ready = null;
async function setup() {
  if (ready !== null) return ready;
  if (!h.isRoot) return (ready = 'needs root (network namespaces, XDP)');
  for (const tool of ['hping3', 'redis-server', 'redis-cli']) {
    if (!h.haveTool(tool)) return (ready = `${tool} not found on PATH (apt-get install ${tool === 'hping3' ? 'hping3' : 'redis-server'})`);
  }
  const probe = await h.run('ip', ['netns', 'add', NS_P]);
  if (probe.code !== 0) return (ready = `cannot create network namespaces: ${probe.stderr}`);
  test.after(async () => {
    await h.run('ip', ['netns', 'del', NS_P]);
    await h.run('ip', ['netns', 'del', NS_C]);
  });
  await sh('netns', 'add', NS_C);
  await sh('link', 'add', VP, 'type', 'veth', 'peer', 'name', VC);
  await sh('link', 'set', VP, 'netns', NS_P);
  await sh('link', 'set', VC, 'netns', NS_C);
  await sh('-n', NS_P, 'addr', 'add', `${PROXY}/24`, 'dev', VP);
  await sh('-n', NS_C, 'addr', 'add', `${FLOODER}/24`, 'dev', VC);
  for (const [ns, dev] of [[NS_P, VP], [NS_C, VC]]) {
    await sh('-n', ns, 'link', 'set', 'lo', 'up');
    await sh('-n', ns, 'link', 'set', dev, 'up');
  }
  return (ready = '');
}

/** Node B: the cluster spec's node child, run inside the proxy's namespace (IPC kept). */
async function nodeB(opts) {
  const child = fork(path.join(__dirname, 'helpers', 'cluster-node.js'), [JSON.stringify(opts)], {
    execPath: 'ip',
    execArgv: ['netns', 'exec', NS_P, process.execPath],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const waiting = new Map();
  let n = 0;
  const started = new Promise((resolve, reject) => {
    child.on('message', (m) => {
      if (m.ready) return resolve();
      if (m.fatal) return reject(new Error(m.fatal));
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m.result);
    });
  });
  const call = (cmd, ...args) =>
    new Promise((resolve, reject) => {
      const mid = ++n;
      waiting.set(mid, { resolve, reject });
      child.send({ id: mid, cmd, args });
    });
  await started;
  return { child, call };
}

test('a kernel SYN ban on node A reaches node B; nothing is echoed', async (t) => {
  const why = await setup();
  if (why) return h.skipOrFail(t, why);
  const redisPort = await h.freePort();
  const redis = spawn('ip', ['netns', 'exec', NS_P, 'redis-server', '--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  t.after(() => redis.kill('SIGKILL'));
  const cli = (...args) => h.run('ip', ['netns', 'exec', NS_P, 'redis-cli', '-p', String(redisPort), '--raw', ...args], { timeoutMs: 5000 });
  await h.waitFor(async () => (await cli('PING')).stdout.toString().trim() === 'PONG', { timeoutMs: 5000, what: 'redis-server up' });
  const cluster = (nodeId) => ({ redis: { url: `redis://127.0.0.1:${redisPort}`, keyPrefix: PREFIX }, nodeId, breaker: { failures: 3, openMs: 300 } });
  const protection = { xdp: { synPerSecond: 10, synBurst: 10 }, penaltyBox: { durationMs: 5000 } };

  const a = startXdpProxy(NS_P, { host: PROXY, port: PORT, plainPort: 9000, protection, cluster: cluster('node-a') });
  t.after(async () => {
    await Promise.race([a.call('detach'), new Promise((r) => setTimeout(r, 3000))]);
    await Promise.race([a.call('exit'), new Promise((r) => setTimeout(r, 3000))]);
    a.child.kill('SIGKILL');
  });
  const r = await a.ready;
  assert.equal(r.fatal, undefined, r.fatal);
  const attached = await a.call('attach', { interface: VP, mode: 'native' });
  assert.equal(attached.attached, true);
  const upstream = 9; // node B's route is never used: nothing connects to it
  const b = await nodeB({ host: NODE_B, port: PORT, upstreamPort: upstream, protection, cluster: cluster('node-b') });
  t.after(async () => {
    await b.call('stop').catch(() => {});
    b.child.kill('SIGKILL');
  });
  for (const n of [() => a.call('metrics'), () => b.call('metrics')]) {
    await h.waitFor(async () => (await n()).cluster.connected, { timeoutMs: 5000, what: 'connected' });
  }

  // 100 SYN/s from one source for 1.5 s against 10/s: the kernel bans it after its burst.
  const t0 = performance.now();
  const flood = h.run('ip', ['netns', 'exec', NS_C, 'hping3', '-q', '-S', '-p', String(PORT), '-i', 'u10000', '-c', '150', '-a', FLOODER, PROXY], { timeoutMs: 15000 });
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
  console.log(`# kernel SYN ban: counted on A ${(bannedAt - t0).toFixed(0)} ms after hping3 was started, listed on B ${delay.toFixed(0)} ms later (polled over IPC; load ${require('node:os').loadavg()[0].toFixed(2)})`);
  assert.ok(delay < 500, `kernel ban A -> B ${delay} ms`);
  await flood;

  const st = await a.call('status');
  assert.ok(st.counters.banned >= 1, `kernel bans ${st.counters.banned}`);
  const own = (await a.call('blocked', { detail: true })).penaltyBoxed;
  assert.deepEqual(own.map((e) => [e.ip, e.port, e.note, e.node]), [[FLOODER, PORT, 'banned in the kernel by xdp.synPerSecond', 'node-a']]);
  const got = (await b.call('blockedIps', { detail: true })).penaltyBoxed;
  assert.deepEqual(got.map((e) => [e.ip, e.port, e.reason, e.note, e.node]), [[FLOODER, PORT, 'penalty_boxed', 'kernel SYN ban from node node-a', 'node-a']]);
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
