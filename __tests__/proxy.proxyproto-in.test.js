'use strict';
// acceptProxyProtocol: a fake load balancer (a TCP client that writes a PROXY v1 / v2 header, then
// runs a real TLS handshake over the same socket) from a trusted address (127.0.0.1) and an
// untrusted one (127.0.0.9). The header's client is the client for protection, events, lists and
// the outbound PROXY header; a trusted peer without a header is closed; an untrusted peer's
// header is not honoured.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

const SIG = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');
const HEADER_TIMEOUT_MS = 400;

/** PROXY v2 header (TCP over IPv4), PROXY command, optional TLVs appended (ignored by Rampart). */
function v2(src, srcPort, dst, dstPort, tlv = Buffer.alloc(0)) {
  const b = Buffer.alloc(16 + 12);
  SIG.copy(b, 0);
  b.writeUInt8(0x21, 12);
  b.writeUInt8(0x11, 13);
  b.writeUInt16BE(12 + tlv.length, 14);
  for (const [i, o] of src.split('.').entries()) b.writeUInt8(Number(o), 16 + i);
  for (const [i, o] of dst.split('.').entries()) b.writeUInt8(Number(o), 20 + i);
  b.writeUInt16BE(srcPort, 24);
  b.writeUInt16BE(dstPort, 26);
  return Buffer.concat([b, tlv]);
}

/** PROXY v2 LOCAL (a balancer's health check): no addresses. */
const V2_LOCAL = Buffer.concat([SIG, Buffer.from([0x20, 0x00, 0, 0])]);

const v1 = (src, srcPort, dst, dstPort) => Buffer.from(`PROXY TCP4 ${src} ${dst} ${srcPort} ${dstPort}\r\n`);

/**
 * The fake balancer: connects from `localAddress`, writes `header` (if any), then a TLS handshake
 * over the same socket; on success writes `payload`. Resolves `{ secure, localPort, socket }` once
 * the handshake is done or the connection closed.
 */
function viaBalancer({ port, header, localAddress = '127.0.0.1', payload = 'DATA' }) {
  return new Promise((resolve) => {
    const raw = net.connect({ port, host: '127.0.0.1', localAddress });
    raw.on('error', () => {});
    raw.once('connect', () => {
      const localPort = raw.localPort;
      if (header) raw.write(header);
      const s = tls.connect({ socket: raw, servername: 'app.test', rejectUnauthorized: false });
      s.on('error', () => {});
      s.once('secureConnect', () => {
        s.write(payload);
        resolve({ secure: true, localPort, socket: s });
      });
      s.once('close', () => resolve({ secure: false, localPort }));
    });
  });
}

test('PROXY headers from a trusted load balancer name the client; others are not honoured', async (t) => {
  const cap = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [
      {
        host: '127.0.0.1',
        port,
        defaultCert: h.selfSigned(['app.test']),
        acceptProxyProtocol: { trustedCidrs: ['127.0.0.1/32'], timeoutMs: HEADER_TIMEOUT_MS },
        protection: { blocklist: ['192.0.2.66/32'], rateLimit: { connectionsPerSecond: 0.1, burst: 2 } },
      },
    ],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }], sourceAddressHeader: 'proxyProtocolV2' }],
  });
  const events = [];
  const errors = [];
  proxy.on('blocked', (e) => events.push(e));
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  const m = () => proxy.metrics().listeners[0];

  /**
   * The upstream's next connection, its PROXY v2 header's TLVs taken out (after checking they are
   * the SNI and the SSL TLV of a terminated connection, laid out in proxy.proxy-v2-tlvs.test.js):
   * the header as it is without TLVs, then 'DATA'.
   */
  async function upstreamSaw(before) {
    await h.waitFor(() => cap.captured.length > before && cap.captured[before].data.includes('DATA'), { what: 'upstream data' });
    const d = cap.captured[before].data;
    const v2h = h.parseProxyV2(d);
    assert.deepEqual(
      v2h.tlvs.map((x) => x.type),
      [0x02, 0x20]
    );
    assert.equal(v2h.tlvs[0].value.toString(), 'app.test');
    const addrEnd = v2h.family === 0x11 ? 28 : 52;
    const head = Buffer.from(d.subarray(0, addrEnd));
    head.writeUInt16BE(addrEnd - 16, 14);
    return Buffer.concat([head, v2h.rest]);
  }

  await t.test('v1 header: the upstream PROXY v2 header carries the header client and destination', async () => {
    const before = cap.captured.length;
    const r = await viaBalancer({ port, header: v1('203.0.113.7', 5555, '198.51.100.1', 443) });
    assert.equal(r.secure, true);
    const data = await upstreamSaw(before);
    assert.deepEqual(data, Buffer.concat([v2('203.0.113.7', 5555, '198.51.100.1', 443), Buffer.from('DATA')]));
    r.socket.destroy();
  });

  await t.test('v2 header with TLVs (ignored): the client is the header source', async () => {
    const before = cap.captured.length;
    const tlv = Buffer.from([0x04, 0x00, 0x01, 0x00]); // PP2_TYPE_NOOP, one byte
    const r = await viaBalancer({ port, header: v2('203.0.113.8', 40000, '198.51.100.1', 443, tlv) });
    assert.equal(r.secure, true);
    const data = await upstreamSaw(before);
    assert.deepEqual(data, Buffer.concat([v2('203.0.113.8', 40000, '198.51.100.1', 443), Buffer.from('DATA')]));
    r.socket.destroy();
  });

  await t.test('an IPv6 client in a v1 header: the upstream PROXY v2 header is IPv6', async () => {
    const before = cap.captured.length;
    const r = await viaBalancer({ port, header: Buffer.from('PROXY TCP6 2001:db8::5 2001:db8::1 5000 443\r\n') });
    assert.equal(r.secure, true);
    const data = await upstreamSaw(before);
    const want = Buffer.alloc(16 + 36);
    SIG.copy(want, 0);
    want.writeUInt8(0x21, 12);
    want.writeUInt8(0x21, 13);
    want.writeUInt16BE(36, 14);
    Buffer.from('20010db8000000000000000000000005', 'hex').copy(want, 16);
    Buffer.from('20010db8000000000000000000000001', 'hex').copy(want, 32);
    want.writeUInt16BE(5000, 48);
    want.writeUInt16BE(443, 50);
    assert.deepEqual(data, Buffer.concat([want, Buffer.from('DATA')]));
    r.socket.destroy();
  });

  await t.test('v2 LOCAL (health check): the peer itself is the client', async () => {
    const before = cap.captured.length;
    const r = await viaBalancer({ port, header: V2_LOCAL });
    assert.equal(r.secure, true);
    const data = await upstreamSaw(before);
    assert.deepEqual(data, Buffer.concat([v2('127.0.0.1', r.localPort, '127.0.0.1', port), Buffer.from('DATA')]));
    r.socket.destroy();
  });

  await t.test('v2 over UDP (0x12) names no client: the peer itself is the client (HAProxy)', async () => {
    const before = cap.captured.length;
    const udp = v2('203.0.113.77', 5000, '198.51.100.1', 443);
    udp.writeUInt8(0x12, 13);
    const r = await viaBalancer({ port, header: udp });
    assert.equal(r.secure, true);
    const data = await upstreamSaw(before);
    assert.deepEqual(data, Buffer.concat([v2('127.0.0.1', r.localPort, '127.0.0.1', port), Buffer.from('DATA')]));
    r.socket.destroy();
  });

  await t.test('a v2 header announcing more than 16 KiB, or a TLV cut short, is refused at once', async () => {
    const huge = v2('203.0.113.78', 5000, '198.51.100.1', 443);
    huge.writeUInt16BE(0xffff, 14);
    const cut = v2('203.0.113.78', 5000, '198.51.100.1', 443, Buffer.from([0x04, 0x00, 0x09, 0x00]));
    for (const header of [huge, cut]) {
      const before = m().errorsByReason.proxy_header_invalid;
      const n = errors.length;
      const r = await viaBalancer({ port, header });
      assert.equal(r.secure, false);
      await h.waitFor(() => m().errorsByReason.proxy_header_invalid === before + 1, { what: 'proxy_header_invalid' });
      // Refused as not a header, not after waiting timeoutMs for bytes that would never do.
      assert.equal(errors[n].message, 'trusted peer 127.0.0.1: the first bytes are not a PROXY v1 or v2 header');
    }
    assert.ok(!events.some((e) => e.ip === '203.0.113.78'));
  });

  await t.test("a blocklisted client in the header is refused and named in the 'blocked' event", async () => {
    const blockedBefore = m().blockedByReason.cidr_blocked || 0;
    const r = await viaBalancer({ port, header: v2('192.0.2.66', 1234, '198.51.100.1', 443) });
    assert.equal(r.secure, false);
    const ev = await h.waitFor(() => events.find((e) => e.ip === '192.0.2.66'), { what: 'blocked event' });
    assert.equal(ev.reason, 'cidr_blocked');
    assert.equal(ev.port, port);
    assert.equal(m().blockedByReason.cidr_blocked, blockedBefore + 1);
    assert.ok(!events.some((e) => e.ip === '127.0.0.1'), 'the balancer itself is never blocked');
  });

  await t.test('per-client rate limits key on the header client (blockedIps lists it, not the balancer)', async () => {
    const hdr = () => v2('203.0.113.50', 7000, '198.51.100.1', 443);
    const a = await viaBalancer({ port, header: hdr() });
    const b = await viaBalancer({ port, header: hdr() });
    const c = await viaBalancer({ port, header: hdr() });
    assert.deepEqual([a.secure, b.secure, c.secure], [true, true, false]);
    a.socket.destroy();
    b.socket.destroy();
    const ev = await h.waitFor(() => events.find((e) => e.ip === '203.0.113.50'), { what: 'rate_limited event' });
    assert.equal(ev.reason, 'rate_limited');
    assert.deepEqual(proxy.blockedIps().rateLimited, ['203.0.113.50']);
    // Another client behind the same balancer is not boxed with it.
    const other = await viaBalancer({ port, header: v2('203.0.113.51', 7000, '198.51.100.1', 443) });
    assert.equal(other.secure, true);
    other.socket.destroy();
  });

  await t.test('a trusted peer without a header is closed (proxy_header_invalid)', async () => {
    const before = m().errorsByReason.proxy_header_invalid;
    const r = await viaBalancer({ port, header: null });
    assert.equal(r.secure, false);
    await h.waitFor(() => m().errorsByReason.proxy_header_invalid === before + 1, { what: 'proxy_header_invalid' });
    const e = errors.find((x) => x.code === 'proxy_header_invalid');
    assert.equal(e.ip, '127.0.0.1');
    assert.match(e.message, /trusted peer 127\.0\.0\.1: the first bytes are not a PROXY v1 or v2 header/);
  });

  await t.test('a header that does not complete within timeoutMs closes the connection', async () => {
    const before = m().errorsByReason.proxy_header_invalid;
    const raw = net.connect({ port, host: '127.0.0.1' });
    raw.on('error', () => {});
    await new Promise((r) => raw.once('connect', r));
    const start = Date.now();
    raw.write('PROXY TCP4 203.0.113.9 ');
    await new Promise((r) => raw.once('close', r));
    const took = Date.now() - start;
    assert.ok(took >= HEADER_TIMEOUT_MS - 50, `closed after ${took} ms, before the ${HEADER_TIMEOUT_MS} ms timeout`);
    assert.ok(took < HEADER_TIMEOUT_MS + 2000, `closed after ${took} ms`);
    await h.waitFor(() => m().errorsByReason.proxy_header_invalid === before + 1, { what: 'proxy_header_invalid' });
  });

  await t.test("an untrusted peer's header is not honoured: bad_client_hello, nothing keyed on the header's address", async () => {
    const before = m().errorsByReason.bad_client_hello;
    const r = await viaBalancer({ port, header: v1('192.0.2.66', 1, '198.51.100.1', 443), localAddress: '127.0.0.9' });
    assert.equal(r.secure, false);
    await h.waitFor(() => m().errorsByReason.bad_client_hello === before + 1, { what: 'bad_client_hello' });
    assert.equal(events.filter((e) => e.ip === '192.0.2.66').length, 1, 'only the trusted refusal above');
    // Its own connections are keyed and forwarded on its own address.
    const cBefore = cap.captured.length;
    const d = await viaBalancer({ port, header: null, localAddress: '127.0.0.9' });
    assert.equal(d.secure, true);
    const data = await upstreamSaw(cBefore);
    assert.deepEqual(data, Buffer.concat([v2('127.0.0.9', d.localPort, '127.0.0.1', port), Buffer.from('DATA')]));
    d.socket.destroy();
  });
});

test('acceptProxyProtocol is validated with paths', () => {
  const errs = (app) => {
    try {
      new RampartProxy({
        listeners: [{ host: '127.0.0.1', port: 9, acceptProxyProtocol: app }],
        routes: [{ sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
      });
    } catch (e) {
      return e.errors;
    }
    assert.fail('expected a ConfigError');
  };
  assert.deepEqual(errs({ trustedCidrs: ['10.0.0.0/33', 'nope'], timeoutMs: NaN }), [
    { path: 'listeners[0].acceptProxyProtocol.trustedCidrs[0]', message: errs({ trustedCidrs: ['10.0.0.0/33'] })[0].message },
    { path: 'listeners[0].acceptProxyProtocol.trustedCidrs[1]', message: errs({ trustedCidrs: ['nope'] })[0].message },
    { path: 'listeners[0].acceptProxyProtocol.timeoutMs', message: 'must be an integer in [1, 2^53-1], got NaN' },
  ]);
  assert.deepEqual(errs({ trustedCidrs: [], timeoutMs: -1, extra: 1 }), [
    { path: 'listeners[0].acceptProxyProtocol.extra', message: 'unknown field; expected one of: trustedCidrs, timeoutMs' },
    { path: 'listeners[0].acceptProxyProtocol.trustedCidrs', message: 'must hold at least one CIDR (leave acceptProxyProtocol out to trust no peer)' },
    { path: 'listeners[0].acceptProxyProtocol.timeoutMs', message: 'must be an integer in [1, 2^53-1], got -1' },
  ]);
  assert.deepEqual(errs({ timeoutMs: 10 }), [
    { path: 'listeners[0].acceptProxyProtocol.trustedCidrs', message: "is required (the load balancers' addresses, e.g. ['10.0.0.0/24'])" },
  ]);
  assert.deepEqual(
    errs('yes').map((e) => e.path),
    ['listeners[0].acceptProxyProtocol']
  );
});
