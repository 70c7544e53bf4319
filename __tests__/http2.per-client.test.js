'use strict';
// The HTTP/2 guard per client, not only per connection (docs/protection.md: HTTP/2 guard): streams, resets
// and control frames are also counted over all of a client's connections (the per-connection
// limit × `clientFactor`, 2 by default), so more connections buy no more budget; a rapid reset
// boxes its source at its first violation; `maxStreamsPerConnection` ends a connection with a
// graceful GOAWAY (NO_ERROR). Raw frame clients from several 127.0.0.x addresses against Rampart
// in front of a counting upstream (a frame-counting relay before a node:http2 server). A GCRA
// admits `burst` at once and one more per interval, so over `elapsed` seconds at most
// `burst + floor(rate × elapsed)` events of a kind pass.
const test = require('node:test');
const assert = require('node:assert/strict');
const http2 = require('node:http2');
const h = require('./helpers');
const H = require('./helpers/h2');

const CALM = H.ENHANCE_YOUR_CALM;
const times = (n, f) => Array.from({ length: n }, (_, i) => f(i));
const budget = (burst, rate, elapsed) => burst + Math.floor(rate * elapsed);
const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
const sum = (conns, kind) => conns.reduce((n, c) => n + (c.frames[kind] || 0), 0);

test('rapid reset from 8 sources × 4 connections: each source gets one client budget and is boxed at its first violation', async (t) => {
  // Per connection 5 resets/s, burst 10; per client (× 2) 10/s, burst 20.
  const s = await H.proxiedUpstream(t, { protection: { http2: { maxResetsPerSecond: 5 } } });
  const sources = times(8, (i) => `127.0.0.${i + 20}`);
  const clients = [];
  for (const localAddress of sources) {
    for (let k = 0; k < 4; k++) clients.push(await H.rawClient({ port: s.port, localAddress }));
  }
  const pairs = Buffer.concat(times(200, (i) => Buffer.concat([H.headers(2 * i + 1), H.rst(2 * i + 1)])));
  const t0 = process.hrtime.bigint();
  await Promise.all(clients.map((c) => c.write(Buffer.concat([H.PREFACE, H.settings(), pairs]))));
  await h.waitFor(() => clients.every((c) => c.closed), { what: 'the proxy to close all 32 connections' });
  const elapsed = seconds(t0);
  await h.waitFor(() => s.up.conns.length === 32 && s.up.conns.every((c) => c.closed), { what: 'the 32 upstream connections to close' });
  for (const c of clients) assert.deepEqual([c.goaway.errorCode, c.frames.at(-1).type], [CALM, H.T.GOAWAY]);
  // Every source spent its client budget (20 resets at once), never more than it refills;
  // four connections with only their own budgets would have passed 4 × 10 each.
  const resets = sum(s.up.conns, 'RST_STREAM');
  const streams = sum(s.up.conns, 'HEADERS');
  assert.ok(resets >= 8 * 20 && resets <= 8 * budget(20, 10, elapsed), `${resets} resets in ${elapsed}s`);
  // Each connection forwards at most the HEADERS of the pair whose reset was refused.
  assert.ok(streams >= resets && streams <= resets + 32, `${streams} streams, ${resets} resets`);
  // Every connection was cut as a rapid reset, and each source is boxed.
  await h.waitFor(() => s.events.length === 32, { what: '32 h2_flood events' });
  assert.deepEqual(new Set(s.events.map((e) => `${e.reason}/${e.detail}/${e.observed}`)), new Set(['h2_flood/rapid_reset/false']));
  assert.deepEqual([...new Set(s.events.map((e) => e.ip))].sort(), sources);
  assert.deepEqual(s.proxy.blockedIps().penaltyBoxed.sort(), sources);
  const boxed = s.proxy.blockedIps({ detail: true }).penaltyBoxed;
  assert.ok(
    boxed.every((b) => b.remainingMs > 590000 && b.remainingMs <= 600000),
    JSON.stringify(boxed)
  );
  // The next connection of a source is refused at accept.
  await assert.rejects(H.rawClient({ port: s.port, localAddress: sources[0] }));
  await h.waitFor(() => s.events.length === 33, { what: 'the penalty_boxed event' });
  assert.deepEqual([s.events[32].ip, s.events[32].reason], [sources[0], 'penalty_boxed']);
  assert.equal(s.metrics().h2FloodByDetail.rapid_reset, 32);
});

test('a rapid reset boxes at the first violation even with boxAfterViolations 3; another client is not affected', async (t) => {
  const s = await H.proxiedUpstream(t);
  const c = await H.rawClient({ port: s.port, localAddress: '127.0.0.30' });
  c.write(Buffer.concat([H.PREFACE, H.settings(), ...times(1000, (i) => Buffer.concat([H.headers(2 * i + 1), H.rst(2 * i + 1)]))]));
  await h.waitFor(() => c.closed, { what: 'the proxy to close the connection' });
  assert.equal(c.goaway.errorCode, CALM);
  await h.waitFor(() => s.events.length === 1, { what: 'the h2_flood event' });
  assert.deepEqual([s.events[0].ip, s.events[0].reason, s.events[0].detail], ['127.0.0.30', 'h2_flood', 'rapid_reset']);
  assert.deepEqual(s.proxy.blockedIps().penaltyBoxed, ['127.0.0.30']);
  await assert.rejects(H.rawClient({ port: s.port, localAddress: '127.0.0.30' }));
  const other = await H.rawClient({ port: s.port, localAddress: '127.0.0.31' });
  assert.equal(other.alpn, 'h2');
  other.socket.destroy();
});

test('streams spread over 4 connections of one client are limited like one connection × clientFactor', async (t) => {
  // Per connection 10 streams/s, burst 10 (maxConcurrentStreams); per client (× 2) 20/s, burst 20.
  const s = await H.proxiedUpstream(t, { protection: { http2: { maxStreamsPerSecond: 10, maxConcurrentStreams: 10 } } });
  const clients = [];
  for (let k = 0; k < 4; k++) clients.push(await H.rawClient({ port: s.port, localAddress: '127.0.0.40' }));
  const t0 = process.hrtime.bigint();
  // Each connection sends 8 requests (under its own 10), one connection after the other.
  for (const c of clients) {
    c.write(Buffer.concat([H.PREFACE, H.settings(), ...times(8, (i) => H.headers(2 * i + 1))]));
    await h.waitFor(() => c.closed || (c.count.HEADERS || 0) === 8, { what: 'answers or the close' });
  }
  const elapsed = seconds(t0);
  const cut = clients.filter((c) => c.closed);
  const open = clients.filter((c) => !c.closed);
  // The client's 20 (+ what refilled meanwhile) passed; 4 × 8 = 32 did not.
  const answered = open.length * 8 + cut.reduce((n, c) => n + ((c.goaway.lastStreamId + 1) >> 1), 0);
  assert.ok(answered >= 20 && answered <= budget(20, 20, elapsed), `${answered} streams in ${elapsed}s`);
  assert.ok(cut.length >= 1, 'at least one connection went over the client budget');
  for (const c of cut) assert.equal(c.goaway.errorCode, CALM);
  await h.waitFor(() => s.events.length === cut.length, { what: 'one h2_flood per cut connection' });
  assert.deepEqual(
    s.events.map((e) => [e.ip, e.reason, e.detail]),
    cut.map(() => ['127.0.0.40', 'h2_flood', 'stream_rate'])
  );
  await h.waitFor(() => sum(s.up.conns, 'HEADERS') === answered, { what: `${answered} HEADERS at the upstream` });
  for (const c of open) c.socket.destroy();
});

test('maxStreamsPerConnection: a graceful GOAWAY (NO_ERROR) after the last stream; the next connection works', async (t) => {
  const s = await H.proxiedUpstream(t, { protection: { http2: { maxStreamsPerConnection: 5 } } });
  const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false });
  session.on('error', () => {});
  let goaway = null;
  session.on('goaway', (errorCode, lastStreamID) => (goaway = { errorCode, lastStreamID }));
  const get = H.getter(session);
  const results = [];
  for (let i = 0; i < 5; i++) results.push(await get(`/${i}`));
  assert.deepEqual(
    results,
    times(5, () => [200, 'ok'])
  );
  await h.waitFor(() => goaway !== null, { what: 'the GOAWAY' });
  assert.deepEqual(goaway, { errorCode: http2.constants.NGHTTP2_NO_ERROR, lastStreamID: 9 });
  await h.waitFor(() => session.closed || session.destroyed, { what: 'the session to close' });
  // The client's next request goes on a new connection.
  const next = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false });
  next.on('error', () => {});
  assert.deepEqual(await H.getter(next)('/again'), [200, 'ok']);
  next.close();
  assert.equal(s.up.streams, 6);
  assert.equal(s.events.length, 0, JSON.stringify(s.events));
  assert.equal(s.metrics().blockedByReason.h2_flood, 0);
});

test('maxStreamsPerConnection: a stream opened after the GOAWAY is not forwarded; the connection ends with the same GOAWAY, unreported', async (t) => {
  const s = await H.proxiedUpstream(t, { protection: { http2: { maxStreamsPerConnection: 2 } }, handler: () => {} });
  const c = await H.rawClient({ port: s.port });
  c.write(Buffer.concat([H.PREFACE, H.settings(), H.headers(1), H.headers(3)]));
  await h.waitFor(() => c.goaway !== null, { what: 'the graceful GOAWAY' });
  assert.deepEqual(c.goaway, { lastStreamId: 3, errorCode: 0 });
  assert.equal(c.closed, false, 'streams 1 and 3 are still in flight');
  c.write(H.headers(5));
  await h.waitFor(() => c.closed, { what: 'the proxy to close the connection' });
  const goaways = c.frames.filter((f) => f.type === H.T.GOAWAY).map((f) => [f.payload.readUInt32BE(0), f.payload.readUInt32BE(4)]);
  assert.deepEqual(goaways, [
    [3, 0],
    [3, 0],
  ]);
  await h.waitFor(() => s.up.conns[0].closed, { what: 'the upstream connection to close' });
  assert.equal(s.up.conns[0].frames.HEADERS, 2);
  assert.equal(s.events.length, 0, JSON.stringify(s.events));
});

test('protection.http2 clientFactor and maxStreamsPerConnection are validated with paths', () => {
  const { RampartProxy } = require('..');
  const cert = h.selfSigned(['localhost']);
  const make = (http2) => () => new RampartProxy({ listeners: [{ port: 1, defaultCert: cert, protection: { http2 } }], routes: [] });
  assert.deepEqual(h.errorsOf(make({ clientFactor: 0.5, maxStreamsPerConnection: 0 })), [
    { path: 'listeners[0].protection.http2.maxStreamsPerConnection', message: 'must be an integer in [1, 1073741824], got 0' },
    { path: 'listeners[0].protection.http2.clientFactor', message: 'must be a finite number in [1, 1000], got 0.5' },
  ]);
  assert.deepEqual(h.errorsOf(make({ clientFactor: NaN, maxStreamsPerConnection: 1.5 })), [
    { path: 'listeners[0].protection.http2.maxStreamsPerConnection', message: 'must be an integer in [1, 1073741824], got 1.5' },
    { path: 'listeners[0].protection.http2.clientFactor', message: 'must be a finite number in [1, 1000], got NaN' },
  ]);
  assert.doesNotThrow(make({ clientFactor: 1, maxStreamsPerConnection: 1 }));
});

test('a client earns its known-good mark with an answered HTTP/2 stream, not with SETTINGS and streams it reset', async (t) => {
  const s = await H.proxiedUpstream(t, { protection: { knownGoodTtlMs: 600000 } });
  const ip = '127.0.4.40';
  const knownGoodMs = () => s.proxy.explain(ip).listeners[0].knownGoodMs;
  const c = await H.rawClient({ port: s.port, localAddress: ip });
  await c.write(Buffer.concat([H.PREFACE, H.settings(), H.headers(1), H.rst(1), H.ping()]));
  // The PING's ACK comes back from the upstream: everything before it went both ways.
  await h.waitFor(() => c.frames.some((f) => f.type === H.T.PING && f.flags & H.F.ACK), { what: 'the PING ACK' });
  assert.equal(s.up.frames.RST_STREAM, 1);
  assert.ok(c.settings.length >= 2, 'Rampart’s and the upstream’s SETTINGS reached the client');
  assert.equal(knownGoodMs(), null);
  // Stream 3 is answered: the mark follows.
  await c.write(H.headers(3));
  await h.waitFor(() => c.frames.some((f) => f.type === H.T.HEADERS && f.stream === 3), { what: 'the answer on stream 3' });
  await h.waitFor(() => knownGoodMs() !== null, { what: 'the known-good mark' });
  // The mark ends on a whole second, rounded up.
  assert.ok(knownGoodMs() > 590000 && knownGoodMs() <= 601000, String(knownGoodMs()));
});
