'use strict';
// protection.shadow: tighter limits evaluated on live traffic beside the enforced policy, counted
// and reported, never enforced (real sockets, real TLS clients).
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./helpers');

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
  assert.deepEqual(l.shadowByReason, { rate_limited: 3, too_many_connections: 0 });
  assert.equal(l.blocked, 0);
  assert.equal(l.accepted, 5);
  assert.deepEqual(
    p.events,
    Array.from({ length: 3 }, () => ({
      ip, port: p.port, listener: `127.0.0.1:${p.port}`, reason: 'rate_limited', ja3: '', ja4: '', observed: true, detail: '', shadow: true,
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
  assert.deepEqual(l.shadowByReason, { rate_limited: 0, too_many_connections: 1 });
  assert.equal(l.activeConnections, 3);
  assert.equal(l.blocked, 0);
  assert.deepEqual(p.events.map((e) => [e.ip, e.reason, e.shadow, e.observed]), [[ip, 'too_many_connections', true, true]]);
});

test('protection.shadow is validated like the enforced fields, with a path per problem', () => {
  const { RampartProxy } = require('..');
  const errs = h.errorsOf(() => new RampartProxy({
    listeners: [{ host: '127.0.0.1', port: 1, defaultCert: h.selfSigned(), protection: {
      shadow: { rateLimit: { connectionsPerSecond: -1 }, maxConcurrentPerIp: 'x', penaltyBox: {} },
    } }],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
  }));
  assert.deepEqual(errs.map((e) => e.path).sort(), [
    'listeners[0].protection.shadow.maxConcurrentPerIp',
    'listeners[0].protection.shadow.penaltyBox',
    'listeners[0].protection.shadow.rateLimit.connectionsPerSecond',
  ]);
});
