'use strict';
// Symphony drop-in, the ALPN split (docs/proxy.md: "Upstream protocols"): upstreams marked `protocol:
// 'h2'` / `'http/1.1'` behind one route; each real client lands on an upstream that speaks the
// protocol it negotiated (node:http2 → h2, node:https with ALPN http/1.1 → http/1.1, no ALPN →
// http/1.1, curl --http2 / --http1.1), terminated and passthrough; a client no upstream speaks
// for is closed as `no_upstream_for_alpn`. Route and listener counts are exact. Harper's shape on
// SymphonyProxy: UDS workers behind PROXY v1, the h2 one marked, real HTTP/2 and HTTP/1.1 servers.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const https = require('node:https');
const http2 = require('node:http2');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { RampartProxy, SymphonyProxy } = require('..');
const h = require('./helpers');

/** An origin answering `<name> <HTTP version>`; `server.conns` counts its connections / h2 sessions. */
async function origin(name, make) {
  const server = make((req, res) => res.end(`${name} ${req.httpVersion}`));
  server.conns = 0;
  server.on(server instanceof http.Server || server instanceof https.Server ? 'connection' : 'session', () => server.conns++);
  return h.listen(server);
}

/**
 * A Harper worker socket: a Unix socket that takes the PROXY v1 line off each connection
 * (recorded in `worker.proxyLines`) and relays the rest to `app` (a listening node:http or
 * node:http2 server), a connection of its own per client connection.
 */
async function udsWorker(app) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-alpn-')), 'worker.sock');
  const server = net.createServer((s) => {
    let buf = Buffer.alloc(0);
    s.on('error', () => {});
    const onData = (d) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n');
      if (end < 0) return;
      s.off('data', onData);
      server.proxyLines.push(buf.subarray(0, end + 2).toString('latin1'));
      const to = net.connect(app.address().port, '127.0.0.1');
      to.on('error', () => s.destroy());
      to.write(buf.subarray(end + 2));
      s.pipe(to).pipe(s);
    };
    s.on('data', onData);
  });
  server.proxyLines = [];
  server.path = file;
  await new Promise((r) => server.listen(file, r));
  return server;
}

/** GET / with node:http2 (ALPN h2 only) over its own session: `{ body, alpn }`. */
function h2Get(port, servername) {
  return h2GetFrom(port, servername).then(({ body, alpn }) => ({ body, alpn }));
}

/** h2Get, also resolving the client's `localPort`. */
function h2GetFrom(port, servername) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { servername, rejectUnauthorized: false });
    session.on('error', reject);
    const req = session.request({ ':path': '/' });
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d) => (body += d));
    req.on('error', reject);
    req.on('end', () => {
      const alpn = session.alpnProtocol;
      const localPort = session.socket.localPort;
      session.close();
      resolve({ body, alpn, localPort });
    });
    req.end();
  });
}

/** GET / with node:https on a new connection, offering `ALPNProtocols` (none when undefined): `{ body, alpn }`. */
function httpsGet(port, servername, ALPNProtocols) {
  return httpsGetFrom(port, servername, ALPNProtocols).then(({ body, alpn }) => ({ body, alpn }));
}

/** httpsGet, also resolving the client's `localPort`. */
function httpsGetFrom(port, servername, ALPNProtocols) {
  return new Promise((resolve, reject) => {
    const opts = { host: '127.0.0.1', port, servername, path: '/', rejectUnauthorized: false, agent: false, ALPNProtocols };
    const req = https.get(opts, (res) => {
      const { alpnProtocol: alpn, localPort } = res.socket;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ body, alpn, localPort }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

test('ALPN split: each client goes to an upstream that speaks the protocol it negotiated', async (t) => {
  const cert = h.selfSigned(['localhost', 'h2only.test', 'pt.test']);
  // Cleartext origins behind the terminating routes: h2c (prior knowledge) and HTTP/1.1.
  const h2c = await origin('h2c', (fn) => http2.createServer(fn));
  const h1 = await origin('h1', (fn) => http.createServer(fn));
  // TLS origins behind the passthrough route: they negotiate ALPN with the client themselves.
  const h2s = await origin('h2s', (fn) => http2.createSecureServer({ key: cert.privateKey, cert: cert.certChain }, fn));
  const h1s = await origin('h1s', (fn) => https.createServer({ key: cert.privateKey, cert: cert.certChain }, fn));
  const tcp = (srv, protocol) => ({ kind: 'tcp', host: '127.0.0.1', port: srv.address().port, protocol });
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: cert }],
    routes: [
      { sni: 'localhost', upstreams: [tcp(h2c, 'h2'), tcp(h1, 'http/1.1')] },
      { sni: 'h2only.test', upstreams: [tcp(h2c, 'h2')] },
      { sni: 'pt.test', terminateTls: false, upstreams: [tcp(h1s, 'http/1.1'), tcp(h2s, 'h2')] },
    ],
    workerThreads: 1,
  });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const s of [h2c, h1, h2s, h1s]) await h.closeServer(s);
  });
  const route = (name) => proxy.metrics().routeMetrics.find((r) => r.route === name);

  await t.test('terminated: node:http2 lands on the h2 upstream, node:https on the http/1.1 one', async () => {
    for (let i = 0; i < 2; i++) assert.deepEqual(await h2Get(port, 'localhost'), { body: 'h2c 2.0', alpn: 'h2' });
    assert.deepEqual(await httpsGet(port, 'localhost', ['http/1.1']), { body: 'h1 1.1', alpn: 'http/1.1' });
    // No ALPN at all is HTTP/1.1.
    assert.deepEqual(await httpsGet(port, 'localhost', undefined), { body: 'h1 1.1', alpn: false });
    assert.equal(h2c.conns, 2);
    assert.equal(h1.conns, 2);
  });

  await t.test('a set of h2 upstreams: HTTP/1.1 and no-ALPN clients reach none', async () => {
    assert.deepEqual(await h2Get(port, 'h2only.test'), { body: 'h2c 2.0', alpn: 'h2' });
    // The route offers h2 only: an http/1.1-only client fails the handshake (no_application_protocol).
    const e1 = await httpsGet(port, 'h2only.test', ['http/1.1']).then(
      () => null,
      (e) => e
    );
    assert.ok(e1 && /no application protocol/i.test(e1.message), String(e1));
    // Without ALPN the handshake completes, and the connection is closed before any upstream.
    const e2 = await httpsGet(port, 'h2only.test', undefined).then(
      () => null,
      (e) => e
    );
    assert.ok(e2 && e2.code === 'ECONNRESET', String(e2 && e2.code));
    await h.waitFor(() => route('h2only.test').errorsByReason.no_upstream_for_alpn === 1, { what: 'no_upstream_for_alpn' });
    assert.equal(h2c.conns, 3);
    assert.equal(h1.conns, 2);
  });

  await t.test("passthrough: the ClientHello's ALPN list picks the upstream", async () => {
    assert.deepEqual(await h2Get(port, 'pt.test'), { body: 'h2s 2.0', alpn: 'h2' });
    assert.deepEqual(await httpsGet(port, 'pt.test', ['http/1.1']), { body: 'h1s 1.1', alpn: 'http/1.1' });
    assert.deepEqual(await httpsGet(port, 'pt.test', undefined), { body: 'h1s 1.1', alpn: false });
    assert.equal(h2s.conns, 1);
    assert.equal(h1s.conns, 2);
  });

  await t.test('metrics: exact per-route counts', async () => {
    const zero = Object.fromEntries(Object.keys(route('localhost').errorsByReason).map((k) => [k, 0]));
    await h.waitFor(() => proxy.metrics().routeMetrics.every((r) => r.activeConnections === 0), { what: 'every connection closed' });
    const pick = ({ route: r, connections, errors: n, errorsByReason }) => ({ route: r, connections, errors: n, errorsByReason });
    assert.deepEqual(proxy.metrics().routeMetrics.map(pick), [
      { route: 'localhost', connections: 4, errors: 0, errorsByReason: zero },
      { route: 'h2only.test', connections: 3, errors: 2, errorsByReason: { ...zero, handshake_failed: 1, no_upstream_for_alpn: 1 } },
      { route: 'pt.test', connections: 3, errors: 0, errorsByReason: zero },
    ]);
    const l = proxy.metrics().listeners[0];
    assert.equal(l.errorsByReason.no_upstream_for_alpn, 1);
    assert.equal(l.errorsByReason.handshake_failed, 1);
    // The refusal is counted, not an 'error' event; the failed handshake is one.
    assert.deepEqual(
      errors.map((e) => e.code),
      ['handshake_failed']
    );
  });
});

test('ALPN split with curl: --http2 (offers h2 and http/1.1) gets h2, --http1.1 gets HTTP/1.1', async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const h2c = await origin('h2c', (fn) => http2.createServer(fn));
  const h1 = await origin('h1', (fn) => http.createServer(fn));
  const tcp = (srv, protocol) => ({ kind: 'tcp', host: '127.0.0.1', port: srv.address().port, protocol });
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: 'localhost', upstreams: [tcp(h1, 'http/1.1'), tcp(h2c, 'h2')] }],
    workerThreads: 1,
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const s of [h2c, h1]) await h.closeServer(s);
  });
  const curl = async (flag) => {
    const r = await h.run('curl', ['-sk', flag, '--resolve', `localhost:${port}:127.0.0.1`, '-w', ' %{http_version}', `https://localhost:${port}/`]);
    assert.equal(r.code, 0, r.stderr.toString());
    return r.stdout.toString();
  };
  assert.equal(await curl('--http2'), 'h2c 2.0 2');
  assert.equal(await curl('--http1.1'), 'h1 1.1 1.1');
  assert.equal(await curl('--http2'), 'h2c 2.0 2');
  assert.deepEqual([h2c.conns, h1.conns], [2, 1]);
  await h.waitFor(() => proxy.metrics().routeMetrics[0].activeConnections === 0, { what: 'connections closed' });
  const r = proxy.metrics().routeMetrics[0];
  assert.deepEqual([r.connections, r.errors], [3, 0]);
});

test("SymphonyProxy, Harper's shape: ALPN h2 over PROXY v1 reaches the 'h2' UDS worker, HTTP/1.1 the unmarked one", async (t) => {
  // Two workers on Unix sockets, each a real server behind the PROXY v1 line: node:http2 (h2c)
  // marked protocol: 'h2', node:http unmarked. The route offers h2 (http2: true).
  const h2app = await h.listen(http2.createServer((req, res) => res.end(`h2 worker ${req.httpVersion}`)));
  const h1app = await h.listen(http.createServer((req, res) => res.end(`h1 worker ${req.httpVersion}`)));
  const h2w = await udsWorker(h2app);
  const h1w = await udsWorker(h1app);
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [
      {
        sni: 'localhost',
        terminateTls: true,
        http2: true,
        sourceAddressHeader: 'proxyProtocol',
        cert: h.selfSigned(['localhost']),
        upstreams: [
          { kind: 'uds', path: h1w.path },
          { kind: 'uds', path: h2w.path, protocol: 'h2' },
        ],
      },
    ],
  });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const s of [h2w, h1w, h2app, h1app]) await h.closeServer(s);
  });
  const line = (localPort) => `PROXY TCP4 127.0.0.1 127.0.0.1 ${localPort} ${port}\r\n`;

  const a = await h2GetFrom(port, 'localhost');
  assert.deepEqual([a.body, a.alpn], ['h2 worker 2.0', 'h2']);
  assert.deepEqual([h2w.proxyLines, h1w.proxyLines], [[line(a.localPort)], []]);

  const b = await httpsGetFrom(port, 'localhost', ['http/1.1']);
  assert.deepEqual([b.body, b.alpn], ['h1 worker 1.1', 'http/1.1']);
  const c = await httpsGetFrom(port, 'localhost', undefined);
  assert.deepEqual([c.body, c.alpn], ['h1 worker 1.1', false]);
  assert.deepEqual([h2w.proxyLines, h1w.proxyLines], [[line(a.localPort)], [line(b.localPort), line(c.localPort)]]);

  await h.waitFor(() => proxy.metrics().activeConnections === 0, { what: 'every connection closed' });
  const r = proxy.metrics().routeMetrics[0];
  assert.deepEqual([r.connections, r.errors, r.errorsByReason], [3, 0, []]);
  assert.deepEqual(errors, []);
});
