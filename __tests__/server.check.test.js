'use strict';
// `rampart check` and `rampart version` as child processes: a valid file prints "ok"; an invalid
// one prints every problem as `path: message` (paths from the top of the file) and exits 1.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const s = require('./helpers/server');

test.after(s.cleanup);

function configDir() {
  const dir = s.tempDir();
  s.writeCert(dir);
  return dir;
}

async function check(dir, doc, { name = 'rampart.json', cwd = os.tmpdir() } = {}) {
  const file = path.join(dir, name);
  if (typeof doc === 'string') fs.writeFileSync(file, doc);
  else s.writeJson(file, doc);
  const r = await s.runCli(['check', '--config', file], { cwd });
  return { ...r, file, problems: r.stderr.split('\n').slice(1).filter(Boolean) };
}

const valid = () => s.baseConfig({ port: 8443, upstreamPort: 9926, adminPort: 9901 });

test('a valid file with cert files relative to it prints ok and exits 0 (whatever the cwd)', async () => {
  const dir = configDir();
  const r = await check(dir, valid(), { cwd: '/' });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'ok\n');
  assert.equal(r.stderr, '');
});

test('every problem is printed with its path, and the exit status is 1', async () => {
  const dir = configDir();
  const doc = valid();
  doc.admin.port = 70000;
  doc.drainMs = -1;
  doc.extra = true;
  doc.proxy.listeners[0].defaultCert.certChainFile = 'missing.pem';
  doc.proxy.listeners[0].idleTimeoutMs = 'soon';
  const r = await check(dir, doc);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  assert.match(r.stderr.split('\n')[0], /rampart\.json: 5 problems$/);
  assert.deepEqual(
    r.problems.sort(),
    [
      'admin.port: must be an integer in [0, 65535], got 70000',
      'drainMs: must be a finite number of ms in [0, 3600000], got -1',
      'extra: unknown field; expected one of: proxy, admin, xdp, drainMs',
      `proxy.listeners[0].defaultCert.certChainFile: cannot read ${path.join(dir, 'missing.pem')}: ENOENT (no such file or directory)`,
      r.problems.find((p) => p.startsWith('proxy.listeners[0].idleTimeoutMs: ')),
    ].sort()
  );
});

test('a file that is not JSON is reported with its line and column', async () => {
  const dir = configDir();
  const r = await check(dir, '{\n  "proxy": {,\n}\n');
  assert.equal(r.code, 1);
  assert.equal(r.problems.length, 1);
  assert.match(r.problems[0], /^\(file\): invalid JSON: .* \(line 2, column 13\)$/);
});

test('a missing file is reported as unreadable', async () => {
  const dir = s.tempDir();
  const file = path.join(dir, 'nope.json');
  const r = await s.runCli(['check', '--config', file]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, new RegExp(`\\(file\\): cannot read ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: ENOENT`));
});

test('the file must be an object with a proxy', async () => {
  const dir = configDir();
  let r = await check(dir, '[]');
  assert.deepEqual(r.problems, ['(file): must be a JSON object { proxy, admin?, xdp?, drainMs? }, got an array']);
  r = await check(dir, { drainMs: 10 });
  assert.deepEqual(r.problems, ['proxy: required: the ProxyConfig { listeners, routes, ... }']);
});

test("ProxyConfig errors are the addon's own, prefixed proxy., and name the cert files they came from", async () => {
  const dir = configDir();
  fs.writeFileSync(path.join(dir, 'junk.pem'), 'not a certificate\n');
  const doc = valid();
  doc.proxy.listeners[0].defaultCert.certChainFile = 'junk.pem';
  doc.proxy.listeners[0].port = 0;
  const r = await check(dir, doc);
  assert.equal(r.code, 1);
  assert.equal(r.problems.length, 2, r.stderr);
  assert.ok(
    r.problems.some((p) => /^proxy\.listeners\[0\]\.port: /.test(p)),
    r.stderr
  );
  const cert = r.problems.find((p) => p.startsWith('proxy.listeners[0].defaultCert'));
  assert.ok(cert, r.stderr);
  assert.ok(cert.includes(`(from certChainFile ${path.join(dir, 'junk.pem')}, privateKeyFile ${path.join(dir, 'key.pem')})`), cert);
});

test('certChain and certChainFile together is an error; a route cert may name files too', async () => {
  const dir = configDir();
  const doc = valid();
  doc.proxy.listeners[0].defaultCert.certChain = 'inline';
  doc.proxy.routes[0].cert = { certChainFile: 'cert.pem', privateKeyFile: 'nokey.pem' };
  const r = await check(dir, doc);
  assert.equal(r.code, 1);
  assert.deepEqual(r.problems.sort(), [
    'proxy.listeners[0].defaultCert.certChainFile: give certChain or certChainFile, not both',
    `proxy.routes[0].cert.privateKeyFile: cannot read ${path.join(dir, 'nokey.pem')}: ENOENT (no such file or directory)`,
  ]);
});

test('a route that fails to build is a warning (the others serve), naming its cert files', async () => {
  const dir = configDir();
  s.writeCert(dir, { cert: 'b.pem', key: 'b.key', hosts: ['b.test'] });
  const doc = valid();
  // b.test's new chain beside the listener's key: a mismatch, that route alone is dropped.
  doc.proxy.routes.unshift({
    sni: 'b.test',
    cert: { certChainFile: 'b.pem', privateKeyFile: 'key.pem' },
    upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 9926 }],
  });
  const r = await check(dir, doc);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'ok\n');
  const lines = r.stderr.split('\n').filter(Boolean);
  assert.equal(lines.length, 1, r.stderr);
  assert.ok(lines[0].startsWith('warning: proxy.routes[0].cert: privateKey does not match the first certificate of certChain'), lines[0]);
  assert.ok(
    lines[0].endsWith(
      `(from certChainFile ${path.join(dir, 'b.pem')}, privateKeyFile ${path.join(dir, 'key.pem')}): this route fails to build and is not served (the other routes are; see Route isolation)`
    ),
    lines[0]
  );
});

test('admin: port and/or socketPath, a token of 16+ characters, token or tokenFile, an IP host', async () => {
  const dir = configDir();
  const cases = [
    [{}, ['admin: give port (with host, default 127.0.0.1) and/or socketPath']],
    [{ socketPath: 'a.sock', host: '127.0.0.1' }, ['admin.host: only with port (socketPath listens on a unix socket)']],
    [{ socketPath: `/tmp/${'x'.repeat(120)}.sock` }, [`admin.socketPath: /tmp/${'x'.repeat(120)}.sock is 130 bytes; a unix socket path is at most 107`]],
    [{ port: 9901, host: 'localhost' }, ['admin.host: must be an IP address such as "127.0.0.1" or "::1", got "localhost"']],
    [{ port: 9901, token: 'short' }, ['admin.token: must be 16 to 4096 characters, got 5 (e.g. openssl rand -hex 32)']],
    [{ port: 9901, token: 'has a space in it, quite long' }, ['admin.token: must be printable ASCII without spaces']],
    [{ port: 9901, token: s.TOKEN, tokenFile: 't' }, ['admin.tokenFile: give token or tokenFile, not both']],
    [{ port: 9901, tokenFile: 'missing-token' }, [`admin.tokenFile: cannot read ${path.join(dir, 'missing-token')}: ENOENT (no such file or directory)`]],
    [
      { port: 9901, tokn: 'x' },
      ['admin.tokn: unknown field; expected one of: host, port, socketPath, token, tokenFile, allowedHosts, maxConnectionsPerAddress'],
    ],
    [{ port: 1.5 }, ['admin.port: must be an integer in [0, 65535], got 1.5']],
  ];
  for (const [adminCfg, want] of cases) {
    const doc = valid();
    doc.admin = adminCfg;
    const r = await check(dir, doc);
    assert.equal(r.code, 1, JSON.stringify(adminCfg));
    assert.deepEqual(r.problems, want, JSON.stringify(adminCfg));
  }
  fs.writeFileSync(path.join(dir, 'token'), `${s.TOKEN}\n`);
  const doc = valid();
  doc.admin = { socketPath: 'admin.sock', tokenFile: 'token' };
  assert.equal((await check(dir, doc)).code, 0);
});

test('xdp: an interface name and an optional mode', async () => {
  const dir = configDir();
  const cases = [
    [{}, ["xdp.interface: must be a network interface name (1-15 characters, no spaces or '/'), got nothing"]],
    [{ interface: 'eth0', mode: 'fast' }, ["xdp.mode: must be one of 'auto', 'native', 'generic', got \"fast\""]],
    [{ interface: 'eth0', iface: 'x' }, ['xdp.iface: unknown field; expected one of: interface, mode']],
    ['eth0', ['xdp: must be an object { interface, mode? }, got "eth0"']],
  ];
  for (const [xdp, want] of cases) {
    const doc = valid();
    doc.xdp = xdp;
    const r = await check(dir, doc);
    assert.deepEqual(r.problems, want, JSON.stringify(xdp));
  }
  const doc = valid();
  doc.xdp = { interface: 'eth0', mode: 'generic' };
  assert.equal((await check(dir, doc)).code, 0);
});

test('version prints the package version; bad usage exits 2 with the usage text', async () => {
  const { version } = require('../package.json');
  const v = await s.runCli(['version']);
  assert.equal(v.code, 0);
  assert.equal(v.stdout, `rampart ${version}\n`);
  for (const args of [[], ['frobnicate'], ['check'], ['serve'], ['check', '--config'], ['serve', '--config', 'x', '--log', 'xml'], ['check', '--nope']]) {
    const r = await s.runCli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /usage:\n {2}rampart serve --config FILE/, args.join(' '));
  }
  const h = await s.runCli(['--help']);
  assert.equal(h.code, 0);
  assert.match(h.stdout, /rampart check --config FILE/);
});
