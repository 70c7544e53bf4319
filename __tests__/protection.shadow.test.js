'use strict';
// protection.shadow: tighter limits evaluated on live traffic beside the enforced policy, counted
// and reported, never enforced (real sockets, real TLS clients).
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./helpers');

/** `shadowByReason` with every shadow reason at 0 but those given. */
const shadowCounts = (counts = {}) => ({
  cidr_blocked: 0,
  rate_limited: 0,
  too_many_connections: 0,
  prefix_rate_limited: 0,
  prefix_too_many_connections: 0,
  listener_overloaded: 0,
  ...counts,
});
/** A shadow 'blocked' event as the proxy emits it. */
const shadowEvent = (p, ip, reason) => ({
  ip,
  port: p.port,
  listener: `127.0.0.1:${p.port}`,
  reason,
  ja3: '',
  ja4: '',
  observed: true,
  detail: '',
  shadow: true,
});

test('a shadow rate limit counts what it would refuse and refuses nothing', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      rateLimit: { connectionsPerSecond: 100, burst: 100 },
      // One connection every 10 s, burst 2: the 3rd..5th of five quick connections.
      shadow: { rateLimit: { connectionsPerSecond: 0.1, burst: 2 } },
    },
  });
  t.after(() => p.close());
  const ip = '127.0.0.51';
  for (let i = 0; i < 5; i++) assert.equal(await h.admitted(p.port, ip), true, `connection ${i + 1}`);
  await h.waitFor(() => p.events.length === 3, { what: "three shadow 'blocked' events" });
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ rate_limited: 3 }));
  assert.equal(l.blocked, 0);
  assert.equal(l.accepted, 5);
  assert.deepEqual(
    p.events,
    Array.from({ length: 3 }, () => ({
      ip,
      port: p.port,
      listener: `127.0.0.1:${p.port}`,
      reason: 'rate_limited',
      ja3: '',
      ja4: '',
      observed: true,
      detail: '',
      shadow: true,
    }))
  );
  // Another client has its own shadow budget.
  assert.equal(await h.admitted(p.port, '127.0.0.52'), true);
  assert.equal(p.proxy.metrics().listeners[0].shadowByReason.rate_limited, 3);
  const prom = p.proxy.prometheus();
  assert.match(prom, new RegExp(`rampart_shadow_refusals_total\\{listener="127\\.0\\.0\\.1:${p.port}",reason="rate_limited"\\} 3\\n`));
  assert.match(prom, new RegExp(`rampart_shadow_refusals_total\\{listener="127\\.0\\.0\\.1:${p.port}",reason="too_many_connections"\\} 0\\n`));
  // Nothing was enforced: nobody listed.
  const b = p.proxy.blockedIps();
  assert.deepEqual([b.rateLimited, b.penaltyBoxed], [[], []]);
});

test('a shadow maxConcurrentPerIp counts the connection over it while the enforced limit admits it', async (t) => {
  const p = await h.protectedProxy({ protection: { maxConcurrentPerIp: 10, shadow: { maxConcurrentPerIp: 2 } } });
  t.after(() => p.close());
  const ip = '127.0.0.53';
  // Three open connections from one address (TCP only: admission is at accept).
  const socks = [];
  t.after(() => {
    for (const s of socks) s.destroy();
  });
  for (let i = 0; i < 3; i++) {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: ip });
    s.on('error', () => {});
    socks.push(s);
    await h.waitFor(() => p.proxy.metrics().listeners[0].accepted === i + 1, { what: `connection ${i + 1} accepted` });
  }
  await h.waitFor(() => p.events.length === 1, { what: "the shadow 'blocked' event" });
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ too_many_connections: 1 }));
  assert.equal(l.activeConnections, 3);
  assert.equal(l.blocked, 0);
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason, e.shadow, e.observed]),
    [[ip, 'too_many_connections', true, true]]
  );
});

test('a shadow blocklist counts its clients once, never an allowlisted or enforced-blocked one, and explain shows it', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      allowlist: ['127.0.3.9/32'],
      blocklist: ['127.0.3.8/32'],
      shadow: { blocklist: ['127.0.3.0/29', '127.0.3.8/31'] },
    },
  });
  t.after(() => p.close());
  // .1 and .2 are on the shadow list; .20 is not; .9 is allowlisted; .8 is enforced-blocked.
  for (const ip of ['127.0.3.1', '127.0.3.2', '127.0.3.1', '127.0.3.20', '127.0.3.9']) {
    assert.equal(await h.admitted(p.port, ip), true, ip);
  }
  assert.equal(await h.admitted(p.port, '127.0.3.8'), false);
  await h.waitFor(() => p.events.length === 4, { what: "three shadow and one real 'blocked' event" });
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ cidr_blocked: 3 }));
  assert.deepEqual(l.blockedByReason.cidr_blocked, 1);
  assert.equal(l.accepted, 5);
  const shadow = p.events.filter((e) => e.shadow);
  assert.deepEqual(
    shadow,
    ['127.0.3.1', '127.0.3.2', '127.0.3.1'].map((ip) => shadowEvent(p, ip, 'cidr_blocked'))
  );
  assert.deepEqual(
    p.events.filter((e) => !e.shadow).map((e) => [e.ip, e.reason, e.observed]),
    [['127.0.3.8', 'cidr_blocked', false]]
  );
  const x = (ip) => p.proxy.explain(ip).listeners[0];
  assert.deepEqual([x('127.0.3.1').verdict, x('127.0.3.1').shadowVerdict], [null, 'cidr_blocked']);
  assert.deepEqual([x('127.0.3.20').verdict, x('127.0.3.20').shadowVerdict], [null, null]);
  assert.deepEqual([x('127.0.3.9').verdict, x('127.0.3.9').shadowVerdict], [null, null]);
  assert.deepEqual([x('127.0.3.8').verdict, x('127.0.3.8').shadowVerdict], ['cidr_blocked', 'cidr_blocked']);
  assert.match(p.proxy.prometheus(), new RegExp(`rampart_shadow_refusals_total\\{listener="127\\.0\\.0\\.1:${p.port}",reason="cidr_blocked"\\} 3\\n`));
  assert.deepEqual(p.proxy.blockedIps().cidrBlocklist, ['127.0.3.8/32']);
});

test('a shadow prefix rate counts per prefix with its own prefix length and refuses nothing', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      prefixLimit: { connectionsPerSecond: 100, burst: 100 },
      // One connection every 10 s per /28, burst 2.
      shadow: { prefixLimit: { ipv4PrefixLength: 28, connectionsPerSecond: 0.1, burst: 2 } },
    },
  });
  t.after(() => p.close());
  const ips = ['127.0.4.1', '127.0.4.2', '127.0.4.3', '127.0.4.4', '127.0.4.17', '127.0.4.18'];
  for (const ip of ips) assert.equal(await h.admitted(p.port, ip), true, ip);
  await h.waitFor(() => p.events.length === 2, { what: "two shadow 'blocked' events" });
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ prefix_rate_limited: 2 }));
  assert.equal(l.blocked, 0);
  assert.equal(l.accepted, 6);
  assert.deepEqual(
    p.events,
    ['127.0.4.3', '127.0.4.4'].map((ip) => shadowEvent(p, ip, 'prefix_rate_limited'))
  );
  // 127.0.4.0/28 and 127.0.4.16/28 have used their shadow burst, 127.0.4.32/28 has not; the
  // enforced policy admits all three.
  const x = (ip) => p.proxy.explain(ip).listeners[0];
  assert.deepEqual([x('127.0.4.9').verdict, x('127.0.4.9').shadowVerdict], [null, 'prefix_rate_limited']);
  assert.deepEqual([x('127.0.4.30').verdict, x('127.0.4.30').shadowVerdict], [null, 'prefix_rate_limited']);
  assert.deepEqual([x('127.0.4.33').verdict, x('127.0.4.33').shadowVerdict], [null, null]);
});

test('a shadow prefix maxConcurrent counts the open connections of a prefix', async (t) => {
  const p = await h.protectedProxy({ protection: { shadow: { prefixLimit: { maxConcurrent: 2 } } } });
  t.after(() => p.close());
  const socks = [];
  t.after(() => {
    for (const s of socks) s.destroy();
  });
  const open = async (ip) => {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: ip });
    s.on('error', () => {});
    socks.push(s);
    const n = socks.length;
    await h.waitFor(() => p.proxy.metrics().listeners[0].accepted === n, { what: `connection ${n} accepted` });
  };
  // Three open connections from three addresses of 127.0.5.0/24: the third is over.
  for (const ip of ['127.0.5.1', '127.0.5.2', '127.0.5.3']) await open(ip);
  await h.waitFor(() => p.events.length === 1, { what: "the shadow 'blocked' event" });
  assert.deepEqual(p.events, [shadowEvent(p, '127.0.5.3', 'prefix_too_many_connections')]);
  assert.equal(p.proxy.explain('127.0.5.4').listeners[0].shadowVerdict, 'prefix_too_many_connections');
  // Closing them releases the prefix: one more is counted clean.
  for (const s of socks.splice(0)) s.destroy();
  await h.waitFor(() => p.proxy.metrics().listeners[0].activeConnections === 0, { what: 'the connections closed' });
  assert.equal(p.proxy.explain('127.0.5.4').listeners[0].shadowVerdict, null);
  assert.equal(await h.admitted(p.port, '127.0.5.4'), true);
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ prefix_too_many_connections: 1 }));
  assert.equal(l.blocked, 0);
});

test('a shadow listener rate counts over every client of the listener', async (t) => {
  // Two connections at once, then one every 10 s, over the whole listener.
  const p = await h.protectedProxy({ protection: { shadow: { listenerLimit: { connectionsPerSecond: 0.1, burst: 2 } } } });
  t.after(() => p.close());
  // Distinct addresses: a clean exchange makes a client known-good, and known-good clients are
  // not counted on the listener.
  const ips = ['127.0.6.1', '127.0.7.1', '127.0.8.1', '127.0.10.1', '127.0.11.1'];
  for (const ip of ips) assert.equal(await h.admitted(p.port, ip), true, ip);
  await h.waitFor(() => p.events.length === 3, { what: "three shadow 'blocked' events" });
  assert.deepEqual(
    p.events,
    ips.slice(2).map((ip) => shadowEvent(p, ip, 'listener_overloaded'))
  );
  // 127.0.6.1 is known-good now: the shadow listener rate does not count it.
  assert.equal(await h.admitted(p.port, '127.0.6.1'), true);
  assert.equal(p.proxy.explain('127.0.12.1').listeners[0].shadowVerdict, 'listener_overloaded');
  assert.equal(p.proxy.explain('127.0.6.1').listeners[0].shadowVerdict, null);
  const l = p.proxy.metrics().listeners[0];
  assert.deepEqual(l.shadowByReason, shadowCounts({ listener_overloaded: 3 }));
  assert.equal(l.accepted, 6);
  assert.equal(l.blocked, 0);
});

test('updateConfig adds and removes shadow rules live', async (t) => {
  const p = await h.protectedProxy({ protection: { maxConcurrentPerIp: 100 } });
  t.after(() => p.close());
  const ip = '127.0.13.1';
  assert.equal(await h.admitted(p.port, ip), true);
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { maxConcurrentPerIp: 100, shadow: { blocklist: ['127.0.13.0/24'] } } }] });
  assert.equal(p.proxy.explain(ip).listeners[0].shadowVerdict, 'cidr_blocked');
  assert.equal(await h.admitted(p.port, ip), true);
  assert.equal(await h.admitted(p.port, ip), true);
  await h.waitFor(() => p.events.length === 2, { what: "two shadow 'blocked' events" });
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { maxConcurrentPerIp: 100 } }] });
  assert.equal(p.proxy.explain(ip).listeners[0].shadowVerdict, null);
  assert.equal(await h.admitted(p.port, ip), true);
  const l = p.proxy.metrics().listeners[0];
  assert.equal(l.accepted, 4);
  assert.deepEqual(l.shadowByReason, shadowCounts({ cidr_blocked: 2 }));
  assert.deepEqual(p.events, [shadowEvent(p, ip, 'cidr_blocked'), shadowEvent(p, ip, 'cidr_blocked')]);
  // A bad shadow rule is a ConfigError at its path and changes nothing.
  const errs = h.errorsOf(() => p.proxy.updateConfig({ protection: [{ port: p.port, protection: { shadow: { blocklist: ['nope'] } } }] }));
  assert.deepEqual(
    errs.map((e) => e.path),
    ['protection[0].protection.shadow.blocklist[0]']
  );
  assert.equal(p.proxy.explain(ip).listeners[0].shadowVerdict, null);
});

test('protection.shadow is validated like the enforced fields, with a path per problem', () => {
  const { RampartProxy } = require('..');
  const errs = h.errorsOf(
    () =>
      new RampartProxy({
        listeners: [
          {
            host: '127.0.0.1',
            port: 1,
            defaultCert: h.selfSigned(),
            protection: {
              ipv6PrefixLength: 56,
              shadow: {
                rateLimit: { connectionsPerSecond: -1 },
                maxConcurrentPerIp: 'x',
                penaltyBox: {},
                blocklist: ['10.0.0.0/8', '300.1.1.1'],
                prefixLimit: { ipv4PrefixLength: 40, ipv6PrefixLength: 64, maxConcurrent: 1 },
                listenerLimit: { connectionsPerSecond: 5, maxPendingHandshakes: 10 },
              },
            },
          },
        ],
        routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
      })
  );
  assert.deepEqual(errs.map((e) => e.path).sort(), [
    'listeners[0].protection.shadow.blocklist[1]',
    'listeners[0].protection.shadow.listenerLimit.maxPendingHandshakes',
    'listeners[0].protection.shadow.maxConcurrentPerIp',
    'listeners[0].protection.shadow.penaltyBox',
    'listeners[0].protection.shadow.prefixLimit.ipv4PrefixLength',
    'listeners[0].protection.shadow.prefixLimit.ipv6PrefixLength',
    'listeners[0].protection.shadow.rateLimit.connectionsPerSecond',
  ]);
});
