'use strict';
// TLS termination: real clients (node:tls, curl, openssl s_client) through Rampart to a TCP echo
// upstream; bytes come back unchanged, a 10 MiB transfer is intact, chains and ALPN are served.
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const net = require('node:net');
const { RampartProxy } = require('..');
const h = require('./helpers');

test('TLS termination round trips', async (t) => {
  const echo = await h.echoServer();
  const web = await h.listen(http.createServer((req, res) => res.end(`hello via rampart ${req.url}`)));
  // An h2c upstream as far as the first bytes go: its SETTINGS (empty), then an echo.
  const EMPTY_SETTINGS = Buffer.from('000000040000000000', 'hex');
  const h2echo = await h.listen(
    net.createServer((s) => {
      s.on('error', () => {});
      s.write(EMPTY_SETTINGS);
      s.pipe(s);
    })
  );
  const port = await h.freePort();
  const chainRsa = h.opensslChain('rsa.example.com', 'rsa');
  const chainEc = h.opensslChain('ec.example.com', 'ec');
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [
      { sni: 'localhost', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }], terminateTls: true },
      { sni: 'web.localhost', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: web.address().port }], terminateTls: true },
      { sni: 'h2.localhost', http2: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: h2echo.address().port }], terminateTls: true },
      {
        sni: 'rsa.example.com',
        cert: { certChain: Buffer.from(chainRsa.certChain), privateKey: chainRsa.privateKey },
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }],
        terminateTls: true,
      },
      {
        sni: 'ec.example.com',
        cert: { certChain: chainEc.certChain, privateKey: chainEc.privateKey },
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }],
        terminateTls: true,
      },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
    await h.closeServer(web);
    await h.closeServer(h2echo);
  });

  await t.test('node:tls bytes come back unchanged', async () => {
    const payload = crypto.randomBytes(4096);
    const r = await h.tlsRoundTrip({ port, servername: 'localhost', payload });
    assert.equal(r.data.equals(payload), true);
    assert.equal(r.alpn, false);
  });

  await t.test('a 10 MiB transfer is intact (sha256 match)', async () => {
    const payload = crypto.randomBytes(10 * 1024 * 1024);
    const r = await h.tlsRoundTrip({ port, servername: 'localhost', payload, timeoutMs: 30000 });
    assert.equal(r.data.length, payload.length);
    assert.equal(h.sha256(r.data), h.sha256(payload));
  });

  await t.test('ALPN: http/1.1 by default, h2 when the route has http2', async () => {
    const a = await h.tlsRoundTrip({ port, servername: 'localhost', ALPNProtocols: ['h2', 'http/1.1'] });
    assert.equal(a.alpn, 'http/1.1');
    // An h2 connection gets Rampart's SETTINGS (MAX_CONCURRENT_STREAMS 100) first and goes
    // through the HTTP/2 guard, which wants the client preface first; then the upstream's.
    const preface = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const settings = Buffer.from('000006040000000000000300000064', 'hex');
    const b = await h.tlsRoundTrip({ port, servername: 'h2.localhost', ALPNProtocols: ['h2', 'http/1.1'], payload: preface, expect: 48 });
    assert.equal(b.alpn, 'h2');
    assert.equal(b.data.toString('hex'), Buffer.concat([settings, EMPTY_SETTINGS, preface]).toString('hex'));
  });

  await t.test('route certificates with intermediates verify against the root (RSA and ECDSA)', async () => {
    const r = await h.tlsRoundTrip({ port, servername: 'rsa.example.com', ca: chainRsa.ca });
    assert.equal(r.cert.subject.CN, 'rsa.example.com');
    const e = await h.tlsRoundTrip({ port, servername: 'ec.example.com', ca: chainEc.ca });
    assert.equal(e.cert.subject.CN, 'ec.example.com');
    assert.equal(e.cert.asn1Curve, 'prime256v1');
  });

  await t.test('curl --resolve gets an HTTP response through the proxy', async () => {
    const r = await h.run('curl', [
      '-sk',
      '--http1.1',
      '--max-time',
      '5',
      '--resolve',
      `web.localhost:${port}:127.0.0.1`,
      `https://web.localhost:${port}/through`,
    ]);
    assert.equal(r.code, 0, r.stderr.toString());
    assert.equal(r.stdout.toString(), 'hello via rampart /through');
  });

  await t.test('openssl s_client sends and receives through the proxy', async () => {
    const marker = `rampart-${crypto.randomBytes(6).toString('hex')}`;
    const r = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', 'localhost', '-quiet', '-ign_eof'], {
      input: `${marker}\n`,
      timeoutMs: 3000,
    });
    assert.match(r.stdout.toString(), new RegExp(marker));
  });

  await t.test('metrics count the bytes and connections', async () => {
    const m = proxy.metrics();
    assert.equal(m.listeners[0].port, port);
    assert.ok(m.listeners[0].bytesReceived >= 10 * 1024 * 1024);
    assert.ok(m.listeners[0].bytesSent >= 10 * 1024 * 1024);
    assert.ok(m.acceptedConnections >= 7);
  });
});
