'use strict';
// Symphony drop-in, mTLS (docs/proxy.md: "mTLS"): `mtls: { clientCaCert, requireClientCert }` on a
// listener (required by default) and a route (optional by default), with CA and client
// certificates made by openssl at test time; the client certificate's facts reach the upstream as
// a PROXY v2 PP2_TYPE_SSL TLV, checked byte-exact; on an http2 route (SymphonyProxy) an HTTP/1.1
// client's negotiated ALPN and certificate chain too.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const crypto = require('node:crypto');
const { RampartProxy, SymphonyProxy, ConfigError } = require('..');
const h = require('./helpers');

const SIG = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');

/** The PROXY v2 header a 127.0.0.1 client gets, with `tlvs` (already encoded) after the addresses. */
function v2(srcPort, dstPort, tlvs = Buffer.alloc(0)) {
  const b = Buffer.alloc(28);
  SIG.copy(b, 0);
  b.writeUInt8(0x21, 12);
  b.writeUInt8(0x11, 13);
  b.writeUInt16BE(12 + tlvs.length, 14);
  Buffer.from([127, 0, 0, 1, 127, 0, 0, 1]).copy(b, 16);
  b.writeUInt16BE(srcPort, 24);
  b.writeUInt16BE(dstPort, 26);
  return Buffer.concat([b, tlvs]);
}

function tlv(type, value) {
  const head = Buffer.alloc(3);
  head.writeUInt8(type, 0);
  head.writeUInt16BE(value.length, 1);
  return Buffer.concat([head, value]);
}

/** rustls' name of the TLS 1.3 suite node calls `standardName` (TLS 1.2 names are the same). */
function rustlsSuite(standardName) {
  return standardName.replace(/^TLS_(AES|CHACHA20)/, 'TLS13_$1');
}

/**
 * The TLVs of a terminated connection as the PROXY protocol spec and Symphony lay them out,
 * written independently of the addon: PP2_TYPE_AUTHORITY (the SNI), PP2_TYPE_ALPN (the
 * negotiated protocol, when there is one), PP2_TYPE_SSL (client flags,
 * verify, version, cipher, then the CN when a certificate was presented), one 0xE2 per
 * certificate the client presented (DER, leaf first).
 */
function tlsTlvs({ sni, alpn, cipher, cn, certs = [] }) {
  const fixed = Buffer.alloc(5);
  fixed.writeUInt8(cn ? 0x03 : 0x01, 0); // PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN
  fixed.writeUInt32BE(cn ? 0 : 1, 1); // 0 = verified
  const subs = [tlv(0x21, Buffer.from('TLSv1.3')), tlv(0x23, Buffer.from(rustlsSuite(cipher)))];
  if (cn) subs.push(tlv(0x22, Buffer.from(cn)));
  const der = certs.map((pem) => tlv(0xe2, new crypto.X509Certificate(pem).raw));
  const alpnTlv = alpn ? [tlv(0x01, Buffer.from(alpn))] : [];
  return Buffer.concat([tlv(0x02, Buffer.from(sni)), ...alpnTlv, tlv(0x20, Buffer.concat([fixed, ...subs])), ...der]);
}

/**
 * A TLS round trip with an optional client certificate: writes `payload`, expects `reply`;
 * resolves `{ src, cipher, alpn }` (local port, suite, negotiated ALPN).
 */
function roundTrip(port, servername, client = {}, { payload = 'ping', reply = 'ok' } = {}) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false, ...client });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error('timed out'));
    }, 5000);
    let local;
    s.once('secureConnect', () => {
      local = { src: s.localPort, cipher: s.getCipher().standardName, alpn: s.alpnProtocol };
      s.write(payload);
    });
    s.once('data', (d) => {
      clearTimeout(timer);
      s.end();
      if (d.toString() === reply) resolve(local);
      else reject(new Error(`unexpected reply ${d}`));
    });
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.once('close', () => {
      clearTimeout(timer);
      reject(Object.assign(new Error('closed without a reply'), { code: 'ECLOSED' }));
    });
  });
}

test('mtls: required on a listener, optional on a route; facts in the PROXY v2 TLVs byte-exact', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-mtls-'));
  const good = h.clientPki(dir, 'good', 'alice.harper.test');
  const rogue = h.clientPki(dir, 'rogue', 'mallory');
  const cap = await h.captureServer({ reply: 'ok', until: 'ping' });
  const [pA, pB] = await h.freePorts(2);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }];
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port: pA, defaultCert: h.selfSigned(['localhost']), mtls: { clientCaCert: good.ca } },
      { host: '127.0.0.1', port: pB, defaultCert: h.selfSigned(['localhost']) },
    ],
    routes: [
      { sni: '', upstreams: up, sourceAddressHeader: 'proxyProtocolV2' },
      { sni: 'opt.test', upstreams: up, sourceAddressHeader: 'proxyProtocolV2', mtls: { clientCaCert: Buffer.from(good.ca) } },
    ],
    workerThreads: 1,
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const lastCapture = async () => {
    await h.waitFor(() => cap.captured.length && cap.captured.at(-1).data.length >= 4, { what: 'upstream bytes' });
    return cap.captured.at(-1).data;
  };
  const withCert = { cert: good.cert, key: good.key };

  // Listener A requires a certificate from the good CA.
  const alice = { cn: 'alice.harper.test', certs: [good.cert] };
  let c = await roundTrip(pA, 'localhost', withCert);
  assert.deepEqual(await lastCapture(), Buffer.concat([v2(c.src, pA, tlsTlvs({ sni: 'localhost', cipher: c.cipher, ...alice })), Buffer.from('ping')]));
  const before = cap.captured.length;
  await assert.rejects(roundTrip(pA, 'localhost'), 'no certificate: refused');
  await assert.rejects(roundTrip(pA, 'localhost', { cert: rogue.cert, key: rogue.key }), 'a certificate of another CA: refused');
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.handshake_failed === 2, { what: 'two handshake_failed' });
  assert.equal(cap.captured.length, before, 'a refused client never reached the upstream');

  // The route's optional mtls on listener B: with and without a certificate.
  c = await roundTrip(pB, 'opt.test');
  assert.deepEqual(await lastCapture(), Buffer.concat([v2(c.src, pB, tlsTlvs({ sni: 'opt.test', cipher: c.cipher })), Buffer.from('ping')]));
  c = await roundTrip(pB, 'opt.test', withCert);
  assert.deepEqual(await lastCapture(), Buffer.concat([v2(c.src, pB, tlsTlvs({ sni: 'opt.test', cipher: c.cipher, ...alice })), Buffer.from('ping')]));
  await assert.rejects(roundTrip(pB, 'opt.test', { cert: rogue.cert, key: rogue.key }), 'a certificate that does not verify is refused even when optional');
  // ... and it replaces listener A's required mtls for that route.
  c = await roundTrip(pA, 'opt.test');
  assert.deepEqual(await lastCapture(), Buffer.concat([v2(c.src, pA, tlsTlvs({ sni: 'opt.test', cipher: c.cipher })), Buffer.from('ping')]));
  // No mtls at all (listener B, default route): the SSL TLV says so (no certificate, verify 1).
  c = await roundTrip(pB, 'localhost');
  assert.deepEqual(await lastCapture(), Buffer.concat([v2(c.src, pB, tlsTlvs({ sni: 'localhost', cipher: c.cipher })), Buffer.from('ping')]));
});

test('mtls on an http2 route (SymphonyProxy): an HTTP/1.1 client with a certificate; ALPN, SSL and its chain in the PROXY v2 TLVs byte-exact', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-mtls-alpn-'));
  const good = h.clientPki(dir, 'good', 'alice.harper.test', { intermediate: true });
  const response = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok';
  const cap = await h.captureServer({ reply: response, until: 'Host: localhost\r\n\r\n' });
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [
      {
        sni: 'localhost',
        terminateTls: true,
        http2: true,
        cert: h.selfSigned(['localhost']),
        mtls: { clientCaCert: good.ca },
        sourceAddressHeader: 'proxyProtocolV2',
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }],
      },
    ],
  });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const request = 'GET / HTTP/1.1\r\nHost: localhost\r\n\r\n';
  const exchange = { payload: request, reply: response };
  const upstreamGot = async (n) => {
    await h.waitFor(() => cap.captured.length === n && cap.captured[n - 1].data.includes(request), { what: `connection ${n} at the upstream` });
    return cap.captured[n - 1].data;
  };

  // With the client certificate (leaf + intermediate): the ALPN TLV says http/1.1, the SSL TLV
  // the verified CN, then one 0xE2 per certificate, leaf first.
  const c = await roundTrip(port, 'localhost', { cert: good.chain, key: good.key, ALPNProtocols: ['http/1.1'] }, exchange);
  assert.equal(c.alpn, 'http/1.1');
  const certs = good.chain.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----\n?/g);
  assert.equal(certs.length, 2);
  const tlvs = tlsTlvs({ sni: 'localhost', alpn: 'http/1.1', cipher: c.cipher, cn: 'alice.harper.test', certs });
  assert.deepEqual(await upstreamGot(1), Buffer.concat([v2(c.src, port, tlvs), Buffer.from(request)]));

  // Without one (optional on a route), and without ALPN: no ALPN TLV, no certificate TLVs.
  const d = await roundTrip(port, 'localhost', {}, exchange);
  assert.equal(d.alpn, false);
  assert.deepEqual(await upstreamGot(2), Buffer.concat([v2(d.src, port, tlsTlvs({ sni: 'localhost', cipher: d.cipher })), Buffer.from(request)]));

  await h.waitFor(() => proxy.metrics().activeConnections === 0, { what: 'both connections closed' });
  const r = proxy.metrics().routeMetrics[0];
  assert.deepEqual([r.connections, r.errors], [2, 0]);
  assert.deepEqual(errors, []);
});

test('mtls config errors name every field', () => {
  let errs;
  try {
    new RampartProxy({
      listeners: [{ port: 9, defaultCert: h.selfSigned(['localhost']), mtls: { requireClientCert: 'yes' } }],
      routes: [{ sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], mtls: { clientCaCert: 'not pem', verify: 1 } }],
    });
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    errs = e.errors;
  }
  assert.deepEqual(errs, [
    { path: 'listeners[0].mtls.requireClientCert', message: 'must be a boolean, got "yes"' },
    { path: 'listeners[0].mtls.clientCaCert', message: 'is required (PEM CA certificates)' },
    { path: 'routes[0].mtls.verify', message: 'unknown field; expected one of: clientCaCert, requireClientCert' },
    { path: 'routes[0].mtls.clientCaCert', message: 'holds no CERTIFICATE block (expected PEM text)' },
    { path: 'routes[0].mtls', message: 'needs terminateTls: true (client certificates are verified where TLS is terminated)' },
  ]);
});
