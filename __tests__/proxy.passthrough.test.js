'use strict';
// Passthrough (terminateTls: false): the upstream TLS server sees the client's own handshake,
// the client completes it against the upstream's certificate.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

test('passthrough forwards the raw ClientHello and the client completes the upstream handshake', async (t) => {
  const upCert = h.opensslChain('backend.example.com', 'ec');
  let seenServername = null;
  const backend = tls.createServer({ cert: upCert.certChain, key: upCert.privateKey, ALPNProtocols: ['h2', 'http/1.1'] }, (s) => {
    seenServername = s.servername;
    s.on('error', () => {});
    s.pipe(s);
  });
  await h.listen(backend);
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [{ sni: 'backend.example.com', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: backend.address().port }] }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(backend);
  });
  const r = await h.tlsRoundTrip({ port, servername: 'backend.example.com', ca: upCert.ca, ALPNProtocols: ['h2'], payload: Buffer.from('through') });
  assert.equal(r.data.toString(), 'through');
  assert.equal(r.cert.subject.CN, 'backend.example.com');
  assert.equal(r.alpn, 'h2');
  assert.equal(seenServername, 'backend.example.com');
});
