'use strict';
// Protocol dispatch (README: Upstream protocols): an upstream never receives a protocol it cannot
// speak — an unmarked upstream beside an 'h2' one is the HTTP/1 worker (Symphony's split), a set
// with no marks offers h2 only with `http2: true` — and an upstream that answers in another
// protocol than the connection speaks is reported ('error' upstream_protocol_mismatch + counter)
// while the client gets a GOAWAY or a 502, never an empty reply. Real clients: curl, node:http2.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const http2 = require('node:http2');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** An origin answering `<name> <HTTP version>`; `server.versions` lists what each request spoke. */
async function origin(name, make) {
  const server = make((req, res) => {
    server.versions.push(req.httpVersion);
    res.end(`${name} ${req.httpVersion}`);
  });
  server.versions = [];
  return h.listen(server);
}

const tcp = (srv, extra = {}) => ({ kind: 'tcp', host: '127.0.0.1', port: srv.address().port, ...extra });

/** A started proxy on a fresh port with `routes` (default cert for localhost); errors collected. */
async function start(t, routes, servers) {
  const port = await h.freePort();
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }], routes, workerThreads: 1 });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const s of servers) await h.closeServer(s);
  });
  return { proxy, port, errors };
}

/** curl GET https://localhost:<port>/ with `flag`: `'<body> <http_version>'`. */
async function curl(port, flag) {
  const r = await h.run('curl', ['-sk', flag, '--resolve', `localhost:${port}:127.0.0.1`, '-w', ' %{http_version}', `https://localhost:${port}/`]);
  assert.equal(r.code, 0, r.stderr.toString());
  return r.stdout.toString();
}

test('an h2 client and an HTTP/1-only upstream set: ALPN gives it http/1.1 and it gets a real reply', async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const h1 = await origin('h1', (fn) => http.createServer(fn));
  const { proxy, port, errors } = await start(t, [{ sni: 'localhost', upstreams: [tcp(h1)], protocol: 'http' }], [h1]);
  // curl --http2 offers h2 and http/1.1: a set with no marks and no http2 offers http/1.1 only.
  assert.equal(await curl(port, '--http2'), 'h1 1.1 1.1');
  // node:http2 offers h2 alone: refused in the handshake, nothing reaches the upstream.
  const session = http2.connect(`https://127.0.0.1:${port}`, { servername: 'localhost', rejectUnauthorized: false });
  const failed = await new Promise((resolve) => session.on('error', resolve));
  assert.match(failed.message, /no application protocol/i);
  assert.deepEqual(h1.versions, ['1.1']);
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.handshake_failed === 1, { what: 'the refused handshake' });
  assert.equal(errors.filter((e) => e.code !== 'handshake_failed').length, 0);
});

test("a Symphony-shaped set: h2 goes to the 'h2' upstream only, the unmarked one gets HTTP/1.1", async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const h2c = await origin('h2c', (fn) => http2.createServer(fn));
  const h1 = await origin('h1', (fn) => http.createServer(fn));
  const { proxy, port, errors } = await start(t, [{ sni: 'localhost', http2: true, upstreams: [tcp(h1), tcp(h2c, { protocol: 'h2' })] }], [h2c, h1]);
  assert.equal(await curl(port, '--http2'), 'h2c 2.0 2');
  assert.equal(await curl(port, '--http1.1'), 'h1 1.1 1.1');
  assert.equal(await curl(port, '--http2'), 'h2c 2.0 2');
  assert.deepEqual([h2c.versions, h1.versions], [['2.0', '2.0'], ['1.1']]);
  await h.waitFor(() => proxy.metrics().routeMetrics[0].activeConnections === 0, { what: 'connections closed' });
  assert.deepEqual([proxy.metrics().routeMetrics[0].errors, errors.length], [0, 0]);
});

test('an http2: true route whose upstream speaks HTTP/1.1: GOAWAY to the client, error event and counter', async (t) => {
  const h1 = await origin('h1', (fn) => http.createServer(fn));
  const { proxy, port, errors } = await start(t, [{ sni: 'localhost', http2: true, upstreams: [tcp(h1)] }], [h1]);
  const session = http2.connect(`https://127.0.0.1:${port}`, { servername: 'localhost', rejectUnauthorized: false });
  session.on('error', () => {});
  const goaway = new Promise((resolve) => session.on('goaway', (code, last, data) => resolve({ code, last, data: data.toString() })));
  const req = session.request({ ':path': '/' });
  req.on('error', () => {});
  req.end();
  assert.deepEqual(await goaway, { code: http2.constants.NGHTTP2_INTERNAL_ERROR, last: 0, data: 'upstream not h2' });
  await h.waitFor(() => errors.length === 1, { what: "the 'error' event" });
  assert.deepEqual(errors[0], {
    code: 'upstream_protocol_mismatch',
    message: `upstream 127.0.0.1:${h1.address().port} did not answer HTTP/2 to an h2 connection (its first bytes: "HTTP/1.1 400 Bad"): it does not speak h2c; give it protocol: 'http/1.1' (h2 clients then go to 'h2' upstreams only) or take http2 off the route`,
    ip: '127.0.0.1',
    port,
    listener: `127.0.0.1:${port}`,
  });
  const m = proxy.metrics();
  assert.equal(m.listeners[0].errorsByReason.upstream_protocol_mismatch, 1);
  assert.equal(m.routeMetrics[0].errorsByReason.upstream_protocol_mismatch, 1);
  assert.ok(proxy.prometheus().includes(`rampart_errors_total{listener="127.0.0.1:${port}",reason="upstream_protocol_mismatch"} 1`));
  session.destroy();
});

test('an HTTP/1.1 request to an h2c-only upstream: 502 to the client, error event and counter', async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const h2c = await origin('h2c', (fn) => http2.createServer(fn));
  const { proxy, port, errors } = await start(t, [{ sni: 'localhost', protocol: 'http', upstreams: [tcp(h2c)] }], [h2c]);
  const r = await h.run('curl', ['-sk', '--http1.1', '--resolve', `localhost:${port}:127.0.0.1`, '-w', '%{http_code}', `https://localhost:${port}/`]);
  assert.equal(r.stdout.toString(), '502');
  await h.waitFor(() => errors.length === 1, { what: "the 'error' event" });
  const { message, ...rest } = errors[0];
  assert.deepEqual(rest, { code: 'upstream_protocol_mismatch', ip: '127.0.0.1', port, listener: `127.0.0.1:${port}` });
  // node:http2 answers an HTTP/1.1 request with its SETTINGS (an empty one) and a GOAWAY.
  const head = `upstream 127.0.0.1:${h2c.address().port} answered HTTP/2 frames to an HTTP/1.1 request (its first bytes: "\\x00\\x00\\x00\\x04\\x00\\x00\\x00\\x00\\x00`;
  assert.ok(message.startsWith(head), message);
  assert.ok(message.endsWith(`"): it speaks h2c only; give it protocol: 'h2'`), message);
  assert.equal(proxy.metrics().listeners[0].errorsByReason.upstream_protocol_mismatch, 1);
  assert.deepEqual(h2c.versions, []);
});

test("protocol 'any' keeps an upstream serving both beside an 'h2' one", async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const both = await origin('both', (fn) => http2.createServer({ allowHTTP1: false }, fn));
  const h2c = await origin('h2c', (fn) => http2.createServer(fn));
  const { proxy, port } = await start(
    t,
    [{ sni: 'localhost', balance: 'roundRobin', upstreams: [tcp(h2c, { protocol: 'h2' }), tcp(both, { protocol: 'any' })] }],
    [both, h2c]
  );
  assert.equal(await curl(port, '--http2'), 'h2c 2.0 2');
  assert.equal(await curl(port, '--http2'), 'both 2.0 2');
  const r = proxy.metrics().routeMetrics[0];
  assert.deepEqual(
    r.upstreams.map((u) => u.upstream),
    [`127.0.0.1:${h2c.address().port}`, `127.0.0.1:${both.address().port}`]
  );
});
