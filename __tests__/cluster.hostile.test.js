'use strict';
// Nothing read from Redis is trusted: a real redis-server started here on a free port (killed at
// the end) and Rampart nodes as child processes. Someone with access to Redis publishes hostile
// ban messages on the ban channel and writes hostile ban keys; each is rejected, counted exactly
// in metrics().cluster.rejectedMessages (and rampart_cluster_rejected_messages_total), reported in
// an aggregated 'error' cluster_message_rejected, and changes nothing; a valid message still applies.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const { startRedis, forkClusterNode } = require('./helpers/cluster');

const PREFIX = 'rhostile:';
const CHANNEL = `${PREFIX}bans`;
const U64_MAX = '18446744073709551615';

let redis;
let echo;
let port;
let node;

function needRedis(t) {
  return h.needTool(t, 'redis-server') && h.needTool(t, 'redis-cli', 'apt-get install redis-server');
}

async function startNode(host, nodeId) {
  const opts = {
    host,
    port,
    upstreamPort: echo.address().port,
    cluster: { redis: { url: redis.url, keyPrefix: PREFIX, commandTimeoutMs: 500 }, nodeId },
  };
  return { ...(await forkClusterNode(opts)), id: nodeId };
}

/** A ban message as another node writes it; `over` replaces fields (raw JSON text for `net` etc.). */
function message(over = {}) {
  return JSON.stringify({ op: 'ban', node: 'node-z', kind: 'block', net: '127.0.30.0/24', port: null, ttlMs: 60000, sentUs: 0, ...over });
}

/** PUBLISHes `payload` on the ban channel as raw bytes (stdin: a payload may exceed argv's limits). */
async function publish(payload) {
  const r = await redis.cli('-x', 'PUBLISH', CHANNEL, { input: payload });
  assert.equal(r.stdout.toString().trim(), '1', `one subscriber received it (${r.stderr})`);
}

const cluster = async (n) => (await n.call('metrics')).cluster;

/** Waits until `n` counts exactly `count` rejected messages, then checks it stays there a beat. */
async function rejectedBecomes(n, count) {
  await h.waitFor(async () => (await cluster(n)).rejectedMessages === count, { timeoutMs: 3000, intervalMs: 10, what: `rejectedMessages === ${count}` });
  assert.equal((await cluster(n)).rejectedMessages, count);
}

/** Publishes `payloads`, each rejected: the count moves by exactly that many and nothing is applied. */
async function rejects(payloads) {
  const before = await cluster(node);
  for (const p of payloads) await publish(p);
  await rejectedBecomes(node, before.rejectedMessages + payloads.length);
  const after = await cluster(node);
  assert.equal(after.bansReceived, before.bansReceived, 'nothing received');
  const b = await node.call('blockedIps');
  assert.deepEqual([b.penaltyBoxed, b.dynamicBlocklist], [[], []]);
}

test.before(async () => {
  if (!h.haveTool('redis-server') || !h.haveTool('redis-cli')) return;
  port = await h.freePort();
  echo = await h.echoServer();
  redis = await startRedis();
  node = await startNode('127.0.0.31', 'node-a');
});

test.after(async () => {
  if (node) await node.stop();
  if (redis) redis.kill();
  if (echo) await h.closeServer(echo);
});

test('a prefix ban on 0.0.0.0/0 (and ::/0) with the largest TTL is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([
    message({ kind: 'prefix', net: '0.0.0.0/0', port: null, ttlMs: 0 }).replace('"ttlMs":0', `"ttlMs":${U64_MAX}`),
    message({ kind: 'prefix', net: '::/0', ttlMs: 60000 }),
    message({ kind: 'prefix', net: '127.0.31.0/24', ttlMs: 0 }).replace('"ttlMs":0', `"ttlMs":${U64_MAX}`),
  ]);
});

test('a CIDR with host bits, or not written canonically, is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ net: '10.0.0.1/8' }), message({ net: '127.0.30.1' }), message({ net: '::ffff:127.0.30.0/120' })]);
});

test('a 1 MiB note is rejected, and so is a 201-character one', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ note: 'x'.repeat(1 << 20) }), message({ note: 'x'.repeat(201) })]);
});

test('a syn ban on ::/0 and a box of a /8 are rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ kind: 'syn', net: '::/0' }), message({ kind: 'box', net: '10.0.0.0/8' })]);
});

test('an unknown kind or op is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ kind: 'worm' }), message({ op: 'nuke' }), message({ op: 'unban', kind: 'box' })]);
});

test('a port out of range is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ port: 0 }), message({ port: 70000 }), message({ port: -1 })]);
});

test('a bad node id is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ node: '' }), message({ node: 'n'.repeat(129) }), message({ node: 'a b' })]);
});

test('a ban claiming to come from this node, which did not publish it, is rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects([message({ node: 'node-a' }), message({ node: 'node-a', kind: 'box', net: '127.0.30.7/32' })]);
  // This node's own messages echoed back by Redis are not rejections.
  const before = await cluster(node);
  await node.call('blockIp', '127.0.32.0/24', { ttlMs: 60000 });
  await h.waitFor(async () => (await cluster(node)).bansPublished === before.bansPublished + 1, { what: 'published' });
  // A marker from another node, published after the echo, orders the channel: once it is in, the echo was handled.
  await publish(message({ net: '127.0.33.0/24' }));
  await h.waitFor(async () => (await cluster(node)).bansReceived === before.bansReceived + 1, { what: 'marker received' });
  assert.equal((await cluster(node)).rejectedMessages, before.rejectedMessages);
  // Replaying this node's own message (read back from its key) is a rejection.
  const own = (await redis.cli('GET', `${PREFIX}{bans}:block:*:127.0.32.0/24`)).stdout.toString().trim();
  assert.equal(JSON.parse(own).node, 'node-a');
  await publish(own);
  await rejectedBecomes(node, before.rejectedMessages + 1);
  assert.equal(await node.call('unblockIp', '127.0.32.0/24'), true);
  assert.equal(await node.call('unblockIp', '127.0.33.0/24'), true);
});

test('malformed JSON and oversized payloads are rejected', async (t) => {
  if (!needRedis(t)) return;
  await rejects(['{', 'null', '[]', '{"op":"ban"}', message({ ttlMs: 'soon' }), `${message()}${' '.repeat(5000)}`]);
});

test('a valid message still applies, attributed to the node it names', async (t) => {
  if (!needRedis(t)) return;
  const before = await cluster(node);
  assert.ok(Number.isInteger(before.rejectedMessages), `rejectedMessages ${before.rejectedMessages}`);
  // A note at the bound (200 characters) is accepted.
  await publish(message({ net: '127.0.34.0/24', note: 'x'.repeat(200), ttlMs: 60000 }));
  await h.waitFor(async () => (await node.call('blockedIps')).dynamicBlocklist.includes('127.0.34.0/24'), { what: 'valid block applied' });
  const d = (await node.call('blockedIps', { detail: true })).dynamicBlocklist;
  assert.deepEqual(
    d.map((e) => [e.ip, e.note, e.node]),
    [['127.0.34.0/24', 'x'.repeat(200), 'node-z']]
  );
  const after = await cluster(node);
  assert.equal(after.bansReceived, before.bansReceived + 1);
  assert.equal(after.rejectedMessages, before.rejectedMessages);
  assert.equal(await h.admitted(port, '127.0.34.5', { host: '127.0.0.31' }), false);
  assert.equal(await node.call('unblockIp', '127.0.34.0/24'), true);
});

test('rejections are in prometheus() and reported as aggregated error events', async (t) => {
  if (!needRedis(t)) return;
  await rejects(['{', '{', '{', '{', '{']);
  const total = (await cluster(node)).rejectedMessages;
  assert.match(await node.call('prometheus'), new RegExp(`^rampart_cluster_rejected_messages_total ${total}$`, 'm'));
  // One event per second at most, each with the count since the previous one: they add up.
  const counted = async () =>
    (await node.call('events')).error
      .filter((e) => e.code === 'cluster_message_rejected')
      .map((e) => Number(/^(\d+) ban message\(s\) from Redis rejected/.exec(e.message)[1]))
      .reduce((a, b) => a + b, 0);
  await h.waitFor(async () => (await counted()) === total, { timeoutMs: 3000, what: `events adding up to ${total}` });
  const errs = (await node.call('events')).error.filter((e) => e.code === 'cluster_message_rejected');
  assert.ok(errs.length < total, `${errs.length} events for ${total} rejections`);
  assert.deepEqual(
    errs.map((e) => [e.port, e.listener]),
    errs.map(() => [null, null])
  );
});

test('hostile ban keys are rejected when a node starts and loads them; a valid key still applies', async (t) => {
  if (!needRedis(t)) return;
  const key = (kind, p, net) => `${PREFIX}{bans}:${kind}:${p}:${net}`;
  const set = (k, v) => redis.cli('-x', 'SET', k, { input: v });
  // Hostile: a prefix ban of 0.0.0.0/0 for ~584 years, a host-bit CIDR, a ban under another
  // ban's key, a 1 MiB value, not JSON, an unban, a key of another type, a valid value whose key
  // lies about it.
  await set(key('prefix', port, '0.0.0.0/0'), message({ kind: 'prefix', net: '0.0.0.0/0', port }));
  await redis.cli('PEXPIRE', key('prefix', port, '0.0.0.0/0'), '9000000000000000');
  await set(key('block', '*', '10.0.0.1/8'), message({ net: '10.0.0.1/8' }));
  await set(key('block', '*', '127.0.40.0/24'), message({ net: '127.0.41.0/24' }));
  await set(key('block', '*', '127.0.42.0/24'), message({ net: '127.0.42.0/24', note: 'x'.repeat(1 << 20) }));
  await set(key('block', '*', '127.0.43.0/24'), 'not json');
  await set(key('block', '*', '127.0.44.0/24'), message({ op: 'unban', net: '127.0.44.0/24', ttlMs: null }));
  await redis.cli('HSET', key('block', '*', '127.0.45.0/24'), 'f', 'v');
  // Valid: a block of another node.
  await set(key('block', '*', '127.0.46.0/24'), message({ net: '127.0.46.0/24' }));
  await redis.cli('PEXPIRE', key('block', '*', '127.0.46.0/24'), '60000');
  const b = await startNode('127.0.0.32', 'node-b');
  t.after(() => b.stop());
  await rejectedBecomes(b, 7);
  await h.waitFor(async () => (await cluster(b)).bansReceived === 1, { what: 'the valid key loaded' });
  const got = await b.call('blockedIps', { detail: true });
  assert.deepEqual(got.penaltyBoxed, []);
  assert.deepEqual(
    got.dynamicBlocklist.map((e) => [e.ip, e.node]),
    [['127.0.46.0/24', 'node-z']]
  );
  assert.equal(await h.admitted(port, '127.0.46.1', { host: '127.0.0.32' }), false);
  assert.equal(await h.admitted(port, '127.0.40.1', { host: '127.0.0.32' }), true);
});
