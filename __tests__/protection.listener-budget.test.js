'use strict';
// The listener budget (listenerLimit) and known-good clients: past the budget new sources are
// shed with listener_overloaded, while a client whose connection completed its handshake and moved
// bytes both ways keeps its round trips (within its own limits).
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const h = require('./helpers');

const NEW_SOURCES = 60;

test('a listener budget sheds 60 new sources while a known-good client keeps its round trips', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      rateLimit: { connectionsPerSecond: 100, burst: 100 },
      listenerLimit: { connectionsPerSecond: 0.01, burst: 1 },
    },
  });
  t.after(() => p.close());
  const good = '127.0.6.1';
  // Its first round trip takes the budget's only token, and earns the mark.
  assert.equal(await h.admitted(p.port, good), true);
  await h.waitFor(() => p.proxy.metrics().listeners[0].knownGoodClients === 1, { what: 'known-good mark' });
  const shed = [];
  let goodTrips = 0;
  for (let i = 1; i <= NEW_SOURCES; i++) {
    shed.push(await h.admitted(p.port, `127.0.7.${i}`));
    if (i % 10 === 0) {
      assert.equal(await h.admitted(p.port, good), true, `known-good round trip after ${i} new sources`);
      goodTrips++;
    }
  }
  assert.deepEqual(shed, Array(NEW_SOURCES).fill(false));
  await h.waitFor(() => p.events.length === NEW_SOURCES, { what: 'blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    Array.from({ length: NEW_SOURCES }, (_, k) => [`127.0.7.${k + 1}`, 'listener_overloaded'])
  );
  const m = p.proxy.metrics().listeners[0];
  assert.equal(m.blockedByReason.listener_overloaded, NEW_SOURCES);
  assert.equal(m.accepted, 1 + goodTrips);
  assert.equal(m.knownGoodClients, 1);
  assert.match(p.proxy.prometheus(), /rampart_known_good_clients\{listener="[^"]+"\} 1/);
});

test('a known-good client keeps its own limits', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      rateLimit: { connectionsPerSecond: 0.01, burst: 3 },
      listenerLimit: { connectionsPerSecond: 0.01, burst: 1 },
    },
  });
  t.after(() => p.close());
  const good = '127.0.6.2';
  for (let i = 0; i < 3; i++) assert.equal(await h.admitted(p.port, good), true, `round trip ${i + 1}`);
  assert.equal(await h.admitted(p.port, good), false);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason], [good, 'rate_limited']);
});

test('a connection refused in observe mode, or one that never exchanged bytes both ways, earns no mark', async (t) => {
  const p = await h.protectedProxy({
    protection: { mode: 'observe', listenerLimit: { connectionsPerSecond: 0.01, burst: 1 } },
  });
  t.after(() => p.close());
  // TLS handshake only, no application bytes.
  const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.6.3', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  c.destroy();
  // Over the budget, admitted by observe mode: a full round trip, but refused.
  assert.equal(await h.admitted(p.port, '127.0.6.4'), true);
  await h.waitFor(() => p.events.length === 1, { what: 'observed event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason, p.events[0].observed], ['127.0.6.4', 'listener_overloaded', true]);
  assert.equal(p.proxy.metrics().listeners[0].knownGoodClients, 0);
});

test('listenerLimit.maxPendingHandshakes sheds handshakes beyond it', async (t) => {
  const net = require('node:net');
  const p = await h.protectedProxy({ protection: { listenerLimit: { maxPendingHandshakes: 3 } } });
  t.after(() => p.close());
  // Three sources open TCP and send nothing: three handshakes pending.
  const idle = [];
  for (let i = 1; i <= 3; i++) {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: `127.0.8.${i}` });
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    idle.push(s);
  }
  await h.waitFor(() => p.proxy.metrics().listeners[0].activeConnections === 3, { what: 'three pending' });
  assert.equal(await h.admitted(p.port, '127.0.8.10'), false);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason], ['127.0.8.10', 'listener_overloaded']);
  idle[0].destroy();
  await h.waitFor(() => p.proxy.metrics().listeners[0].activeConnections === 2, { what: 'one pending left' });
  assert.equal(await h.admitted(p.port, '127.0.8.10'), true);
  for (const s of idle) s.destroy();
});
