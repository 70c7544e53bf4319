'use strict';
// `tls` on listeners and routes: versions, cipher suites and their order, groups, and session
// resumption (tickets and session ids) that survives an updateConfig keeping the certificate.
// Real clients: openssl s_client (-sess_out / -sess_in) and node:tls sessions.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** An upstream that greets and closes: the client reads tickets, the greeting, then the end. */
async function greeter() {
  return h.listen(
    net.createServer((s) => {
      s.on('error', () => {});
      s.end('hello\n');
    })
  );
}

/**
 * `openssl s_client` to `port` for `servername` with `args`; resolves `{ code, state, cipher,
 * version, tempKey, ticketHint, out }` from its report (`state` 'New' or 'Reused').
 */
async function sClient(port, servername, args = []) {
  const r = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', servername, '-ign_eof', ...args], {
    input: '',
    timeoutMs: 5000,
  });
  const out = r.stdout.toString();
  const m = out.match(/^(New|Reused), (\S+), Cipher is (\S+)$/m) || [];
  const key = out.match(/^Server Temp Key: (.*)$/m);
  const hint = out.match(/lifetime hint: (\d+)/);
  return {
    code: r.code,
    state: m[1],
    version: m[2],
    cipher: m[3],
    tempKey: key && key[1],
    ticketHint: hint && Number(hint[1]),
    greeted: out.includes('hello\n'),
    out: out + r.stderr.toString(),
  };
}

/**
 * node:tls connection; resolves at close `{ reused, protocol, cipher, session }` (`session`: the
 * last one the server gave, for the next connection).
 */
function nodeSession(port, servername, { session, maxVersion = 'TLSv1.3', minVersion = 'TLSv1.2' } = {}) {
  return new Promise((resolve, reject) => {
    const got = {};
    const s = tls.connect({ port, host: '127.0.0.1', servername, session, rejectUnauthorized: false, maxVersion, minVersion });
    s.on('session', (sess) => (got.session = sess));
    s.on('secureConnect', () => Object.assign(got, { reused: s.isSessionReused(), protocol: s.getProtocol(), cipher: s.getCipher().name }));
    s.on('data', () => {});
    s.on('error', reject);
    s.on('close', () => (got.protocol ? resolve(got) : reject(new Error('closed before the handshake'))));
  });
}

test('tls config errors name every bad field', () => {
  const cert = h.selfSigned(['localhost']);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const errors = h.errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ port: 9443, defaultCert: cert, tls: { minVersion: 'TLSv1.3', maxVersion: 'TLSv1.2', groups: ['X448'] } }],
        routes: [
          { sni: 'a.test', upstreams: up, tls: { cipherSuites: ['TLS_AES_128_GCM_SHA256'] } },
          { sni: 'b.test', upstreams: up, terminateTls: false, tls: { sessionTickets: 'yes' } },
          { sni: 'c.test', upstreams: up, tls: { cipherSuites: ['AES128-SHA'], sessionCacheSize: 1.5 } },
        ],
      })
  );
  assert.deepEqual(
    errors.map((e) => e.path),
    [
      'listeners[0].tls.maxVersion',
      'listeners[0].tls.groups[0]',
      'routes[0].tls.cipherSuites',
      'routes[1].tls.sessionTickets',
      'routes[1].tls',
      'routes[2].tls.cipherSuites[0]',
      'routes[2].tls.sessionCacheSize',
    ]
  );
  assert.equal(errors[0].message, 'TLSv1.2 is older than minVersion TLSv1.3 (minVersion must not be newer than maxVersion)');
  assert.match(errors[1].message, /^unknown group "X448": expected one of 'X25519MLKEM768', 'X25519', 'secp256r1'/);
  assert.equal(errors[2].message, 'names no TLSv1.2 suite but TLSv1.2 is allowed (minVersion TLSv1.2, maxVersion TLSv1.3): add one or narrow the versions');
  assert.equal(errors[4].message, "needs terminateTls: true (a passthrough route's TLS is the upstream's)");
  assert.match(errors[5].message, /^unknown cipher suite "AES128-SHA": CBC suites are not offered/);
});

test('tls fields against openssl s_client', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const up = await greeter();
  const port = await h.freePort();
  const upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }];
  // selfSigned is ECDSA: the ECDSA TLS 1.2 suites apply.
  const order = ['ECDHE-ECDSA-CHACHA20-POLY1305', 'TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256', 'TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_128_GCM_SHA256'];
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost', '*.localhost']) }],
    routes: [
      { sni: 'localhost', upstreams },
      { sni: 'only13.localhost', upstreams, tls: { minVersion: 'TLSv1.3' } },
      { sni: 'only12.localhost', upstreams, tls: { maxVersion: 'TLSv1.2' } },
      { sni: 'server.localhost', upstreams, tls: { cipherSuites: order, preferServerCipherOrder: true } },
      { sni: 'client.localhost', upstreams, tls: { cipherSuites: order } },
      { sni: 'p384.localhost', upstreams, tls: { groups: ['P-384'] } },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(up);
  });

  await t.test('defaults: TLS 1.3 and 1.2 both served', async () => {
    const a = await sClient(port, 'localhost', ['-tls1_3']);
    assert.deepEqual([a.state, a.version, a.cipher, a.greeted], ['New', 'TLSv1.3', 'TLS_AES_256_GCM_SHA384', true]);
    const b = await sClient(port, 'localhost', ['-tls1_2']);
    assert.deepEqual([b.state, b.version, b.cipher, b.greeted], ['New', 'TLSv1.2', 'ECDHE-ECDSA-AES256-GCM-SHA384', true]);
  });

  await t.test('minVersion TLSv1.3 refuses a TLS 1.2 client; maxVersion TLSv1.2 serves 1.2', async () => {
    const refused = await sClient(port, 'only13.localhost', ['-tls1_2']);
    assert.equal(refused.code, 1);
    assert.equal(refused.state, 'New');
    assert.equal(refused.cipher, '(NONE)');
    assert.match(refused.out, /alert protocol version/);
    const ok = await sClient(port, 'only13.localhost', []);
    assert.equal(ok.version, 'TLSv1.3');
    const capped = await sClient(port, 'only12.localhost', []);
    assert.deepEqual([capped.version, capped.greeted], ['TLSv1.2', true]);
  });

  await t.test('preferServerCipherOrder: our order wins; without it the client order does', async () => {
    const clientPrefs = [
      '-cipher',
      'ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305',
      '-ciphersuites',
      'TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256',
    ];
    const s12 = await sClient(port, 'server.localhost', ['-tls1_2', ...clientPrefs]);
    assert.equal(s12.cipher, 'ECDHE-ECDSA-CHACHA20-POLY1305');
    const s13 = await sClient(port, 'server.localhost', ['-tls1_3', ...clientPrefs]);
    assert.equal(s13.cipher, 'TLS_CHACHA20_POLY1305_SHA256');
    const c12 = await sClient(port, 'client.localhost', ['-tls1_2', ...clientPrefs]);
    assert.equal(c12.cipher, 'ECDHE-ECDSA-AES128-GCM-SHA256');
    const c13 = await sClient(port, 'client.localhost', ['-tls1_3', ...clientPrefs]);
    assert.equal(c13.cipher, 'TLS_AES_128_GCM_SHA256');
    // A suite left out of cipherSuites is never chosen.
    const none = await sClient(port, 'server.localhost', ['-tls1_3', '-ciphersuites', 'TLS_AES_256_GCM_SHA384']);
    assert.deepEqual([none.code, none.cipher], [1, '(NONE)']);
  });

  await t.test('groups: only the listed group is negotiated', async () => {
    for (const v of ['-tls1_3', '-tls1_2']) {
      const ok = await sClient(port, 'p384.localhost', [v, '-groups', 'X25519:P-256:P-384']);
      assert.equal(ok.tempKey, 'ECDH, secp384r1, 384 bits', v);
      const refused = await sClient(port, 'p384.localhost', [v, '-groups', 'X25519:P-256']);
      assert.deepEqual([refused.code, refused.cipher], [1, '(NONE)'], v);
    }
    const dflt = await sClient(port, 'localhost', ['-tls1_3', '-groups', 'X25519:P-384']);
    assert.equal(dflt.tempKey, 'X25519, 253 bits');
  });
});

test('resumption survives an updateConfig that keeps the certificate', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const up = await greeter();
  const other = await greeter();
  const port = await h.freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-sess-'));
  const certA = h.selfSigned(['localhost', '*.localhost']);
  const certB = h.selfSigned(['localhost', '*.localhost']);
  const route = (cert, upstream, extra = {}) => ({
    sni: 'localhost',
    cert,
    upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upstream.address().port }],
    ...extra,
  });
  // Tickets only (sessionCacheSize 0) and session ids only (sessionTickets false) on their own names.
  const routes = (cert, upstream) => [
    route(cert, upstream),
    { ...route(cert, upstream), sni: 'tickets.localhost', tls: { sessionCacheSize: 0 } },
    { ...route(cert, upstream), sni: 'ids.localhost', tls: { sessionTickets: false } },
  ];
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: routes(certA, up) });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(up);
    await h.closeServer(other);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  // One saved session per (name, version) for openssl, and per name for node.
  const cases = [
    ['localhost', '-tls1_3'],
    ['localhost', '-tls1_2'],
    ['tickets.localhost', '-tls1_3'],
    ['tickets.localhost', '-tls1_2'],
    ['ids.localhost', '-tls1_2'],
  ];
  const file = (name, v) => path.join(dir, `${name}${v}.pem`);
  const nodeSessions = {};

  await t.test('full handshakes save sessions (TLS 1.2 tickets where enabled)', async () => {
    for (const [name, v] of cases) {
      const r = await sClient(port, name, [v, '-sess_out', file(name, v)]);
      assert.deepEqual([r.state, r.greeted], ['New', true], `${name} ${v}`);
      // A ticket (12 h hint) unless tickets are off: then a session id only.
      assert.equal(r.ticketHint, name === 'ids.localhost' ? null : 43200, `${name} ${v}`);
    }
    for (const maxVersion of ['TLSv1.3', 'TLSv1.2']) {
      const r = await nodeSession(port, 'localhost', { maxVersion });
      assert.equal(r.reused, false);
      assert.ok(r.session, `node got a ${maxVersion} session`);
      nodeSessions[maxVersion] = r.session;
    }
  });

  const resumesAll = async (what) => {
    for (const [name, v] of cases) {
      const r = await sClient(port, name, [v, '-sess_in', file(name, v)]);
      assert.deepEqual([r.state, r.version, r.greeted], ['Reused', v === '-tls1_3' ? 'TLSv1.3' : 'TLSv1.2', true], `${what}: ${name} ${v}`);
    }
    for (const maxVersion of ['TLSv1.3', 'TLSv1.2']) {
      const r = await nodeSession(port, 'localhost', { maxVersion, session: nodeSessions[maxVersion] });
      assert.deepEqual([r.reused, r.protocol], [true, maxVersion], `${what}: node ${maxVersion}`);
    }
  };

  await t.test('resumed before any change', () => resumesAll('before'));

  await t.test('resumed after updateConfig changes routes but not the certificate', async () => {
    proxy.updateConfig({ routes: [...routes(certA, other), route(certA, up, { sni: 'new.localhost' })] });
    await resumesAll('after a route change');
  });

  await t.test('a session is not resumed under another name with the same certificate', async () => {
    const r = await sClient(port, 'new.localhost', ['-tls1_3', '-sess_in', file('localhost', '-tls1_3')]);
    assert.deepEqual([r.state, r.greeted], ['New', true]);
  });

  await t.test('not resumed after the certificate changes', async () => {
    proxy.updateConfig({ routes: routes(certB, other) });
    for (const [name, v] of cases) {
      const r = await sClient(port, name, [v, '-sess_in', file(name, v)]);
      assert.deepEqual([r.state, r.greeted], ['New', true], `${name} ${v}`);
    }
    for (const maxVersion of ['TLSv1.3', 'TLSv1.2']) {
      const r = await nodeSession(port, 'localhost', { maxVersion, session: nodeSessions[maxVersion] });
      assert.equal(r.reused, false, `node ${maxVersion}`);
    }
  });
});
