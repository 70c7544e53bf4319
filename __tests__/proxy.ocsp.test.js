'use strict';
// OCSP stapling from a response the operator refreshes (`cert.ocspResponse`, `ocspFile` in a
// `rampart serve` config file): `openssl s_client -status` sees the stapled response, a new one
// replaces it on reload, a cert without one staples nothing, and garbage is a ConfigError. The
// responses are made by `openssl ocsp` answering from an index, for a leaf of a tiny openssl CA.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { RampartProxy } = require('..');
const { loadConfigFile } = require('../server/config-file');
const { runConfig, plan } = require('../server/plan');
const h = require('./helpers');

/** A leaf for localhost (openssl chain) and DER OCSP responses for it: good, then revoked. */
function pkiWithOcsp() {
  const chain = h.opensslChain('localhost', 'ec');
  const run = (...args) => execFileSync('openssl', args, { cwd: chain.dir, stdio: 'pipe' });
  const serial = run('x509', '-in', 'leaf.pem', '-serial', '-noout').toString().trim().split('=')[1];
  const respond = (status, out) => {
    const line =
      status === 'V' ? `V\t301231000000Z\t\t${serial}\tunknown\t/CN=localhost\n` : `R\t301231000000Z\t260101000000Z\t${serial}\tunknown\t/CN=localhost\n`;
    fs.writeFileSync(path.join(chain.dir, 'index.txt'), line);
    run(
      'ocsp',
      '-index',
      'index.txt',
      '-rsigner',
      'int.pem',
      '-rkey',
      'int.key',
      '-CA',
      'int.pem',
      '-issuer',
      'int.pem',
      '-cert',
      'leaf.pem',
      '-respout',
      out,
      '-ndays',
      '1'
    );
    return fs.readFileSync(path.join(chain.dir, out));
  };
  return { ...chain, good: respond('V', 'good.der'), revoked: respond('R', 'revoked.der') };
}

/** `openssl s_client -status`: the stapled response's status lines, or 'none'. */
async function stapled(port) {
  const r = await h.run('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', 'localhost', '-status', '-ign_eof'], {
    input: '',
    timeoutMs: 5000,
  });
  const out = r.stdout.toString();
  if (out.includes('OCSP response: no response sent')) return 'none';
  const status = out.match(/OCSP Response Status: (\S+)/);
  const cert = out.match(/Cert Status: (\S+)/);
  assert.ok(status && cert, `no OCSP section in:\n${out}${r.stderr}`);
  return `${status[1]} ${cert[1]}`;
}

async function upstream() {
  return h.listen(
    net.createServer((s) => {
      s.on('error', () => {});
      s.end('hello\n');
    })
  );
}

test('ocspResponse is stapled, replaced by updateConfig, absent without it', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const pki = pkiWithOcsp();
  const up = await upstream();
  const port = await h.freePort();
  const upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }];
  const cert = (ocspResponse) => ({ certChain: pki.certChain, privateKey: pki.privateKey, ...(ocspResponse ? { ocspResponse } : {}) });
  const p = new RampartProxy({
    listeners: [{ port, host: '127.0.0.1', defaultCert: cert(pki.good) }],
    routes: [{ sni: 'localhost', upstreams }],
  });
  await p.start();
  t.after(async () => {
    await p.stop();
    await h.closeServer(up);
  });
  assert.equal(await stapled(port), 'successful good', 'the listener default cert staples its response');
  // A route cert with the revoked response: new full handshakes get it.
  p.updateConfig({ routes: [{ sni: 'localhost', upstreams, cert: cert(pki.revoked) }] });
  assert.equal(await stapled(port), 'successful revoked');
  p.updateConfig({ routes: [{ sni: 'localhost', upstreams, cert: cert(pki.good) }] });
  assert.equal(await stapled(port), 'successful good');
  // The same certificate without a response: nothing stapled.
  p.updateConfig({ routes: [{ sni: 'localhost', upstreams, cert: cert(null) }] });
  assert.equal(await stapled(port), 'none');
});

test('an ocspResponse that is not a successful DER OCSPResponse is a ConfigError', () => {
  const pki = pkiWithOcsp();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const errors = h.errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ port: 9443, defaultCert: { certChain: pki.certChain, privateKey: pki.privateKey, ocspResponse: Buffer.from('not der') } }],
        routes: [
          { sni: 'a.test', upstreams: up, cert: { certChain: pki.certChain, privateKey: pki.privateKey, ocspResponse: 'MIIFTAoBAKCC' } },
          {
            sni: 'b.test',
            upstreams: up,
            cert: { certChain: pki.certChain, privateKey: pki.privateKey, ocspResponse: Buffer.from([0x30, 0x03, 0x0a, 0x01, 0x03]) },
          },
          {
            sni: 'c.test',
            upstreams: up,
            cert: { certChain: pki.certChain, privateKey: pki.privateKey, ocspResponse: Buffer.concat([pki.good, Buffer.from([0])]) },
          },
          { sni: 'd.test', upstreams: up, cert: { certChain: pki.certChain, privateKey: pki.privateKey, ocspResponse: Buffer.alloc(0) } },
        ],
      })
  );
  assert.deepEqual(
    errors.map((e) => e.path),
    [
      'listeners[0].defaultCert.ocspResponse',
      'routes[0].cert.ocspResponse',
      'routes[1].cert.ocspResponse',
      'routes[2].cert.ocspResponse',
      'routes[3].cert.ocspResponse',
    ]
  );
  assert.match(errors[0].message, /^is not a DER OCSPResponse \(RFC 6960 §4\.2\.1\): /);
  assert.equal(errors[1].message, 'must be a Buffer, got "MIIFTAoBAKCC"');
  assert.equal(errors[2].message, 'has responseStatus 3 (tryLater), not successful (0): nothing to staple');
  assert.equal(errors[3].message, 'is not a DER OCSPResponse (RFC 6960 §4.2.1): 1 bytes follow the response');
  assert.equal(errors[4].message, 'is empty (expected a DER OCSPResponse)');
});

test('rampart serve config: ocspFile is read as bytes, and a new file is a hot route change', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const pki = pkiWithOcsp();
  const dir = pki.dir;
  fs.writeFileSync(path.join(dir, 'leaf.key.pem'), pki.privateKey);
  fs.writeFileSync(path.join(dir, 'chain.pem'), pki.certChain);
  fs.copyFileSync(path.join(dir, 'good.der'), path.join(dir, 'live.ocsp'));
  const file = path.join(dir, 'rampart.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      proxy: {
        listeners: [{ port: 9443, defaultCert: { certChainFile: 'chain.pem', privateKeyFile: 'leaf.key.pem', ocspFile: 'live.ocsp' } }],
        routes: [{ sni: 'localhost', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
      },
    })
  );
  const a = loadConfigFile(file);
  assert.deepEqual(a.errors, []);
  assert.ok(Buffer.isBuffer(a.proxy.listeners[0].defaultCert.ocspResponse));
  assert.ok(a.proxy.listeners[0].defaultCert.ocspResponse.equals(pki.good));
  assert.ok(
    a.inputs.some((i) => i.path === path.join(dir, 'live.ocsp')),
    'the watcher compares the OCSP file too'
  );
  // The shared defaultCert (with its response) is copied into the route: a new response is a
  // route update, not a new proxy; the same bytes are no change.
  const runA = runConfig(a.proxy);
  assert.ok(Buffer.from(runA.config.routes[0].cert.ocspResponse).equals(pki.good));
  assert.deepEqual(plan(runA, runConfig(loadConfigFile(file).proxy)), { restart: false, update: null, changed: [] });
  fs.copyFileSync(path.join(dir, 'revoked.der'), path.join(dir, 'live.ocsp'));
  const b = loadConfigFile(file);
  const step = plan(runA, runConfig(b.proxy));
  assert.deepEqual([step.restart, step.changed], [false, ['certificates']]);
  assert.ok(Buffer.from(step.update.routes[0].cert.ocspResponse).equals(pki.revoked));
  // A file that is not an OCSP response: the addon's error, with the file named.
  fs.writeFileSync(path.join(dir, 'live.ocsp'), 'garbage');
  const c = loadConfigFile(file);
  assert.deepEqual(
    c.errors.map((e) => e.path),
    ['proxy.listeners[0].defaultCert.ocspResponse']
  );
  assert.match(
    c.errors[0].message,
    /^is not a DER OCSPResponse .* \(from certChainFile .*chain\.pem, privateKeyFile .*leaf\.key\.pem, ocspFile .*live\.ocsp\)$/
  );
});

test('rampart serve: a rewritten ocspFile is stapled on the next handshakes (a hot certificate update)', async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const s = require('./helpers/server');
  const pki = pkiWithOcsp();
  const up = await upstream();
  t.after(() => h.closeServer(up));
  const [port, adminPort] = await h.freePorts(2);
  fs.writeFileSync(path.join(pki.dir, 'chain.pem'), pki.certChain);
  fs.writeFileSync(path.join(pki.dir, 'leaf.key.pem'), pki.privateKey);
  fs.copyFileSync(path.join(pki.dir, 'good.der'), path.join(pki.dir, 'live.ocsp'));
  const doc = s.baseConfig({ port, upstreamPort: up.address().port, adminPort, cert: 'chain.pem', key: 'leaf.key.pem' });
  doc.proxy.listeners[0].defaultCert.ocspFile = 'live.ocsp';
  const file = path.join(pki.dir, 'rampart.json');
  s.writeJson(file, doc);
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  assert.equal(await stapled(port), 'successful good');
  // The renewal job's way: write beside, rename over.
  const ev = await child.reloadAfter(() => {
    fs.copyFileSync(path.join(pki.dir, 'revoked.der'), path.join(pki.dir, 'live.ocsp.tmp'));
    fs.renameSync(path.join(pki.dir, 'live.ocsp.tmp'), path.join(pki.dir, 'live.ocsp'));
  });
  assert.deepEqual([ev.trigger, ev.ok, ev.applied, ev.changed], ['file', true, 'update', ['certificates']]);
  assert.equal(await stapled(port), 'successful revoked');
});
