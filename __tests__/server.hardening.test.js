'use strict';
// No input stops `rampart serve`, and the admin API holds: a config nested 2,000 levels deep is a
// ConfigError with a path (JS API, `rampart check`, start and every kind of reload, the old config
// still serving), slow sockets cannot take the admin API's slots, a `Host` that is not the API's
// own is refused (DNS rebinding), and a world-readable token file or a trustedCidrs covering
// every address is warned about.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const h = require('./helpers');
const s = require('./helpers/server');
const { RampartProxy, MAX_CONFIG_DEPTH } = require('..');

const servers = s.echoSuite(test);
const tok = { token: s.TOKEN };
const DEPTH_MESSAGE = 'nested deeper than 64 levels';

/** `levels` arrays nested in one another around 1. */
function nested(levels) {
  let v = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

/** `times` × `[0]`: the path of the first array past the bound, inside `levels` nested arrays. */
const zeros = (times) => '[0]'.repeat(times);

const configDir = (edit) => s.configDir(servers[''].address().port, edit);

/** The base config with 2,000 nested arrays under `routes[0].upstreams[0].extra`. */
function deepDoc(doc) {
  const deep = structuredClone(doc);
  deep.proxy.routes[0].upstreams[0].extra = nested(2000);
  return deep;
}
// top object 1, proxy 2, routes 3, routes[0] 4, upstreams 5, upstreams[0] 6, extra 7: the
// array at level 65 is 58 levels inside `extra`.
const DEEP_PATH = `proxy.routes[0].upstreams[0].extra${zeros(65 - 7)}`;

test('JS API: a config, an update or opts nested 2,000 deep (or cyclic) is a ConfigError with the path', async () => {
  assert.equal(MAX_CONFIG_DEPTH, 64);
  const config = { listeners: [{ port: 1 }], routes: [{ sni: 'a.example', upstreams: [{ host: '127.0.0.1', port: 9, x: nested(2000) }] }] };
  // config 1, routes 2, routes[0] 3, upstreams 4, upstreams[0] 5, x 6
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy(config)),
    [{ path: `routes[0].upstreams[0].x${zeros(65 - 6)}`, message: DEPTH_MESSAGE }]
  );
  // Deeper than V8's own JSON.stringify can go.
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy({ listeners: [{ port: 1 }], routes: nested(100000) })),
    [{ path: `routes${zeros(65 - 2)}`, message: DEPTH_MESSAGE }]
  );
  const cyclic = {};
  cyclic.self = cyclic;
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy(cyclic)),
    [{ path: Array(64).fill('self').join('.'), message: DEPTH_MESSAGE }]
  );
  // Exactly 64 levels is not refused for depth: only the unknown field is wrong.
  const at64 = h.errorsOf(() => new RampartProxy({ listeners: [{ port: 1 }], routes: [], x: nested(63) }));
  assert.deepEqual(
    at64.map((e) => e.path),
    ['x']
  );
  assert.match(at64[0].message, /^unknown field/);

  const proxy = new RampartProxy({ listeners: [{ port: 1, host: '127.0.0.1' }], routes: [] });
  assert.deepEqual(
    h.errorsOf(() => proxy.updateConfig({ routes: nested(2000) })),
    [{ path: `routes${zeros(65 - 2)}`, message: DEPTH_MESSAGE }]
  );
  assert.deepEqual(
    h.errorsOf(() => proxy.blockIp('192.0.2.1', { reason: nested(2000) })),
    [{ path: `opts.reason${zeros(65 - 2)}`, message: DEPTH_MESSAGE }]
  );
  // Nothing was applied: a valid call still works.
  proxy.updateConfig({ routes: [] });
});

test('rampart check: a config file nested 2,000 deep is one error line with the path, exit 1, no stack trace', async () => {
  const { file, doc } = await configDir();
  s.writeJson(file, deepDoc(doc));
  const r = await s.runCli(['check', '--config', file]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  assert.equal(r.stderr, `${file}: 1 problem\n${DEEP_PATH}: ${DEPTH_MESSAGE}\n`);
  // A file past the size bound is refused unread.
  fs.writeFileSync(file, `${' '.repeat(8 << 20)}{}`);
  const big = await s.runCli(['check', '--config', file]);
  assert.equal(big.code, 1);
  assert.equal(big.stderr, `${file}: 1 problem\n(file): cannot read ${file}: EFBIG (larger than 8 MiB)\n`);
});

test('rampart serve: a 2,000-deep file at start exits 1 naming the path; on reload (file, SIGHUP, POST /reload) it is refused and the old config keeps serving', async (t) => {
  const { file, doc, port, api } = await configDir();
  s.writeJson(file, deepDoc(doc));
  const refused = new s.ServerChild(['serve', '--config', file]);
  assert.deepEqual(await refused.exited, { code: 1, signal: null });
  assert.equal(refused.stderr, `rampart: ${file}: invalid config\n  ${DEEP_PATH}: ${DEPTH_MESSAGE}\n`);

  s.writeJson(file, doc);
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  assert.equal((await s.tlsAttempt(port)).ok, true);

  const expectRefused = (ev, trigger) => {
    assert.equal(ev.trigger, trigger);
    assert.equal(ev.ok, false);
    assert.equal(ev.message, 'invalid config; the running config is unchanged');
    assert.deepEqual(ev.errors, [{ path: DEEP_PATH, message: DEPTH_MESSAGE }]);
  };
  expectRefused(await child.reloadAfter(() => s.writeJson(file, deepDoc(doc))), 'file');
  assert.equal((await s.tlsAttempt(port)).ok, true);
  expectRefused(await child.reloadAfter(() => child.signal('SIGHUP')), 'sighup');
  assert.equal((await s.tlsAttempt(port)).ok, true);
  const from = child.events.length;
  const r = await s.admin(api, 'POST', '/reload', tok);
  assert.equal(r.status, 400);
  assert.deepEqual(r.json, { error: 'invalid config; the running config is unchanged', errors: [{ path: DEEP_PATH, message: DEPTH_MESSAGE }] });
  expectRefused(await child.waitEvent((e) => e.event === 'reload', { from }), 'admin');

  // Still serving the old config, alive, nothing uncaught.
  assert.equal((await s.tlsAttempt(port)).ok, true);
  assert.equal((await s.admin(api, 'GET', '/health')).status, 200);
  assert.equal(child.exit, undefined);
  assert.deepEqual(
    child.events.filter((e) => e.event === 'error'),
    []
  );
  const m = (await s.admin(api, 'GET', '/metrics', tok)).text;
  assert.match(m, /^rampart_config_reloads_total\{result="failure"\} 3$/m);
  // Fixed: applies.
  const fixed = await child.reloadAfter(() => s.writeJson(file, { ...doc, drainMs: 500 }));
  assert.equal(fixed.ok, true);
  assert.deepEqual(fixed.changed, ['drainMs']);
});

/** A TCP connection to the admin API that sends nothing; `closed` resolves when the server closes it. */
function idleSocket(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const out = { sock, openedAt: Date.now(), closedAt: null };
    sock.on('error', () => {});
    sock.on('close', () => (out.closedAt = Date.now()));
    sock.once('connect', () => resolve(out));
    sock.once('error', reject);
  });
}

test('admin API: 300 sockets that send nothing (more than the 256 slots) cannot starve /health; a partial head is closed after 5 s', async (t) => {
  const { file, adminPort, api } = await configDir();
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());

  const idle = [];
  for (let i = 0; i < 300; i++) idle.push(await idleSocket(adminPort));
  t.after(() => {
    for (const i of idle) i.sock.destroy();
  });
  for (let i = 0; i < 20; i++) {
    const r = await s.admin(api, 'GET', '/health');
    assert.equal(r.status, 200, `call ${i}`);
  }
  // 8 per address: the 292 longest idle were closed as the next ones came, well before the 5 s
  // head timeout (the first /health call took the slot of one more); the head timeout closes the rest.
  await h.waitFor(() => idle.every((i) => i.closedAt !== null), { timeoutMs: 8000, intervalMs: 50, what: 'every idle socket closed' });
  const held = idle.map((i) => i.closedAt - i.openedAt);
  assert.ok(
    held.slice(0, 292).every((ms) => ms < 4000),
    `held: ${held.slice(0, 292).filter((ms) => ms >= 4000)}`
  );
  assert.ok(
    held.every((ms) => ms < 7000),
    `held: ${held.filter((ms) => ms >= 7000)}`
  );
  assert.equal(child.exit, undefined);

  // A connection that sends part of a head and stops is closed after HEAD_TIMEOUT_MS (5 s).
  const slow = await idleSocket(adminPort);
  const start = Date.now();
  slow.sock.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  await h.waitFor(() => slow.closedAt !== null, { timeoutMs: 9000, intervalMs: 50, what: 'the slow head closed' });
  const after = slow.closedAt - start;
  assert.ok(after >= 4900 && after < 8000, `closed after ${after} ms`);
});

test('admin.maxConnectionsPerAddress: past the cap with every connection busy, a new one is closed at once', async (t) => {
  const { file, adminPort, api } = await configDir((doc) => {
    doc.admin.maxConnectionsPerAddress = 2;
  });
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  // Two requests in progress: complete heads (the server's 100 Continue says it has them),
  // bodies still to come.
  const busy = [];
  for (let i = 0; i < 2; i++) {
    const b = await idleSocket(adminPort);
    b.data = '';
    b.sock.on('data', (d) => (b.data += d));
    b.sock.write(
      `POST /reload HTTP/1.1\r\nHost: 127.0.0.1:${adminPort}\r\nAuthorization: Bearer ${s.TOKEN}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n`
    );
    busy.push(b);
  }
  t.after(() => {
    for (const b of busy) b.sock.destroy();
  });
  await h.waitFor(() => busy.every((b) => b.data.startsWith('HTTP/1.1 100 Continue')), { what: '100 Continue on both' });
  const third = await idleSocket(adminPort);
  let got = '';
  third.sock.on('data', (d) => (got += d));
  third.sock.write(`GET /health HTTP/1.1\r\nHost: 127.0.0.1:${adminPort}\r\n\r\n`);
  await h.waitFor(() => third.closedAt !== null, { timeoutMs: 1000, what: 'the third connection closed' });
  assert.equal(got, '');
  // The busy requests complete; then /health answers again.
  for (const b of busy) b.sock.write('{}');
  await h.waitFor(() => busy.every((b) => b.data.includes('\r\n\r\nHTTP/1.1 200 OK\r\n')), { what: 'both reloads answered' });
  for (const b of busy) b.sock.destroy();
  await h.waitFor(async () => (await s.admin(api, 'GET', '/health')).status === 200, { what: '/health again' });
});

test("admin API Host check: a foreign Host is 421 on every route (DNS rebinding); the API's own addresses, localhost and admin.allowedHosts pass", async (t) => {
  const { file, adminPort, api, dir } = await configDir((doc) => {
    doc.admin.allowedHosts = ['Rampart.Internal'];
    doc.admin.socketPath = 'admin.sock';
  });
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const misdirected = (host) => ({
    error: `misdirected request: Host ${JSON.stringify(host)} does not name this admin API; use its address, localhost, or a name listed in admin.allowedHosts`,
  });
  for (const host of ['evil.example', `evil.example:${adminPort}`, 'localhost.evil.example', '127.0.0.1.nip.io', 'rampart.internal.evil']) {
    for (const [method, p, opts] of [
      ['GET', '/health', {}],
      ['GET', '/metrics', tok],
      ['POST', '/reload', tok],
    ]) {
      const r = await s.admin(api, method, p, { ...opts, headers: { host } });
      assert.equal(r.status, 421, `${method} ${p} Host: ${host}`);
      assert.deepEqual(r.json, misdirected(host));
    }
  }
  for (const host of [
    `127.0.0.1:${adminPort}`,
    '127.0.0.1',
    `localhost:${adminPort}`,
    'LOCALHOST',
    `[::1]:${adminPort}`,
    '127.0.0.2:1',
    'rampart.internal',
    `RAMPART.internal:${adminPort}`,
  ]) {
    assert.equal((await s.admin(api, 'GET', '/health', { headers: { host } })).status, 200, `Host: ${host}`);
  }
  // An allowed Host still needs the token on token routes.
  assert.equal((await s.admin(api, 'GET', '/metrics', { headers: { host: 'rampart.internal' } })).status, 401);
  // The unix socket is out of a browser's reach: no Host check there.
  assert.equal((await s.admin({ socketPath: path.join(dir, 'admin.sock') }, 'GET', '/health', { headers: { host: 'evil.example' } })).status, 200);
});

test('warnings at start, one log line each: a world-readable token file and trustedCidrs covering every address', async (t) => {
  const { file, doc, dir, port, adminPort } = await configDir((d) => {
    d.admin = { port: d.admin.port, tokenFile: 'admin-token' };
    d.proxy.listeners[0].acceptProxyProtocol = { trustedCidrs: ['0.0.0.0/0', '::/0'] };
  });
  // Two more ports, distinct from the two configDir chose (free-port calls apart may repeat one).
  const [port1, port2] = (await h.freePorts(4)).filter((p) => p !== port && p !== adminPort);
  doc.proxy.listeners.push({
    host: '127.0.0.1',
    port: port1,
    defaultCert: doc.proxy.listeners[0].defaultCert,
    acceptProxyProtocol: { trustedCidrs: ['0.0.0.0/1', '128.0.0.0/1', '10.0.0.0/8'] },
  });
  doc.proxy.listeners.push({
    host: '127.0.0.1',
    port: port2,
    defaultCert: doc.proxy.listeners[0].defaultCert,
    acceptProxyProtocol: { trustedCidrs: ['10.0.0.0/8', '::/1'] },
  });
  s.writeJson(file, doc);
  const tokenFile = path.join(dir, 'admin-token');
  fs.writeFileSync(tokenFile, `${s.TOKEN}\n`);
  fs.chmodSync(tokenFile, 0o644);
  const tokenMessage = `${tokenFile} is readable by every user (mode 0644): anyone on this host can take the admin token; chmod 600 it (or 640 with the service's group)`;
  const cidrMessage = (families) =>
    `covers every ${families} address: any client may send a PROXY header and pose as any address, past every per-IP limit; list only the load balancers' addresses`;
  const expected = [
    { event: 'warning', code: 'token_file_world_readable', path: 'admin.tokenFile', message: tokenMessage },
    {
      event: 'warning',
      code: 'trusted_cidrs_cover_all',
      path: 'proxy.listeners[0].acceptProxyProtocol.trustedCidrs',
      message: cidrMessage('IPv4 and every IPv6'),
    },
    { event: 'warning', code: 'trusted_cidrs_cover_all', path: 'proxy.listeners[1].acceptProxyProtocol.trustedCidrs', message: cidrMessage('IPv4') },
  ];
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const warnings = child.events.filter((e) => e.event === 'warning').map(({ ts, ...rest }) => rest);
  assert.deepEqual(warnings, expected);
  const lines = child.lines.filter((l) => l.includes('"event":"warning"'));
  assert.equal(lines.length, 3);

  // rampart check prints them too (and still says ok).
  const r = await s.runCli(['check', '--config', file]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout, 'ok\n');
  assert.equal(r.stderr, expected.map((w) => `warning: ${w.path}: ${w.message}\n`).join(''));

  // A private token file (0600 or 0640) and a narrow trust list: no warning.
  fs.chmodSync(tokenFile, 0o640);
  const narrow = structuredClone(doc);
  for (const l of narrow.proxy.listeners) l.acceptProxyProtocol = { trustedCidrs: ['10.0.0.0/8'] };
  s.writeJson(file, narrow);
  const quiet = await s.runCli(['check', '--config', file]);
  assert.equal(quiet.stderr, '');
  assert.equal(quiet.stdout, 'ok\n');
});

test('admin.allowedHosts and admin.maxConnectionsPerAddress are validated with paths', async () => {
  const { file, doc } = await configDir();
  const bad = structuredClone(doc);
  bad.admin.allowedHosts = ['ok.example', 'with:port', 7, 'sp ace'];
  bad.admin.maxConnectionsPerAddress = 0;
  s.writeJson(file, bad);
  const r = await s.runCli(['check', '--config', file]);
  assert.equal(r.code, 1);
  const hostMessage = (v) => `must be a host name such as "rampart.internal" or an IP address, without a port, got ${v}`;
  assert.equal(
    r.stderr,
    [
      `${file}: 4 problems`,
      `admin.allowedHosts[1]: ${hostMessage('"with:port"')}`,
      `admin.allowedHosts[2]: ${hostMessage('7')}`,
      `admin.allowedHosts[3]: ${hostMessage('"sp ace"')}`,
      'admin.maxConnectionsPerAddress: must be an integer in [1, 256], got 0',
      '',
    ].join('\n')
  );
});
