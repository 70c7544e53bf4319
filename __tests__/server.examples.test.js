'use strict';
// The files in examples/: the Harper config passes `rampart check`, the Grafana dashboard shows
// the series `rampart serve` adds to `GET /metrics` (the proxy's families: tests/metrics_families.rs),
// the systemd unit and the Prometheus scrape config match the example config.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');
const s = require('./helpers/server');

const EX = path.join(__dirname, '..', 'examples');
const read = (p) => fs.readFileSync(path.join(EX, p), 'utf8');

test.after(s.cleanup);

function seriesIn(text) {
  return new Set(text.match(/\brampart_[a-z0-9_]+/g) || []);
}

function dashboardExprs() {
  const d = JSON.parse(read('grafana/rampart-dashboard.json'));
  const exprs = [];
  for (const p of d.panels) for (const t of p.targets || []) exprs.push(t.expr);
  for (const v of d.templating.list) if (v.definition) exprs.push(v.definition);
  return { d, exprs };
}

test('examples/harper/rampart.json passes rampart check (with its cert and token files in place)', async () => {
  const dir = s.tempDir();
  fs.copyFileSync(path.join(EX, 'harper', 'rampart.json'), path.join(dir, 'rampart.json'));
  fs.mkdirSync(path.join(dir, 'tls'));
  s.writeCert(path.join(dir, 'tls'), { cert: 'fullchain.pem', key: 'privkey.pem', hosts: ['example.com', 'ops.example.com'] });
  fs.writeFileSync(path.join(dir, 'admin-token'), `${'ab'.repeat(32)}\n`, { mode: 0o600 });
  const r = await s.runCli(['check', '--config', path.join(dir, 'rampart.json')]);
  assert.equal(r.stderr, '');
  assert.equal(r.stdout, 'ok\n');
  const doc = JSON.parse(read('harper/rampart.json'));
  assert.equal(doc.proxy.listeners[0].port, 443);
  assert.deepEqual(doc.proxy.routes.at(-1).upstreams, [{ kind: 'tcp', host: '127.0.0.1', port: 9926 }]);
  assert.equal(doc.admin.socketPath, '/run/rampart/admin.sock');
});

test('examples/harper/rampart.local.json (docs/harper.md) passes rampart check and routes as rampart.json does', async () => {
  const dir = s.tempDir();
  fs.copyFileSync(path.join(EX, 'harper', 'rampart.local.json'), path.join(dir, 'rampart.local.json'));
  fs.mkdirSync(path.join(dir, 'tls'));
  s.writeCert(path.join(dir, 'tls'), { cert: 'fullchain.pem', key: 'privkey.pem', hosts: ['localhost', 'ops.localhost'] });
  fs.writeFileSync(path.join(dir, 'admin-token'), `${'cd'.repeat(32)}\n`, { mode: 0o600 });
  const r = await s.runCli(['check', '--config', path.join(dir, 'rampart.local.json')]);
  assert.equal(r.stderr, '');
  assert.equal(r.stdout, 'ok\n');
  const local = JSON.parse(read('harper/rampart.local.json'));
  const prod = JSON.parse(read('harper/rampart.json'));
  assert.deepEqual(
    local.proxy.routes.map((x) => x.upstreams),
    prod.proxy.routes.map((x) => x.upstreams)
  );
  // Harper's plain HTTP port speaks HTTP/1.1 only: no route may send it h2c.
  for (const doc of [local, prod]) {
    assert.deepEqual(
      doc.proxy.routes.map((x) => [x.http2, x.protocol]),
      [
        [undefined, undefined],
        [undefined, 'http'],
      ]
    );
  }
  assert.deepEqual(local.admin, { host: '127.0.0.1', port: 9901, tokenFile: 'admin-token' });
  assert.equal(local.xdp, undefined);
});

// The proxy's own families are declared once (src/metrics/families.rs) and checked there, by
// tests/metrics_families.rs: each is on the dashboard, and the dashboard and the rules ask for
// declared families only. What is left here is what `rampart serve` adds to GET /metrics itself.
const serverSeries = (name) => /^rampart_(config|server)_/.test(name);

test('the series rampart serve adds to GET /metrics are on the dashboard, and the dashboard and rules ask for no other server series', async (t) => {
  const echo = await h.echoServer();
  t.after(() => h.closeServer(echo));
  const dir = s.tempDir();
  s.writeCert(dir);
  const [port, adminPort] = await h.freePorts(2);
  const doc = s.baseConfig({ port, upstreamPort: echo.address().port, adminPort });
  doc.xdp = { interface: 'rampart-none0' }; // not attached: still exports rampart_server_xdp_attached
  const file = path.join(dir, 'rampart.json');
  s.writeJson(file, doc);
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const exported = [...seriesIn((await s.admin({ port: adminPort }, 'GET', '/metrics', { token: s.TOKEN })).text)].filter(serverSeries);
  assert.deepEqual(exported.sort(), [
    'rampart_config_last_reload_success_timestamp_seconds',
    'rampart_config_last_reload_successful',
    'rampart_config_reloads_total',
    'rampart_server_xdp_attached',
  ]);

  const { d, exprs } = dashboardExprs();
  assert.equal(d.uid, 'rampart-overview');
  const onDashboard = seriesIn(exprs.join(' '));
  const used = new Set(onDashboard);
  for (const name of seriesIn(read('prometheus/rampart.rules.yml'))) used.add(name);
  assert.ok(used.size >= 12, [...used].join());
  for (const name of used) if (serverSeries(name)) assert.ok(exported.includes(name), `${name} is not exported`);
  for (const name of exported) assert.ok(onDashboard.has(name), `${name} is not on the dashboard`);
  const ids = d.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length);
});

test('the systemd unit: XDP capabilities, Restart=on-failure, ExecReload by SIGHUP, a stop timeout above drainMs', () => {
  const unit = read('harper/rampart.service');
  const doc = JSON.parse(read('harper/rampart.json'));
  const get = (k) => (unit.match(new RegExp(`^${k}=(.*)$`, 'm')) || [])[1];
  assert.equal(get('AmbientCapabilities'), 'CAP_NET_BIND_SERVICE CAP_BPF CAP_NET_ADMIN CAP_PERFMON');
  assert.equal(get('CapabilityBoundingSet'), 'CAP_NET_BIND_SERVICE CAP_BPF CAP_NET_ADMIN CAP_PERFMON');
  assert.equal(get('Restart'), 'on-failure');
  assert.equal(get('ExecReload'), '/bin/kill -HUP $MAINPID');
  assert.match(get('ExecStart'), / serve --config \/etc\/rampart\/rampart\.json$/);
  assert.match(get('ExecStartPre'), / check --config \/etc\/rampart\/rampart\.json$/);
  assert.equal(get('RuntimeDirectory'), 'rampart');
  assert.ok(Number(get('TimeoutStopSec')) * 1000 > doc.drainMs);
  // Rampart is not on the npm registry: the unit installs the packed tarball, never `rampart` by name.
  const installs = unit.match(/npm install[^`\n&]*/g);
  assert.deepEqual(
    installs.map((l) => l.trim()),
    ['npm install', 'npm install --prefix /opt/rampart ./rampart-0.1.0.tgz']
  );
  assert.doesNotMatch(unit, /npmjs\.com/);
  assert.equal(get('ExecStart').split(' ')[1], '/opt/rampart/node_modules/rampart/bin/rampart.js');
});

test('the Prometheus scrape config targets the example admin port with the bearer token', () => {
  const yml = read('prometheus/prometheus.yml');
  const doc = JSON.parse(read('harper/rampart.json'));
  assert.match(yml, new RegExp(`targets: \\['${doc.admin.host.replace(/\./g, '\\.')}:${doc.admin.port}'\\]`));
  assert.match(yml, /metrics_path: \/metrics/);
  assert.match(yml, /type: Bearer/);
  assert.match(yml, /rule_files:\n {2}- rampart\.rules\.yml/);
});
