'use strict';
// `rampart serve` start and stop: cert files served, the start event, JSON (and text) log lines,
// SIGTERM/SIGINT draining for drainMs and exiting 0, start-up failures exiting 1, and an XDP
// attach failure logged without stopping the server.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');
const s = require('./helpers/server');

const servers = s.echoSuite(test);

async function configFile(edit = () => {}, opts = {}) {
  const dir = s.tempDir();
  const cert = s.writeCert(dir);
  const [port, adminPort] = await h.freePorts(2);
  const doc = s.baseConfig({ port, upstreamPort: servers[''].address().port, adminPort, ...opts });
  edit(doc);
  const file = path.join(dir, 'rampart.json');
  s.writeJson(file, doc);
  return { dir, file, doc, port, adminPort, cert, api: { port: adminPort } };
}

const EVENTS = new Set(['start', 'stop', 'reload', 'blocked', 'blockedSummary', 'error', 'defense', 'block', 'unblock']);

test('serve: the certificate from the files is served; the start event says what runs', async (t) => {
  const { file, port, adminPort, cert } = await configFile();
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const r = await s.tlsAttempt(port);
  assert.equal(r.ok, true);
  assert.equal(r.fingerprint256, cert.fingerprint256);
  const start = child.events.find((e) => e.event === 'start');
  assert.equal(start.pid, child.proc.pid);
  assert.equal(start.version, require('../package.json').version);
  assert.equal(start.config, file);
  assert.deepEqual(start.ports, [port]);
  assert.deepEqual(start.admin, [`http://127.0.0.1:${adminPort}`]);
  assert.equal(start.xdp, null);
  assert.equal(start.drainMs, 1000);
});

test('every log line is one JSON object { ts, event, ...payload }: blocked, blockedSummary, reload, stop', async (t) => {
  const { file, doc, port } = await configFile((d) => {
    d.proxy.blockedEvents = { maxPerSecond: 2 };
    d.proxy.listeners[0].protection = { blocklist: ['127.0.0.9/32'] };
  });
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  for (let i = 0; i < 6; i++) assert.equal(await h.admitted(port, '127.0.0.9'), false);
  await child.waitEvent((e) => e.event === 'blockedSummary', { what: 'blockedSummary' });
  await child.reloadAfter(() => s.writeJson(file, { ...doc, drainMs: 500 }));
  child.signal('SIGTERM');
  assert.equal((await child.exited).code, 0);
  assert.ok(child.lines.length >= 5);
  for (const line of child.lines) {
    const e = JSON.parse(line);
    assert.equal(typeof e.ts, 'string', line);
    assert.equal(new Date(e.ts).toISOString(), e.ts, line);
    assert.ok(EVENTS.has(e.event), line);
    assert.deepEqual(Object.keys(e).slice(0, 2), ['ts', 'event']);
  }
  const blocked = child.events.filter((e) => e.event === 'blocked');
  assert.equal(blocked.length >= 1 && blocked.length <= 2 + 2, true, `${blocked.length} blocked events`); // within the cap
  assert.deepEqual(Object.keys(blocked[0]).sort(), ['detail', 'event', 'ip', 'ja3', 'ja4', 'listener', 'observed', 'port', 'reason', 'ts']);
  assert.equal(blocked[0].ip, '127.0.0.9');
  assert.equal(blocked[0].reason, 'cidr_blocked');
  const summary = child.events.find((e) => e.event === 'blockedSummary');
  assert.equal(summary.byReason.cidr_blocked >= 1, true);
  assert.deepEqual(summary.topIps[0].ip, '127.0.0.9');
  const stop = child.events.at(-1);
  assert.equal(stop.event, 'stop');
  assert.equal(stop.signal, 'SIGTERM');
  assert.equal(stop.drainMs, 500);
});

test('--log text writes one human line per event', async (t) => {
  const { file, port } = await configFile();
  const child = new s.ServerChild(['serve', '--config', file, '--log', 'text']);
  t.after(() => child.close());
  await h.waitFor(() => child.lines.some((l) => / start /.test(l)), { what: 'start line' });
  const start = child.lines.find((l) => / start /.test(l));
  assert.match(
    start,
    new RegExp(
      `^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z start pid=${child.proc.pid} version=\\S+ config=\\S+ ports=\\[${port}\\] admin=\\["http://127\\.0\\.0\\.1:\\d+"\\] xdp=null drainMs=1000$`
    )
  );
  child.signal('SIGTERM');
  assert.equal((await child.exited).code, 0);
  assert.match(child.lines.at(-1), /Z stop signal=SIGTERM drainMs=1000 durationMs=\d+$/);
});

test('SIGTERM: new connections refused at once, open ones drain for drainMs, then exit 0', async (t) => {
  const drainMs = 1500;
  const { file, port, api } = await configFile(() => {}, { drainMs });
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const conn = await s.openConnection(port);
  const t0 = Date.now();
  child.signal('SIGTERM');
  await h.waitFor(async () => !(await s.accepting(port)), { timeoutMs: 1000, what: 'listener closed' });
  await assert.rejects(s.admin(api, 'GET', '/health')); // the admin API closed first
  assert.equal(await conn.echo('draining'), 'draining');
  const exit = await child.exited;
  const took = Date.now() - t0;
  assert.deepEqual(exit, { code: 0, signal: null });
  assert.ok(took >= drainMs - 100, `exited after ${took} ms`);
  assert.ok(took < drainMs + 1500, `exited after ${took} ms, drainMs ${drainMs}`);
  assert.ok((await conn.closed) - t0 < drainMs + 1500);
  const stop = child.events.at(-1);
  assert.equal(stop.event, 'stop');
  assert.ok(stop.durationMs >= drainMs - 100 && stop.durationMs < drainMs + 1000, JSON.stringify(stop));
});

test('SIGTERM or SIGINT with no connection open exits 0 at once', async () => {
  for (const sig of ['SIGTERM', 'SIGINT']) {
    const { file } = await configFile(() => {}, { drainMs: 5000 });
    const child = await s.ServerChild.serve(file);
    const t0 = Date.now();
    child.signal(sig);
    assert.deepEqual(await child.exited, { code: 0, signal: null });
    assert.ok(Date.now() - t0 < 2000, `${sig}: ${Date.now() - t0} ms`);
    assert.equal(child.events.at(-1).signal, sig);
  }
});

test('a second SIGTERM while draining ends the process at once, by SIGTERM', async (t) => {
  const { file, port } = await configFile(() => {}, { drainMs: 30000 });
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const conn = await s.openConnection(port);
  child.signal('SIGTERM');
  await h.waitFor(async () => !(await s.accepting(port)), { timeoutMs: 1000, what: 'listener closed' });
  const t0 = Date.now();
  child.signal('SIGTERM');
  assert.deepEqual(await child.exited, { code: null, signal: 'SIGTERM' });
  assert.ok(Date.now() - t0 < 2000, `exited ${Date.now() - t0} ms after the second signal; ${child.lines.join(' | ')}`);
  assert.equal(child.events.at(-1).forced, true);
  await conn.closed;
});

test('start-up failures exit 1 and say why: an invalid file, a port in use, an admin port in use', async () => {
  const bad = await configFile((d) => (d.proxy.listeners[0].port = -1));
  let child = new s.ServerChild(['serve', '--config', bad.file]);
  assert.equal((await child.exited).code, 1);
  const e = child.events.find((x) => x.event === 'error');
  assert.equal(e.code, 'config_invalid');
  assert.deepEqual(
    e.errors.map((x) => x.path),
    ['proxy.listeners[0].port']
  );
  assert.match(child.stderr, /proxy\.listeners\[0\]\.port: /);

  const blocker = await h.listen(require('node:net').createServer());
  const busy = await configFile((d) => (d.proxy.listeners[0].port = blocker.address().port));
  child = new s.ServerChild(['serve', '--config', busy.file]);
  assert.equal((await child.exited).code, 1);
  const e2 = child.events.find((x) => x.event === 'error');
  assert.equal(e2.code, 'start_failed');
  assert.equal(e2.cause, 'EADDRINUSE');

  const adminBusy = await configFile((d) => (d.admin.port = blocker.address().port));
  child = new s.ServerChild(['serve', '--config', adminBusy.file]);
  assert.equal((await child.exited).code, 1);
  const e3 = child.events.find((x) => x.event === 'error');
  assert.equal(e3.code, 'admin_listen_failed');
  assert.equal(await s.accepting(adminBusy.port), false); // the proxy it had started is stopped
  await h.closeServer(blocker);
});

test('an XDP attach failure is logged, not fatal: the proxy serves, GET /xdp shows why, a reload retries', async (t) => {
  const { file, doc, port, api } = await configFile((d) => (d.xdp = { interface: 'rampart-none0' }));
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  const err = child.events.find((e) => e.event === 'error' && e.code === 'xdp_attach_failed');
  assert.ok(err, child.lines.join('\n'));
  assert.equal(err.interface, 'rampart-none0');
  assert.equal(typeof err.message, 'string');
  const start = child.events.find((e) => e.event === 'start');
  assert.equal(start.xdp.attached, false);
  assert.equal((await s.tlsAttempt(port)).ok, true);
  const x = await s.admin(api, 'GET', '/xdp', { token: s.TOKEN });
  assert.equal(x.json.attached, false);
  assert.deepEqual(x.json.configured, { interface: 'rampart-none0', mode: 'auto' });
  assert.equal(x.json.lastError.message, err.message);
  const m = await s.admin(api, 'GET', '/metrics', { token: s.TOKEN });
  assert.match(m.text, /^rampart_server_xdp_attached\{interface="rampart-none0"\} 0$/m);
  const ev = await child.reloadAfter(() => child.signal('SIGHUP'));
  assert.equal(ev.ok, true);
  assert.equal(ev.xdp.attached, false); // tried again
  assert.equal(fs.existsSync(file), true);
  void doc;
});
