'use strict';
// Upstream kinds and source-address headers: Unix domain socket upstream, and PROXY protocol v1
// and v2 headers arriving byte-exact at a capturing upstream for IPv4 and IPv6 clients.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

const SIG = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');

/** A PROXY v2 TLV: type, 16-bit length, value. */
function tlv(type, value) {
  const head = Buffer.alloc(3);
  head.writeUInt8(type, 0);
  head.writeUInt16BE(value.length, 1);
  return Buffer.concat([head, value]);
}

/**
 * The TLVs of a terminated connection without a client certificate and without ALPN: the SNI,
 * then PP2_TYPE_SSL (PP2_CLIENT_SSL, verify 1, TLS version, rustls' name of the cipher node
 * reports as `standardName`).
 */
function tlsTlvs(sni, standardName) {
  const fixed = Buffer.from([0x01, 0, 0, 0, 1]);
  const cipher = standardName.replace(/^TLS_(AES|CHACHA20)/, 'TLS13_$1');
  const ssl = Buffer.concat([fixed, tlv(0x21, Buffer.from('TLSv1.3')), tlv(0x23, Buffer.from(cipher))]);
  return Buffer.concat([tlv(0x02, Buffer.from(sni)), tlv(0x20, ssl)]);
}

function v2Expected(src, srcPort, dst, dstPort, family, tlvs = Buffer.alloc(0)) {
  return Buffer.concat([v2Addresses(src, srcPort, dst, dstPort, family, tlvs.length), tlvs]);
}

function v2Addresses(src, srcPort, dst, dstPort, family, tlvLength) {
  if (family === 4) {
    const b = Buffer.alloc(16 + 12);
    SIG.copy(b, 0);
    b.writeUInt8(0x21, 12);
    b.writeUInt8(0x11, 13);
    b.writeUInt16BE(12 + tlvLength, 14);
    for (const [i, o] of src.split('.').entries()) b.writeUInt8(Number(o), 16 + i);
    for (const [i, o] of dst.split('.').entries()) b.writeUInt8(Number(o), 20 + i);
    b.writeUInt16BE(srcPort, 24);
    b.writeUInt16BE(dstPort, 26);
    return b;
  }
  const b = Buffer.alloc(16 + 36);
  SIG.copy(b, 0);
  b.writeUInt8(0x21, 12);
  b.writeUInt8(0x21, 13);
  b.writeUInt16BE(36 + tlvLength, 14);
  // only ::1 is used here
  b.writeUInt8(1, 16 + 15);
  b.writeUInt8(1, 32 + 15);
  b.writeUInt16BE(srcPort, 48);
  b.writeUInt16BE(dstPort, 50);
  return b;
}

test('UDS upstream and PROXY protocol headers', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-uds-'));
  const sock = path.join(dir, 'up.sock');
  const uds = await h.echoServer({ path: sock });
  const cap = await h.captureServer();
  const [p4, p6] = await h.freePorts(2);
  const capUp = [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }];
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port: p4, defaultCert: h.selfSigned(['localhost']) },
      { host: '::', port: p6, defaultCert: h.selfSigned(['localhost']) },
    ],
    routes: [
      { sni: 'uds.test', upstreams: [{ kind: 'uds', path: sock }], terminateTls: true },
      { sni: 'v1.test', upstreams: capUp, terminateTls: true, sourceAddressHeader: 'proxyProtocol' },
      { sni: 'v2.test', upstreams: capUp, terminateTls: true, sourceAddressHeader: 'proxyProtocolV2' },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
    await new Promise((r) => uds.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  await t.test('a Unix-socket upstream gets the bytes', async () => {
    const r = await h.tlsRoundTrip({ port: p4, servername: 'uds.test', payload: Buffer.from('over-uds') });
    assert.equal(r.data.toString(), 'over-uds');
  });

  // A client from a known source port, so the expected header is exact.
  async function sendFrom(port, host, localAddress, servername) {
    const before = cap.captured.length;
    const s = tls.connect({ port, host, servername, rejectUnauthorized: false, localAddress });
    s.on('error', () => {});
    await new Promise((r) => s.once('secureConnect', r));
    const srcPort = s.localPort;
    const cipher = s.getCipher().standardName;
    s.write('DATA');
    await h.waitFor(() => cap.captured.length === before + 1 && cap.captured[before].data.includes('DATA'), { what: 'captured upstream data' });
    s.destroy();
    return { data: cap.captured[before].data, srcPort, cipher };
  }

  await t.test('PROXY v1, IPv4 client 127.0.0.2', async () => {
    const { data, srcPort } = await sendFrom(p4, '127.0.0.1', '127.0.0.2', 'v1.test');
    assert.equal(data.toString(), `PROXY TCP4 127.0.0.2 127.0.0.1 ${srcPort} ${p4}\r\nDATA`);
  });

  await t.test('PROXY v1, IPv6 client ::1', async () => {
    const { data, srcPort } = await sendFrom(p6, '::1', '::1', 'v1.test');
    assert.equal(data.toString(), `PROXY TCP6 ::1 ::1 ${srcPort} ${p6}\r\nDATA`);
  });

  await t.test('PROXY v1, IPv4 client on a :: listener is reported as IPv4', async () => {
    const { data, srcPort } = await sendFrom(p6, '127.0.0.1', '127.0.0.3', 'v1.test');
    assert.equal(data.toString(), `PROXY TCP4 127.0.0.3 127.0.0.1 ${srcPort} ${p6}\r\nDATA`);
  });

  await t.test('PROXY v2, IPv4 client 127.0.0.2 (byte-exact)', async () => {
    const { data, srcPort, cipher } = await sendFrom(p4, '127.0.0.1', '127.0.0.2', 'v2.test');
    const want = Buffer.concat([v2Expected('127.0.0.2', srcPort, '127.0.0.1', p4, 4, tlsTlvs('v2.test', cipher)), Buffer.from('DATA')]);
    assert.equal(data.toString('hex'), want.toString('hex'));
  });

  await t.test('PROXY v2, IPv6 client ::1 (byte-exact)', async () => {
    const { data, srcPort, cipher } = await sendFrom(p6, '::1', '::1', 'v2.test');
    const want = Buffer.concat([v2Expected('::1', srcPort, '::1', p6, 6, tlsTlvs('v2.test', cipher)), Buffer.from('DATA')]);
    assert.equal(data.toString('hex'), want.toString('hex'));
  });
});

test("udsSourceAddressHeader: a route with a Unix-socket upstream that sets no sourceAddressHeader gets it (Symphony's 'proxyProtocol'), in updateConfig and resolveConnection routes too", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-uds-'));
  const uds = await h.captureServer({ reply: 'ok', path: path.join(dir, 'cap.sock') });
  const tcp = await h.captureServer({ reply: 'ok' });
  const port = await h.freePort();
  const udsUp = [{ kind: 'uds', path: path.join(dir, 'cap.sock') }];
  const tcpUp = [{ kind: 'tcp', host: '127.0.0.1', port: tcp.address().port }];
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [
      { sni: 'uds.test', upstreams: udsUp },
      { sni: 'none.test', upstreams: udsUp, sourceAddressHeader: 'none' },
      { sni: 'tcp.test', upstreams: tcpUp },
      { sni: '*.held.test', suspended: true },
    ],
    udsSourceAddressHeader: 'proxyProtocol',
  });
  proxy.on('suspended', (e) => proxy.resolveConnection(e.id, { upstream: udsUp[0] }));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(uds);
    await h.closeServer(tcp);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  /** What the upstream `cap` got from a client to `servername` that sent 'DATA'. */
  async function sent(cap, servername) {
    const before = cap.captured.length;
    const s = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false });
    s.on('error', () => {});
    await new Promise((r) => s.once('secureConnect', r));
    const src = s.localPort;
    s.write('DATA');
    await h.waitFor(() => cap.captured.length > before && cap.captured[before].data.includes('DATA'), { what: `${servername} at its upstream` });
    s.destroy();
    return { data: cap.captured[before].data.toString(), src };
  }
  const v1 = (src) => `PROXY TCP4 127.0.0.1 127.0.0.1 ${src} ${port}\r\nDATA`;
  let r = await sent(uds, 'uds.test');
  assert.equal(r.data, v1(r.src));
  assert.equal((await sent(uds, 'none.test')).data, 'DATA', "an explicit 'none' stays none");
  assert.equal((await sent(tcp, 'tcp.test')).data, 'DATA', 'a route with TCP upstreams only is not concerned');
  r = await sent(uds, 'app.held.test');
  assert.equal(r.data, v1(r.src), 'a resolveConnection route gets the default');
  proxy.updateConfig({ routes: [{ sni: 'uds.test', upstreams: udsUp }] });
  r = await sent(uds, 'uds.test');
  assert.equal(r.data, v1(r.src), 'an updateConfig route gets the default');
});

test('udsSourceAddressHeader is validated', () => {
  const base = { listeners: [{ port: 9 }], routes: [] };
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy({ ...base, udsSourceAddressHeader: 'xForwardedFor' })),
    [{ path: 'udsSourceAddressHeader', message: "must be one of 'none', 'proxyProtocol', 'proxyProtocolV2', got \"xForwardedFor\"" }]
  );
});
