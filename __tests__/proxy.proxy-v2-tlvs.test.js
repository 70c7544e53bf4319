'use strict';
// The TLVs of the PROXY v2 header (`sourceAddressHeader: 'proxyProtocolV2'`), decoded by the
// hand-written parser of the helpers and checked byte for byte against the layout Symphony sends
// and Harper reads: the forwarded fingerprints (0xE0 JA3, 0xE1 JA4), PP2_TYPE_AUTHORITY (the
// SNI), then on a connection terminated here PP2_TYPE_ALPN, PP2_TYPE_SSL (client flags, verify,
// version, cipher, and the CN of a client certificate) and the verified client chain (one 0xE2
// per certificate, DER, leaf first). Real node:tls clients; certificates from openssl.
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** A TLV encoded by hand: type, 16-bit big-endian length, value. */
function tlv(type, value) {
  const head = Buffer.alloc(3);
  head.writeUInt8(type, 0);
  head.writeUInt16BE(value.length, 1);
  return Buffer.concat([head, Buffer.from(value)]);
}

/** rustls' name of the suite node reports as `standardName` (TLS 1.3 suites are `TLS13_...`). */
function rustlsSuite(standardName) {
  return standardName.replace(/^TLS_(AES|CHACHA20)/, 'TLS13_$1');
}

/** PP2_TYPE_SSL's value per the PROXY protocol spec: flags, verify, version, cipher, then the CN. */
function sslValue({ version, cipher, cn }) {
  const fixed = Buffer.alloc(5);
  fixed.writeUInt8(cn ? 0x03 : 0x01, 0); // PP2_CLIENT_SSL (| PP2_CLIENT_CERT_CONN)
  fixed.writeUInt32BE(cn ? 0 : 1, 1); // 0: a certificate was presented and verified
  const subs = [tlv(0x21, version), tlv(0x23, rustlsSuite(cipher))];
  if (cn) subs.push(tlv(0x22, cn));
  return Buffer.concat([fixed, ...subs]);
}

/** The upstream's connection number `i` once `payload` arrived after its header, parsed. */
async function header(cap, i, payload) {
  await h.waitFor(() => cap.captured.length > i && cap.captured[i].data.includes(payload), { what: 'the upstream connection' });
  const v2 = h.parseProxyV2(cap.captured[i].data);
  assert.equal(v2.rest.toString(), payload, 'the client bytes follow the header untouched');
  return v2;
}

/** A node:tls client that writes `payload` once connected; resolves the socket. */
function connect(port, servername, opts = {}) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false, ...opts });
    s.once('secureConnect', () => resolve(s));
    s.once('error', reject);
  });
}

/** A proxy on one listener whose routes send a PROXY v2 header to the capture upstream `cap`. */
async function proxyFor(t, cap, routes, listener = {}) {
  const port = await h.freePort();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }];
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost', 'tlv.test', 'pt.test', 'mtls.test']), ...listener }],
    routes: routes.map((r) => ({ upstreams: up, sourceAddressHeader: 'proxyProtocolV2', ...r })),
    workerThreads: 1,
  });
  await proxy.start();
  t.after(() => proxy.stop());
  return port;
}

test('a terminated connection without a client certificate: fingerprint, authority, ALPN and SSL (version, cipher) byte-exact', async (t) => {
  const cap = await h.captureServer();
  t.after(() => h.closeServer(cap));
  const port = await proxyFor(t, cap, [{ sni: 'tlv.test', forwardFingerprint: 'ja4' }]);
  for (const [i, version] of [
    [0, 'TLSv1.3'],
    [1, 'TLSv1.2'],
  ]) {
    const client = { ALPNProtocols: ['http/1.1'], minVersion: version, maxVersion: version };
    // The JA4 of this very ClientHello, recorded from the same client options.
    const fp = await h.fingerprintOf((p) => connect(p, 'tlv.test', client).catch(() => {}));
    const s = await connect(port, 'tlv.test', client);
    const [cipher, src] = [s.getCipher().standardName, s.localPort];
    s.write('hello');
    const v2 = await header(cap, i, 'hello');
    s.destroy();
    assert.equal(v2.command, 0x21);
    assert.equal(v2.family, 0x11);
    assert.deepEqual(v2.source, { ip: '127.0.0.1', port: src });
    assert.deepEqual(v2.destination, { ip: '127.0.0.1', port });
    assert.deepEqual(v2.tlvs, [
      { type: 0xe1, value: Buffer.from(fp.ja4) },
      { type: 0x02, value: Buffer.from('tlv.test') },
      { type: 0x01, value: Buffer.from('http/1.1') },
      { type: 0x20, value: sslValue({ version, cipher }) },
    ]);
  }
});

test('mTLS: the SSL TLV says verified with the CN, and the client chain follows leaf first, DER', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-tlv-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const pki = h.clientPki(dir, 'harper', 'alice.harper.test', { intermediate: true });
  const cap = await h.captureServer();
  t.after(() => h.closeServer(cap));
  const port = await proxyFor(t, cap, [{ sni: 'mtls.test', mtls: { clientCaCert: pki.ca, requireClientCert: true } }]);

  const s = await connect(port, 'mtls.test', { cert: pki.chain, key: pki.key });
  const cipher = s.getCipher().standardName;
  s.write('who');
  const v2 = await header(cap, 0, 'who');
  s.destroy();
  const [leaf, intermediate] = pki.chain.split(/(?<=-----END CERTIFICATE-----\n)/);
  assert.deepEqual(v2.tlvs, [
    { type: 0x02, value: Buffer.from('mtls.test') },
    { type: 0x20, value: sslValue({ version: 'TLSv1.3', cipher, cn: 'alice.harper.test' }) },
    { type: 0xe2, value: new crypto.X509Certificate(leaf).raw },
    { type: 0xe2, value: new crypto.X509Certificate(intermediate).raw },
  ]);
  // The SSL TLV's sub-TLVs decode on their own, as Harper reads them.
  const subs = h.parseTlvs(v2.tlvs[1].value.subarray(5));
  assert.deepEqual(
    subs.map((x) => [x.type, x.value.toString()]),
    [
      [0x21, 'TLSv1.3'],
      [0x23, rustlsSuite(cipher)],
      [0x22, 'alice.harper.test'],
    ]
  );
});

test('passthrough: the SNI (and fingerprints) only, before the untouched ClientHello', async (t) => {
  const cap = await h.captureServer();
  t.after(() => h.closeServer(cap));
  const port = await proxyFor(t, cap, [{ sni: 'pt.test', terminateTls: false }]);
  const s = tls.connect({ port, host: '127.0.0.1', servername: 'pt.test', rejectUnauthorized: false });
  s.on('error', () => {});
  t.after(() => s.destroy());
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.length > 100, { what: 'the passthrough bytes' });
  const v2 = h.parseProxyV2(cap.captured[0].data);
  assert.deepEqual(v2.tlvs, [{ type: 0x02, value: Buffer.from('pt.test') }]);
  assert.equal(v2.rest[0], 0x16, 'a TLS handshake record follows');
});
