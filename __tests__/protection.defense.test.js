'use strict';
// Defense mode: on by updateConfig (the operator's switch) and by a surge of new connections,
// with its 'defense' events, metrics and Prometheus gauge; while on, clients that are not
// known-good get factor × their rates.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./helpers');

/** A TLS handshake from `src` and no application byte (so no known-good mark): true when it completed. */
function handshake(port, src) {
  return new Promise((resolve) => {
    const c = require('node:tls').connect({ port, host: '127.0.0.1', localAddress: src, servername: 'x', rejectUnauthorized: false });
    c.once('secureConnect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
    c.once('close', () => resolve(false));
  });
}

function defenseEvents(proxy) {
  const got = [];
  proxy.on('defense', (e) => got.push(e));
  return got;
}

test("defense on by updateConfig: 'defense' events, defenseActive, and factor x rates for clients that are not known-good", async (t) => {
  const base = { rateLimit: { connectionsPerSecond: 0.01, burst: 8 } };
  const p = await h.protectedProxy({ protection: base });
  t.after(() => p.close());
  const events = defenseEvents(p.proxy);
  const label = `127.0.0.1:${p.port}`;
  const good = '127.0.9.1';
  assert.equal(await h.admitted(p.port, good), true);
  await h.waitFor(() => p.proxy.metrics().listeners[0].knownGoodClients === 1, { what: 'known-good mark' });
  assert.equal(p.proxy.metrics().listeners[0].defenseActive, 0);

  // newClientMaxPending 3: this test is about rates. A client's `secureConnect` fires before the
  // server's side of the handshake ends (TLS 1.3: the server still reads the client's Finished), so
  // the previous handshake may still count as pending when the next one arrives; with the default
  // of 1 that refuses it `slow_handshake` (the cap itself: tests/protection_aggregate.rs).
  const on = { mode: 'on', factor: 0.25, newClientMaxPending: 3 };
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { ...base, defense: on } }] });
  await h.waitFor(() => events.length === 1, { what: 'defense on event' });
  assert.deepEqual({ ...events[0], rate: 0 }, { port: p.port, listener: label, active: true, rate: 0, threshold: 100 });
  assert.equal(p.proxy.metrics().listeners[0].defenseActive, 1);
  assert.match(p.proxy.prometheus(), new RegExp(`rampart_defense_active\\{listener="${label}"\\} 1`));
  // A client that is not known-good (handshakes, no application bytes): burst 8 × factor 0.25 →
  // floor(0.25 × 7) + 1 = 2 at once.
  const fresh = '127.0.9.2';
  assert.deepEqual([await handshake(p.port, fresh), await handshake(p.port, fresh), await handshake(p.port, fresh)], [true, true, false]);
  // The known-good client keeps its whole burst (7 left of 8).
  for (let i = 0; i < 7; i++) assert.equal(await h.admitted(p.port, good), true, `known-good round trip ${i + 1}`);
  assert.equal(await h.admitted(p.port, good), false);
  await h.waitFor(() => p.events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [
      [fresh, 'rate_limited'],
      [good, 'rate_limited'],
    ]
  );

  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { ...base, defense: { mode: 'off' } } }] });
  await h.waitFor(() => events.length === 2, { what: 'defense off event' });
  assert.equal(events[1].active, false);
  assert.equal(p.proxy.metrics().listeners[0].defenseActive, 0);
});

test('defense on by a surge of new connections, and off after holdMs', async (t) => {
  const p = await h.protectedProxy({
    protection: { defense: { mode: 'auto', minConnectionsPerSecond: 20, holdMs: 1000 } },
  });
  t.after(() => p.close());
  const events = defenseEvents(p.proxy);
  // A quiet listener: a few connections, nothing happens.
  for (let i = 1; i <= 3; i++) assert.equal(await h.admitted(p.port, `127.0.10.${i}`), true);
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(events.length, 0);
  // 60 TCP connections from 60 sources at once.
  const socks = await Promise.all(
    Array.from(
      { length: 60 },
      (_, i) =>
        new Promise((resolve) => {
          const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: `127.0.11.${i + 1}` });
          s.on('error', () => resolve(s));
          s.once('connect', () => resolve(s));
        })
    )
  );
  for (const s of socks) s.destroy();
  await h.waitFor(() => events.length === 1, { timeoutMs: 3000, what: 'defense on event' });
  const on = events[0];
  assert.equal(on.active, true);
  assert.equal(on.port, p.port);
  assert.equal(on.listener, `127.0.0.1:${p.port}`);
  assert.equal(on.threshold, 20);
  assert.ok(on.rate > 20 && on.rate <= 60, `rate ${on.rate}`);
  assert.equal(p.proxy.metrics().listeners[0].defenseActive, 1);
  // Quiet again: off once holdMs has passed below the threshold.
  await h.waitFor(() => events.length === 2, { timeoutMs: 5000, what: 'defense off event' });
  assert.equal(events[1].active, false);
  assert.ok(events[1].rate <= events[1].threshold, JSON.stringify(events[1]));
  assert.equal(p.proxy.metrics().listeners[0].defenseActive, 0);
});
