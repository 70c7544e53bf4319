'use strict';
// mode: 'http' listeners: ACME HTTP-01 proxied to the route that matches Host, everything else
// redirected to https; 400 / 404 / 431; keep-alive; protection at accept and slowRequest.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const http = require('node:http');
const { RampartProxy } = require('..');
const h = require('./helpers');

/**
 * A raw HTTP/1.1 client on one socket: `send(text)`, `response()` resolves the next complete
 * response `{ status, headers, body, raw }` (Content-Length framed, or until close), `closed`.
 */
function rawClient(port, { localAddress } = {}) {
  const s = net.connect({ port, host: '127.0.0.1', localAddress });
  let buf = Buffer.alloc(0);
  let closed = false;
  const waiters = [];
  const poke = () => {
    for (const w of waiters.splice(0)) w();
  };
  s.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    poke();
  });
  s.on('error', () => {});
  s.on('close', () => {
    closed = true;
    poke();
  });
  const connected = new Promise((r) => s.once('connect', r));
  async function response({ timeoutMs = 5000 } = {}) {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const at = buf.indexOf('\r\n\r\n');
      if (at >= 0) {
        const head = buf.subarray(0, at).toString('latin1').split('\r\n');
        const [, status] = head[0].split(' ');
        const headers = {};
        for (const line of head.slice(1)) {
          const i = line.indexOf(':');
          headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
        }
        const len = headers['content-length'] !== undefined ? Number(headers['content-length']) : null;
        const total = at + 4 + (len ?? 0);
        if ((len !== null && buf.length >= total) || (len === null && closed)) {
          const stop = len === null ? buf.length : total;
          const r = { status: Number(status), headers, body: buf.subarray(at + 4, stop).toString(), raw: buf.subarray(0, stop).toString() };
          buf = buf.subarray(stop);
          return r;
        }
      }
      if (closed) throw new Error(`closed before a complete response: ${JSON.stringify(buf.toString())}`);
      if (Date.now() > end) throw new Error('no response in time');
      await new Promise((r) => {
        waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }
  return {
    socket: s,
    connected,
    send: async (text) => {
      await connected;
      s.write(text);
    },
    response,
    get closed() {
      return closed;
    },
    waitClosed: () => h.waitFor(() => closed, { what: 'connection closed' }),
  };
}

test('mode http: ACME proxied by Host, 301 to https, 400 / 404 / 431, keep-alive, protection', async (t) => {
  const seen = [];
  const origin = http.createServer((req, res) => {
    seen.push({ url: req.url, host: req.headers.host, connection: req.headers.connection });
    res.end(`answer for ${req.url}`);
  });
  await h.listen(origin);
  const [port, protectedPort] = await h.freePorts(2);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: origin.address().port }];
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port, mode: 'http' },
      {
        host: '127.0.0.1',
        port: protectedPort,
        mode: 'http',
        protection: { rateLimit: { connectionsPerSecond: 0.1, burst: 2 }, slowRequest: { headTimeoutMs: 300 } },
      },
    ],
    // Terminating routes need no cert when only http listeners exist.
    routes: [
      { sni: 'acme.test', upstreams: up },
      { sni: '*.example.com', upstreams: up },
    ],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(origin);
  });
  const m = (i = 0) => proxy.metrics().listeners[i];

  await t.test('GET /.well-known/acme-challenge/<token> goes to the origin, which answers', async () => {
    const c = rawClient(port);
    await c.send('GET /.well-known/acme-challenge/tok-123 HTTP/1.1\r\nHost: ACME.test:80\r\nConnection: keep-alive\r\n\r\n');
    const r = await c.response();
    assert.equal(r.status, 200);
    assert.equal(r.body, 'answer for /.well-known/acme-challenge/tok-123');
    assert.deepEqual(seen, [{ url: '/.well-known/acme-challenge/tok-123', host: 'ACME.test:80', connection: 'close' }]);
    await c.waitClosed();
  });

  await t.test('everything else: 301 to https with the path and query, keep-alive', async () => {
    const c = rawClient(port);
    await c.send('GET /some/path?x=1&y=2 HTTP/1.1\r\nHost: www.example.com:8080\r\n\r\n');
    const r1 = await c.response();
    assert.equal(r1.status, 301);
    assert.equal(r1.headers.location, 'https://www.example.com/some/path?x=1&y=2');
    assert.equal(r1.headers.connection, 'keep-alive');
    // A second request on the same socket.
    await c.send('POST /form HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n\r\n');
    const r2 = await c.response();
    assert.equal(r2.status, 301);
    assert.equal(r2.headers.location, 'https://api.example.com/form');
    assert.equal(c.closed, false);
    // An ACME path with another method is redirected, not proxied.
    await c.send('HEAD /.well-known/acme-challenge/x HTTP/1.1\r\nHost: acme.test\r\n\r\n');
    const r3 = await c.response();
    assert.equal(r3.status, 301);
    assert.equal(r3.headers.location, 'https://acme.test/.well-known/acme-challenge/x');
    assert.equal(seen.length, 1);
    c.socket.destroy();
  });

  await t.test('no Host → 400 (kept alive); Host with no route → 404 (kept alive)', async () => {
    const before = m().errorsByReason;
    const c = rawClient(port);
    await c.send('GET / HTTP/1.1\r\n\r\n');
    const r1 = await c.response();
    assert.equal(r1.status, 400);
    assert.equal(r1.headers.connection, 'keep-alive');
    await c.send('GET / HTTP/1.1\r\nHost: nowhere.test\r\n\r\n');
    const r2 = await c.response();
    assert.equal(r2.status, 404);
    assert.equal(r2.body, '404 Not Found\n');
    assert.equal(c.closed, false);
    c.socket.destroy();
    const after = m().errorsByReason;
    assert.equal(after.bad_request, before.bad_request + 1);
    assert.equal(after.no_route, before.no_route + 1);
  });

  await t.test('a request head over 16 KiB → 431 and close', async () => {
    const c = rawClient(port);
    await c.send(`GET / HTTP/1.1\r\nHost: www.example.com\r\nX-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`);
    const r = await c.response();
    assert.equal(r.status, 431);
    assert.equal(r.headers.connection, 'close');
    await c.waitClosed();
  });

  await t.test('bytes that are not HTTP → 400 and close', async () => {
    const c = rawClient(port);
    await c.send('\x16\x03\x01\x00\x05hello\r\n\r\n');
    const r = await c.response();
    assert.equal(r.status, 400);
    await c.waitClosed();
  });

  await t.test('the rate limit refuses at accept, before a byte is read', async () => {
    const src = '127.0.0.21';
    const answers = [];
    for (let i = 0; i < 3; i++) {
      const c = rawClient(protectedPort, { localAddress: src });
      await c.send('GET / HTTP/1.1\r\nHost: www.example.com\r\nConnection: close\r\n\r\n');
      answers.push(
        await c.response().then(
          (r) => r.status,
          () => 'closed'
        )
      );
      await c.waitClosed();
    }
    assert.deepEqual(answers, [301, 301, 'closed']);
    const ev = await h.waitFor(() => events.find((e) => e.ip === src), { what: 'blocked event' });
    assert.equal(ev.reason, 'rate_limited');
    assert.equal(ev.port, protectedPort);
    assert.equal(m(1).blockedByReason.rate_limited, 1);
  });

  await t.test('slowRequest: a head that does not complete within headTimeoutMs is closed slow_request', async () => {
    const src = '127.0.0.22';
    const c = rawClient(protectedPort, { localAddress: src });
    await c.send('GET / HTTP/1.1\r\nHost: www.exa');
    const start = Date.now();
    await c.waitClosed();
    assert.ok(Date.now() - start >= 250, `closed after ${Date.now() - start} ms`);
    const ev = await h.waitFor(() => events.find((e) => e.ip === src), { what: 'slow_request event' });
    assert.equal(ev.reason, 'slow_request');
    assert.equal(m(1).blockedByReason.slow_request, 1);
  });
});

test("mode 'http' config: defaultCert has no use there", () => {
  try {
    new RampartProxy({
      listeners: [{ host: '127.0.0.1', port: 9, mode: 'http', defaultCert: h.selfSigned() }],
      routes: [{ sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }],
    });
  } catch (e) {
    assert.deepEqual(e.errors, [{ path: 'listeners[0].defaultCert', message: "has no use on a mode 'http' listener (no TLS there); leave it out" }]);
    return;
  }
  assert.fail('expected a ConfigError');
});

test('mode http behind a trusted balancer: the ACME request reaches the upstream with the header client in its PROXY line', async (t) => {
  const reply = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok';
  const cap = await h.captureServer({ reply });
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [
      {
        host: '127.0.0.1',
        port,
        mode: 'http',
        acceptProxyProtocol: { trustedCidrs: ['127.0.0.1'] },
        protection: { blocklist: ['192.0.2.0/24'] },
      },
    ],
    routes: [{ sni: 'acme.test', sourceAddressHeader: 'proxyProtocol', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }] }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  const c = rawClient(port);
  await c.send('PROXY TCP4 203.0.113.5 198.51.100.1 6000 80\r\nGET /.well-known/acme-challenge/t0k HTTP/1.1\r\nHost: acme.test\r\n\r\n');
  const r = await c.response();
  assert.equal(r.status, 200);
  assert.equal(r.body, 'ok');
  await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].data.includes('\r\n\r\n'), { what: 'upstream request' });
  assert.equal(
    cap.captured[0].data.toString(),
    'PROXY TCP4 203.0.113.5 198.51.100.1 6000 80\r\nGET /.well-known/acme-challenge/t0k HTTP/1.1\r\nHost: acme.test\r\nConnection: close\r\n\r\n'
  );
  c.socket.destroy();
  // A blocklisted client behind the balancer is refused at admission, before its request is read.
  const b = rawClient(port);
  await b.send('PROXY TCP4 192.0.2.7 198.51.100.1 6001 80\r\nGET / HTTP/1.1\r\nHost: acme.test\r\n\r\n');
  await b.waitClosed();
  const ev = await h.waitFor(() => events.find((e) => e.ip === '192.0.2.7'), { what: 'blocked event' });
  assert.equal(ev.reason, 'cidr_blocked');
  assert.equal(cap.captured.length, 1);
});

test('mode http under attack: the challenge path, absolute-form, Host forms, framing, slow readers, keep-alive cap', async (t) => {
  const reply = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok';
  const cap = await h.captureServer({ reply });
  const port = await h.freePort();
  const IDLE_MS = 500;
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, mode: 'http', idleTimeoutMs: IDLE_MS }],
    routes: [{ sni: 'acme.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: cap.address().port }] }],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(cap);
  });
  const m = () => proxy.metrics().listeners[0];

  await t.test('only a base64url token is proxied: .., %2e, a query or a body are redirected', async () => {
    const c = rawClient(port);
    for (const p of ['../../admin', '%2e%2e/%2e%2e/admin', 'tok?x=1']) {
      await c.send(`GET /.well-known/acme-challenge/${p} HTTP/1.1\r\nHost: acme.test\r\n\r\n`);
      const r = await c.response();
      assert.equal(r.status, 301, p);
      assert.equal(r.headers.location, `https://acme.test/.well-known/acme-challenge/${p}`);
    }
    await c.send('GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: acme.test\r\nContent-Length: 2\r\n\r\nab');
    const r = await c.response();
    assert.equal(r.status, 301);
    assert.equal(r.headers.connection, 'close');
    await c.waitClosed();
    assert.equal(cap.captured.length, 0);
  });

  await t.test('what the client pipelines after a challenge never reaches the upstream', async () => {
    const c = rawClient(port);
    const head = 'GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: acme.test\r\n\r\n';
    await c.send(`${head}GET /admin HTTP/1.1\r\nHost: internal\r\n\r\n`);
    const r = await c.response();
    assert.equal(r.status, 200);
    await c.send('GET /later HTTP/1.1\r\nHost: internal\r\n\r\n');
    await c.waitClosed();
    await h.waitFor(() => cap.captured.length === 1 && cap.captured[0].closed !== false, { what: 'upstream connection' });
    assert.equal(cap.captured[0].data.toString(), head.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'));
  });

  await t.test('absolute-form naming another host than Host → 400 and close', async () => {
    const before = m().errorsByReason.bad_request;
    const c = rawClient(port);
    await c.send('GET http://evil.test/.well-known/acme-challenge/tok HTTP/1.1\r\nHost: acme.test\r\n\r\n');
    assert.equal((await c.response()).status, 400);
    await c.waitClosed();
    assert.equal(m().errorsByReason.bad_request, before + 1);
    assert.equal(cap.captured.length, 1);
  });

  await t.test('Host is redirected as routed: lower case, no port, no trailing dot; empty labels → 400', async () => {
    const c = rawClient(port);
    await c.send('GET /p?q HTTP/1.1\r\nHost: ACME.Test.:8080\r\n\r\n');
    const r = await c.response();
    assert.equal(r.status, 301);
    assert.equal(r.headers.location, 'https://acme.test/p?q');
    await c.send('GET /p HTTP/1.1\r\nHost: acme..test\r\n\r\n');
    assert.equal((await c.response()).status, 400);
    await c.waitClosed();
  });

  await t.test('Content-Length that is not one number, or beside Transfer-Encoding → 400 and close', async () => {
    for (const framing of ['Content-Length: abc', 'Content-Length: 0\r\nContent-Length: 5', 'Content-Length: 4\r\nTransfer-Encoding: chunked']) {
      const c = rawClient(port);
      await c.send(`POST / HTTP/1.1\r\nHost: acme.test\r\n${framing}\r\n\r\n0\r\n\r\n`);
      assert.equal((await c.response()).status, 400, framing);
      await c.waitClosed();
    }
  });

  await t.test('a client that pipelines and never reads is closed after idleTimeoutMs (idle_timeout)', async () => {
    const before = m().errorsByReason.idle_timeout;
    const s = net.connect({ port, host: '127.0.0.1' });
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    s.pause();
    // 8 KB paths: the 8 KB Locations of fewer than 1000 answers fill the socket buffers.
    s.write(`GET /${'a'.repeat(8000)} HTTP/1.1\r\nHost: acme.test\r\n\r\n`.repeat(999));
    await h.waitFor(() => m().errorsByReason.idle_timeout === before + 1, { what: 'idle_timeout', timeoutMs: 10000 });
    await h.waitFor(() => m().activeConnections === 0, { what: 'the connection closed' });
    s.destroy();
  });

  await t.test('a connection carries at most 1000 requests; the 1000th answer closes it', async () => {
    const c = rawClient(port);
    await c.send('GET / HTTP/1.1\r\nHost: acme.test\r\n\r\n'.repeat(1001));
    const answers = [];
    for (let i = 0; i < 1000; i++) answers.push(await c.response());
    assert.deepEqual([...new Set(answers.map((r) => r.status))], [301]);
    assert.equal(answers[998].headers.connection, 'keep-alive');
    assert.equal(answers[999].headers.connection, 'close');
    await c.waitClosed();
    await h.waitFor(() => m().activeConnections === 0, { what: 'no connection left' });
  });
});

test('updateConfig on an http listener is all-or-nothing: a bad protection field keeps the old routes', async (t) => {
  const port = await h.freePort();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port, mode: 'http' }], routes: [{ sni: 'a.test', upstreams: up }] });
  await proxy.start();
  t.after(() => proxy.stop());
  const status = async (host) => {
    const c = rawClient(port);
    await c.send(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    const r = await c.response();
    c.socket.destroy();
    return r.status;
  };
  assert.throws(
    () =>
      proxy.updateConfig({
        routes: [{ sni: 'c.test', upstreams: up }],
        protection: [{ port, protection: { rateLimit: { connectionsPerSecond: NaN }, slowRequest: { headTimeoutMs: -1 } } }],
      }),
    (e) => {
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['protection[0].protection.rateLimit.connectionsPerSecond', 'protection[0].protection.slowRequest.headTimeoutMs']
      );
      return true;
    }
  );
  assert.deepEqual([await status('a.test'), await status('c.test')], [301, 404]);
  proxy.updateConfig({ routes: [{ sni: 'c.test', upstreams: up }] });
  assert.deepEqual([await status('a.test'), await status('c.test')], [404, 301]);
});

test("mode http: a route's maxConnectionsPerSecond applies to the ACME requests proxied to it (503 route_rate_limited)", async (t) => {
  const seen = [];
  const origin = http.createServer((req, res) => {
    seen.push(req.url);
    res.end('ok');
  });
  await h.listen(origin);
  const port = await h.freePort();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: origin.address().port }];
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, mode: 'http' }],
    // 2 at once, then one every 1000 s: the third challenge in a row is over the route's limit.
    routes: [{ sni: 'acme.test', maxConnectionsPerSecond: 0.001, burst: 2, upstreams: up }],
  });
  const blocked = [];
  proxy.on('blocked', (e) => blocked.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(origin);
  });
  const challenge = async (token) => {
    const c = rawClient(port);
    await c.send(`GET /.well-known/acme-challenge/${token} HTTP/1.1\r\nHost: acme.test\r\n\r\n`);
    const r = await c.response();
    await c.waitClosed();
    return r;
  };
  assert.equal((await challenge('t1')).status, 200);
  assert.equal((await challenge('t2')).status, 200);
  const refused = await challenge('t3');
  assert.deepEqual([refused.status, refused.headers.connection, refused.body], [503, 'close', '503 Service Unavailable\n']);
  // Redirects never reach the upstream: the route's limit does not apply to them.
  const c = rawClient(port);
  await c.send('GET /x HTTP/1.1\r\nHost: acme.test\r\nConnection: close\r\n\r\n');
  assert.equal((await c.response()).status, 301);
  assert.deepEqual(seen, ['/.well-known/acme-challenge/t1', '/.well-known/acme-challenge/t2']);
  await h.waitFor(() => proxy.metrics().routeMetrics[0].activeConnections === 0, { what: 'challenges closed' });
  const r = proxy.metrics().routeMetrics[0];
  const l = proxy.metrics().listeners[0];
  assert.deepEqual([r.connections, r.errors, r.errorsByReason.route_rate_limited], [2, 1, 1]);
  assert.deepEqual([l.errors, l.errorsByReason.route_rate_limited], [1, 1]);
  assert.deepEqual(blocked, [], "a route-limit refusal is no 'blocked' event");
});
