'use strict';
// `rampart serve` and `symphony-server` with a symphony-server config file (docs/symphony.md):
// status.json written (and removed only while it names this process), the admin routes over a
// unix socket and a loopback port, Symphony's Prometheus names, hot route updates, the stale
// admin socket reclaimed. Real processes, real node:tls clients, a real TCP origin.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const h = require('./helpers');
const s = require('./helpers/server');

const SYMPHONY_BIN = path.join(__dirname, '..', 'bin', 'symphony-server.js');
const { renderPrometheus } = require('../server/symphony-admin');

test.after(() => s.cleanup());

/** A config directory with cert files and a symphony-server config; returns its paths. */
async function symphonyDir({ echoPort, admin }) {
  const dir = s.tempDir('rampart-symphony-');
  s.writeCert(dir, { hosts: ['localhost', '*.localhost'] });
  const proxyPort = await h.freePort();
  const doc = {
    version: 1,
    admin,
    proxies: [
      {
        listeners: [{ host: '127.0.0.1', port: proxyPort }],
        routes: [
          {
            sni: 'localhost',
            metricsGroup: 'tenant-exact',
            upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echoPort }],
            terminateTls: true,
            cert: { certChainFile: 'cert.pem', privateKeyFile: 'key.pem' },
          },
          {
            sni: '*.localhost',
            metricsGroup: 'tenant-wildcard',
            upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echoPort }],
            terminateTls: true,
            cert: { certChainFile: 'cert.pem', privateKeyFile: 'key.pem' },
          },
        ],
      },
    ],
  };
  const config = path.join(dir, 'config.json');
  s.writeJson(config, doc);
  return { dir, config, doc, proxyPort, status: path.join(dir, 'status.json') };
}

/** A child process with its stdout/stderr collected; `exited` resolves `{ code, signal }`. */
function child(argv) {
  const p = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  const c = { proc: p, out: '', err: '' };
  p.stdout.on('data', (d) => (c.out += d));
  p.stderr.on('data', (d) => (c.err += d));
  c.exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  return c;
}

const readJson = (f) => {
  try {
    return JSON.parse(fs.readFileSync(f, 'utf8'));
  } catch {
    return null;
  }
};

test('rampart serve with a symphony-server file: status.json, admin routes, live traffic, hot update, clean stop', async (t) => {
  const echo = await h.echoServer();
  t.after(() => h.closeServer(echo));
  const adminPort = await h.freePort();
  const socketPath = path.join(s.tempDir('rampart-symphony-sock-'), 'admin.sock');
  const d = await symphonyDir({ echoPort: echo.address().port, admin: { socketPath, port: adminPort, host: '127.0.0.1' } });
  const c = child([s.BIN, 'serve', '--config', d.config]);
  t.after(() => c.proc.kill('SIGKILL'));
  const status = await h.waitFor(() => readJson(d.status), { timeoutMs: 10000, what: `status.json (stderr: ${c.err})` });
  assert.deepEqual(Object.keys(status), ['pid', 'version', 'startedAt', 'reloadedAt', 'configPath', 'ports']);
  assert.equal(status.pid, c.proc.pid);
  assert.equal(status.configPath, d.config);
  assert.deepEqual(status.ports, [d.proxyPort]);
  // The socket is bound (and its mode set) before the port: once the port answers, both are up.
  const health = await h.waitFor(async () => await s.admin({ port: adminPort }, 'GET', '/health').catch(() => null), { what: 'admin port' });
  assert.equal(fs.statSync(socketPath).mode & 0o777, 0o660);
  assert.equal(health.status, 200);
  assert.deepEqual(health.json, { ok: true, pid: c.proc.pid, version: status.version, ports: [d.proxyPort] });
  assert.equal((await s.admin({ port: adminPort }, 'GET', '/nope')).status, 404);
  const post = await s.admin({ port: adminPort }, 'POST', '/metrics');
  assert.equal(post.status, 405);
  assert.equal(post.headers.allow, 'GET, HEAD');

  // Traffic on the exact and the wildcard route, then one scrape of each kind.
  assert.equal((await h.tlsRoundTrip({ port: d.proxyPort, servername: 'localhost', payload: Buffer.from('hello') })).data.toString(), 'hello');
  assert.equal((await h.tlsRoundTrip({ port: d.proxyPort, servername: 'random.localhost', payload: Buffer.from('wild') })).data.toString(), 'wild');
  const snap = await h.waitFor(
    async () => {
      const r = await s.admin({ socketPath }, 'GET', '/metrics.json');
      return r.json.proxies[0].metrics.activeConnections === 0 && r.json.proxies[0].metrics.listeners[0].bytesSent === 9 ? r : null;
    },
    { what: 'both sessions closed' }
  );
  assert.match(snap.headers['content-type'], /application\/json/);
  assert.deepEqual(Object.keys(snap.json), ['pid', 'version', 'startedAt', 'reloadedAt', 'proxies']);
  assert.equal(snap.json.proxies[0].ports, String(d.proxyPort));
  const m = snap.json.proxies[0].metrics;
  assert.deepEqual(
    [m.listeners[0].address, m.listeners[0].mode, m.listeners[0].accepted, m.routes, m.failingRoutes],
    [`127.0.0.1:${d.proxyPort}`, 'tls', 2, 2, 0]
  );
  assert.deepEqual(
    m.routeMetrics.map((r) => [r.route, r.metricsGroup, r.connections, r.bytesReceived]),
    [
      ['localhost', 'tenant-exact', 1, 5],
      ['*.localhost', 'tenant-wildcard', 1, 4],
    ]
  );
  const prom = await s.admin({ socketPath }, 'GET', '/metrics?foo=bar');
  assert.equal(prom.status, 200);
  assert.match(prom.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  const lines = prom.text.split('\n');
  assert.ok(lines.includes(`symphony_listener_accepted_total{proxy="${d.proxyPort}",listener="127.0.0.1:${d.proxyPort}",mode="tls"} 2`), prom.text);
  assert.ok(lines.includes(`symphony_route_connections_total{proxy="${d.proxyPort}",route="*.localhost",group="tenant-wildcard"} 1`), prom.text);
  assert.ok(
    lines.includes(`symphony_listener_errors_total{proxy="${d.proxyPort}",listener="127.0.0.1:${d.proxyPort}",mode="tls",reason="upstream_connect"} 0`),
    prom.text
  );
  assert.ok(!prom.text.includes('random.localhost'), 'no client-given host name in a label');
  const types = lines.filter((l) => l.startsWith('# TYPE ')).map((l) => l.split(' ')[2]);
  assert.equal(new Set(types).size, types.length, 'one TYPE line per metric name');

  // A route update in the file is applied in place (same listener): the new group is served.
  d.doc.proxies[0].routes[0].metricsGroup = 'tenant-renamed';
  s.writeJsonAtomic(d.config, d.doc);
  await h.waitFor(
    async () => {
      const r = await s.admin({ port: adminPort }, 'GET', '/metrics.json');
      return r.json.proxies[0].metrics.routeMetrics[0].metricsGroup === 'tenant-renamed';
    },
    { what: 'the renamed group' }
  );
  assert.equal(readJson(d.status).pid, c.proc.pid);
  assert.match(c.out, / \[symphony-server\] proxy listening on ports \[\d+\]\n/);

  c.proc.kill('SIGTERM');
  assert.deepEqual(await c.exited, { code: 0, signal: null });
  assert.equal(fs.existsSync(d.status), false, 'status.json removed by its owner');
  await assert.rejects(s.admin({ port: adminPort }, 'GET', '/health'), { code: 'ECONNREFUSED' });
  // The socket path is left for the next binder (never unlinked at shutdown): refused, not missing.
  await assert.rejects(s.admin({ socketPath }, 'GET', '/health'), { code: 'ECONNREFUSED' });
});

test('symphony-server bin: --status path, and a status file another process owns is left alone', async (t) => {
  const echo = await h.echoServer();
  t.after(() => h.closeServer(echo));
  const d = await symphonyDir({ echoPort: echo.address().port });
  const statusPath = path.join(d.dir, 'elsewhere.json');
  const c = child([SYMPHONY_BIN, '--config', d.config, '--status', statusPath]);
  t.after(() => c.proc.kill('SIGKILL'));
  await h.waitFor(() => readJson(statusPath), { timeoutMs: 10000, what: `status file (stderr: ${c.err})` });
  assert.equal(fs.existsSync(d.status), false);
  assert.equal((await h.tlsRoundTrip({ port: d.proxyPort, servername: 'localhost', payload: Buffer.from('hi') })).data.toString(), 'hi');
  // A successor took the file over: this process must not remove it at shutdown.
  const successor = { ...readJson(statusPath), pid: c.proc.pid + 100000 };
  fs.writeFileSync(statusPath, JSON.stringify(successor));
  c.proc.kill('SIGTERM');
  assert.deepEqual(await c.exited, { code: 0, signal: null });
  assert.deepEqual(readJson(statusPath), successor);
  assert.match(c.out, /\[symphony-server\] received SIGTERM, shutting down\n/);
});

test('a stale admin socket left by a killed process is reclaimed; a live one is not', async (t) => {
  const echo = await h.echoServer();
  t.after(() => h.closeServer(echo));
  const sockDir = s.tempDir('rampart-symphony-stale-');
  const socketPath = path.join(sockDir, 'admin.sock');
  // A process that binds the socket and is killed: the file stays, nobody listens.
  const holder = child(['-e', `require('net').createServer().listen(${JSON.stringify(socketPath)}, () => console.log('up'))`]);
  await h.waitFor(() => holder.out.includes('up'), { what: 'holder listening' });
  holder.proc.kill('SIGKILL');
  await holder.exited;
  assert.equal(fs.existsSync(socketPath), true);
  const d = await symphonyDir({ echoPort: echo.address().port, admin: { socketPath } });
  const c = child([s.BIN, 'serve', '--config', d.config]);
  t.after(() => c.proc.kill('SIGKILL'));
  const health = await h.waitFor(async () => await s.admin({ socketPath }, 'GET', '/health').catch(() => null), {
    timeoutMs: 10000,
    what: 'health over the reclaimed socket',
  });
  assert.equal(health.json.pid, c.proc.pid);
  assert.match(c.out, /removing stale admin socket /);

  // A second server on the same (now live) socket must leave it to the first.
  const ino = fs.statSync(socketPath).ino;
  const d2 = await symphonyDir({ echoPort: echo.address().port, admin: { socketPath } });
  const c2 = child([s.BIN, 'serve', '--config', d2.config]);
  t.after(() => c2.proc.kill('SIGKILL'));
  await h.waitFor(() => c2.err.includes('could not bind admin endpoint'), { timeoutMs: 10000, what: 'second server gives up the bind' });
  assert.equal(fs.statSync(socketPath).ino, ino);
  assert.equal((await s.admin({ socketPath }, 'GET', '/health')).json.pid, c.proc.pid);
  // It serves its proxy all the same.
  assert.equal((await h.tlsRoundTrip({ port: d2.proxyPort, servername: 'localhost', payload: Buffer.from('ok') })).data.toString(), 'ok');
});

test('admin /metrics text: label values escaped (CR, LF and CRLF all as \\n), one HELP/TYPE per name over several proxies', () => {
  const metrics = (address) => ({
    routes: 1,
    failingRoutes: 0,
    halfClosedConnections: 0,
    pendingSuspended: 0,
    suspendedResolved: 0,
    suspendedUnresolved: 0,
    listeners: [
      {
        address,
        mode: 'tls',
        activeConnections: 0,
        accepted: 1,
        blocked: 0,
        errors: 0,
        bytesReceived: 0,
        bytesSent: 0,
        blockedByReason: [{ reason: 'no_sni', count: 0 }],
        errorsByReason: [],
      },
    ],
    routeMetrics: [
      {
        route: 'a"b\\c\nroute',
        metricsGroup: 'tenant\rgroup\r\nend',
        activeConnections: 0,
        connections: 2,
        errors: 0,
        bytesReceived: 0,
        bytesSent: 0,
        errorsByReason: [{ reason: 'upstream_connect', count: 1 }],
      },
    ],
  });
  const text = renderPrometheus({
    pid: 1,
    version: 'v"1',
    startedAt: '2026-01-01T00:00:00.000Z',
    reloadedAt: '2026-01-01T00:01:00.000Z',
    proxies: [
      { ports: '80,443', metrics: metrics('0.0.0.0:443') },
      { ports: '8443', metrics: metrics('0.0.0.0:8443') },
    ],
  });
  const lines = text.split('\n');
  assert.ok(lines.includes('symphony_build_info{version="v\\"1"} 1'), text);
  assert.ok(lines.includes('symphony_route_connections_total{proxy="80,443",route="a\\"b\\\\c\\nroute",group="tenant\\ngroup\\nend"} 2'), text);
  assert.ok(
    lines.includes('symphony_route_errors_total{proxy="8443",route="a\\"b\\\\c\\nroute",group="tenant\\ngroup\\nend",reason="upstream_connect"} 1'),
    text
  );
  assert.ok(lines.includes('symphony_start_time_seconds 1767225600'), text);
  // Every sample of a name sits right under its one HELP/TYPE pair.
  let current = null;
  const declared = new Set();
  for (const l of lines) {
    if (l.startsWith('# TYPE ')) {
      current = l.split(' ')[2];
      assert.ok(!declared.has(current), `${current} declared twice`);
      declared.add(current);
    } else if (l && !l.startsWith('#')) {
      assert.equal(l.slice(0, l.search(/[{ ]/)), current, l);
    }
  }
});

test('rampart check with a symphony-server file: ok, or every problem with its path from the top of the file', async () => {
  const echo = await h.echoServer();
  try {
    const d = await symphonyDir({ echoPort: echo.address().port });
    const ok = await s.runCli(['check', '--config', d.config]);
    assert.deepEqual([ok.code, ok.stdout, ok.stderr], [0, 'ok\n', '']);
    d.doc.proxies[0].routes[0].metricsGroup = 'x'.repeat(129);
    d.doc.proxies[0].routes[1].cert.privateKeyFile = 'missing.pem';
    d.doc.proxies[0].listeners[0].idleTimeoutMs = -1;
    s.writeJson(d.config, d.doc);
    const bad = await s.runCli(['check', '--config', d.config]);
    assert.equal(bad.code, 1);
    assert.equal(bad.stdout, '');
    assert.equal(
      bad.stderr,
      `${d.config}: 3 problems\n` +
        `proxies[0].routes: route '*.localhost': ENOENT: no such file or directory, open '${path.join(d.dir, 'missing.pem')}'\n` +
        'proxies[0].routes[0].metricsGroup: metricsGroup exceeds 128 UTF-8 bytes\n' +
        'proxies[0].listeners[0].idleTimeoutMs: must be an integer in [0, 2^53-1], got -1\n'
    );
    // A route left out beside one that serves (Symphony's xForwardedFor-with-http2 rule): a
    // problem all the same, at its own index.
    const d2 = await symphonyDir({ echoPort: echo.address().port });
    Object.assign(d2.doc.proxies[0].routes[1], { protocol: 'http', http2: true, sourceAddressHeader: 'xForwardedFor' });
    s.writeJson(d2.config, d2.doc);
    const left = await s.runCli(['check', '--config', d2.config]);
    assert.deepEqual(
      [left.code, left.stdout, left.stderr],
      [
        1,
        '',
        `${d2.config}: 1 problem\n` +
          "proxies[0].routes[1].http2: http2 cannot be combined with sourceAddressHeader: 'xForwardedFor' (header injection would corrupt h2 frames; use 'proxyProtocol')\n",
      ]
    );
  } finally {
    await h.closeServer(echo);
  }
});
