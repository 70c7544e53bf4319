'use strict';
// Session-ticket keys: rotation (`tls.ticketKeyRotationS`: a ticket made under key k resumes
// after one rotation, when k is the previous key, and not after two) with local keys and with
// keys shared through a real redis-server (`cluster.shareTicketKeys`: two proxies resume each
// other's sessions; without it they do not; Redis gone, the last keys stay). Real clients:
// `openssl s_client -sess_out/-sess_in` (TLS 1.2 and 1.3) and node:tls sessions (TLS 1.3).
//
// Epochs are wall-clock seconds / rotation (docs/proxy.md: Session tickets); each step polls the
// clock for its point in an epoch and checks afterwards that it did not run past it.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { RampartProxy } = require('..');
const h = require('./helpers');
const { startRedis } = require('./helpers/cluster');

const ROTATION_S = 8;
const HINT_MS = 2 * ROTATION_S * 1000;
const epoch = () => Math.floor(Math.floor(Date.now() / 1000) / ROTATION_S);
const startOf = (e) => e * ROTATION_S * 1000;
/**
 * Runs `fn` once the clock is `fromMs` into epoch `e` (polled), and checks it ended before
 * `endByMs` into `e`: a step meant for an epoch never runs in another one.
 */
async function step(e, fromMs, endByMs, fn) {
  await h.waitFor(() => Date.now() >= startOf(e) + fromMs, {
    timeoutMs: startOf(e) + fromMs - Date.now() + 1000,
    intervalMs: 20,
    what: `${fromMs} ms into epoch ${e}`,
  });
  assert.ok(Date.now() < startOf(e) + fromMs + 500, `epoch ${e} was missed (this machine is too slow for a ${ROTATION_S} s rotation)`);
  const out = await fn();
  assert.ok(Date.now() < startOf(e) + endByMs, `the step meant for ${fromMs}..${endByMs} ms into epoch ${e} ran past it`);
  return out;
}

async function greeter() {
  return h.listen(
    net.createServer((s) => {
      s.on('error', () => {});
      s.end('hello\n');
    })
  );
}

/** `openssl s_client`: 'New' or 'Reused'. */
async function sClient(port, args) {
  const r = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', 'localhost', '-ign_eof', ...args], {
    input: '',
    timeoutMs: 5000,
  });
  const m = r.stdout.toString().match(/^(New|Reused), (\S+), Cipher is/m);
  assert.ok(m, `no session line:\n${r.stdout}${r.stderr}`);
  return `${m[1]} ${m[2]}`;
}

/** node:tls (TLS 1.3); resolves `{ reused, session }` at close. */
function nodeTls(port, session) {
  return new Promise((resolve, reject) => {
    const got = {};
    const s = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', session, rejectUnauthorized: false, minVersion: 'TLSv1.3' });
    s.on('session', (x) => (got.session = x));
    s.on('secureConnect', () => (got.reused = s.isSessionReused()));
    s.on('data', () => {});
    s.on('error', reject);
    s.on('close', () => (got.reused === undefined ? reject(new Error('closed before the handshake')) : resolve(got)));
  });
}

/** A proxy on a free port for `localhost` with `tls` and `cluster`, started; stopped after `t`. */
async function proxy(t, { cert, up, tls: tlsOpts, cluster }) {
  const port = await h.freePort();
  const p = new RampartProxy({
    listeners: [{ port, host: '127.0.0.1', defaultCert: cert, tls: { sessionCacheSize: 0, ...tlsOpts } }],
    routes: [{ sni: 'localhost', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }] }],
    ...(cluster ? { cluster } : {}),
  });
  p.on('error', () => {});
  await p.start();
  t.after(() => p.stop());
  return { p, port };
}

/** One ticket per version from `port` (files under `dir`, named `tag`), and a node:tls session. */
async function makeTickets(port, dir, tag) {
  const files = {};
  for (const v of ['-tls1_2', '-tls1_3']) {
    files[v] = path.join(dir, `${tag}${v}.pem`);
    assert.match(await sClient(port, [v, '-sess_out', files[v]]), /^New /);
  }
  const n = await nodeTls(port);
  assert.equal(n.reused, false);
  return { files, session: n.session };
}

/** Offers every ticket of `tickets` to `port`: `[tls1.2 state, tls1.3 state, node reused]`. */
async function offer(port, tickets) {
  return [
    await sClient(port, ['-tls1_2', '-sess_in', tickets.files['-tls1_2']]),
    await sClient(port, ['-tls1_3', '-sess_in', tickets.files['-tls1_3']]),
    (await nodeTls(port, tickets.session)).reused,
  ];
}

/**
 * What the two ticket tests share: a temporary directory, a certificate, the upstream and a
 * `redis-server` (stopped after `t`); null when openssl or redis-server is missing (skipped).
 */
async function ticketsSetup(t) {
  if (!h.needTool(t, 'openssl') || !h.needTool(t, 'redis-server')) return null;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-tickets-'));
  const cert = h.selfSigned(['localhost']);
  const up = await greeter();
  t.after(() => h.closeServer(up));
  const redis = await startRedis();
  t.after(() => redis.kill());
  return { dir, cert, up, redis };
}

const RESUMED = ['Reused TLSv1.2', 'Reused TLSv1.3', true];
const FULL = ['New TLSv1.2', 'New TLSv1.3', false];

test('ticketKeyRotationS: a ticket resumes after one rotation, not after two (local and shared keys)', async (t) => {
  const ctx = await ticketsSetup(t);
  if (!ctx) return;
  const { dir, cert, up, redis } = ctx;
  const cluster = (nodeId) => ({ redis: { url: redis.url, keyPrefix: 'tickets-rot:' }, nodeId, shareBans: false, shareTicketKeys: true });
  const local = await proxy(t, { cert, up, tls: { ticketKeyRotationS: ROTATION_S } });
  const a = await proxy(t, { cert, up, tls: { ticketKeyRotationS: ROTATION_S }, cluster: cluster('a') });
  const b = await proxy(t, { cert, up, tls: { ticketKeyRotationS: ROTATION_S }, cluster: cluster('b') });
  await h.waitFor(() => a.p.metrics().cluster.ticketKeyUpdates >= 1 && b.p.metrics().cluster.ticketKeyUpdates >= 1, {
    what: 'both nodes hold the shared keys',
  });
  // The lifetime hint is two rotations.
  const hint = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${local.port}`, '-servername', 'localhost', '-tls1_2', '-ign_eof'], { input: '' });
  assert.match(hint.stdout.toString(), new RegExp(`lifetime hint: ${2 * ROTATION_S} \\(seconds\\)`));

  // Tickets made late in epoch e (key k current), so that two rotations later they are still
  // within their lifetime hint and the clients offer them.
  const e = epoch() + 1;
  const made = await step(e, 5000, ROTATION_S * 1000, async () => ({
    at: Date.now(),
    local: await makeTickets(local.port, dir, 'local'),
    shared: await makeTickets(a.port, dir, 'shared'),
  }));
  // One rotation: k is the previous key, the tickets resume (the shared ones on the other node).
  assert.deepEqual(await step(e + 1, 1000, ROTATION_S * 1000, () => offer(local.port, made.local)), RESUMED, 'local keys, one rotation later');
  assert.deepEqual(await step(e + 1, 1000, ROTATION_S * 1000, () => offer(b.port, made.shared)), RESUMED, 'shared keys, one rotation later, on the other node');
  // Two rotations: k is gone; the clients still offer the tickets (younger than the hint).
  const full = await step(e + 2, 1000, made.at + HINT_MS - 1000 - startOf(e + 2), async () => [
    await offer(local.port, made.local),
    await offer(b.port, made.shared),
  ]);
  assert.deepEqual(full, [FULL, FULL], 'local keys, then shared keys, two rotations later');
});

test("cluster.shareTicketKeys: two nodes resume each other's sessions, keep the keys while Redis is gone; without it they do not", async (t) => {
  const ctx = await ticketsSetup(t);
  if (!ctx) return;
  const { dir, cert, up, redis } = ctx;
  const cluster = (nodeId, share) => ({
    redis: { url: redis.url, keyPrefix: 'tickets:' },
    nodeId,
    shareBans: false,
    shareTicketKeys: share,
    breaker: { failures: 1, openMs: 100 },
  });
  const a = await proxy(t, { cert, up, cluster: cluster('a', true) });
  const b = await proxy(t, { cert, up, cluster: cluster('b', true) });
  const c = await proxy(t, { cert, up, cluster: cluster('c', false) });
  const d = await proxy(t, { cert, up, cluster: cluster('d', false) });
  await h.waitFor(() => a.p.metrics().cluster.ticketKeyUpdates === 1 && b.p.metrics().cluster.ticketKeyUpdates === 1, {
    what: 'both nodes hold the shared keys',
  });
  assert.equal(c.p.metrics().cluster.ticketKeyUpdates, 0);
  // One key set in Redis under the prefix, for the default rotation (6 h).
  assert.deepEqual((await redis.cli('KEYS', 'tickets:tls-ticket-keys:*')).stdout.toString().trim().split('\n'), ['tickets:tls-ticket-keys:21600']);
  // `epoch:previous:current:next`, each key 48 bytes of hex; it expires three rotations after the last read.
  const set = (await redis.cli('GET', 'tickets:tls-ticket-keys:21600')).stdout.toString().trim();
  assert.match(set, /^\d+:(?:[0-9a-f]{96})?:[0-9a-f]{96}:[0-9a-f]{96}$/);
  const pttl = Number((await redis.cli('PTTL', 'tickets:tls-ticket-keys:21600')).stdout.toString().trim());
  assert.ok(pttl > 3 * 21600 * 1000 - 60000 && pttl <= 3 * 21600 * 1000, `PTTL ${pttl}`);

  const fromA = await makeTickets(a.port, dir, 'a');
  assert.deepEqual(await offer(b.port, fromA), RESUMED, 'made on a, resumed on b');
  const fromB = await makeTickets(b.port, dir, 'b');
  assert.deepEqual(await offer(a.port, fromB), RESUMED, 'made on b, resumed on a');
  // Nodes with their own keys: resumed on the node that made the ticket only.
  const fromC = await makeTickets(c.port, dir, 'c');
  assert.deepEqual(await offer(d.port, fromC), FULL, 'made on c, offered to d');
  assert.deepEqual(await offer(c.port, fromC), RESUMED, 'made on c, offered to c');
  assert.deepEqual(await offer(d.port, fromA), FULL, 'a shared-key ticket on a node with its own keys');

  // Redis gone: the nodes keep the last keys (errors counted, one cluster_unavailable each).
  const errors = [];
  b.p.on('error', (err) => errors.push(err.code));
  redis.kill();
  await h.waitFor(() => a.p.metrics().cluster.breakerOpen && b.p.metrics().cluster.breakerOpen, { what: 'both breakers open' });
  assert.ok(b.p.metrics().cluster.errors > 0);
  const during = await makeTickets(a.port, dir, 'during');
  assert.deepEqual(await offer(b.port, during), RESUMED, 'made on a during the outage, resumed on b');
  assert.deepEqual(await offer(b.port, fromA), RESUMED, 'made before the outage, resumed during it');
  await h.waitFor(() => errors.includes('cluster_unavailable'), { what: "b's cluster_unavailable event" });
  assert.deepEqual(errors, ['cluster_unavailable']);
});

test('shareTicketKeys and ticketKeyRotationS are validated', () => {
  const cert = h.selfSigned(['localhost']);
  const errors = h.errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ port: 9443, defaultCert: cert, tls: { ticketKeyRotationS: 0 } }],
        routes: [{ sni: 'a.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], tls: { ticketKeyRotationS: 302401 } }],
        cluster: { redis: { url: 'redis://127.0.0.1:1' }, shareTicketKeys: 'yes' },
      })
  );
  assert.deepEqual(
    errors.map((e) => [e.path, e.message]),
    [
      ['listeners[0].tls.ticketKeyRotationS', 'must be an integer in [1, 302400], got 0'],
      ['routes[0].tls.ticketKeyRotationS', 'must be an integer in [1, 302400], got 302401'],
      ['cluster.shareTicketKeys', 'must be a boolean, got "yes"'],
    ]
  );
});
