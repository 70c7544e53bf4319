'use strict';
// Shared helpers for the node:test specs: certificates, free ports, upstream servers, real TLS
// clients (node:tls, curl, openssl s_client) and polling instead of sleeps.
const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { execFileSync } = require('node:child_process');
const assert = require('node:assert/strict');
const { generateSelfSignedCert, ConfigError, fingerprintClientHello } = require('../..');
const { run, haveTool, freePort } = require('./proc');

/** Self-signed ECDSA certificate for the given names: `{ certChain, privateKey }` (PEM). */
function selfSigned(hosts = ['localhost', 'example.com', '*.example.com', 'api.example.com']) {
  const [certChain, privateKey] = generateSelfSignedCert(hosts);
  return { certChain, privateKey };
}

/**
 * A real chain made with openssl: root CA → intermediate → leaf for `cn` (+ SANs), with an `rsa`
 * or `ec` leaf key. Returns `{ certChain (leaf+intermediate), privateKey, ca }` (PEM strings).
 */
function opensslChain(cn, keyType = 'rsa') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-chain-'));
  const run = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const keyArgs = keyType === 'rsa' ? ['-newkey', 'rsa:2048'] : ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256'];
  run(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '2',
    '-subj',
    '/CN=Rampart Test Root',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign'
  );
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'int.key', '-out', 'int.csr', '-subj', '/CN=Rampart Test Intermediate');
  fs.writeFileSync(path.join(dir, 'int.ext'), 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n');
  run('x509', '-req', '-in', 'int.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'int.pem', '-days', '2', '-extfile', 'int.ext');
  run('req', ...keyArgs, '-nodes', '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', `/CN=${cn}`);
  fs.writeFileSync(path.join(dir, 'leaf.ext'), `subjectAltName=DNS:${cn}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  run('x509', '-req', '-in', 'leaf.csr', '-CA', 'int.pem', '-CAkey', 'int.key', '-CAcreateserial', '-out', 'leaf.pem', '-days', '2', '-extfile', 'leaf.ext');
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
  const out = { certChain: read('leaf.pem') + read('int.pem'), privateKey: read('leaf.key'), ca: read('ca.pem'), dir };
  return out;
}

/**
 * A client-certificate PKI made with openssl in `dir`: a CA and a client certificate for `cn`
 * (subject `/O=Harper/CN=<cn>`) it signed, or with `intermediate` one signed by an intermediate
 * CA the root signed. Returns `{ ca, cert, key, chain }` (PEM; `chain` is the client's leaf then
 * its intermediate when there is one, what a client presents).
 */
function clientPki(dir, name, cn, { intermediate = false } = {}) {
  const run = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  run(
    'req',
    '-x509',
    ...ec,
    '-keyout',
    `${name}-ca.key`,
    '-out',
    `${name}-ca.pem`,
    '-days',
    '2',
    '-subj',
    `/CN=${name} client CA`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign'
  );
  let signer = `${name}-ca`;
  if (intermediate) {
    run('req', ...ec, '-keyout', `${name}-int.key`, '-out', `${name}-int.csr`, '-subj', `/CN=${name} client intermediate`);
    fs.writeFileSync(path.join(dir, `${name}-int.ext`), 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n');
    run(
      'x509',
      '-req',
      '-in',
      `${name}-int.csr`,
      '-CA',
      `${name}-ca.pem`,
      '-CAkey',
      `${name}-ca.key`,
      '-CAcreateserial',
      '-out',
      `${name}-int.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}-int.ext`
    );
    signer = `${name}-int`;
  }
  run('req', ...ec, '-keyout', `${name}-client.key`, '-out', `${name}-client.csr`, '-subj', `/O=Harper/CN=${cn}`);
  fs.writeFileSync(path.join(dir, 'client.ext'), 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n');
  run(
    'x509',
    '-req',
    '-in',
    `${name}-client.csr`,
    '-CA',
    `${signer}.pem`,
    '-CAkey',
    `${signer}.key`,
    '-CAcreateserial',
    '-out',
    `${name}-client.pem`,
    '-days',
    '2',
    '-extfile',
    'client.ext'
  );
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
  const cert = read(`${name}-client.pem`);
  const chain = intermediate ? cert + read(`${name}-int.pem`) : cert;
  return { ca: read(`${name}-ca.pem`), cert, key: read(`${name}-client.key`), chain };
}

/** `type(1) length(2, big-endian) value` items filling `buf` exactly (PROXY v2 TLVs, SSL sub-TLVs). */
function parseTlvs(buf) {
  const out = [];
  let off = 0;
  while (off < buf.length) {
    assert.ok(off + 3 <= buf.length, `a TLV head cut short at byte ${off}`);
    const len = buf.readUInt16BE(off + 1);
    assert.ok(off + 3 + len <= buf.length, `TLV 0x${buf[off].toString(16)} says ${len} bytes, has ${buf.length - off - 3}`);
    out.push({ type: buf[off], value: buf.subarray(off + 3, off + 3 + len) });
    off += 3 + len;
  }
  return out;
}

/**
 * A PROXY v2 header at the start of `buf`, parsed by hand after HAProxy's spec (§2.2), independent
 * of the addon: `{ command, family, source, destination, tlvs, length, rest }`. `command` is the
 * version/command byte (0x21 PROXY), `family` the family/protocol byte (0x11 TCP4, 0x21 TCP6),
 * `source`/`destination` `{ ip, port }` (IPv6 as eight 4-digit hex groups), `tlvs` `[{ type, value }]` in order, `length` the header's
 * bytes, `rest` what follows. Fails unless a whole header with whole TLVs is there.
 */
function parseProxyV2(buf) {
  assert.ok(buf.length >= 16, `a PROXY v2 header needs 16 bytes, got ${buf.length}`);
  assert.deepEqual(buf.subarray(0, 12), Buffer.from('0d0a0d0a000d0a515549540a', 'hex'), 'PROXY v2 signature');
  const command = buf[12];
  const family = buf[13];
  const length = 16 + buf.readUInt16BE(14);
  assert.ok(buf.length >= length, `header says ${length} bytes, have ${buf.length}`);
  // biome-ignore lint/complexity/useSimpleNumberKeys: the PROXY v2 family bytes, written as the spec writes them
  const addrLen = { 0x11: 12, 0x21: 36 }[family];
  assert.ok(addrLen !== undefined, `family 0x${family.toString(16)}`);
  const ipLen = addrLen === 12 ? 4 : 16;
  const ip = (b) => (ipLen === 4 ? [...b].join('.') : b.toString('hex').match(/..../g).join(':'));
  const at = 16 + 2 * ipLen;
  return {
    command,
    family,
    source: { ip: ip(buf.subarray(16, 16 + ipLen)), port: buf.readUInt16BE(at) },
    destination: { ip: ip(buf.subarray(16 + ipLen, at)), port: buf.readUInt16BE(at + 2) },
    tlvs: parseTlvs(buf.subarray(16 + addrLen, length)),
    length,
    rest: buf.subarray(length),
  };
}

/** A TCP port free on 127.0.0.1 right now. */

/** Several distinct free ports. */
async function freePorts(n) {
  const out = new Set();
  while (out.size < n) out.add(await freePort());
  return [...out];
}

/** Starts a net.Server; resolves once listening. `server.sockets` tracks open sockets. */
async function listen(server, port = 0, host = '127.0.0.1') {
  server.sockets = new Set();
  server.on('connection', (s) => {
    server.sockets.add(s);
    s.on('close', () => server.sockets.delete(s));
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  return server;
}

async function closeServer(server) {
  if (!server) return;
  for (const s of server.sockets || []) s.destroy();
  await new Promise((r) => server.close(() => r()));
}

/** TCP echo upstream; `tag` (optional) is written first on each connection to identify it. */
async function echoServer({ tag, host = '127.0.0.1', path: udsPath } = {}) {
  const server = net.createServer((s) => {
    s.on('error', () => {});
    if (tag) s.write(tag);
    s.pipe(s);
  });
  if (udsPath) {
    server.sockets = new Set();
    await new Promise((resolve) => server.listen(udsPath, resolve));
    return server;
  }
  return listen(server, 0, host);
}

/**
 * Upstream that records everything each connection sends: `server.captured` is a list of
 * `{ data: Buffer, closed: boolean }`; `server.onData(cb)` for waits. On 127.0.0.1, or on the
 * Unix socket `path`. `reply` is written after every chunk received, or, with `until` (a
 * string), once per connection when what it received includes `until` (a PROXY header and the
 * request after it may arrive as one chunk or two).
 */
async function captureServer({ reply, until, path: udsPath } = {}) {
  const captured = [];
  const server = net.createServer((s) => {
    const entry = { data: Buffer.alloc(0), closed: false, socket: s, replied: false };
    captured.push(entry);
    s.on('data', (d) => {
      entry.data = Buffer.concat([entry.data, d]);
      if (!reply || entry.replied) return;
      if (until !== undefined && !entry.data.includes(until)) return;
      if (until !== undefined) entry.replied = true;
      s.write(reply);
    });
    s.on('error', () => {});
    s.on('close', () => (entry.closed = true));
  });
  server.captured = captured;
  if (udsPath) {
    server.sockets = new Set();
    server.on('connection', (c) => {
      server.sockets.add(c);
      c.on('close', () => server.sockets.delete(c));
    });
    await new Promise((resolve) => server.listen(udsPath, resolve));
    return server;
  }
  return listen(server);
}

/** Polls `fn` (sync or async) until it returns truthy; rejects after `timeoutMs`. */
async function waitFor(fn, { timeoutMs = 5000, intervalMs = 10, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * node:tls round trip: connects (optionally from `localAddress`), sends `payload`, collects
 * `expectBytes` bytes (default: payload length + tag length), resolves `{ data, alpn, socket }`.
 */
function tlsRoundTrip({ port, host = '127.0.0.1', servername, payload = Buffer.from('ping'), expect, localAddress, ALPNProtocols, timeoutMs = 5000, ca }) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let got = 0;
    const want = expect !== undefined ? expect : payload.length;
    const sock = tls.connect({ port, host, servername, rejectUnauthorized: Boolean(ca), ca, localAddress, ALPNProtocols });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`tls round trip timed out (${got}/${want} bytes)`));
    }, timeoutMs);
    sock.on('secureConnect', () => sock.write(payload));
    sock.on('data', (d) => {
      chunks.push(d);
      got += d.length;
      if (got >= want) {
        clearTimeout(timer);
        const alpn = sock.alpnProtocol;
        sock.end();
        resolve({ data: Buffer.concat(chunks), alpn, cert: sock.getPeerCertificate() });
      }
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.on('close', () => {
      clearTimeout(timer);
      if (got < want) reject(Object.assign(new Error(`closed after ${got}/${want} bytes`), { code: 'ECLOSED' }));
    });
  });
}

/**
 * Plain TCP connect; resolves 'closed' when the server closes without sending anything within
 * `timeoutMs`, 'open' when still open after `timeoutMs`, 'refused' on ECONNREFUSED.
 */
function tcpProbe({ port, host = '127.0.0.1', localAddress, timeoutMs = 300 }) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host, localAddress });
    let state = 'connecting';
    const t = setTimeout(() => {
      s.destroy();
      resolve(state === 'connected' ? 'open' : 'timeout');
    }, timeoutMs);
    s.on('connect', () => (state = 'connected'));
    s.on('error', (e) => {
      clearTimeout(t);
      resolve(e.code === 'ECONNREFUSED' ? 'refused' : 'closed');
    });
    s.on('close', () => {
      clearTimeout(t);
      resolve('closed');
    });
  });
}

/** Records the raw ClientHello bytes node:tls sends for `servername`. */
async function recordClientHello(servername) {
  let resolveHello;
  const got = new Promise((r) => (resolveHello = r));
  const server = net.createServer((s) => {
    let buf = Buffer.alloc(0);
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length >= 5 && buf.length >= 5 + buf.readUInt16BE(3)) {
        resolveHello(buf.subarray(0, 5 + buf.readUInt16BE(3)));
        s.destroy();
      }
    });
    s.on('error', () => {});
  });
  await listen(server);
  const c = tls.connect({ port: server.address().port, host: '127.0.0.1', servername, rejectUnauthorized: false });
  c.on('error', () => {});
  const hello = await got;
  c.destroy();
  await closeServer(server);
  return hello;
}

function sha256(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex');
}

/** True when `name` is an executable on PATH. */

/**
 * For a test that needs `tool`: true when it is on PATH. Otherwise the test is skipped with the
 * reason (and the install hint), except under CI (`CI=true`), where a missing tool fails it.
 */
function needTool(t, tool, hint = `apt-get install ${tool}`) {
  if (haveTool(tool)) return true;
  skipOrFail(t, `${tool} not found on PATH (${hint})`);
  return false;
}

/** True when this process may add addresses to `lo` and load BPF (root). */
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** True under CI (`CI` set to anything but '', '0' or 'false'), where every prerequisite is installed. */
const underCi = !['', '0', 'false'].includes(String(process.env.CI || '').toLowerCase());

/**
 * A test that cannot run here: outside CI a visible skip with its reason; under CI (which runs as
 * root with every tool installed) a failure, so a missing prerequisite never passes silently.
 */
function skipOrFail(t, why) {
  if (underCi) throw new Error(`cannot run under CI: ${why} (outside CI this is a visible skip)`);
  console.log(`# SKIPPED ${t.name}: ${why}`);
  t.skip(why);
}

/** The `errors` (`[{ path, message }]`) of the ConfigError `fn` throws; fails when it throws none or another error. */
function errorsOf(fn) {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof ConfigError, `expected ConfigError, got ${e}`);
    return e.errors;
  }
  assert.fail('expected a ConfigError');
}

/**
 * Runs `client(port)` (resolves when done) against a plain TCP recorder on 127.0.0.1 and resolves
 * the `fingerprintClientHello` result of the first ClientHello it sends (the recorder then closes).
 */
async function fingerprintOf(client) {
  let done;
  const got = new Promise((r) => (done = r));
  const server = net.createServer((s) => {
    let buf = Buffer.alloc(0);
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const fp = fingerprintClientHello(buf);
      if (fp) {
        done(fp);
        s.destroy();
      }
    });
    s.on('error', () => {});
  });
  await listen(server);
  const running = client(server.address().port);
  const fp = await got;
  await running;
  await closeServer(server);
  return fp;
}

/**
 * This process's connection-worker threads (`rampart-w0`, `rampart-w1`, ...), sorted by name:
 * `[{ name, tid }]`. A thread that ends while listed is left out (a thread names itself once it
 * runs, so poll for a new worker's name).
 */
function workerThreads() {
  const out = [];
  for (const tid of fs.readdirSync('/proc/self/task')) {
    try {
      const name = fs.readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      if (/^rampart-w\d+$/.test(name)) out.push({ name, tid });
    } catch {
      // the thread ended while listed
    }
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

module.exports = {
  workerThreads,
  fingerprintOf,
  errorsOf,
  skipOrFail,
  underCi,
  selfSigned,
  opensslChain,
  clientPki,
  parseProxyV2,
  parseTlvs,
  freePort,
  freePorts,
  listen,
  closeServer,
  echoServer,
  captureServer,
  waitFor,
  tlsRoundTrip,
  tcpProbe,
  recordClientHello,
  run,
  sha256,
  isRoot,
  haveTool,
  needTool,
};

/**
 * A started proxy on a free port in front of a TCP echo upstream, terminating TLS for every SNI.
 * `listener` fields are merged into the single listener; returns `{ proxy, port, echo, events,
 * close() }` where `events` collects 'blocked' payloads.
 */
async function protectedProxy(listener = {}, extra = {}) {
  const { RampartProxy } = require('../..');
  const echo = await echoServer();
  const port = await freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: selfSigned(), ...listener }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
    ...extra,
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  return {
    proxy,
    port,
    echo,
    events,
    async close() {
      await proxy.stop();
      await closeServer(echo);
    },
  };
}

/** A TLS round trip from `localAddress`; resolves true when the echo came back, false when refused. */
async function admitted(port, localAddress, { host = '127.0.0.1', servername = 'localhost' } = {}) {
  try {
    const r = await tlsRoundTrip({ port, host, localAddress, servername, payload: Buffer.from('hi'), timeoutMs: 3000 });
    return r.data.toString() === 'hi';
  } catch {
    return false;
  }
}

module.exports.protectedProxy = protectedProxy;
module.exports.admitted = admitted;
