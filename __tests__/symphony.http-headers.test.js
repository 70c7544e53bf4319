'use strict';
// Symphony drop-in, forwarded request headers (docs/proxy.md: "Forwarded request headers"):
// sourceAddressHeader 'xForwardedFor' and forwardFingerprint ['ja3', 'ja4'] on an HTTP/1.1 route,
// with node:tls raw sockets against an origin that records every byte it receives: each
// pipelined request gets X-Forwarded-For / X-Forwarded-Proto / X-JA3 / X-JA4, client copies are
// removed, bodies (Content-Length, chunked) pass byte-exact, a smuggling shape is closed.
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

const SNI = 'app.test';
const ALPN = ['h2', 'http/1.1'];

/** The JA3/JA4 that `fingerprintClientHello` gives for the ClientHello this test's client sends. */
function clientFingerprints() {
  return h.fingerprintOf(async (port) => {
    const c = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols: ALPN });
    c.on('error', () => {});
    c.on('close', () => {});
    await new Promise((r) => c.once('close', r));
  });
}

async function setup(t, route = {}, listener = {}) {
  const cap = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned([SNI]), ...listener }],
    // A Symphony route: no `protocol` field (the headers make it an HTTP route); `http2: true`
    // is not offered on a rewriting route, so every request is HTTP/1.1 and gets the headers.
    routes: [
      {
        sni: SNI,
        http2: true,
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }],
        sourceAddressHeader: 'xForwardedFor',
        forwardFingerprint: ['ja3', 'ja4'],
        ...route,
      },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  return { cap, port, proxy };
}

async function connect(port) {
  const s = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols: ALPN });
  s.on('error', () => {});
  await new Promise((r) => s.once('secureConnect', r));
  return s;
}

test('three pipelined requests each get X-Forwarded-For, X-Forwarded-Proto, X-JA3, X-JA4; spoofed copies are removed', async (t) => {
  const fp = await clientFingerprints();
  const { cap, port } = await setup(t);
  const s = await connect(port);
  assert.equal(s.alpnProtocol, 'http/1.1');
  const chunked = '4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n';
  s.write(
    `GET /1 HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\nx-forwarded-proto: http\r\nX-JA3: spoofed\r\nx-ja4: spoofed\r\n\r\n` +
      `POST /2 HTTP/1.1\r\nHost: ${SNI}\r\nTransfer-Encoding: chunked\r\nX-FORWARDED-FOR: 7.7.7.7\r\n\r\n${chunked}` +
      `GET /3 HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`
  );
  const added = `X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: https\r\nX-JA3: ${fp.ja3}\r\nX-JA4: ${fp.ja4}\r\n`;
  const want =
    `GET /1 HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\n` +
    `POST /2 HTTP/1.1\r\nHost: ${SNI}\r\nTransfer-Encoding: chunked\r\n${added}\r\n${chunked}` +
    `GET /3 HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\n`;
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length >= want.length, { what: 'three requests at the origin' });
  assert.equal(cap.captured[0].data.toString(), want);
  s.destroy();
});

test('a 1 MiB Content-Length body passes byte-exact, and the request after it is rewritten', async (t) => {
  const { cap, port, proxy } = await setup(t, { forwardFingerprint: 'none' });
  const s = await connect(port);
  const body = crypto.randomBytes(1024 * 1024);
  const head = `PUT /big HTTP/1.1\r\nHost: ${SNI}\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n`;
  const next = `GET /after HTTP/1.1\r\nHost: ${SNI}\r\n`;
  s.write(Buffer.concat([Buffer.from(`${head}\r\n`), body, Buffer.from(`${next}X-Forwarded-For: 1.2.3.4\r\n\r\n`)]));
  const added = 'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: https\r\n';
  const want = Buffer.concat([Buffer.from(`${head}${added}\r\n`), body, Buffer.from(`${next}${added}\r\n`)]);
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length >= want.length, { what: '1 MiB at the origin', timeoutMs: 10000 });
  assert.equal(cap.captured[0].data.length, want.length);
  assert.ok(cap.captured[0].data.equals(want), 'the origin received the body byte-exact');
  s.destroy();
  const route = proxy.metrics().routeMetrics.find((r) => r.route === SNI);
  assert.equal(route.errorsByReason.bad_request, 0);
});

test('Content-Length beside Transfer-Encoding is closed as bad_request and never reaches the origin', async (t) => {
  const { cap, port, proxy } = await setup(t, { forwardFingerprint: 'ja4' });
  const s = await connect(port);
  const closed = new Promise((r) => s.once('close', r));
  const first = `GET /ok HTTP/1.1\r\nHost: ${SNI}\r\n\r\n`;
  s.write(`${first}POST /smuggle HTTP/1.1\r\nHost: ${SNI}\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG`);
  await closed;
  await h.waitFor(() => proxy.metrics().routeMetrics.find((r) => r.route === SNI).errorsByReason.bad_request === 1, { what: 'bad_request counted' });
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].closed, { what: 'the upstream connection closed' });
  const got = cap.captured[0].data.toString();
  assert.equal(got.startsWith('GET /ok HTTP/1.1\r\n'), true, got);
  assert.equal(got.includes('smuggle'), false, got);
});

test('on a protected listener the first head (read by slowRequest before the upstream exists) is rewritten too', async (t) => {
  const fp = await clientFingerprints();
  const { cap, port } = await setup(t, { forwardFingerprint: ['ja4'] }, { protection: {} });
  const s = await connect(port);
  s.write(`GET /first HTTP/1.1\r\nHost: ${SNI}\r\nX-Forw`);
  await new Promise((r) => setTimeout(r, 50)); // the head arrives in two records
  s.write(`arded-For: 6.6.6.6\r\n\r\nGET /second HTTP/1.1\r\nX-JA4: spoofed\r\n\r\n`);
  const added = `X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: https\r\nX-JA4: ${fp.ja4}\r\n`;
  const want = `GET /first HTTP/1.1\r\nHost: ${SNI}\r\n${added}\r\nGET /second HTTP/1.1\r\n${added}\r\n`;
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length >= want.length, { what: 'two requests at the origin' });
  assert.equal(cap.captured[0].data.toString(), want);
  s.destroy();
});

test("with sourceAddressHeader 'proxyProtocolV2' both fingerprints ride TLVs and the bytes are untouched", async (t) => {
  const fp = await clientFingerprints();
  const { cap, port } = await setup(t, { sourceAddressHeader: 'proxyProtocolV2', http2: false });
  const s = await connect(port);
  const req = `GET / HTTP/1.1\r\nHost: ${SNI}\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n`;
  s.write(req);
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.toString().endsWith(req), { what: 'the request at the origin' });
  const v2 = h.parseProxyV2(cap.captured[0].data);
  // The fingerprints first, then the SNI, the ALPN and the SSL TLV (proxy.proxy-v2-tlvs.test.js).
  const got = v2.tlvs.map((x) => [x.type, x.type === 0x20 ? 'ssl' : x.value.toString()]);
  assert.deepEqual(got, [
    [0xe0, fp.ja3],
    [0xe1, fp.ja4],
    [0x02, SNI],
    [0x01, 'http/1.1'],
    [0x20, 'ssl'],
  ]);
  assert.equal(v2.rest.toString(), req);
  s.destroy();
});

test('an upgrade becomes a tunnel only once the upstream answers 101; behind a declined one requests are still rewritten', async (t) => {
  const { cap, port } = await setup(t, { forwardFingerprint: 'none' });
  const added = 'X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: https\r\n';
  const ws = `GET /ws HTTP/1.1\r\nHost: ${SNI}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n`;
  // Declined: a request sent right behind the upgrade (a smuggling attempt) waits, then is rewritten.
  const a = await connect(port);
  const behind = `GET /behind HTTP/1.1\r\nHost: ${SNI}\r\n`;
  a.write(`${ws}\r\n${behind}X-Forwarded-For: 6.6.6.6\r\n\r\n`);
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length > 0, { what: 'the upgrade request' });
  assert.equal(cap.captured[0].data.toString(), `${ws}${added}\r\n`);
  cap.captured[0].socket.write('HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n');
  const declined = `${ws}${added}\r\n${behind}${added}\r\n`;
  await h.waitFor(() => cap.captured[0].data.length >= declined.length, { what: 'the request behind the declined upgrade' });
  assert.equal(cap.captured[0].data.toString(), declined);
  a.destroy();
  // Granted: after the 101 the client's bytes pass untouched both ways.
  const b = await connect(port);
  let down = '';
  b.on('data', (d) => (down += d));
  b.write(`${ws}\r\n`);
  await h.waitFor(() => cap.captured.length === 2 && cap.captured[1].data.length > 0, { what: 'the second upgrade request' });
  const switched = 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n';
  cap.captured[1].socket.write(switched);
  await h.waitFor(() => down === switched, { what: 'the 101 at the client' });
  const raw = 'GET /x HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n';
  b.write(raw);
  const granted = `${ws}${added}\r\n${raw}`;
  await h.waitFor(() => cap.captured[1].data.length >= granted.length, { what: 'tunnel bytes' });
  assert.equal(cap.captured[1].data.toString(), granted);
  b.destroy();
});

test('header routes are validated: passthrough and opaque routes are refused, a PROXY v2 route keeps its TLVs', () => {
  let errs;
  try {
    new RampartProxy({
      listeners: [{ port: 9, defaultCert: h.selfSigned(['localhost']) }],
      routes: [
        { sni: 'a.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], terminateTls: false, sourceAddressHeader: 'xForwardedFor' },
        { sni: 'b.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], protocol: 'opaque', forwardFingerprint: ['ja3'] },
        { sni: 'c.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], forwardFingerprint: ['ja3', 'ja3', 'md5'] },
        { sni: 'd.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], forwardFingerprint: [] },
        {
          sni: 'e.test',
          upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }],
          sourceAddressHeader: 'proxyProtocolV2',
          protocol: 'opaque',
          forwardFingerprint: ['ja3', 'ja4'],
        },
        {
          sni: 'f.test',
          upstreams: [
            { kind: 'tcp', host: '127.0.0.1', port: 1 },
            { kind: 'uds', path: '/tmp/h2.sock', protocol: 'h2' },
          ],
          sourceAddressHeader: 'xForwardedFor',
        },
      ],
    });
  } catch (e) {
    errs = e.errors;
  }
  assert.deepEqual(errs, [
    { path: 'routes[0].sourceAddressHeader', message: 'sets HTTP request headers: needs terminateTls: true' },
    {
      path: 'routes[1].forwardFingerprint',
      message: "sets HTTP request headers: needs protocol: 'http' (or sourceAddressHeader: 'proxyProtocolV2', where the fingerprint rides a PROXY v2 TLV)",
    },
    { path: 'routes[2].forwardFingerprint[1]', message: 'repeats an earlier entry' },
    { path: 'routes[2].forwardFingerprint[2]', message: "must be one of 'ja3', 'ja4', got \"md5\"" },
    { path: 'routes[3].forwardFingerprint', message: "must name 'ja3' and/or 'ja4' ('none' for none), got []" },
    {
      path: 'routes[5].sourceAddressHeader',
      message: "sets HTTP/1.1 request headers, so the route offers http/1.1 only: upstreams[1] has protocol 'h2' and would never be used",
    },
  ]);
});
