'use strict';
// What a client may not get past Rampart on a forwarding route (docs/proxy.md: "What Rampart refuses on
// forwarding routes"), one test per way around the forwarded request headers: CONNECT answered
// 2xx by an origin that keeps speaking HTTP, an `Upgrade: h2c` granted by the origin (on a
// rewriting route, and as HTTP/2 around the HTTP/2 guard, with prior-knowledge HTTP/2 beside it),
// the ACME path of a `mode: 'http'` listener, hop-by-hop names listed in `Connection` and the
// underscore variants a CGI/WSGI gateway folds into the same name. Real TLS clients (node:tls),
// and origins written here that behave like the servers named and record every byte they get.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');
const h2 = require('./helpers/h2');

const SNI = 'app.test';
const ALPN = ['http/1.1'];
const ADDED_XFF = 'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: https\r\n';
const REFUSED_405 = 'HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain\r\nContent-Length: 23\r\nConnection: close\r\n\r\n405 Method Not Allowed\n';

/**
 * A Go-like origin (net/http, an `http.ServeMux` with a `/` handler): every request head it
 * receives, whatever its method (CONNECT included), is answered `200 OK` with the head as
 * received for body, and the connection goes on speaking HTTP (closed after a head with
 * `Connection: close`). With `grantH2c` a head carrying `Upgrade: h2c` is answered
 * `101 Switching Protocols` instead (Apache with `Protocols h2c http/1.1`), and every later byte
 * is only recorded. `server.conns[i]`: `{ heads: string[], bytes: Buffer (all received),
 * switched, closed }`.
 */
async function goLikeOrigin({ grantH2c = false } = {}) {
  const conns = [];
  const server = net.createServer((s) => {
    const c = { heads: [], bytes: Buffer.alloc(0), switched: false, closed: false };
    conns.push(c);
    let pending = Buffer.alloc(0);
    s.on('data', (d) => {
      c.bytes = Buffer.concat([c.bytes, d]);
      if (c.switched) return;
      pending = Buffer.concat([pending, d]);
      for (let at = pending.indexOf('\r\n\r\n'); at >= 0 && !c.switched; at = pending.indexOf('\r\n\r\n')) {
        const head = pending.subarray(0, at + 4).toString('latin1');
        pending = pending.subarray(at + 4);
        c.heads.push(head);
        if (grantH2c && /^upgrade:[ \t]*h2c[ \t]*$/im.test(head)) {
          c.switched = true;
          s.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n');
        } else {
          s.write(`HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(head, 'latin1')}\r\n\r\n${head}`, 'latin1');
          if (/^connection:.*\bclose\b/im.test(head)) s.end();
        }
      }
    });
    s.on('error', () => {});
    s.on('close', () => (c.closed = true));
  });
  server.conns = conns;
  return h.listen(server);
}

/** A started proxy: one TLS listener (merged with `listener`), one route to `origin` (merged with `route`). */
async function proxyFor(t, origin, route, listener = {}) {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned([SNI]), ...listener }],
    routes: [{ sni: SNI, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: origin.address().port }], ...route }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(origin);
  });
  const routeMetrics = () => proxy.metrics().routeMetrics.find((r) => r.route === SNI);
  return { port, proxy, routeMetrics };
}

/** A TLS client (ALPN `alpn`): `down` holds every byte it received, `closed` once the socket closed. */
async function client(port, alpn = ALPN) {
  const s = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols: alpn });
  const c = { socket: s, down: '', closed: false };
  s.setEncoding('latin1');
  s.on('data', (d) => (c.down += d));
  s.on('error', () => {});
  s.on('close', () => (c.closed = true));
  await new Promise((r) => s.once('secureConnect', r));
  return c;
}

/** The complete `Content-Length` framed responses in `down`, as `{ head, body }`. */
function responses(down) {
  const out = [];
  for (let rest = down; ; ) {
    const at = rest.indexOf('\r\n\r\n');
    if (at < 0) return out;
    const head = rest.slice(0, at + 4);
    const len = /^content-length:\s*(\d+)/im.exec(head);
    const end = at + 4 + (len ? Number(len[1]) : 0);
    if (rest.length < end) return out;
    out.push({ head, body: rest.slice(at + 4, end) });
    rest = rest.slice(end);
  }
}

/** JA3/JA4 of this file's client's ClientHello, as Rampart computes them. */
function clientFingerprints(alpn = ALPN) {
  return h.fingerprintOf(async (port) => {
    const c = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols: alpn });
    c.on('error', () => {});
    await new Promise((r) => c.once('close', r));
  });
}

test('1. CONNECT on a rewriting route is answered 405 by Rampart and closed; the origin gets nothing, the GET behind it never goes unrewritten', async (t) => {
  const origin = await goLikeOrigin();
  const { port, routeMetrics } = await proxyFor(t, origin, { sourceAddressHeader: 'xForwardedFor', forwardFingerprint: 'ja4' });
  const c = await client(port);
  c.socket.write(`CONNECT / HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`);
  await h.waitFor(() => responses(c.down).length === 1, { what: 'an answer to the CONNECT' });
  assert.equal(c.down, REFUSED_405);
  // The next request of the finding: never forwarded as it is (nor at all: the connection ends).
  c.socket.write(`GET / HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\nX-JA4: spoofed\r\n\r\n`);
  await h.waitFor(() => c.closed, { what: 'the connection closed by Rampart' });
  assert.equal(c.down, REFUSED_405);
  await h.waitFor(() => origin.conns.length === 1 && origin.conns[0].closed, { what: 'the upstream connection closed' });
  assert.equal(origin.conns[0].bytes.length, 0);
  await h.waitFor(() => routeMetrics().errorsByReason.bad_request === 1, { what: 'bad_request counted' });
});

test('1b. tunnels: { connect: true } lets CONNECT through: after the 2xx the connection is a byte copy', async (t) => {
  const origin = await goLikeOrigin();
  const { port } = await proxyFor(t, origin, { sourceAddressHeader: 'xForwardedFor', tunnels: { connect: true } });
  const c = await client(port);
  const connect = `CONNECT ${SNI}:443 HTTP/1.1\r\nHost: ${SNI}:443\r\n\r\n`;
  c.socket.write(connect);
  await h.waitFor(() => responses(c.down).length === 1, { what: 'the 200 to CONNECT' });
  const raw = `GET / HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n`;
  c.socket.write(raw);
  const want = `CONNECT ${SNI}:443 HTTP/1.1\r\nHost: ${SNI}:443\r\n${ADDED_XFF}\r\n${raw}`;
  await h.waitFor(() => origin.conns[0].bytes.length >= want.length, { what: 'the tunnel bytes at the origin' });
  assert.equal(origin.conns[0].bytes.toString('latin1'), want);
  c.socket.destroy();
});

test('2. Upgrade: h2c on a rewriting route is declined: the origin never sees it, and the next request is rewritten', async (t) => {
  const fp = await clientFingerprints();
  const origin = await goLikeOrigin({ grantH2c: true });
  const { port } = await proxyFor(t, origin, { sourceAddressHeader: 'xForwardedFor', forwardFingerprint: 'ja4' });
  const c = await client(port);
  c.socket.write(`GET / HTTP/1.1\r\nHost: ${SNI}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`);
  await h.waitFor(() => responses(c.down).length === 1, { what: 'the answer to the upgrade request' });
  const added = `${ADDED_XFF}X-JA4: ${fp.ja4}\r\n`;
  const first = `GET / HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\n`;
  assert.deepEqual(origin.conns[0].heads, [first]);
  assert.equal(responses(c.down)[0].head.split('\r\n')[0], 'HTTP/1.1 200 OK');
  c.socket.write(`GET /next HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\nX-JA4: spoofed\r\n\r\n`);
  await h.waitFor(() => origin.conns[0].heads.length === 2, { what: 'the next request at the origin' });
  assert.deepEqual(origin.conns[0].heads, [first, `GET /next HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\n`]);
  assert.equal(origin.conns[0].switched, false);
  c.socket.destroy();
});

test('3. on an http2: true route HTTP/2 never reaches the upstream past the guard: h2c is declined, an HTTP/2 preface on an HTTP/1.1 connection is refused', async (t) => {
  const origin = await goLikeOrigin({ grantH2c: true });
  const { port, proxy, routeMetrics } = await proxyFor(t, origin, { http2: true });
  const frames = [h2.PREFACE, h2.settings()];
  for (let i = 0; i < 101; i++) frames.push(h2.headers(2 * i + 1), h2.rst(2 * i + 1));
  const flood = Buffer.concat(frames);

  // The upgrade: declined, so the origin answers HTTP/1.1; frames sent anyway are refused.
  const a = await client(port);
  assert.equal(a.socket.alpnProtocol, 'http/1.1');
  a.socket.write(`GET / HTTP/1.1\r\nHost: ${SNI}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`);
  await h.waitFor(() => responses(a.down).length === 1, { what: 'the answer to the upgrade request' });
  const first = `GET / HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`;
  assert.deepEqual(origin.conns[0].heads, [first]);
  assert.equal(a.down.split('\r\n')[0], 'HTTP/1.1 200 OK');
  a.socket.write(flood);
  await h.waitFor(() => a.closed, { what: 'the connection closed' });
  await h.waitFor(() => origin.conns[0].closed, { what: 'the upstream connection closed' });
  assert.equal(origin.conns[0].bytes.toString('latin1'), first);
  // Counted once the connection's sockets are gone: polled.
  await h.waitFor(() => routeMetrics().errorsByReason.bad_request === 1, { what: 'bad_request counted' });

  // Prior knowledge on a connection that negotiated http/1.1: refused, nothing reaches the origin.
  const b = await client(port);
  assert.equal(b.socket.alpnProtocol, 'http/1.1');
  b.socket.write(flood);
  await h.waitFor(() => b.closed, { what: 'the prior-knowledge connection closed' });
  await h.waitFor(() => origin.conns.length === 2 && origin.conns[1].closed, { what: 'its upstream connection closed' });
  assert.equal(origin.conns[1].bytes.length, 0);
  assert.equal(b.down, '');
  await h.waitFor(() => routeMetrics().errorsByReason.bad_request === 2 && proxy.metrics().listeners[0].errorsByReason.bad_request === 2, {
    what: 'the second bad_request counted on the route and the listener',
  });
});

test("4. the ACME path of a mode: 'http' listener forwards no client X-Forwarded-For / X-JA4 (any spelling), and a query never satisfies the challenge prefix", async (t) => {
  const origin = await goLikeOrigin();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, mode: 'http' }],
    routes: [
      {
        sni: SNI,
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: origin.address().port }],
        sourceAddressHeader: 'xForwardedFor',
        forwardFingerprint: 'ja4',
      },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(origin);
  });
  const plain = async (request) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    const c = { down: '', closed: false };
    s.setEncoding('latin1');
    s.on('data', (d) => (c.down += d));
    s.on('error', () => {});
    s.on('close', () => (c.closed = true));
    s.write(request);
    await h.waitFor(() => responses(c.down).length === 1, { what: `an answer to ${JSON.stringify(request.split('\r\n')[0])}` });
    s.destroy();
    return responses(c.down)[0];
  };

  const challenge = await plain(
    `GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\nX-JA4: spoofed\r\nx_ja4: spoofed\r\nConnection: keep-alive, X-Forwarded-For\r\n\r\n`
  );
  const want = `GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: ${SNI}\r\nConnection: close\r\n\r\n`;
  assert.deepEqual(
    origin.conns.map((c) => c.heads),
    [[want]]
  );
  assert.equal(challenge.head.split('\r\n')[0], 'HTTP/1.1 200 OK');
  assert.equal(challenge.body, want);

  // absolute-form whose query holds the prefix: redirected by Rampart, never proxied.
  const query = await plain(`GET http://${SNI}?/.well-known/acme-challenge/t HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`);
  assert.equal(query.head.split('\r\n')[0], 'HTTP/1.1 301 Moved Permanently');
  assert.match(query.head, /\r\nLocation: https:\/\/app\.test\/\?\/\.well-known\/acme-challenge\/t\r\n/);
  assert.equal(origin.conns.length, 1);
});

test("5. names listed in Connection never remove Rampart's headers, and underscore variants of them are removed", async (t) => {
  const fp = await clientFingerprints();
  const origin = await goLikeOrigin();
  const { port } = await proxyFor(t, origin, { sourceAddressHeader: 'xForwardedFor', forwardFingerprint: 'ja4' });
  const c = await client(port);
  c.socket.write(
    `GET /1 HTTP/1.1\r\nHost: ${SNI}\r\nConnection: keep-alive, X-Forwarded-For, X-JA4\r\nX_Forwarded_For: 6.6.6.6\r\nX_JA4: spoofed\r\nx-forwarded_for: 5.5.5.5\r\n\r\n` +
      `GET /2 HTTP/1.1\r\nHost: ${SNI}\r\nConnection: x_forwarded_proto,X-JA3\r\nX-Forwarded_Proto: http\r\n\r\n`
  );
  await h.waitFor(() => origin.conns.length === 1 && origin.conns[0].heads.length === 2, { what: 'two requests at the origin' });
  const added = `${ADDED_XFF}X-JA4: ${fp.ja4}\r\n`;
  assert.deepEqual(origin.conns[0].heads, [
    `GET /1 HTTP/1.1\r\nHost: ${SNI}\r\nConnection: keep-alive\r\n${added}\r\n`,
    `GET /2 HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\n`,
  ]);
  c.socket.destroy();
});

test("5b. a chunked body's trailer section loses client copies of the forwarded fields, in any spelling", async (t) => {
  const origin = await goLikeOrigin();
  const { port } = await proxyFor(t, origin, { sourceAddressHeader: 'xForwardedFor', forwardFingerprint: 'ja4' });
  const c = await client(port);
  const post = `POST / HTTP/1.1\r\nHost: ${SNI}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Forwarded-For, X-JA4\r\n\r\n`;
  c.socket.write(
    `${post}3\r\nabc\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nx_ja4: spoofed\r\nExpires: 0\r\nX-Forwarded-Proto: http\r\n\r\nGET /next HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`
  );
  await h.waitFor(() => origin.conns.length === 1 && origin.conns[0].bytes.includes('GET /next'), { what: 'both requests at the origin' });
  const seen = origin.conns[0].bytes.toString('latin1');
  assert.equal(seen.includes('6.6.6.6'), false, seen);
  assert.equal(seen.includes('spoofed'), false, seen);
  assert.equal(seen.includes('X-Forwarded-Proto: http\r\n'), false, seen);
  assert.equal(seen.includes('\r\n3\r\nabc\r\n0\r\nExpires: 0\r\n\r\nGET /next HTTP/1.1\r\n'), true, seen);
  c.socket.destroy();
});

test('tunnels is validated: tokens, h2c, and routes whose bytes are not followed', () => {
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const errs = h.errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ port: 9, defaultCert: h.selfSigned(['localhost']) }],
        routes: [
          { sni: 'a.test', upstreams: up, protocol: 'http', tunnels: { upgrade: ['websocket', 'h2c'] } },
          { sni: 'b.test', upstreams: up, protocol: 'http', tunnels: { upgrade: ['web socket', 'WebSocket', 'websocket'], connect: 'yes' } },
          { sni: 'c.test', upstreams: up, tunnels: { connect: true } },
          { sni: 'd.test', upstreams: up, terminateTls: false, protocol: 'http', tunnels: {} },
          { sni: 'e.test', upstreams: up, protocol: 'http', tunnels: { upgrades: [] } },
          { sni: 'f.test', upstreams: up, protocol: 'http', tunnels: { upgrade: [], connect: false } },
        ],
      })
  );
  assert.deepEqual(errs, [
    { path: 'routes[0].tunnels.upgrade[1]', message: 'h2c is never a tunnel: HTTP/2 reaches an upstream only over ALPN h2, through the HTTP/2 guard' },
    { path: 'routes[1].tunnels.upgrade[0]', message: 'must be an HTTP token (RFC 9110 §5.6.2), got "web socket"' },
    { path: 'routes[1].tunnels.upgrade[2]', message: 'repeats an earlier entry' },
    { path: 'routes[1].tunnels.connect', message: 'must be a boolean, got "yes"' },
    { path: 'routes[2].tunnels', message: "needs protocol: 'http' (only an HTTP route's requests are followed)" },
    { path: 'routes[3].tunnels', message: 'needs terminateTls: true (the bytes of a passthrough route are encrypted)' },
    { path: 'routes[4].tunnels.upgrades', message: 'unknown field; expected one of: upgrade, connect' },
  ]);
});
