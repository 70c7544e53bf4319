'use strict';
// Symphony drop-in, socket behaviour (docs/config.md: tcpKeepalive, halfCloseTimeoutMs, readBufferSize; docs/proxy.md: "Coming from Symphony"):
// tcpKeepalive as the kernel reports it (`ss -tnoi`), halfCloseTimeoutMs closing a half-closed
// pair on time, and the copy buffer sizes (a 1 MiB transfer byte-exact with 600-byte buffers).
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const crypto = require('node:crypto');
const { RampartProxy } = require('..');
const h = require('./helpers');

const { errorsOf } = h;

async function proxyTo(upstreamPort, extra = {}) {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upstreamPort }] }],
    workerThreads: 1,
    ...extra,
  });
  await proxy.start();
  return { proxy, port };
}

/**
 * The keepalive timers (seconds left) of established sockets matching the `ss` filter. ss prints
 * a timer as `4min59sec`, `12sec`, `6.784ms` (6 s 784 ms) or `784ms`.
 */
async function keepaliveTimers(filter) {
  const r = await h.run('ss', ['-tnoiH', 'state', 'established', filter]);
  assert.equal(r.code, 0, r.stderr.toString());
  return [...r.stdout.toString().matchAll(/timer:\(keepalive,([^,]+),\d+\)/g)].map(([, text]) => {
    const m = /^(?:(\d+)min)?(?:(\d+)(?:sec|\.))?(?:(\d+)ms)?$/.exec(text);
    assert.ok(m, `unparsed ss timer ${text}`);
    return Number(m[1] || 0) * 60 + Number(m[2] || 0) + Number(m[3] || 0) / 1000;
  });
}

/** A TLS client through the proxy that has done one round trip and stays open. */
async function openClient(port) {
  const s = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', rejectUnauthorized: false });
  await new Promise((resolve, reject) => {
    s.once('secureConnect', () => s.write('hi'));
    s.once('data', resolve);
    s.once('error', reject);
  });
  return s;
}

test('the socket fields are validated, every offending field named at once (no clamping)', () => {
  const errs = errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ port: 9 }],
        routes: [{ sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
        tcpKeepalive: { enabled: 1, idleMs: 1500, intervalMs: 0, retries: 200, probes: 3 },
        halfCloseTimeoutMs: NaN,
        readBufferSize: 511,
        clientReadBufferSize: 1048577,
        upstreamReadBufferSize: 1024.5,
      })
  );
  assert.deepEqual(errs, [
    { path: 'tcpKeepalive.probes', message: 'unknown field; expected one of: enabled, idleMs, intervalMs, retries' },
    { path: 'tcpKeepalive.enabled', message: 'must be a boolean, got 1' },
    {
      path: 'tcpKeepalive.idleMs',
      message: 'must be a whole number of seconds (a multiple of 1000 ms: the kernel counts keepalive time in seconds), got 1500',
    },
    { path: 'tcpKeepalive.intervalMs', message: 'must be an integer in [1000, 32767000], got 0' },
    { path: 'tcpKeepalive.retries', message: 'must be an integer in [1, 127], got 200' },
    { path: 'halfCloseTimeoutMs', message: 'must be an integer in [0, 2^53-1], got NaN' },
    { path: 'readBufferSize', message: 'must be an integer in [512, 1048576], got 511' },
    { path: 'clientReadBufferSize', message: 'must be an integer in [512, 1048576], got 1048577' },
    { path: 'upstreamReadBufferSize', message: 'must be an integer in [512, 1048576], got 1024.5' },
  ]);
});

test('tcpKeepalive: the kernel runs the keepalive timer on client and upstream sockets', async (t) => {
  if (!h.needTool(t, 'ss', 'apt-get install iproute2')) return;
  const echo = await h.echoServer();
  const up = echo.address().port;
  const { proxy, port } = await proxyTo(up, { tcpKeepalive: { idleMs: 7000, intervalMs: 2000, retries: 3 } });
  const { proxy: dflt, port: port2 } = await proxyTo(up);
  const { proxy: off, port: port3 } = await proxyTo(up, { tcpKeepalive: { enabled: false } });
  const clients = [];
  t.after(async () => {
    for (const c of clients) c.destroy();
    await proxy.stop();
    await dflt.stop();
    await off.stop();
    await h.closeServer(echo);
  });
  clients.push(await openClient(port), await openClient(port2), await openClient(port3));
  // The proxy's client socket (source port = the listener) and its upstream socket (the one
  // whose peer is the echo port and whose local side is not the echo server).
  const client7 = await keepaliveTimers(`( sport = :${port} )`);
  assert.equal(client7.length, 1, `one keepalive timer on the client socket, got ${client7}`);
  assert.ok(client7[0] > 4 && client7[0] <= 7, `idle 7 s, got ${client7[0]} s left`);
  const clientDefault = await keepaliveTimers(`( sport = :${port2} )`);
  assert.equal(clientDefault.length, 1);
  assert.ok(clientDefault[0] > 290 && clientDefault[0] <= 300, `default idle 300 s, got ${clientDefault[0]}`);
  assert.deepEqual(await keepaliveTimers(`( sport = :${port3} )`), [], 'enabled: false sets no timer');
  // Upstream sockets: all three proxies connect to the echo port; 7 s and 300 s timers, not a third.
  const upstream = (await keepaliveTimers(`( dport = :${up} )`)).sort((a, b) => a - b);
  assert.equal(upstream.length, 2, `keepalive on two upstream sockets, got ${upstream}`);
  assert.ok(upstream[0] > 4 && upstream[0] <= 7 && upstream[1] > 290, `got ${upstream}`);
});

test('halfCloseTimeoutMs: once the upstream ended, a client silent for it is closed, counted half_close_timeout', async (t) => {
  // An upstream that answers and ends its side; the client keeps its own side open, silent.
  const upstream = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.once('data', () => s.end('ok'));
  });
  await h.listen(upstream);
  const { proxy, port } = await proxyTo(upstream.address().port, { halfCloseTimeoutMs: 400 });
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(upstream);
  });
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', rejectUnauthorized: false, allowHalfOpen: true });
  c.on('error', () => {});
  c.on('data', () => {});
  t.after(() => c.destroy());
  const ended = new Promise((resolve) => c.once('end', () => resolve(Date.now())));
  c.once('secureConnect', () => c.write('x'));
  const endedAt = await ended; // the upstream's EOF, passed on
  // The client learns nothing more (its peer had already sent its FIN): the proxy's count does.
  const m = await h.waitFor(() => {
    const l = proxy.metrics().listeners[0];
    return l.activeConnections === 0 && l;
  });
  const took = Date.now() - endedAt;
  assert.ok(took >= 380 && took < 2500, `closed ${took} ms after the upstream ended (limit 400 ms)`);
  assert.equal(m.errorsByReason.half_close_timeout, 1);
  assert.equal(m.errorsByReason.idle_timeout, 0);
  assert.equal(m.halfClosedConnections, 0, 'the gauge is back down');
});

test('readBufferSize 600: a 1 MiB transfer each way is byte-exact', async (t) => {
  const echo = await h.echoServer();
  const { proxy, port } = await proxyTo(echo.address().port, { readBufferSize: 600 });
  const { proxy: p2, port: port2 } = await proxyTo(echo.address().port, { clientReadBufferSize: 600, upstreamReadBufferSize: 1048576 });
  t.after(async () => {
    await proxy.stop();
    await p2.stop();
    await h.closeServer(echo);
  });
  const payload = crypto.randomBytes(1024 * 1024);
  for (const p of [port, port2]) {
    const r = await h.tlsRoundTrip({ port: p, servername: 'localhost', payload, timeoutMs: 20000 });
    assert.equal(r.data.length, payload.length);
    assert.equal(h.sha256(r.data), h.sha256(payload));
  }
  const l = await h.waitFor(() => {
    const x = proxy.metrics().listeners[0];
    return x.activeConnections === 0 && x;
  });
  assert.equal(l.bytesReceived, payload.length);
  assert.equal(l.bytesSent, payload.length);
});
