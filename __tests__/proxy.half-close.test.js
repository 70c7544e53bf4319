'use strict';
// Half-closed connections and the zero values of the copy loop's timeouts, with real node:tls
// clients through a terminating route to node `net` upstreams that keep their side open
// (`allowHalfOpen`). `halfCloseTimeoutMs` bounds a connection whose upstream ended while its
// client has not: each byte from the client restarts the wait, silence for it closes the
// connection (`half_close_timeout`), and `halfClosedConnections` counts it meanwhile. A client
// that ended its side first is not bounded by it: the response it waits for may be slow, and only
// `idleTimeoutMs` applies. `idleTimeoutMs: 0` is no idle timeout.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A proxy terminating TLS for `localhost` in front of `upstream` (a listening net.Server). */
async function proxyTo(t, upstream, { listener = {}, ...extra } = {}) {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']), ...listener }],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upstream.address().port }] }],
    workerThreads: 1,
    ...extra,
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(upstream);
  });
  return { proxy, port, m: () => proxy.metrics().listeners[0] };
}

/** A node:tls client that keeps its side open when the proxy ends its own; collects what it reads. */
function client(t, port) {
  const c = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', rejectUnauthorized: false, allowHalfOpen: true });
  c.received = [];
  c.on('data', (d) => c.received.push({ at: Date.now(), text: d.toString() }));
  c.on('error', () => {});
  c.ended = new Promise((resolve) => c.once('end', () => resolve(Date.now())));
  c.connected = new Promise((resolve) => c.once('secureConnect', resolve));
  t.after(() => c.destroy());
  return c;
}

/** An upstream that keeps its side open after the client's EOF (`allowHalfOpen`). */
async function upstream(onConnection) {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    onConnection(s);
  });
  return h.listen(server);
}

test("a slow response after the client's FIN: it outlives halfCloseTimeoutMs while bytes flow, and idleTimeoutMs cuts it once they stop", async (t) => {
  const CHUNKS = 8;
  let upstreamSawEnd = false;
  const up = await upstream((s) => {
    s.resume();
    s.on('end', async () => {
      upstreamSawEnd = true;
      await sleep(600); // the response starts twice halfCloseTimeoutMs after the client's FIN
      for (let i = 0; i < CHUNKS; i++) {
        s.write(`chunk${i};`);
        await sleep(150);
      }
      // ... then silence, the upstream's side still open.
    });
  });
  const { m } = await proxyTo(t, up, { halfCloseTimeoutMs: 300, listener: { idleTimeoutMs: 900 } });
  const c = client(t, m().port);
  await c.connected;
  c.end('request');
  await h.waitFor(() => upstreamSawEnd, { what: "the upstream to see the client's FIN" });
  await h.waitFor(() => c.received.length && c.received.at(-1).text.endsWith(`chunk${CHUNKS - 1};`), { timeoutMs: 5000, what: 'the whole slow response' });
  const lastAt = c.received.at(-1).at;
  assert.equal(c.received.map((r) => r.text).join(''), Array.from({ length: CHUNKS }, (_, i) => `chunk${i};`).join(''));
  assert.equal(m().halfClosedConnections, 0, "a client's FIN is not the bounded half-closed state");
  assert.equal(m().activeConnections, 1);
  const after = await h.waitFor(() => m().activeConnections === 0 && m(), { timeoutMs: 5000, what: 'the idle timeout' });
  const quiet = Date.now() - lastAt;
  assert.ok(quiet >= 850, `cut ${quiet} ms after the last byte (idleTimeoutMs 900)`);
  assert.equal(after.errorsByReason.idle_timeout, 1);
  assert.equal(after.errorsByReason.half_close_timeout, 0);
});

test("after the upstream's FIN: the client's bytes keep it open past halfCloseTimeoutMs, silence closes it; halfClosedConnections counts it", async (t) => {
  let upstreamGot = '';
  const up = await upstream((s) => {
    s.on('data', (d) => {
      upstreamGot += d.toString();
      if (upstreamGot === 'x') s.end('bye'); // answer, then end the upstream's side
    });
  });
  const { proxy, m } = await proxyTo(t, up, { halfCloseTimeoutMs: 300 });
  const c = client(t, m().port);
  await c.connected;
  c.write('x');
  await c.ended;
  assert.equal(c.received.map((r) => r.text).join(''), 'bye');
  await h.waitFor(() => m().halfClosedConnections === 1, { what: 'the half-closed gauge' });
  assert.equal(proxy.metrics().halfClosedConnections, 1);
  // 1 s of a byte every 100 ms: more than three times the bound, each byte restarting it.
  let lastByteAt;
  for (let i = 0; i < 10; i++) {
    c.write(String(i));
    lastByteAt = Date.now();
    await sleep(100);
  }
  await h.waitFor(() => upstreamGot === 'x0123456789', { what: "the client's bytes at the upstream" });
  assert.equal(m().activeConnections, 1, "the client's bytes deferred the bound");
  const after = await h.waitFor(() => m().activeConnections === 0 && m(), { what: 'the half-close bound' });
  const quiet = Date.now() - lastByteAt;
  assert.ok(quiet >= 290, `closed ${quiet} ms after the client's last byte (halfCloseTimeoutMs 300)`);
  assert.equal(after.errorsByReason.half_close_timeout, 1);
  assert.equal(after.halfClosedConnections, 0, 'the gauge comes back down');
});

test('halfCloseTimeoutMs: 0 holds a half-closed connection; idleTimeoutMs: 0 keeps an idle one', async (t) => {
  const up = await upstream((s) => {
    s.on('data', (d) => {
      if (d.toString() === 'end-please') s.end('bye');
      else s.write(d);
    });
  });
  const { proxy, m } = await proxyTo(t, up, { halfCloseTimeoutMs: 0, listener: { idleTimeoutMs: 0 } });
  // An idle connection: nothing either way for four times a short bound, then it still echoes.
  const idle = client(t, m().port);
  await idle.connected;
  await sleep(1200);
  idle.write('still-here');
  await h.waitFor(() => idle.received.map((r) => r.text).join('') === 'still-here', { what: 'the echo after 1.2 s idle' });
  // A half-closed one: the upstream ends, the client stays silent, and the connection stays.
  const half = client(t, m().port);
  await half.connected;
  half.write('end-please');
  await half.ended;
  await h.waitFor(() => m().halfClosedConnections === 1, { what: 'the half-closed gauge' });
  assert.equal(proxy.metrics().halfClosedConnections, 1);
  await sleep(1200);
  assert.equal(m().activeConnections, 2);
  assert.equal(m().errorsByReason.half_close_timeout, 0);
  assert.equal(m().errorsByReason.idle_timeout, 0);
  // The gauge as Prometheus reads it.
  assert.match(proxy.prometheus(), new RegExp(`^rampart_half_closed_connections\\{listener="127\\.0\\.0\\.1:${m().port}"\\} 1$`, 'm'));
});
