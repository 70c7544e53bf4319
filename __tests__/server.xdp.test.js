'use strict';
// `xdp: { interface }` in the config file (root): `rampart serve` runs in a network namespace
// with a veth interface, attaches the XDP filter at start, re-attaches it to the new proxy after
// a reload that replaced the proxy, and re-attaches in place when only the xdp section changes.
// The admin API is on a unix socket, reachable from outside the namespace.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const h = require('./helpers');
const s = require('./helpers/server');

const id = process.pid % 100000;
const NS = `rampart-srv${id}`;
const DEV = `rsv${id}`;
const PEER = `rsw${id}`;

async function ip(...args) {
  const r = await h.run('ip', args);
  if (r.code !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

async function setup(t) {
  if (!h.isRoot) return 'needs root (network namespaces, XDP)';
  const probe = await h.run('ip', ['netns', 'add', NS]);
  if (probe.code !== 0) return `cannot create network namespaces: ${probe.stderr}`;
  t.after(() => h.run('ip', ['netns', 'del', NS]));
  await ip('link', 'add', DEV, 'type', 'veth', 'peer', 'name', PEER);
  await ip('link', 'set', DEV, 'netns', NS);
  await ip('link', 'set', PEER, 'netns', NS);
  for (const d of ['lo', DEV, PEER]) await ip('-n', NS, 'link', 'set', d, 'up');
  return null;
}

test('xdp in the file: attached at start, re-attached after a handover and after an xdp change', async (t) => {
  const skip = await setup(t);
  if (skip) {
    h.skipOrFail(t, skip);
    return;
  }
  const dir = s.tempDir();
  s.writeCert(dir);
  const doc = s.baseConfig({ port: 8443, upstreamPort: 9926, socketPath: 'admin.sock' });
  doc.proxy.listeners[0].protection = { rateLimit: { connectionsPerSecond: 20 }, xdp: { synPerSecond: 50 } };
  doc.xdp = { interface: DEV };
  const file = path.join(dir, 'rampart.json');
  s.writeJson(file, doc);
  const child = new s.ServerChild(['serve', '--config', file], { wrap: ['ip', 'netns', 'exec', NS] });
  t.after(() => child.close());
  const start = await child.waitEvent((e) => e.event === 'start' || (e.event === 'error' && e.code !== 'xdp_attach_failed'), { what: 'start' });
  assert.equal(start.event, 'start', JSON.stringify(start));
  if (!start.xdp.attached && /not built/i.test(start.xdp.error)) {
    h.skipOrFail(t, `XDP object not built: ${start.xdp.error}`);
    return;
  }
  assert.equal(start.xdp.attached, true, JSON.stringify(start.xdp));
  assert.equal(start.xdp.interface, DEV);
  const api = { socketPath: path.join(dir, 'admin.sock') };
  const tok = { token: s.TOKEN };
  let x = (await s.admin(api, 'GET', '/xdp', tok)).json;
  assert.equal(x.attached, true);
  assert.equal(x.interface, DEV);
  assert.deepEqual(x.configured, { interface: DEV, mode: 'auto' });
  const m = (await s.admin(api, 'GET', '/metrics', tok)).text;
  assert.match(m, /^rampart_xdp_packets_total\{action="pass"\} \d+$/m);
  for (const name of s.XDP_SERIES) assert.match(m, new RegExp(`^# TYPE ${name} `, 'm'), name);
  assert.match(m, new RegExp(`^rampart_server_xdp_attached\\{interface="${DEV}"\\} 1$`, 'm'));

  // A listener change: a new proxy, and XDP moves to it.
  const moved = structuredClone(doc);
  moved.proxy.listeners[0].port = 8444;
  let ev = await child.reloadAfter(() => s.writeJson(file, moved));
  assert.equal(ev.ok, true, JSON.stringify(ev));
  assert.equal(ev.applied, 'restart');
  assert.equal(ev.xdp.attached, true, JSON.stringify(ev));
  x = (await s.admin(api, 'GET', '/xdp', tok)).json;
  assert.equal(x.attached, true);
  assert.deepEqual((await s.admin(api, 'GET', '/health')).json.ports, [8444]);

  // Only the xdp section changes: detached and attached again in place, in the mode asked for.
  const generic = structuredClone(moved);
  generic.xdp.mode = 'generic';
  ev = await child.reloadAfter(() => s.writeJson(file, generic));
  assert.equal(ev.applied, 'none');
  assert.deepEqual(ev.changed, ['xdp']);
  assert.equal(ev.xdp.attached, true);
  assert.equal(ev.xdp.mode, 'generic');
  assert.equal((await s.admin(api, 'GET', '/xdp', tok)).json.mode, 'generic');

  // xdp removed from the file: detached.
  const none = structuredClone(generic);
  delete none.xdp;
  ev = await child.reloadAfter(() => s.writeJson(file, none));
  assert.deepEqual(ev.changed, ['xdp']);
  x = (await s.admin(api, 'GET', '/xdp', tok)).json;
  assert.equal(x.attached, false);
  assert.equal(x.configured, null);

  child.signal('SIGTERM');
  assert.equal((await child.exited).code, 0);
});
