'use strict';
// Hot reload of `rampart serve`: by a file rewritten in place, an atomic rename, a Kubernetes
// `..data` symlink swap, SIGHUP and POST /reload; certificate rotation; an invalid file keeping
// the running config; listener changes handed over to a new proxy while a client keeps
// connecting; dynamic blocks carried over.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./helpers');
const s = require('./helpers/server');

const servers = s.echoSuite(test, ['', 'B:']);

async function setup({ edit = () => {}, drainMs = 1000 } = {}) {
  const dir = s.tempDir();
  const cert = s.writeCert(dir);
  const [port, adminPort] = await h.freePorts(2);
  const doc = s.baseConfig({ port, upstreamPort: servers[''].address().port, adminPort, drainMs });
  edit(doc);
  const file = path.join(dir, 'rampart.json');
  s.writeJson(file, doc);
  const child = await s.ServerChild.serve(file);
  return { dir, file, doc, port, adminPort, cert, child, api: { port: adminPort } };
}

const tok = { token: s.TOKEN };
const blocklist = (doc, list) => {
  doc.proxy.listeners[0].protection = { blocklist: list };
  return doc;
};

test('a file rewritten in place is applied through updateConfig (protection), connections in flight kept', async (t) => {
  const { file, doc, port, child, api } = await setup();
  t.after(() => child.close());
  const held = await s.openConnection(port);
  assert.equal(await h.admitted(port, '127.0.0.3'), true);
  const ev = await child.reloadAfter(() => s.writeJson(file, blocklist(doc, ['127.0.0.3/32'])));
  assert.equal(ev.trigger, 'file');
  assert.equal(ev.ok, true);
  assert.equal(ev.applied, 'update');
  assert.deepEqual(ev.changed, [`protection:${port}`]);
  assert.equal(await h.admitted(port, '127.0.0.3'), false);
  assert.equal(await h.admitted(port, '127.0.0.1'), true);
  assert.equal(await held.echo('still-here'), 'still-here');
  const b = await s.admin(api, 'GET', '/blocked', tok);
  assert.deepEqual(b.json.cidrBlocklist, ['127.0.0.3/32']);
  const health = await s.admin(api, 'GET', '/health');
  assert.ok(Date.parse(health.json.reloadedAt) >= Date.parse(ev.ts) - 1000);
  held.sock.destroy();
});

test('an atomic rename over the file is caught (routes changed)', async (t) => {
  const { file, doc, port, child } = await setup();
  t.after(() => child.close());
  assert.equal((await s.tlsAttempt(port)).data, 'ping');
  doc.proxy.routes[0].upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: servers['B:'].address().port }];
  const ev = await child.reloadAfter(() => s.writeJsonAtomic(file, doc));
  assert.equal(ev.trigger, 'file');
  assert.equal(ev.applied, 'update');
  assert.deepEqual(ev.changed, ['routes']);
  assert.equal((await s.tlsAttempt(port)).data, 'B:ping');
  // and a second rename (the watcher follows the directory, not the replaced inode)
  doc.proxy.routes[0].upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: servers[''].address().port }];
  const ev2 = await child.reloadAfter(() => s.writeJsonAtomic(file, doc));
  assert.equal(ev2.applied, 'update');
  assert.equal((await s.tlsAttempt(port)).data, 'ping');
});

/**
 * A Kubernetes ConfigMap/Secret volume: `<dir>/<file>` → `..data/<file>`, `..data` → a
 * timestamped directory; an update writes a new directory and renames a new `..data` symlink
 * over the old one.
 */
function k8sVolume(dir) {
  let n = 0;
  const publish = (files) => {
    const version = `..2026_01_01_00_00_0${n++}.${process.pid}`;
    fs.mkdirSync(path.join(dir, version));
    for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, version, name), content);
    const old = fs.existsSync(path.join(dir, '..data')) ? fs.readlinkSync(path.join(dir, '..data')) : null;
    fs.symlinkSync(version, path.join(dir, '..data_tmp'));
    fs.renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
    for (const name of Object.keys(files)) {
      if (!fs.existsSync(path.join(dir, name))) fs.symlinkSync(path.join('..data', name), path.join(dir, name));
    }
    if (old) fs.rmSync(path.join(dir, old), { recursive: true });
  };
  return { publish };
}

test('a Kubernetes ..data symlink swap is caught, for the config file and for a rotated certificate', async (t) => {
  const dir = s.tempDir();
  const [port, adminPort] = await h.freePorts(2);
  const vol = k8sVolume(dir);
  const gen = () => {
    const d = s.tempDir();
    return s.writeCert(d);
  };
  const c1 = gen();
  const doc = s.baseConfig({ port, upstreamPort: servers[''].address().port, adminPort, cert: 'tls.crt', key: 'tls.key' });
  vol.publish({ 'rampart.json': JSON.stringify(doc), 'tls.crt': c1.certChain, 'tls.key': c1.privateKey });
  const file = path.join(dir, 'rampart.json');
  assert.ok(fs.lstatSync(file).isSymbolicLink());
  const child = await s.ServerChild.serve(file);
  t.after(() => child.close());
  assert.equal((await s.tlsAttempt(port)).fingerprint256, c1.fingerprint256);

  // The config changes (a blocklist), the certificate not.
  let ev = await child.reloadAfter(() =>
    vol.publish({ 'rampart.json': JSON.stringify(blocklist(structuredClone(doc), ['127.0.0.4/32'])), 'tls.crt': c1.certChain, 'tls.key': c1.privateKey })
  );
  assert.equal(ev.trigger, 'file');
  assert.equal(ev.applied, 'update');
  assert.deepEqual(ev.changed, [`protection:${port}`]);
  assert.equal(await h.admitted(port, '127.0.0.4'), false);

  // The Secret rotates: new connections get the new certificate.
  const c2 = gen();
  ev = await child.reloadAfter(() =>
    vol.publish({ 'rampart.json': JSON.stringify(blocklist(structuredClone(doc), ['127.0.0.4/32'])), 'tls.crt': c2.certChain, 'tls.key': c2.privateKey })
  );
  assert.equal(ev.ok, true, JSON.stringify(ev));
  assert.equal(ev.applied, 'update');
  assert.deepEqual(ev.changed, ['certificates']);
  assert.equal((await s.tlsAttempt(port)).fingerprint256, c2.fingerprint256);
});

test('certificate rotation by rewriting the cert files: new connections get the new certificate, open ones keep going', async (t) => {
  const { dir, port, child, cert } = await setup();
  t.after(() => child.close());
  const before = await s.tlsAttempt(port);
  assert.equal(before.fingerprint256, cert.fingerprint256);
  const held = await s.openConnection(port);
  const from = child.events.length;
  // certbot-style: both files replaced by rename, one after the other
  const staging = s.tempDir();
  const next = s.writeCert(staging);
  fs.renameSync(path.join(staging, 'cert.pem'), path.join(dir, 'cert.pem'));
  fs.renameSync(path.join(staging, 'key.pem'), path.join(dir, 'key.pem'));
  await h.waitFor(async () => (await s.tlsAttempt(port)).fingerprint256 === next.fingerprint256, { timeoutMs: 8000, what: 'the new certificate' });
  const ok = child.events.slice(from).filter((e) => e.event === 'reload' && e.ok);
  assert.ok(ok.length >= 1);
  assert.deepEqual(ok.at(-1).changed, ['certificates']);
  assert.equal(ok.at(-1).applied, 'update');
  assert.equal(held.sock.getPeerCertificate().fingerprint256, cert.fingerprint256);
  assert.equal(await held.echo('after-rotation'), 'after-rotation');
  held.sock.destroy();
});

test('SIGHUP reloads the file (and the watcher does not apply it a second time)', async (t) => {
  const { file, doc, port, child } = await setup();
  t.after(() => child.close());
  const ev = await child.reloadAfter(() => {
    s.writeJson(file, blocklist(doc, ['127.0.0.5/32']));
    child.signal('SIGHUP');
  });
  assert.equal(ev.trigger, 'sighup');
  assert.equal(ev.applied, 'update');
  assert.equal(await h.admitted(port, '127.0.0.5'), false);
  const from = child.events.length;
  await assert.rejects(
    child.waitEvent((e) => e.event === 'reload', { from, timeoutMs: 1500 }),
    /timed out/
  );
  // An unchanged file: SIGHUP still reloads, and nothing changes.
  const again = await child.reloadAfter(() => child.signal('SIGHUP'));
  assert.equal(again.trigger, 'sighup');
  assert.equal(again.applied, 'none');
  assert.deepEqual(again.changed, []);
});

test('POST /reload applies the file: 200 { reloaded: true }; an invalid file: 400 with every path', async (t) => {
  const { file, doc, port, child, api } = await setup();
  t.after(() => child.close());
  s.writeJson(file, blocklist(doc, ['127.0.0.6/32']));
  const r = await s.admin(api, 'POST', '/reload', tok);
  assert.equal(r.status, 200);
  assert.equal(r.json.reloaded, true);
  assert.ok(['update', 'none'].includes(r.json.applied)); // 'none' when the watcher got there first
  assert.equal(await h.admitted(port, '127.0.0.6'), false);
  const reloads = child.events.filter((e) => e.event === 'reload');
  assert.ok(reloads.some((e) => e.trigger === 'admin' && e.ok));

  const broken = structuredClone(blocklist(doc, ['10.1.2.3/8']));
  broken.admin.port = 'nine';
  s.writeJson(file, broken);
  const bad = await s.admin(api, 'POST', '/reload', tok);
  assert.equal(bad.status, 400);
  assert.match(bad.json.error, /the running config is unchanged/);
  assert.deepEqual(bad.json.errors.map((e) => e.path).sort(), ['admin.port', 'proxy.listeners[0].protection.blocklist[0]']);
  assert.equal(await h.admitted(port, '127.0.0.6'), false);
});

test('an invalid file keeps the running config and logs the ConfigError paths; fixing it applies', async (t) => {
  const { file, doc, port, child, api } = await setup();
  t.after(() => child.close());
  const healthBefore = (await s.admin(api, 'GET', '/health')).json;
  const broken = structuredClone(doc);
  broken.proxy.listeners[0].protection = { rateLimit: { connectionsPerSecond: -1 } };
  broken.proxy.routes[0].upstreams = [];
  broken.typo = 1;
  const ev = await child.reloadAfter(() => s.writeJson(file, broken));
  assert.equal(ev.ok, false);
  assert.equal(ev.trigger, 'file');
  assert.match(ev.message, /the running config is unchanged/);
  const paths = ev.errors.map((e) => e.path).sort();
  assert.ok(paths.includes('typo'), paths.join());
  assert.ok(paths.includes('proxy.listeners[0].protection.rateLimit.connectionsPerSecond'), paths.join());
  assert.ok(
    paths.some((p) => p.startsWith('proxy.routes[0].upstreams')),
    paths.join()
  );
  // still serving the old config
  assert.equal((await s.tlsAttempt(port)).ok, true);
  assert.equal((await s.admin(api, 'GET', '/health')).json.reloadedAt, healthBefore.reloadedAt);
  let m = (await s.admin(api, 'GET', '/metrics', tok)).text;
  assert.match(m, /^rampart_config_last_reload_successful 0$/m);
  assert.match(m, /^rampart_config_reloads_total\{result="failure"\} 1$/m);
  // A file that is not JSON at all, then a fixed one.
  const notJson = await child.reloadAfter(() => fs.writeFileSync(file, '{ "proxy": '));
  assert.equal(notJson.ok, false);
  assert.equal(notJson.errors[0].path, '');
  assert.match(notJson.errors[0].message, /^invalid JSON/);
  const fixed = await child.reloadAfter(() => s.writeJson(file, blocklist(doc, ['127.0.0.7/32'])));
  assert.equal(fixed.ok, true);
  assert.equal(await h.admitted(port, '127.0.0.7'), false);
  m = (await s.admin(api, 'GET', '/metrics', tok)).text;
  assert.match(m, /^rampart_config_last_reload_successful 1$/m);
});

/**
 * The handover configuration of docs/operating.md (Reloading): `net.ipv4.tcp_migrate_req=1`, so a connection still queued
 * in a closing listener's backlog moves to the new one instead of being reset. Set for the test
 * when we are root and it is 0 (restored after); otherwise the test runs with what the host has.
 */
function migrateQueuedConnections(t) {
  const file = '/proc/sys/net/ipv4/tcp_migrate_req';
  let was = null;
  try {
    was = fs.readFileSync(file, 'utf8').trim();
  } catch {
    return;
  }
  if (was !== '0' || !h.isRoot) return;
  fs.writeFileSync(file, '1');
  t.after(() => fs.writeFileSync(file, was));
}

test('a listener change (a listener added) hands over to a new proxy while a client loops on the kept port', async (t) => {
  migrateQueuedConnections(t);
  const { file, doc, port, child, api } = await setup({ drainMs: 2000 });
  t.after(() => child.close());
  const extra = await h.freePort();
  const loop = s.loopClient(port);
  await h.waitFor(() => loop.tally.ok >= 20, { timeoutMs: 10000, what: 'the loop client under way' });
  const next = structuredClone(doc);
  next.proxy.listeners.push({ ...doc.proxy.listeners[0], port: extra });
  const ev = await child.reloadAfter(() => s.writeJson(file, next));
  const after = loop.tally.ok;
  await h.waitFor(() => loop.tally.ok >= after + 20, { timeoutMs: 10000, what: 'the loop client past the reload' });
  const tally = await loop.stop();
  assert.equal(ev.ok, true, JSON.stringify(ev));
  assert.equal(ev.applied, 'restart');
  assert.deepEqual(ev.changed, ['listeners']);
  assert.deepEqual(ev.ports, [port, extra]);
  assert.equal((await s.tlsAttempt(extra)).ok, true);
  assert.deepEqual((await s.admin(api, 'GET', '/health')).json.ports, [port, extra]);
  const failures = tally.total - tally.ok;
  // A second proxy of the process joins the SO_REUSEPORT group of the kept port: both accept
  // until the old one stops.
  assert.equal(ev.handover, 'overlap', JSON.stringify(ev));
  // With both proxies bound, a connection still queued in a closing listener's backlog is reset
  // unless the kernel migrates it (net.ipv4.tcp_migrate_req=1, set above when we may).
  assert.equal(failures, 0, `${failures} of ${tally.total} connections failed: ${JSON.stringify(tally.failed)} (tcp_migrate_req ${ev.tcpMigrateReq})`);
});

test('a listener port change: the new port serves before the old stops, open connections drain for drainMs, blocks carry over', async (t) => {
  const drainMs = 1500;
  const { file, doc, port, child, api } = await setup({ drainMs });
  t.after(() => child.close());
  const next = await h.freePort();
  const post = (body) => s.admin(api, 'POST', '/block', { ...tok, body });
  assert.equal((await post({ cidr: '127.0.0.2', reason: 'INC-7 scraper' })).status, 204); // every port
  assert.equal((await post({ cidr: '198.51.100.0/24', ttlMs: 600000 })).status, 204); // every port, timed
  const timedAt = Date.now();
  assert.equal((await post({ cidr: '203.0.113.0/24', port })).status, 204); // only the old port
  const held = await s.openConnection(port);
  const moved = structuredClone(doc);
  moved.proxy.listeners[0].port = next;
  const ev = await child.reloadAfter(() => s.writeJson(file, moved));
  const switchedAt = Date.now();
  assert.equal(ev.ok, true, JSON.stringify(ev));
  assert.equal(ev.applied, 'restart');
  assert.equal(ev.handover, 'overlap'); // no shared port: both bound at once
  assert.equal(ev.blocksCarried, 2);
  assert.deepEqual(ev.blocksDropped, [{ cidr: '203.0.113.0/24', port, why: 'the port has no listener any more' }]);

  assert.equal((await s.tlsAttempt(next)).ok, true);
  assert.equal(await h.admitted(next, '127.0.0.2'), false);
  await h.waitFor(async () => !(await s.accepting(port)), { timeoutMs: 3000, what: 'the old port closed' });
  // the open connection keeps working through the drain, and is closed at its end
  assert.equal(await held.echo('draining'), 'draining');
  const closedAt = await held.closed;
  assert.ok(closedAt - switchedAt >= drainMs - 300, `closed ${closedAt - switchedAt} ms after the switch`);
  assert.ok(closedAt - switchedAt < drainMs + 2000, `closed ${closedAt - switchedAt} ms after the switch`);

  const b = await s.admin(api, 'GET', '/blocked?detail=1', tok);
  const dyn = b.json.dynamicBlocklist;
  assert.deepEqual(dyn.map((e) => [e.ip, e.port]).sort(), [
    ['127.0.0.2/32', next],
    ['198.51.100.0/24', next],
  ]);
  assert.equal(dyn.find((e) => e.ip === '127.0.0.2/32').note, 'INC-7 scraper');
  assert.equal(dyn.find((e) => e.ip === '127.0.0.2/32').remainingMs, undefined);
  // The remaining time carried over exactly (within 1 s of what was left), not restarted.
  const timed = dyn.find((e) => e.ip === '198.51.100.0/24').remainingMs;
  const left = 600000 - (Date.now() - timedAt);
  assert.ok(Math.abs(timed - left) <= 1000, `${timed} ms listed, ${left} ms left`);
  assert.deepEqual((await s.admin(api, 'GET', '/health')).json.ports, [next]);
});

test('a handover that cannot bind (a port another process holds) keeps the old config serving, whatever the listener order', async (t) => {
  const { file, doc, port, child, api } = await setup();
  t.after(() => child.close());
  const squatter = await h.listen(require('node:net').createServer());
  t.after(() => h.closeServer(squatter));
  const taken = squatter.address().port;
  assert.equal((await s.admin(api, 'POST', '/block', { ...tok, body: { cidr: '127.0.0.2', reason: 'kept' } })).status, 204);
  for (const order of [
    [port, taken],
    [taken, port],
  ]) {
    const next = structuredClone(doc);
    next.proxy.listeners = order.map((p) => ({ ...doc.proxy.listeners[0], port: p }));
    s.writeJson(file, next);
    const r = await s.admin(api, 'POST', '/reload', tok);
    assert.equal(r.status, 500, r.text);
    assert.equal(r.json.code, 'EADDRINUSE');
    const ev = child.events.filter((e) => e.event === 'reload').at(-1);
    assert.equal(ev.ok, false);
    assert.equal(ev.code, 'EADDRINUSE');
    if (ev.rolledBack) assert.equal(order[0], port); // only a failure on the kept port stops the old proxy first
    // still the old config: one listener, serving, with its blocks
    assert.deepEqual((await s.admin(api, 'GET', '/health')).json.ports, [port]);
    assert.equal((await s.tlsAttempt(port)).ok, true);
    assert.equal(await h.admitted(port, '127.0.0.2'), false);
    assert.equal(child.exit, undefined);
  }
  assert.match((await s.admin(api, 'GET', '/metrics', tok)).text, /^rampart_config_last_reload_successful 0$/m);
});

test('workerThreads and blockedEvents are listener changes too; drainMs and the admin token apply in place', async (t) => {
  const { file, doc, child, api, port } = await setup();
  t.after(() => child.close());
  let next = structuredClone(doc);
  next.proxy.workerThreads = 2;
  next.proxy.blockedEvents = { maxPerSecond: 10 };
  let ev = await child.reloadAfter(() => s.writeJson(file, next));
  assert.equal(ev.applied, 'restart');
  assert.equal((await s.tlsAttempt(port)).ok, true);
  next = structuredClone(next);
  next.drainMs = 250;
  next.admin.token = 'another-token-0123456789';
  ev = await child.reloadAfter(() => s.writeJson(file, next));
  assert.equal(ev.applied, 'none');
  assert.deepEqual(ev.changed, ['drainMs', 'admin.token']);
  assert.equal((await s.admin(api, 'GET', '/xdp', tok)).status, 401);
  assert.equal((await s.admin(api, 'GET', '/xdp', { token: 'another-token-0123456789' })).status, 200);
  next = structuredClone(next);
  next.admin.port = next.admin.port === 65535 ? 65534 : next.admin.port + 1;
  ev = await child.reloadAfter(() => s.writeJson(file, next));
  assert.deepEqual(ev.notApplied, ['admin listen address (restart to apply)']);
  assert.equal((await s.admin(api, 'GET', '/health')).status, 200);
});
