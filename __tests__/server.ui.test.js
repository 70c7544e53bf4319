'use strict';
// The incident page of the admin API (docs/admin-api.md: Incident page): `GET /` and `/ui` serve the page
// with the token rules of the other routes (Basic with the token as the password for GET, never
// for changes), `GET /ui.json` its state; headless Chromium loads it from a running
// `rampart serve` during a flood from 127.0.0.2 and shows the boxed address, its reason and a
// chart with points. The demo (`npm start`) prints the page's URL and serves it.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const http = require('node:http');
const h = require('./helpers');
const s = require('./helpers/server');
const { startDemo } = require('./helpers/demo');

const servers = s.echoSuite(test);
const FLOODER = '127.0.0.2';
const basic = (password, user = 'oncall') => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

/**
 * `rampart serve` with a tight rate limit (1/s, burst 2), a 60 s penalty box and a shadow rate of
 * one connection every 10 s (burst 1), admin token on.
 */
async function serveProtected() {
  const { file, port, api } = await s.configDir(servers[''].address().port, (doc) => {
    doc.proxy.listeners[0].protection = {
      rateLimit: { connectionsPerSecond: 1, burst: 2 },
      penaltyBox: { durationMs: 60000 },
      shadow: { rateLimit: { connectionsPerSecond: 0.1, burst: 1 } },
    };
  });
  const child = await s.ServerChild.serve(file);
  return { child, port, api };
}

/**
 * 8 connections from FLOODER (2 admitted, 1 rate_limited, which boxes it, 5 penalty_boxed), then
 * polls `/ui.json` until every refusal is in the sampled series (and it has at least two samples).
 * Resolves that state.
 */
async function floodUntilBoxed(port, api) {
  let ok = 0;
  for (let i = 0; i < 8; i++) if ((await s.tlsAttempt(port, { localAddress: FLOODER })).ok) ok++;
  assert.equal(ok, 2, 'the burst of 2 is admitted, the rest refused');
  return h.waitFor(
    async () => {
      const r = await s.admin(api, 'GET', '/ui.json', { token: s.TOKEN });
      assert.equal(r.status, 200, r.text);
      const l = r.json.listeners[0];
      const sampled = l.series.reduce((a, p) => a + (p.refused.penalty_boxed || 0), 0);
      // At least two samples: a chart line needs two points.
      return l.blockedByReason.penalty_boxed === 5 && sampled === 5 && l.series.length >= 2 ? r.json : null;
    },
    { timeoutMs: 5000, intervalMs: 100, what: 'the penalty_boxed refusals sampled into the chart' }
  );
}

test('GET / and /ui serve the page under the token rules; Basic (token as password) works for GET only', async (t) => {
  const { child, api } = await serveProtected();
  t.after(() => child.close());

  for (const p of ['/', '/ui', '/ui.json']) {
    const r = await s.admin(api, 'GET', p);
    assert.equal(r.status, 401, p);
    assert.equal(r.headers['www-authenticate'], 'Basic realm="rampart", charset="UTF-8"', p);
    for (const auth of [basic('wrong-token-0123456789abcdef'), basic(s.TOKEN.slice(1)), `Basic ${s.TOKEN}`, basic(`${s.TOKEN}x`)]) {
      assert.equal((await s.admin(api, 'GET', p, { headers: { authorization: auth } })).status, 401, `${p} ${auth}`);
    }
  }
  const page = await s.admin(api, 'GET', '/ui', { token: s.TOKEN });
  assert.equal(page.status, 200);
  assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
  assert.equal(page.headers['x-frame-options'], 'DENY');
  assert.match(
    page.headers['content-security-policy'],
    /^default-src 'none'; script-src 'sha256-[A-Za-z0-9+/]{43}='; style-src 'sha256-[A-Za-z0-9+/]{43}='; connect-src 'self';/
  );
  assert.match(page.text, /^<!doctype html>/);
  const root = await s.admin(api, 'GET', '/', { headers: { authorization: basic(s.TOKEN) } });
  assert.equal(root.status, 200);
  assert.equal(root.text, page.text);
  // Basic authenticates every GET (the page's own requests), with any user name...
  assert.equal((await s.admin(api, 'GET', '/blocked', { headers: { authorization: basic(s.TOKEN, '') } })).status, 200);
  assert.equal((await s.admin(api, 'GET', '/ui.json', { headers: { authorization: basic(s.TOKEN) } })).status, 200);
  // ...but never a change: a browser that saved it must not be able to block or reload for another site.
  for (const [method, p, body] of [
    ['POST', '/block', { cidr: '192.0.2.1' }],
    ['DELETE', '/block', { cidr: '192.0.2.1' }],
    ['POST', '/reload', undefined],
  ]) {
    const r = await s.admin(api, method, p, { headers: { authorization: basic(s.TOKEN) }, body });
    assert.equal(r.status, 401, `${method} ${p}`);
    assert.equal(r.headers['www-authenticate'], 'Bearer realm="rampart"');
  }
  assert.deepEqual((await s.admin(api, 'GET', '/blocked', { token: s.TOKEN })).json.dynamicBlocklist, []);
  // Same input rules as the other routes.
  const q = await s.admin(api, 'GET', '/ui.json?x=1', { token: s.TOKEN });
  assert.equal(q.status, 400);
  assert.deepEqual(q.json.errors, [{ path: 'query.x', message: 'this route takes no parameters' }]);
  assert.equal((await s.admin(api, 'POST', '/ui', { token: s.TOKEN })).status, 405);
});

test('/ui.json: per-second series by reason, the boxed address with its reason and remaining time, routes', async (t) => {
  const { child, port, api } = await serveProtected();
  t.after(() => child.close());
  const state = await floodUntilBoxed(port, api);
  assert.equal(state.version, require('../package.json').version);
  assert.equal(state.pid, child.proc.pid);
  assert.equal(state.seconds, 300);
  assert.equal(state.listeners.length, 1);
  const l = state.listeners[0];
  assert.equal(l.address, `127.0.0.1:${port}`);
  assert.equal(l.accepted, 2);
  assert.deepEqual(l.blockedByReason, { rate_limited: 1, penalty_boxed: 5 });
  assert.equal(l.defenseActive, false);
  // The second admitted connection is over the shadow rate (the refused ones are reported as refused only).
  assert.deepEqual(l.shadowByReason, { rate_limited: 1 });
  // The sampled seconds add up to the counters (the first sample, taken at start, is the baseline).
  const sum = (f) => l.series.reduce((a, p) => a + f(p), 0);
  assert.ok(
    l.series.every((p, i) => p.ms > 0 && (i === 0 || p.t - l.series[i - 1].t === p.ms)),
    JSON.stringify(l.series)
  );
  assert.equal(
    sum((p) => p.accepted),
    2
  );
  assert.equal(
    sum((p) => p.refused.penalty_boxed || 0),
    5
  );
  assert.equal(
    sum((p) => p.refused.rate_limited || 0),
    1
  );
  assert.equal(state.blocked.total, 1);
  assert.equal(state.blocked.entries.length, 1);
  const b = state.blocked.entries[0];
  assert.deepEqual(
    { ...b, remainingMs: undefined },
    { ip: FLOODER, prefix: false, port, list: 'penaltyBoxed', reason: 'penalty_boxed', remainingMs: undefined, note: null, node: null }
  );
  assert.ok(b.remainingMs > 50000 && b.remainingMs <= 60000, String(b.remainingMs));
  assert.equal(state.routes.length, 1);
  const { upstream, ...route } = state.routes[0];
  assert.deepEqual(route, { route: '', metricsGroup: '', activeConnections: 0, connections: 2, errors: 0 });
  // An opaque route: capacity off, still measured (two upstream connections made).
  assert.deepEqual([upstream.mode, upstream.limit, upstream.inFlight, upstream.refused], ['off', null, 0, 0]);
  assert.equal(state.xdp, null);
  assert.equal(state.cluster, null);
});

/** The page as headless Chromium renders it after `budgetMs` of virtual time: the serialized DOM. */
async function chromiumDom(url, budgetMs) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-chromium-'));
  try {
    const args = ['--headless', '--disable-gpu', '--no-first-run', `--user-data-dir=${profile}`, `--virtual-time-budget=${budgetMs}`, '--dump-dom', url];
    if (h.isRoot) args.unshift('--no-sandbox'); // Chromium refuses to run as root with its sandbox
    const r = await h.run('chromium', args, { timeoutMs: 90000 });
    assert.equal(r.code, 0, `chromium exited ${r.code}: ${r.stderr.toString().slice(-2000)}`);
    return r.stdout.toString();
  } finally {
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

test('headless Chromium shows the refused address, its reason and a chart with points during a flood', async (t) => {
  if (!h.needTool(t, 'chromium')) return;
  const { child, port, api } = await serveProtected();
  t.after(() => child.close());
  await floodUntilBoxed(port, api);

  // The browser is given the token in the URL: it answers the 401's Basic challenge with it and
  // keeps sending it with the page's polls of /ui.json.
  const dom = await chromiumDom(`http://oncall:${s.TOKEN}@127.0.0.1:${api.port}/ui`, 5000);
  const status = /<span id="status"[^>]*>([^<]*)</.exec(dom);
  assert.ok(status, dom.slice(0, 2000));
  assert.match(status[1], /^live · updated /);
  const blocked = /<table id="blocked">([\s\S]*?)<\/table>/.exec(dom)[1];
  const rows = [...blocked.matchAll(/<tr>(<td[\s\S]*?)<\/tr>/g)].map((m) => [...m[1].matchAll(/<td[^>]*>([^<]*)<\/td>/g)].map((c) => c[1]));
  assert.equal(rows.length, 1, blocked);
  assert.deepEqual(rows[0].slice(0, 3), [FLOODER, String(port), 'penalty_boxed']);
  assert.match(rows[0][3], /^(5[1-9]|60) s$/);
  assert.equal(rows[0][4], '');
  const section = new RegExp(`<section data-listener="127\\.0\\.0\\.1:${port}">([\\s\\S]*?)</section>`).exec(dom);
  assert.ok(section, 'the listener has a section');
  const paths = Object.fromEntries([...section[1].matchAll(/<path d="([^"]*)"[^>]*data-series="([^"]+)"/g)].map((m) => [m[2], m[1]]));
  assert.deepEqual(Object.keys(paths).sort(), ['accepted', 'penalty_boxed', 'rate_limited']);
  for (const [name, d] of Object.entries(paths)) {
    const points = d.match(/[ML]-?\d+(\.\d+)?,-?\d+(\.\d+)?/g) || [];
    assert.ok(points.length >= 2, `${name}: ${d}`);
  }
  // The penalty_boxed line rises above the baseline (y of 0/s = 160) somewhere.
  const ys = paths.penalty_boxed.match(/,(-?\d+(\.\d+)?)/g).map((y) => Number(y.slice(1)));
  assert.ok(Math.min(...ys) < 160, paths.penalty_boxed);
  assert.match(section[1], /refused since start: penalty_boxed 5, rate_limited 1/);
  assert.match(section[1], /<div class="dim" data-shadow="">shadow rules would have refused \(admitted\): rate_limited 1<\/div>/);
  // Upstream health and overload state of the route: in flight / limit, queued, overload on/off
  // (an opaque route: capacity off, nothing in flight after the flood).
  const routes = /<table id="routes">([\s\S]*?)<\/table>/.exec(dom)[1];
  const routeRows = [...routes.matchAll(/<tr>(<td[\s\S]*?)<\/tr>/g)].map((m) => m[1]);
  assert.equal(routeRows.length, 1, routes);
  const health = /<span data-route-health="">([\s\S]*?)<\/span><\/td>/.exec(routeRows[0]);
  assert.ok(health, routeRows[0]);
  assert.equal(
    health[1].replace(/<[^>]+>/g, ''),
    'overload off in flight 0 / limit none · queued 0 · off · latency 0 ms (baseline 0) · refused 0 · connect failures 0'
  );
  assert.match(health[1], /^<span class="pill ok">overload off<\/span>/);
});

test('the demo (npm start) serves the page and prints its URL', async () => {
  const demo = await startDemo();
  try {
    const m = /incident page: (http:\/\/127\.0\.0\.1:(\d+))\/ui /.exec(demo.out());
    assert.ok(m, demo.out());
    const get = (p) =>
      new Promise((resolve, reject) => {
        http
          .get(`${m[1]}${p}`, (res) => {
            let body = '';
            res.on('data', (d) => (body += d));
            res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'], body }));
          })
          .on('error', reject);
      });
    const page = await get('/ui');
    assert.equal(page.status, 200);
    assert.equal(page.type, 'text/html; charset=utf-8');
    const state = JSON.parse((await get('/ui.json')).body);
    assert.deepEqual(
      state.listeners.map((l) => l.address),
      [`127.0.0.1:${demo.port}`]
    );
  } finally {
    await demo.stop();
  }
});
