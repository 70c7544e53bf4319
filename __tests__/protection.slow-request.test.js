'use strict';
// slowRequest: on a route that carries HTTP, the first request head must arrive within
// headTimeoutMs of the TLS handshake; the upstream is connected only after it.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

const HEAD_MS = 500;

async function httpProxy(t, { protection = { slowRequest: { headTimeoutMs: HEAD_MS } }, route = { protocol: 'http' } } = {}) {
  const up = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(), protection }],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }], ...route }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(up);
  });
  return { proxy, port, up, events };
}

/** Connects, then sends `first` and one `drip` chunk every `everyMs`; resolves { closedAfterMs } from the handshake. */
function trickle(port, { src, first, drip = 'X-Slow: 1\r\n', everyMs = 100, alpn } = {}) {
  return new Promise((resolve, reject) => {
    const c = tls.connect({ port, host: '127.0.0.1', localAddress: src, servername: 'x', rejectUnauthorized: false, ALPNProtocols: alpn });
    let start;
    let timer;
    c.once('secureConnect', () => {
      start = Date.now();
      c.write(first);
      timer = setInterval(() => c.write(drip), everyMs);
    });
    c.on('error', () => {});
    c.once('close', () => {
      clearInterval(timer);
      if (start === undefined) reject(new Error('closed before the handshake'));
      else resolve({ closedAfterMs: Date.now() - start });
    });
    setTimeout(() => c.destroy(), 5000);
  });
}

test('a post-handshake trickle is closed at the deadline while the upstream never saw a connection', async (t) => {
  const p = await httpProxy(t);
  const { closedAfterMs } = await trickle(p.port, { src: '127.0.12.1', first: 'GET / HTTP/1.1\r\nHost: x\r\n' });
  assert.ok(closedAfterMs >= HEAD_MS - 20 && closedAfterMs < HEAD_MS + 400, `closed after ${closedAfterMs} ms`);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason, p.events[0].observed], ['127.0.12.1', 'slow_request', false]);
  assert.equal(p.up.captured.length, 0);
  const m = p.proxy.metrics().listeners[0];
  assert.equal(m.blockedByReason.slow_request, 1);
  assert.equal(m.activeConnections, 0);
  assert.equal(p.proxy.metrics().activeConnections, 0);
});

test('a complete head is buffered, then the upstream is connected and receives it first', async (t) => {
  const p = await httpProxy(t);
  const head = 'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n';
  const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.12.2', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  // Split in three writes with pauses: not before the last one does an upstream connection exist.
  c.write(head.slice(0, 10));
  await new Promise((r) => setTimeout(r, 100));
  c.write(head.slice(10, 20));
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(p.up.captured.length, 0);
  c.write(`${head.slice(20)}body`);
  await h.waitFor(() => p.up.captured.length === 1 && p.up.captured[0].data.length >= head.length + 4, { what: 'head at the upstream' });
  assert.equal(p.up.captured[0].data.toString(), `${head}body`);
  c.destroy();
  assert.equal(p.events.length, 0);
});

test('HTTP/2: the preface and a first HEADERS block with END_HEADERS complete the head', async (t) => {
  const p = await httpProxy(t, { route: { http2: true } });
  const frame = (type, flags, stream, payload) => {
    const b = Buffer.alloc(9 + payload.length);
    b.writeUIntBE(payload.length, 0, 3);
    b[3] = type;
    b[4] = flags;
    b.writeUInt32BE(stream, 5);
    payload.copy(b, 9);
    return b;
  };
  const preface = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  const settings = frame(0x4, 0, 0, Buffer.alloc(0));
  const headers = frame(0x1, 0x4 | 0x1, 1, Buffer.from([0x82, 0x86, 0x84]));
  // The preface and SETTINGS alone, trickled: closed at the deadline.
  const slow = await trickle(p.port, {
    src: '127.0.12.3',
    first: Buffer.concat([preface, settings]),
    drip: frame(0x8, 0, 0, Buffer.from([0, 0, 0, 1])),
    alpn: ['h2'],
  });
  assert.ok(slow.closedAfterMs >= HEAD_MS - 20 && slow.closedAfterMs < HEAD_MS + 400, `closed after ${slow.closedAfterMs} ms`);
  assert.equal(p.up.captured.length, 0);
  // With the HEADERS block: forwarded.
  const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.12.4', servername: 'x', rejectUnauthorized: false, ALPNProtocols: ['h2'] });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  assert.equal(c.alpnProtocol, 'h2');
  const all = Buffer.concat([preface, settings, headers]);
  c.write(all);
  await h.waitFor(() => p.up.captured.length === 1 && p.up.captured[0].data.length >= all.length, { what: 'h2 head at the upstream' });
  assert.ok(p.up.captured[0].data.equals(all));
  c.destroy();
  await h.waitFor(() => p.events.length === 1, { what: 'one blocked event' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [['127.0.12.3', 'slow_request']]
  );
});

test('observe mode reports slow_request and then connects the upstream with what arrived', async (t) => {
  const p = await httpProxy(t, { protection: { mode: 'observe', slowRequest: { headTimeoutMs: 300 } } });
  const c = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.12.5', servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  await new Promise((r) => c.once('secureConnect', r));
  c.write('GET / HTTP/1.1\r\n');
  await h.waitFor(() => p.events.length === 1, { what: 'observed event' });
  assert.deepEqual([p.events[0].reason, p.events[0].observed], ['slow_request', true]);
  await h.waitFor(() => p.up.captured.length === 1, { what: 'upstream connected' });
  // The route's requests are followed one by one: the head goes on once it is complete.
  c.write('Host: x\r\n\r\n');
  await h.waitFor(() => p.up.captured[0].data.length > 0, { what: 'the head at the upstream' });
  assert.equal(p.up.captured[0].data.toString(), 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  c.destroy();
});

test('opaque routes and listeners without protection are not held for a head', async (t) => {
  // The upstream is connected before the client sends a byte; then its bytes go at once (on an
  // HTTP route as requests, which are followed one by one).
  for (const [opts, bytes] of [
    [{ route: { protocol: 'opaque' } }, 'x'],
    [{ protection: null }, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n'],
  ]) {
    const p = await httpProxy(t, opts);
    const c = tls.connect({ port: p.port, host: '127.0.0.1', servername: 'x', rejectUnauthorized: false });
    c.on('error', () => {});
    await new Promise((r) => c.once('secureConnect', r));
    await h.waitFor(() => p.up.captured.length === 1, { what: 'upstream connected before any byte' });
    c.write(bytes);
    await h.waitFor(() => p.up.captured[0].data.toString() === bytes, { what: 'bytes forwarded at once' });
    c.destroy();
  }
});

test('bytes that are not HTTP on an HTTP route are closed as bad_request, with no upstream', async (t) => {
  const p = await httpProxy(t);
  const { closedAfterMs } = await trickle(p.port, { src: '127.0.12.6', first: '\x00\x01garbage' });
  assert.ok(closedAfterMs < HEAD_MS, `closed after ${closedAfterMs} ms`);
  await h.waitFor(() => p.proxy.metrics().listeners[0].errorsByReason.bad_request === 1, { what: 'bad_request' });
  assert.equal(p.up.captured.length, 0);
});
