'use strict';
// XDP end to end (root): two network namespaces joined by a veth pair, the proxy in one with XDP
// attached natively on its veth end, clients in the other. A boxed client's SYNs are dropped in
// the kernel while a second address keeps getting TLS round trips, an unprotected port stays
// reachable, an hping3 SYN flood is cut by the kernel SYN limit, the ban expires, detach cleans up.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const { vethPair } = require('./helpers/netns');

const PROXY = '198.18.0.1';
const BOXED = '198.18.0.2';
const LEGIT = '198.18.0.3';
const FLOOD = '198.18.0.4';
const PORT = 8443;
const PLAIN = 9000;
const pair = vethPair({ tag: 'e', after: test.after, proxy: PROXY, clients: [BOXED, LEGIT, FLOOD] });
const { nsClient: NS_C, nsProxy: NS_P, vethProxy: VP } = pair;
const client = (mode, src, port = PORT, timeoutMs = 1500) => pair.client(mode, src, port, timeoutMs);

test('XDP drops a boxed client and a SYN flood in the kernel while others are served', async (t) => {
  const skip = await pair.setup();
  if (skip) {
    h.skipOrFail(t, skip);
    return;
  }
  const { p } = await pair.startProxy(t, {
    port: PORT,
    plainPort: PLAIN,
    protection: {
      rateLimit: { connectionsPerSecond: 1, burst: 3 },
      penaltyBox: { durationMs: 4000 },
      xdp: { synPerSecond: 5, synBurst: 5 },
    },
  });

  assert.equal(await client('tls', LEGIT), 'ok');
  // Push BOXED into the penalty box in userspace: burst 3, the fourth (well within a second, from
  // one client process) is rate_limited.
  assert.equal(await client('tls4', BOXED, PORT, 4000), 'ok,ok,ok,closed');
  await h.waitFor(async () => (await p.call('status')).bannedIps.includes(BOXED), { what: 'the kernel ban of the boxed IP' });
  const before = (await p.call('status')).counters.dropped.penalty;
  // Now its SYNs die in XDP: the connect times out.
  assert.equal(await client('tls', BOXED, PORT, 1200), 'timeout');
  const after = (await p.call('status')).counters.dropped.penalty;
  assert.ok(after > before, `penalty drops ${before} -> ${after}`);
  assert.deepEqual((await p.call('blocked')).penaltyBoxed, [BOXED]);
  // Everyone else is still served, and the unprotected port is untouched even for BOXED.
  assert.equal(await client('tls', LEGIT), 'ok');
  assert.equal(await client('plain', BOXED, PLAIN), 'ok');

  // A SYN flood from a third address, bounded: 200 SYNs at 1 per ms.
  const flood = h.run('ip', ['netns', 'exec', NS_C, 'hping3', '-q', '-S', '-p', String(PORT), '-c', '200', '-i', 'u1000', '-a', FLOOD, PROXY], {
    timeoutMs: 20000,
  });
  // The legit address stays within its own limit (burst 3 at 1/s) and is served during the flood.
  const legitDuring = await client('tls', LEGIT, PORT, 3000);
  const fr = await flood;
  assert.equal(legitDuring, 'ok');
  assert.match(fr.stderr.toString(), /200 packets transmitted/);
  const st = await p.call('status');
  assert.ok(st.counters.dropped.synFlood >= 150, `synFlood drops: ${st.counters.dropped.synFlood}`);
  assert.ok(st.bannedIps.includes(FLOOD), `banned: ${st.bannedIps}`);

  // After the ban expires (4 s, no excess meanwhile) BOXED is served again.
  await h.waitFor(async () => (await client('tls', BOXED, PORT, 1000)) === 'ok', {
    timeoutMs: 12000,
    intervalMs: 500,
    what: 'the boxed client to be readmitted',
  });

  await p.call('detach');
  const gone = await p.call('status');
  assert.equal(gone.attached, false);
  const link = await h.run('ip', ['-n', NS_P, 'link', 'show', VP]);
  assert.doesNotMatch(link.stdout.toString(), /xdp/);
});
