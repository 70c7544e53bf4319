'use strict';
// The admin API of `rampart serve`, every route with and without a token, on
// TCP and on a unix socket, with the input checks (401/403/404/405/413/400 with paths).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const h = require('./helpers');
const s = require('./helpers/server');

const servers = s.echoSuite(test);

async function serveWith(edit = () => {}) {
  const { dir, file, port, adminPort, api } = await s.configDir(servers[''].address().port, edit);
  const child = await s.ServerChild.serve(file);
  return { child, port, adminPort, dir, file, api };
}

const GETS = ['/metrics', '/metrics.json', '/blocked', '/blocked?detail=1', '/explain?ip=127.0.0.1', '/xdp'];

test('with a token: /health is open, every other route needs Authorization: Bearer <token>', async (t) => {
  const { child, port, api } = await serveWith();
  t.after(() => child.close());

  const health = await s.admin(api, 'GET', '/health');
  assert.equal(health.status, 200);
  assert.deepEqual(Object.keys(health.json).sort(), ['ok', 'pid', 'ports', 'reloadedAt', 'version']);
  assert.equal(health.json.ok, true);
  assert.equal(health.json.pid, child.proc.pid);
  assert.equal(health.json.version, require('../package.json').version);
  assert.deepEqual(health.json.ports, [port]);
  assert.ok(!Number.isNaN(Date.parse(health.json.reloadedAt)));

  const routes = [...GETS.map((p) => ['GET', p]), ['POST', '/block'], ['DELETE', '/block'], ['POST', '/reload'], ['GET', '/nope']];
  for (const [method, p] of routes) {
    for (const token of [undefined, 'wrong-token-0123456789abcdef', `${s.TOKEN}x`, s.TOKEN.slice(1)]) {
      const r = await s.admin(api, method, p, { token, body: method === 'GET' ? undefined : { cidr: '192.0.2.1' } });
      assert.equal(r.status, 401, `${method} ${p} token=${token}`);
      assert.equal(r.headers['www-authenticate'], 'Bearer realm="rampart"');
      assert.match(r.json.error, /^unauthorized/);
    }
  }
  // The scheme is case-insensitive; anything but Bearer is refused (Basic only as base64 of user:token, see server.ui.test.js).
  assert.equal((await s.admin(api, 'GET', '/xdp', { headers: { authorization: `bearer ${s.TOKEN}` } })).status, 200);
  assert.equal((await s.admin(api, 'GET', '/xdp', { headers: { authorization: `Basic ${s.TOKEN}` } })).status, 401);
  for (const p of GETS) assert.equal((await s.admin(api, 'GET', p, { token: s.TOKEN })).status, 200, p);
  // Nothing was changed by the refused calls.
  const blocked = await s.admin(api, 'GET', '/blocked', { token: s.TOKEN });
  assert.deepEqual(blocked.json.dynamicBlocklist, []);
});

test('GET /metrics is Prometheus text 0.0.4; /metrics.json is metrics() plus the reload counters', async (t) => {
  const { child, port, api } = await serveWith();
  t.after(() => child.close());
  assert.equal((await s.tlsAttempt(port)).ok, true);
  const m = await s.admin(api, 'GET', '/metrics', { token: s.TOKEN });
  assert.equal(m.status, 200);
  assert.equal(m.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  assert.match(m.text, new RegExp(`^rampart_accepted_connections_total\\{listener="127\\.0\\.0\\.1:${port}"\\} 1$`, 'm'));
  assert.match(m.text, /^rampart_config_reloads_total\{result="success"\} 0$/m);
  assert.match(m.text, /^rampart_config_last_reload_successful 1$/m);
  assert.ok(m.text.endsWith('\n'));
  for (const line of m.text.trim().split('\n')) assert.match(line, /^(# (HELP|TYPE) rampart_\w+ .+|rampart_\w+(\{[^}]*\})? [0-9.e+-]+)$/, line);
  const j = await s.admin(api, 'GET', '/metrics.json', { token: s.TOKEN });
  assert.equal(j.json.listeners[0].port, port);
  assert.equal(j.json.acceptedConnections, 1);
  assert.deepEqual(j.json.server.reloads, { success: 0, failure: 0 });
  assert.equal(j.json.server.lastReloadSuccessful, true);
});

test('POST /block → 204 and the client is refused (logged as a blocked event); DELETE /block → { removed }', async (t) => {
  const { child, port, api } = await serveWith();
  t.after(() => child.close());
  const tok = { token: s.TOKEN };
  let r = await s.admin(api, 'POST', '/block', { ...tok, body: { cidr: '127.0.0.2', ttlMs: 60000, reason: 'INC-1 test' } });
  assert.equal(r.status, 204);
  assert.equal(r.text, '');
  await child.waitEvent((e) => e.event === 'block' && e.cidr === '127.0.0.2' && e.ttlMs === 60000 && e.reason === 'INC-1 test' && e.via === 'admin');

  r = await s.admin(api, 'GET', '/blocked', tok);
  assert.deepEqual(r.json.dynamicBlocklist, ['127.0.0.2/32']);
  r = await s.admin(api, 'GET', '/explain?ip=127.0.0.2', tok);
  assert.equal(r.status, 200);
  assert.equal(r.json.ip, '127.0.0.2');
  assert.deepEqual(
    r.json.listeners.map((l) => [l.port, l.verdict]),
    [[port, 'dynamic_blocked']]
  );
  assert.deepEqual(r.json.listeners[0].dynamicBlocks, [{ cidr: '127.0.0.2/32', port: null, reason: 'INC-1 test' }]);
  r = await s.admin(api, 'GET', '/explain?ip=127.0.0.0/8', tok);
  assert.equal(r.status, 400);
  assert.deepEqual(r.json.errors, [{ path: 'query.ip', message: 'must be an IPv4 or IPv6 address (no /length, no zone), got "127.0.0.0/8"' }]);
  r = await s.admin(api, 'GET', `/blocked?port=${port}&detail=1`, tok);
  assert.equal(r.json.dynamicBlocklist.length, 1);
  const d = r.json.dynamicBlocklist[0];
  assert.equal(d.ip, '127.0.0.2/32');
  assert.equal(d.port, port);
  assert.equal(d.note, 'INC-1 test');
  assert.ok(d.remainingMs > 50000 && d.remainingMs <= 60000, String(d.remainingMs));

  const from = child.events.length;
  assert.equal(await h.admitted(port, '127.0.0.2'), false);
  assert.equal(await h.admitted(port, '127.0.0.1'), true);
  const ev = await child.waitEvent((e) => e.event === 'blocked', { from });
  assert.equal(ev.ip, '127.0.0.2');
  assert.equal(ev.reason, 'dynamic_blocked');
  assert.equal(ev.port, port);
  assert.equal(ev.listener, `127.0.0.1:${port}`);

  r = await s.admin(api, 'DELETE', '/block', { ...tok, body: { cidr: '127.0.0.2' } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { removed: true });
  r = await s.admin(api, 'DELETE', '/block', { ...tok, body: { cidr: '127.0.0.2', port } });
  assert.deepEqual(r.json, { removed: false });
  assert.equal(await h.admitted(port, '127.0.0.2'), true);
});

test('bad input is a 400 naming every offending field; oversized bodies 413; unknown routes 404; other methods 405', async (t) => {
  const { child, port, api } = await serveWith();
  t.after(() => child.close());
  const tok = { token: s.TOKEN };
  const bad = async (method, p, opts, status = 400) => {
    const r = await s.admin(api, method, p, { ...tok, ...opts });
    assert.equal(r.status, status, `${method} ${p} ${JSON.stringify(opts)}: ${r.text}`);
    assert.equal(typeof r.json.error, 'string');
    return r.json;
  };
  let e = await bad('POST', '/block', { body: { cidr: '10.1.2.3/8', ttlMs: -1 } });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['cidr', 'ttlMs']
  );
  assert.match(e.errors[0].message, /did you mean 10\.0\.0\.0\/8\?/);
  assert.match(e.error, /^invalid input \(2 problems\): cidr: /);
  e = await bad('POST', '/block', { body: { cidr: '192.0.2.1', port: 1 } });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['port']
  );
  assert.match(e.errors[0].message, /no listener on port 1/);
  e = await bad('POST', '/block', { body: { ttlMs: 5, colour: 'red' } });
  assert.deepEqual(e.errors, [
    { path: 'colour', message: 'unknown field; expected one of: cidr, ttlMs, reason, port' },
    { path: 'cidr', message: 'required' },
  ]);
  e = await bad('POST', '/block', { body: ['192.0.2.1'] });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['']
  );
  e = await bad('POST', '/block', { rawBody: '{"cidr": ' });
  assert.match(e.error, /^body is not JSON/);
  e = await bad('POST', '/block', {});
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['']
  );
  e = await bad('DELETE', '/block', { body: { cidr: 'nonsense' } });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['cidr']
  );
  e = await bad('DELETE', '/block', { body: { cidr: '192.0.2.1', ttlMs: 5 } });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['ttlMs']
  );
  e = await bad('POST', '/reload', { body: { force: true } });
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['force']
  );

  e = await bad('GET', '/blocked?port=abc');
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['query.port']
  );
  e = await bad('GET', '/blocked?port=1');
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['query.port']
  );
  assert.match(e.errors[0].message, /no listener on port 1/);
  e = await bad('GET', '/blocked?detail=yes&colour=1');
  assert.deepEqual(e.errors.map((x) => x.path).sort(), ['query.colour']);
  e = await bad('GET', '/blocked?detail=yes');
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['query.detail']
  );
  e = await bad('GET', '/health?verbose=1');
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['query.verbose']
  );

  const big = JSON.stringify({ cidr: '192.0.2.1', reason: 'x'.repeat(1 << 20) });
  await bad('POST', '/block', { rawBody: big }, 413);
  await bad('GET', '/nope', {}, 404);
  await bad('GET', '/uii', {}, 404);
  for (const [method, p, allow] of [
    ['PUT', '/block', 'POST, DELETE'],
    ['GET', '/block', 'POST, DELETE'],
    ['POST', '/metrics', 'GET, HEAD'],
    ['DELETE', '/health', 'GET, HEAD'],
    ['GET', '/reload', 'POST'],
  ]) {
    const r = await s.admin(api, method, p, tok);
    assert.equal(r.status, 405, `${method} ${p}`);
    assert.equal(r.headers.allow, allow);
  }
  const head = await s.admin(api, 'HEAD', '/health');
  assert.equal(head.status, 200);
  assert.equal(head.text, '');
  // Nothing above changed anything, and the server still serves.
  assert.deepEqual((await s.admin(api, 'GET', '/blocked', tok)).json.dynamicBlocklist, []);
  assert.equal((await s.tlsAttempt(port)).ok, true);
});

test('GET /xdp without xdp in the file: not attached, nothing configured; POST /reload of an unchanged file', async (t) => {
  const { child, api } = await serveWith();
  t.after(() => child.close());
  const x = await s.admin(api, 'GET', '/xdp', { token: s.TOKEN });
  assert.equal(x.status, 200);
  assert.equal(x.json.attached, false);
  assert.equal(x.json.configured, null);
  assert.equal(x.json.lastError, null);
  assert.equal(typeof x.json.counters.passed, 'number');
  const r = await s.admin(api, 'POST', '/reload', { token: s.TOKEN });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { reloaded: true, applied: 'none', changed: [] });
});

test('without a token: GET routes answer, POST and DELETE are 403 and change nothing', async (t) => {
  const { child, port, api } = await serveWith((doc) => delete doc.admin.token);
  t.after(() => child.close());
  for (const p of ['/health', ...GETS]) assert.equal((await s.admin(api, 'GET', p)).status, 200, p);
  assert.equal((await s.admin(api, 'GET', `/blocked?port=${port}`)).status, 200);
  for (const [method, p] of [
    ['POST', '/block'],
    ['DELETE', '/block'],
    ['POST', '/reload'],
  ]) {
    const r = await s.admin(api, method, p, { body: { cidr: '127.0.0.1' } });
    assert.equal(r.status, 403, `${method} ${p}`);
    assert.match(r.json.error, /set admin\.token or admin\.tokenFile/);
    // a token is no way around it
    assert.equal((await s.admin(api, method, p, { token: s.TOKEN, body: { cidr: '127.0.0.1' } })).status, 403);
  }
  assert.equal((await s.admin(api, 'GET', '/nope')).status, 404);
  assert.equal((await s.admin(api, 'PUT', '/block')).status, 405);
  assert.equal(await h.admitted(port, '127.0.0.1'), true);
});

test('admin.tokenFile: the token is read from the file (trailing newline ignored)', async (t) => {
  const { child, api } = await serveWith((doc, dir) => {
    fs.writeFileSync(path.join(dir, 'admin-token'), `${s.TOKEN}\n`);
    doc.admin = { port: doc.admin.port, tokenFile: 'admin-token' };
  });
  t.after(() => child.close());
  assert.equal((await s.admin(api, 'GET', '/xdp')).status, 401);
  assert.equal((await s.admin(api, 'GET', '/xdp', { token: s.TOKEN })).status, 200);
  assert.equal((await s.admin(api, 'POST', '/block', { token: s.TOKEN, body: { cidr: '192.0.2.0/24' } })).status, 204);
});

/** A unix socket left behind by a process that died without closing it. */
async function staleSocket(p) {
  const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(p)}, () => console.log('up'))`], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((r) => child.stdout.once('data', r));
  child.kill('SIGKILL');
  await new Promise((r) => child.on('exit', r));
  assert.ok(fs.lstatSync(p).isSocket());
}

test('admin.socketPath: a unix socket with mode 0660, a stale socket file replaced, removed at exit', async (t) => {
  const dir = s.tempDir();
  const sock = path.join(dir, 'admin.sock');
  await staleSocket(sock);
  s.writeCert(dir);
  const port = await h.freePort();
  const file = path.join(dir, 'rampart.json');
  s.writeJson(file, s.baseConfig({ port, upstreamPort: servers[''].address().port, socketPath: 'admin.sock' }));
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const start = child.events.find((e) => e.event === 'start');
  assert.deepEqual(start.admin, [`unix:${sock}`]);
  const st = fs.statSync(sock);
  assert.ok(st.isSocket());
  assert.equal(st.mode & 0o777, 0o660);
  const api = { socketPath: sock };
  const health = await s.admin(api, 'GET', '/health');
  assert.equal(health.status, 200);
  assert.deepEqual(health.json.ports, [port]);
  assert.equal((await s.admin(api, 'GET', '/metrics')).status, 401);
  assert.equal((await s.admin(api, 'POST', '/block', { token: s.TOKEN, body: { cidr: '198.51.100.0/24', port } })).status, 204);
  const b = await s.admin(api, 'GET', '/blocked', { token: s.TOKEN });
  assert.deepEqual(b.json.dynamicBlocklist, ['198.51.100.0/24']);
  child.signal('SIGTERM');
  assert.deepEqual(await child.exited, { code: 0, signal: null });
  assert.equal(fs.existsSync(sock), false);
});

test('admin with both port and socketPath serves on both (Prometheus on TCP, operators on the socket)', async (t) => {
  const { child, adminPort, dir } = await serveWith((doc) => (doc.admin.socketPath = 'admin.sock'));
  t.after(() => child.close());
  const sock = path.join(dir, 'admin.sock');
  assert.deepEqual(child.events.find((e) => e.event === 'start').admin, [`http://127.0.0.1:${adminPort}`, `unix:${sock}`]);
  assert.equal((await s.admin({ port: adminPort }, 'GET', '/metrics', { token: s.TOKEN })).status, 200);
  assert.equal((await s.admin({ socketPath: sock }, 'POST', '/block', { token: s.TOKEN, body: { cidr: '192.0.2.0/24' } })).status, 204);
  assert.deepEqual((await s.admin({ port: adminPort }, 'GET', '/blocked', { token: s.TOKEN })).json.dynamicBlocklist, ['192.0.2.0/24']);
});

test('admin.socketPath: a socket something still answers on, or a file that is not a socket, is left alone (exit 1)', async (t) => {
  const dir = s.tempDir();
  s.writeCert(dir);
  const port = await h.freePort();
  const live = path.join(dir, 'live.sock');
  const other = require('node:net').createServer((c) => c.end());
  await new Promise((r) => other.listen(live, r));
  t.after(() => new Promise((r) => other.close(r)));
  const plain = path.join(dir, 'plain.sock');
  fs.writeFileSync(plain, 'keep me');
  for (const [name, want] of [
    ['live.sock', /another process is serving on this socket/],
    ['plain.sock', /exists and is not a socket; not removing it/],
  ]) {
    const file = path.join(dir, `${name}.json`);
    s.writeJson(file, s.baseConfig({ port, upstreamPort: servers[''].address().port, socketPath: name }));
    const child = new s.ServerChild(['serve', '--config', file]);
    const exit = await child.exited;
    assert.equal(exit.code, 1, child.stderr);
    const ev = child.events.find((e) => e.event === 'error');
    assert.equal(ev.code, 'admin_listen_failed');
    assert.match(ev.message, want);
    // the proxy it had started was stopped again
    assert.equal(await s.accepting(port), false);
  }
  assert.equal(fs.readFileSync(plain, 'utf8'), 'keep me');
  assert.ok(fs.lstatSync(live).isSocket());
});
