'use strict';
// The application's capacity: a real node upstream that serves 20 requests at once, 10 ms each
// (the rest wait in its own queue), behind a terminated `protocol: 'http'` route, and an
// IP-diverse TLS keep-alive GET flood from 400 addresses (in 256 /24s, one connection and at
// most 10 requests/s each: under every per-client limit of the listener; 4,000 requests/s
// together, twice what the upstream serves). The known-good probe
// (127.0.0.2, a new TLS connection + GET every 50 ms) runs alone first — its no-attack p99, and
// it becomes known-good — then beside the flood.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');
const { capacityUpstream, tlsGetFlood, tlsGetFloodOnThread, probe, quantile } = require('./helpers/flood');

/**
 * How long the probe runs alone first: its standing must predate the overload by the seasoning
 * (10 s) before it buys priority, as a site's regular users' does.
 */
const CALM_MS = 11000;

/** Per-client limits the flood stays far under (each source: 1 connection, ≤ 10 requests/s). */
const PROTECTION = { rateLimit: { connectionsPerSecond: 20, burst: 40 }, maxConcurrentPerIp: 64 };

/**
 * Rampart on a free port, one terminated `protocol: 'http'` route to `upPort` (with the route
 * fields of `route`, e.g. its `concurrency`); stopped after `t`.
 */
async function proxyTo(t, upPort, route = {}) {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']), protection: PROTECTION }],
    routes: [{ sni: '', terminateTls: true, protocol: 'http', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upPort }], ...route }],
  });
  await proxy.start();
  t.after(() => proxy.stop());
  return { proxy, port };
}

/** The default route's `metrics().routeMetrics[i].upstream` (undefined until Rampart measures it). */
function routeUpstream(proxy) {
  const r = proxy.metrics().routeMetrics.find((x) => x.route === '');
  return r && r.upstream;
}

test('an IP-diverse GET flood under every per-client limit keeps the upstream in flight within the learned limit + 10 % and the known-good probe within its targets', {
  timeout: 60000,
}, async (t) => {
  const up = await capacityUpstream({ concurrency: 20, serviceMs: 10 });
  t.after(() => up.close());
  const { proxy, port } = await proxyTo(t, up.port);

  const calm = await probe({ port, durationMs: CALM_MS });
  assert.deepEqual(calm.failures, {});
  assert.equal(calm.ok, calm.attempts);
  const target = 2 * calm.p99 + 20;

  up.resetPeak();
  const from = up.series.length;
  const limits = [];
  const sampler = setInterval(() => {
    const u = routeUpstream(proxy);
    limits.push(u ? u.limit : NaN);
  }, 50);
  const [flood, attacked] = await Promise.all([
    // On its own thread: its 400 TLS handshakes never delay the probe's event loop.
    tlsGetFloodOnThread({ port, sources: 400, base: '127.1', perSource: 1, intervalMs: 100, durationMs: 6000 }),
    probe({ port, durationMs: 6000 }),
  ]);
  clearInterval(sampler);

  assert.ok(flood.answered > 0, `flood: ${JSON.stringify(flood)}`);
  assert.ok(up.marked > 0, 'flood requests reached the upstream');

  // In flight at the upstream, after the first second of the flood (the limiter's start), never
  // above the learned limit + 10 %.
  const settled = up.series.slice(from + 100);
  const peak = Math.max(...settled.map((s) => s.inFlight));
  const learned = limits.slice(20);
  assert.ok(learned.every(Number.isFinite), `routeMetrics[].upstream.limit: ${JSON.stringify(learned.slice(0, 5))}`);
  const maxLimit = Math.max(...learned);
  assert.ok(peak <= Math.floor(maxLimit * 1.1), `upstream in flight peaked at ${peak}, learned limit ${maxLimit}`);

  const refused = proxy.metrics().listeners[0].blockedByReason.upstream_overloaded;
  // The probe's p99 once the limiter has learned: see below.
  const learnedP99 = quantile(
    attacked.latenciesMs.filter((_, i) => attacked.startedMs[i] >= 1000),
    0.99
  );
  t.diagnostic(
    `upstream peak ${peak} (learned limit ≤ ${maxLimit}); probe ${attacked.ok}/${attacked.attempts}, ` +
      `failures ${JSON.stringify(attacked.failures)}, p99 ${attacked.p99.toFixed(1)} ms (after 1 s ${learnedP99.toFixed(1)} ms; calm ${calm.p99.toFixed(1)} ms); flood ${JSON.stringify(flood.status)}, ` +
      `upstream_overloaded ${refused}; slowest probe requests (ms after the flood began: ms) ` +
      JSON.stringify(
        attacked.latenciesMs
          .map((l, i) => [Math.round(attacked.startedMs[i]), Math.round(l)])
          .sort((a, b) => b[1] - a[1])
          .slice(0, 4)
      )
  );
  // The known-good probe: ≥ 99 % success, p99 ≤ 2 × its no-attack p99 + 20 ms.
  assert.ok(attacked.ok >= 0.99 * attacked.attempts, `probe ${attacked.ok}/${attacked.attempts}, failures ${JSON.stringify(attacked.failures)}`);
  // Its p99 on requests begun after the flood's first second (as the in-flight check above). In
  // that second the flood's 400 TLS handshakes arrive at once and share this machine's two
  // CPUs with the probe's own handshakes (the upstream is held at the limit from the start:
  // it begins at 20); the whole-flood p99 is in the diagnostic (29-50 ms on a quiet machine,
  // up to 140 ms beside other CPU-heavy work).
  assert.ok(
    learnedP99 <= target,
    `probe p99 after the first second ${learnedP99.toFixed(1)} ms > ${target.toFixed(1)} ms (no-attack p99 ${calm.p99.toFixed(1)} ms; whole flood ${attacked.p99.toFixed(1)} ms)`
  );
});

test('an upstream at normal load sees no refusal', { timeout: 30000 }, async (t) => {
  const up = await capacityUpstream({ concurrency: 20, serviceMs: 10 });
  t.after(() => up.close());
  const { proxy, port } = await proxyTo(t, up.port);

  // 10 keep-alive clients at ≤ 20 requests/s each: ≤ 200 requests/s, ≤ 10 in flight, half the
  // upstream's 20 at once — no queue at the upstream, so nothing for Rampart to refuse.
  const [load, p] = await Promise.all([
    tlsGetFlood({ port, sources: 10, base: '127.2', perSource: 1, intervalMs: 50, durationMs: 3000 }),
    probe({ port, durationMs: 3000 }),
  ]);
  t.diagnostic(`upstream ${JSON.stringify(routeUpstream(proxy))}; load ${JSON.stringify(load.status)}`);
  assert.deepEqual(Object.keys(load.status), ['200']);
  assert.equal(load.status['200'], load.requests);
  assert.equal(load.refused, 0);
  assert.equal(load.closedByProxy, 0);
  assert.equal(load.timeouts, 0);
  assert.equal(load.connections, 10);
  assert.deepEqual(p.failures, {});
  assert.equal(p.ok, p.attempts);
  assert.equal(up.marked, load.requests);
  assert.ok(up.peak <= 20, `upstream in flight peaked at ${up.peak}`);
  const l = proxy.metrics().listeners[0];
  assert.equal(l.blocked, 0, JSON.stringify(l.blockedByReason));
  assert.deepEqual(
    Object.entries(l.errorsByReason).filter(([, n]) => n),
    [],
    'no connection ended with an error'
  );
});

/** Reads one whole response (until the proxy closes) on a new TLS connection from `localAddress`. */
function exchange(port, request, localAddress = '127.0.0.1') {
  return new Promise((resolve) => {
    const chunks = [];
    let secure = false;
    const s = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', localAddress, rejectUnauthorized: false });
    s.on('secureConnect', () => {
      secure = true;
      s.write(request);
    });
    s.on('data', (d) => chunks.push(d));
    s.on('error', () => {});
    s.on('close', () => resolve({ secure, text: Buffer.concat(chunks).toString('latin1') }));
  });
}

/** A TLS connection from `localAddress`, once established: `send(request)` resolves with all it got until the proxy closed. */
function connected(port, localAddress) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', localAddress, rejectUnauthorized: false });
    const chunks = [];
    const closed = new Promise((r) => s.on('close', () => r(Buffer.concat(chunks).toString('latin1'))));
    s.on('data', (d) => chunks.push(d));
    s.on('error', reject);
    s.on('secureConnect', () =>
      resolve({
        send: (request) => {
          s.write(request);
          return closed;
        },
      })
    );
  });
}

const GET = (path) => `GET ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`;

test('HTTP/1.1 at a fixed limit: the request past it is answered 503 with Retry-After, exactly, and never reaches the upstream; new clients are then refused before TLS until the overload ends', {
  timeout: 30000,
}, async (t) => {
  const up = await capacityUpstream({ concurrency: 10, serviceMs: 1500 });
  t.after(() => up.close());
  const { proxy, port } = await proxyTo(t, up.port, { concurrency: { mode: 'fixed', limit: 2, priorityShare: 0, retryAfterS: 3 } });
  const blocked = [];
  const overload = [];
  proxy.on('blocked', (e) => blocked.push([e.ip, e.reason]));
  proxy.on('overload', (e) => overload.push([e.route, e.on, e.limit]));

  const held = [exchange(port, GET('/a'), '127.0.3.1'), exchange(port, GET('/b'), '127.0.3.2')];
  await h.waitFor(() => up.inFlight === 2, { what: 'two requests at the upstream' });
  const third = await exchange(port, GET('/c'), '127.0.3.3');
  assert.equal(
    third.text,
    'HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\nRetry-After: 3\r\n\r\n503 Service Unavailable\n'
  );
  // The route is overloaded: a new client is closed before its TLS handshake completes.
  const fourth = await exchange(port, GET('/d'), '127.0.3.4');
  assert.deepEqual(fourth, { secure: false, text: '' });
  const statuses = (await Promise.all(held)).map((r) => r.text.split('\r\n')[0]);
  assert.deepEqual(statuses, ['HTTP/1.1 200 OK', 'HTTP/1.1 200 OK']);
  assert.equal(up.requests, 2);

  const m = proxy.metrics();
  assert.equal(m.listeners[0].blockedByReason.upstream_overloaded, 2);
  // Each reported once (the 503's report may follow the next client's refusal: sorted).
  assert.deepEqual(blocked.sort(), [
    ['127.0.3.3', 'upstream_overloaded'],
    ['127.0.3.4', 'upstream_overloaded'],
  ]);
  const u = m.routeMetrics[0].upstream;
  assert.deepEqual([u.mode, u.limit, u.refused, u.answered, u.inFlight], ['fixed', 2, 1, 2, 0]);
  // The overload ends 2 s after the last refusal; then new clients are served again.
  await h.waitFor(() => overload.length === 2, { timeoutMs: 5000, what: "'overload' off" });
  assert.deepEqual(overload, [
    ['', true, 2],
    ['', false, 2],
  ]);
  const after = await exchange(port, GET('/e'), '127.0.3.5');
  assert.equal(after.text.split('\r\n')[0], 'HTTP/1.1 200 OK');
});

test('HTTP/2 at a fixed limit: the stream past it is not forwarded and the connection ends with GOAWAY NO_ERROR at the last forwarded stream', {
  timeout: 30000,
}, async (t) => {
  const H = require('./helpers/h2');
  const pending = [];
  const s = await H.proxiedUpstream(t, {
    protection: PROTECTION,
    route: { concurrency: { mode: 'fixed', limit: 2, priorityShare: 0 } },
    handler: (stream) => pending.push(stream),
  });
  const c = await H.rawClient({ port: s.port, localAddress: '127.0.3.9' });
  c.write(Buffer.concat([H.PREFACE, H.settings(), H.headers(1), H.headers(3)]));
  await h.waitFor(() => s.up.streams === 2, { what: 'two streams at the upstream' });
  c.write(H.headers(5));
  await h.waitFor(() => c.goaway !== null, { what: 'the GOAWAY' });
  assert.deepEqual(c.goaway, { lastStreamId: 3, errorCode: 0 });
  // The upstream side closes with the connection: its streams may already be gone.
  for (const st of pending.filter((x) => !x.destroyed)) {
    st.respond({ ':status': 200 });
    st.end('ok');
  }
  await h.waitFor(() => c.closed, { what: 'the connection to end' });
  assert.equal(s.up.streams, 2);
  assert.deepEqual(
    s.events.map((e) => [e.ip, e.reason]),
    [['127.0.3.9', 'upstream_overloaded']]
  );
  assert.equal(s.metrics().blockedByReason.upstream_overloaded, 1);
});

test('overload.eventLoopDelayMs: a blocked event loop overloads every route, and the overload ends after it', { timeout: 30000 }, async (t) => {
  const up = await capacityUpstream({ concurrency: 20, serviceMs: 1 });
  t.after(() => up.close());
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: '', terminateTls: true, protocol: 'http', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: up.port }] }],
    overload: { eventLoopDelayMs: 100 },
  });
  const overload = [];
  proxy.on('overload', (e) => overload.push(e.on));
  await proxy.start();
  t.after(() => proxy.stop());
  // Block this event loop for 400 ms: the sampler's next report (every 100 ms) carries it.
  const until = Date.now() + 400;
  while (Date.now() < until);
  await h.waitFor(() => overload.length >= 1, { timeoutMs: 3000, what: "'overload' on" });
  assert.equal(overload[0], true);
  await h.waitFor(() => overload.length === 2, { timeoutMs: 6000, what: "'overload' off" });
  assert.deepEqual(overload, [true, false]);
});

test('HTTP/1.1 past a fixed limit waits in the queue (HAProxy maxqueue): every request is served, the upstream never holds more than the limit, nothing is refused', {
  timeout: 30000,
}, async (t) => {
  const up = await capacityUpstream({ concurrency: 10, serviceMs: 150 });
  t.after(() => up.close());
  const { proxy, port } = await proxyTo(t, up.port, { concurrency: { mode: 'fixed', limit: 2, priorityShare: 0, queueTimeoutMs: 5000 } });
  const blocked = [];
  proxy.on('blocked', (e) => blocked.push([e.ip, e.reason]));

  // Six clients, connected first (a queue longer than the limit makes the route overloaded, and
  // new unknown clients are then refused at accept), then six requests at once.
  const conns = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => connected(port, `127.0.4.${i}`)));
  const replies = await Promise.all(conns.map((c, i) => c.send(GET(`/${i + 1}`))));
  assert.deepEqual(
    replies.map((r) => r.split('\r\n')[0]),
    Array(6).fill('HTTP/1.1 200 OK')
  );
  assert.equal(up.requests, 6);
  assert.equal(up.peak, 2);
  assert.deepEqual(blocked, []);
  const u = proxy.metrics().routeMetrics[0].upstream;
  // Four waited; at least the fourth waited behind more than the limit: the route was overloaded.
  assert.deepEqual([u.inFlight, u.queued, u.waited, u.queueTimeouts, u.refused, u.answered, u.overloaded], [0, 0, 4, 0, 0, 6, true]);
  const text = proxy.prometheus();
  assert.match(text, /^rampart_route_upstream_waited_total\{route="",group="[^"]*"\} 4$/m);
  assert.match(text, /^rampart_route_upstream_queued\{route="",group="[^"]*"\} 0$/m);
});

test('HTTP/2 streams past a fixed limit wait with their HEADERS held: all answered on one connection, at most the limit at the upstream, no GOAWAY', {
  timeout: 30000,
}, async (t) => {
  const H = require('./helpers/h2');
  const http2 = require('node:http2');
  let atUpstream = 0;
  let peak = 0;
  const s = await H.proxiedUpstream(t, {
    protection: PROTECTION,
    route: { concurrency: { mode: 'fixed', limit: 2, priorityShare: 0, queueTimeoutMs: 5000 } },
    handler: (stream) => {
      atUpstream++;
      peak = Math.max(peak, atUpstream);
      setTimeout(() => {
        atUpstream--;
        stream.respond({ ':status': 200 });
        stream.end('ok');
      }, 100);
    },
  });
  const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false, localAddress: '127.0.4.20' });
  t.after(() => session.destroy());
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  const get = H.getter(session);
  const answers = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => get(`/${i}`)));
  assert.deepEqual(answers, Array(6).fill([200, 'ok']));
  assert.equal(s.up.streams, 6);
  assert.equal(peak, 2);
  assert.equal(goaway, false);
  assert.deepEqual(s.events, []);
  const u = s.proxy.metrics().routeMetrics[0].upstream;
  assert.deepEqual([u.inFlight, u.queued, u.queueTimeouts, u.refused, u.answered], [0, 0, 0, 0, 6]);
  assert.ok(u.waited >= 1 && u.waited <= 4, `waited ${u.waited}`);
});

test('HTTP/2 at the limit: a connection that just reset a stream before its response does not wait (GOAWAY NO_ERROR at its last forwarded stream); one that did not waits and is served', {
  timeout: 30000,
}, async (t) => {
  const H = require('./helpers/h2');
  const http2 = require('node:http2');
  const pending = [];
  const s = await H.proxiedUpstream(t, {
    protection: PROTECTION,
    route: { concurrency: { mode: 'fixed', limit: 2, priorityShare: 0, queueTimeoutMs: 5000 } },
    handler: (stream, hd) => {
      if (hd[':path'] === '/hold') return pending.push(stream);
      stream.respond({ ':status': 200 });
      stream.end('next');
    },
  });
  // The resetting client: stream 1 opened and reset before any response.
  const c = await H.rawClient({ port: s.port, localAddress: '127.0.4.30' });
  c.write(Buffer.concat([H.PREFACE, H.settings(), H.headers(1), H.rst(1)]));
  await h.waitFor(() => s.up.streams === 1, { what: 'stream 1 at the upstream' });
  await h.waitFor(() => routeUp(s).inFlight === 0, { what: 'the reset stream released (no latency learned yet: no hold)' });
  // Another client fills the limit with two streams the upstream holds.
  const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false, localAddress: '127.0.4.31' });
  t.after(() => session.destroy());
  const get = H.getter(session);
  const held = [get('/hold'), get('/hold')];
  await h.waitFor(() => pending.length === 2, { what: 'two held streams at the upstream' });
  // A third client's stream waits for room; the resetting client's is shed at once.
  const waiter = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false, localAddress: '127.0.4.32' });
  t.after(() => waiter.destroy());
  let waiterGoaway = false;
  waiter.on('goaway', () => (waiterGoaway = true));
  const waited = H.getter(waiter)('/next');
  await h.waitFor(() => routeUp(s).queued === 1, { what: 'the third client queued' });
  c.write(H.headers(3));
  await h.waitFor(() => c.goaway !== null, { what: 'the GOAWAY to the resetting client' });
  assert.deepEqual(c.goaway, { lastStreamId: 1, errorCode: 0 });
  assert.equal(routeUp(s).queued, 1);
  for (const st of pending) {
    st.respond({ ':status': 200 });
    st.end('ok');
  }
  assert.deepEqual(await Promise.all(held), [
    [200, 'ok'],
    [200, 'ok'],
  ]);
  assert.deepEqual(await waited, [200, 'next']);
  assert.equal(waiterGoaway, false);
  assert.equal(s.up.streams, 4);
  assert.deepEqual(
    s.events.map((e) => [e.ip, e.reason]),
    [['127.0.4.30', 'upstream_overloaded']]
  );
});

/** The only route's `metrics().routeMetrics[0].upstream`. */
function routeUp(s) {
  return s.proxy.metrics().routeMetrics[0].upstream;
}

test("the workers' run-queue probe runs only while a route is adaptive: an idle proxy without one never wakes them", { timeout: 20000 }, async (t) => {
  const fs = require('node:fs');
  const { setTimeout: wait } = require('node:timers/promises');
  /** Voluntary context switches (wake-ups after a sleep) of each connection worker thread. */
  const wakeUps = () => {
    const out = {};
    for (const { name, tid } of h.workerThreads()) {
      try {
        out[name] = Number(/\nvoluntary_ctxt_switches:\s+(\d+)/.exec(fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8'))[1]);
      } catch {
        // a thread of another test that ended while listed
      }
    }
    return out;
  };
  /** Each worker's wake-ups over 500 ms of no traffic. */
  const idleWakeUps = async () => {
    const a = wakeUps();
    await wait(500);
    const b = wakeUps();
    return Object.keys(a)
      .sort()
      .map((k) => b[k] - a[k]);
  };
  const port = await h.freePort();
  const upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const tcp = { sni: '', terminateTls: false, upstreams };
  const http = { ...tcp, protocol: 'http' }; // adaptive by default
  const proxy = new RampartProxy({ workerThreads: 2, listeners: [{ host: '127.0.0.1', port }], routes: [tcp] });
  t.after(() => proxy.stop());
  await proxy.start();
  await h.waitFor(() => Object.keys(wakeUps()).length === 2, { what: 'two named workers' });
  // Start-up is over within 100 ms (a window, not a condition to poll: the count is the test).
  await wait(100);
  assert.deepEqual(await idleWakeUps(), [0, 0], 'a plain TCP route (concurrency off): the workers sleep');
  proxy.updateConfig({ routes: [http] });
  const on = await idleWakeUps();
  // 10 ms probes: 50 in 500 ms per worker; a loaded machine may delay some.
  assert.ok(
    on.every((n) => n >= 25),
    `an adaptive route: each worker probes its run queue, got ${on}`
  );
  proxy.updateConfig({ routes: [tcp] });
  await wait(100); // the probe's tick under way (10 ms) ends; it then sleeps
  assert.deepEqual(await idleWakeUps(), [0, 0], 'back to a plain TCP route: the workers sleep again');
});

test("proxyDelayMs is measured only while some route is adaptive: a fixed route's reads 0 alone, and the delay once an adaptive route is beside it", {
  timeout: 20000,
}, async (t) => {
  const http = require('node:http');
  const https = require('node:https');
  const up = http.createServer((_req, res) => res.end('ok'));
  await h.listen(up);
  t.after(() => h.closeServer(up));
  const upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }];
  const fixed = { sni: '', terminateTls: true, protocol: 'http', upstreams, concurrency: { mode: 'fixed', limit: 50 } };
  const { proxy, port } = await proxyTo(t, up.address().port, { concurrency: fixed.concurrency });
  const agent = new https.Agent({ keepAlive: true, maxSockets: 4 });
  t.after(() => agent.destroy());
  let stop = false;
  t.after(() => (stop = true));
  const get = () =>
    new Promise((resolve) => {
      const req = https.get({ host: '127.0.0.1', port, servername: 'localhost', rejectUnauthorized: false, agent }, (res) => res.resume().on('end', resolve));
      req.on('error', resolve);
    });
  const traffic = Array.from({ length: 4 }, async () => {
    while (!stop) await get();
  });
  // Windows with answers (latencyMs > 0), none of which has a run-queue sample: 0 exactly.
  await h.waitFor(() => routeUpstream(proxy).answered >= 200 && routeUpstream(proxy).latencyMs > 0, { what: 'answered requests' });
  for (let i = 0; i < 5; i++) {
    assert.equal(routeUpstream(proxy).proxyDelayMs, 0, 'no adaptive route: the probes sleep');
    await new Promise((r) => setTimeout(r, 110));
  }
  // An adaptive route beside it wakes the probes; the fixed route's windows then carry the delay.
  proxy.updateConfig({ routes: [fixed, { ...fixed, sni: 'b.test', concurrency: { mode: 'adaptive' } }] });
  await h.waitFor(() => routeUpstream(proxy).proxyDelayMs > 0, { what: "the fixed route's proxyDelayMs" });
  stop = true;
  await Promise.all(traffic);
});
