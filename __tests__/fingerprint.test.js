'use strict';
// JA3/JA4 with real clients: each client's hello is recorded and fingerprinted, then a JA4 (or
// JA3) blocklist built from one client's fingerprint blocks that client with the exact reason
// while another client gets through; fingerprints ride a PROXY v2 TLV to the upstream.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const http = require('node:http');
const { RampartProxy } = require('..');
const h = require('./helpers');

const SNI = 'fp.test';

const recordWith = h.fingerprintOf;

const clients = {
  nodeAlpn: {
    run: (port) => nodeGet(port, ['h2', 'http/1.1']),
  },
  nodePlain: {
    run: (port) => nodeGet(port, undefined),
  },
  curl: {
    run: async (port) => {
      const r = await h.run('curl', ['-sk', '--http1.1', '--max-time', '3', '--resolve', `${SNI}:${port}:127.0.0.1`, `https://${SNI}:${port}/`]);
      return r.code === 0 && r.stdout.toString() === 'fp-ok';
    },
  },
  openssl12: {
    run: (port) => opensslGet(port, ['-tls1_2']),
  },
  openssl13Alpn: {
    run: (port) => opensslGet(port, ['-tls1_3', '-alpn', 'http/1.1']),
  },
};

function nodeGet(port, ALPNProtocols) {
  return new Promise((resolve) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols });
    let out = '';
    const t = setTimeout(() => s.destroy(), 3000);
    s.on('secureConnect', () => s.write(`GET / HTTP/1.1\r\nHost: ${SNI}\r\nConnection: close\r\n\r\n`));
    s.on('data', (d) => (out += d));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(t);
      resolve(out.endsWith('fp-ok'));
    });
  });
}

async function opensslGet(port, args) {
  const r = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', SNI, '-quiet', ...args], {
    input: `GET / HTTP/1.0\r\nHost: ${SNI}\r\n\r\n`,
    timeoutMs: 4000,
  });
  return r.stdout.toString().endsWith('fp-ok');
}

test('JA3/JA4 blocklists block the fingerprinted client and let the others through', async (t) => {
  const fps = {};
  for (const [name, c] of Object.entries(clients)) {
    fps[name] = await recordWith((port) => c.run(port));
  }
  // Sanity: the fingerprints have the documented shapes and tell the clients apart.
  for (const [name, fp] of Object.entries(fps)) {
    assert.match(fp.ja3, /^[0-9a-f]{32}$/, name);
    assert.match(fp.ja4, /^t1[23]d\d{4}[0-9a-z]{2}_[0-9a-f]{12}_[0-9a-f]{12}$/, name);
    assert.equal(fp.sni, SNI);
  }
  assert.equal(fps.openssl12.ja4.slice(0, 3), 't12');
  assert.equal(fps.openssl13Alpn.ja4.slice(0, 3), 't13');
  assert.equal(fps.openssl13Alpn.ja4.slice(8, 10), 'h1');
  assert.equal(fps.nodeAlpn.ja4.slice(8, 10), 'h2');
  assert.equal(fps.nodePlain.ja4.slice(8, 10), '00');
  assert.equal(new Set(Object.values(fps).map((f) => f.ja4)).size, 5);

  const web = await h.listen(http.createServer((_req, res) => res.end('fp-ok')));
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned([SNI]), protection: {} }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: web.address().port }] }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(web);
  });
  for (const [name, c] of Object.entries(clients)) assert.equal(await c.run(port), true, `${name} without a blocklist`);

  const cases = [
    ['nodeAlpn', 'curl'],
    ['curl', 'nodeAlpn'],
    ['openssl12', 'openssl13Alpn'],
    ['openssl13Alpn', 'nodePlain'],
  ];
  for (const [blocked, other] of cases) {
    events.length = 0;
    proxy.updateConfig({ protection: [{ port, protection: { ja4Blocklist: [fps[blocked].ja4.toUpperCase()] } }] });
    assert.equal(await clients[blocked].run(port), false, `${blocked} must be blocked`);
    assert.equal(await clients[other].run(port), true, `${other} must pass`);
    await h.waitFor(() => events.length === 1, { what: `the ja4_blocked event for ${blocked}` });
    assert.deepEqual(
      { reason: events[0].reason, ja4: events[0].ja4, ja3: events[0].ja3, ip: events[0].ip },
      { reason: 'ja4_blocked', ja4: fps[blocked].ja4, ja3: fps[blocked].ja3, ip: '127.0.0.1' }
    );
  }

  events.length = 0;
  proxy.updateConfig({ protection: [{ port, protection: { ja3Blocklist: [fps.nodePlain.ja3] } }] });
  assert.equal(await clients.nodePlain.run(port), false);
  assert.equal(await clients.openssl12.run(port), true);
  await h.waitFor(() => events.length === 1, { what: 'the ja3_blocked event' });
  assert.equal(events[0].reason, 'ja3_blocked');
  assert.equal(events[0].ja3, fps.nodePlain.ja3);

  // Malformed entries are config errors naming the entry.
  assert.throws(
    () => proxy.updateConfig({ protection: [{ port, protection: { ja3Blocklist: ['xyz'], ja4Blocklist: ['t13d1516h2_8daaf6152771'] } }] }),
    (e) => {
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['protection[0].protection.ja3Blocklist[0]', 'protection[0].protection.ja4Blocklist[0]']
      );
      return true;
    }
  );
});

test('a ClientHello that cannot be fully read while a list is set is incomplete_handshake', async (t) => {
  const p = await h.protectedProxy({ protection: { ja4Blocklist: ['t13d1516h2_8daaf6152771_e5627efa2ab1'] } });
  t.after(() => p.close());
  const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.4' });
  s.on('error', () => {});
  await new Promise((r) => s.once('connect', r));
  s.end(Buffer.from('160301', 'hex')); // three bytes of a record header, then FIN
  await h.waitFor(() => p.events.length === 1, { what: 'incomplete_handshake event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason, p.events[0].ja4], ['127.0.0.4', 'incomplete_handshake', '']);
});

test('forwardFingerprint: ja4 rides PROXY v2 TLV 0xE1 to the upstream', async (t) => {
  const fp = await recordWith((port) => nodeGet(port, ['h2', 'http/1.1']));
  const cap = await h.captureServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned([SNI]) }],
    routes: [
      {
        sni: '',
        terminateTls: true,
        sourceAddressHeader: 'proxyProtocolV2',
        forwardFingerprint: 'ja4',
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }],
      },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  const s = tls.connect({ port, host: '127.0.0.1', servername: SNI, rejectUnauthorized: false, ALPNProtocols: ['h2', 'http/1.1'] });
  s.on('error', () => {});
  await new Promise((r) => s.once('secureConnect', r));
  s.write('X');
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.at(-1) === 0x58, { what: 'upstream data' });
  const v2 = h.parseProxyV2(cap.captured[0].data);
  // The fingerprint first, then the SNI, the ALPN and the SSL TLV (proxy.proxy-v2-tlvs.test.js).
  assert.deepEqual(
    v2.tlvs.map((x) => x.type),
    [0xe1, 0x02, 0x01, 0x20]
  );
  assert.equal(v2.tlvs[0].value.toString(), fp.ja4);
  assert.equal(v2.rest.toString(), 'X');
  s.destroy();
});
