'use strict';
// Per-request protection on HTTP/1.1 routes: requestLimit (a budget per client over all its
// connections, answered 429 with the RateLimit fields), every keep-alive request head under
// slowRequest.headTimeoutMs, and slowRequest.maxRequestsPerConnection.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** A node HTTP upstream answering `ok`; `seen` lists each request's [url, Connection header]. */
async function upstream() {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push([req.url, req.headers.connection]);
    res.end('ok');
  });
  server.seen = seen;
  return h.listen(server);
}

async function httpProxy(t, protection) {
  const up = await upstream();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(), protection }],
    routes: [{ sni: '', protocol: 'http', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: up.address().port }] }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    up.closeAllConnections();
    await h.closeServer(up);
  });
  return { proxy, port, up, events };
}

/**
 * A raw HTTP/1.1 client over TLS from `src`: `send(text)`, `response()` resolves the next whole
 * response ({ head, body, text }) or null at the end of the stream; `closed` resolves when the
 * connection ends.
 */
async function client(port, src) {
  const c = tls.connect({ port, host: '127.0.0.1', localAddress: src, servername: 'x', rejectUnauthorized: false });
  c.on('error', () => {});
  let buf = Buffer.alloc(0);
  let ended = false;
  let wake = () => {};
  c.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    wake();
  });
  const closed = new Promise((r) =>
    c.once('close', () => {
      ended = true;
      wake();
      r();
    })
  );
  await new Promise((r) => c.once('secureConnect', r));
  async function response() {
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = buf.subarray(0, end + 4).toString('latin1');
        const m = /\r\ncontent-length: *(\d+)/i.exec(head);
        const len = m ? Number(m[1]) : 0;
        if (buf.length >= end + 4 + len) {
          const body = buf.subarray(end + 4, end + 4 + len).toString('latin1');
          buf = buf.subarray(end + 4 + len);
          return { head, body, text: head + body };
        }
      }
      if (ended) return null;
      await new Promise((r) => (wake = r));
    }
  }
  return { socket: c, send: (s) => c.write(s), response, closed };
}

const GET = (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`;

test('requestLimit is a budget per client across its keep-alive connections: 429 with the RateLimit fields, exactly', async (t) => {
  // 0.1 request/s, burst 3: the 4th request waits 10 s (7 s of margin before the ceiling changes).
  const p = await httpProxy(t, { requestLimit: { requestsPerSecond: 0.1, burst: 3 } });
  const src = '127.0.20.1';
  const a = await client(p.port, src);
  const b = await client(p.port, src);
  for (const [c, path] of [
    [a, '/1'],
    [a, '/2'],
    [b, '/3'],
  ]) {
    c.send(GET(path));
    const r = await c.response();
    assert.match(r.head, /^HTTP\/1\.1 200 OK\r\n/);
    assert.equal(r.body, 'ok');
  }
  b.send(GET('/4'));
  const r = await b.response();
  assert.equal(
    r.text,
    'HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\nContent-Length: 22\r\n' +
      'Connection: close\r\nRetry-After: 10\r\nRateLimit-Policy: "rampart";q=3;w=30\r\n' +
      'RateLimit: "rampart";r=0;t=10\r\n\r\n429 Too Many Requests\n'
  );
  assert.equal(await b.response(), null, 'the connection ends after the 429');
  await b.closed;
  // The other connection of the same client is over budget too.
  a.send(GET('/5'));
  assert.match((await a.response()).head, /^HTTP\/1\.1 429 /);
  await a.closed;
  assert.deepEqual(
    p.up.seen.map((s) => s[0]),
    ['/1', '/2', '/3']
  );
  await h.waitFor(() => p.events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason, e.observed]),
    [
      [src, 'request_rate_limited', false],
      [src, 'request_rate_limited', false],
    ]
  );
  await h.waitFor(() => p.proxy.metrics().listeners[0].blockedByReason.request_rate_limited === 2, { what: 'counted' });
  // Another client has its own budget.
  const c = await client(p.port, '127.0.20.2');
  c.send(GET('/6'));
  assert.match((await c.response()).head, /^HTTP\/1\.1 200 OK\r\n/);
  c.socket.destroy();
});

test('a slow second request head on a keep-alive connection is closed at its deadline', async (t) => {
  const HEAD_MS = 300;
  const p = await httpProxy(t, { slowRequest: { headTimeoutMs: HEAD_MS } });
  const src = '127.0.20.3';
  const c = await client(p.port, src);
  c.send(GET('/1'));
  const first = await c.response();
  assert.match(first.head, /^HTTP\/1\.1 200 OK\r\n/);
  // The second head starts and stalls.
  const start = Date.now();
  c.send('GET /2 HTTP/1.1\r\nHo');
  await c.closed;
  const closedAfterMs = Date.now() - start;
  assert.ok(closedAfterMs >= HEAD_MS - 20 && closedAfterMs < HEAD_MS + 400, `closed after ${closedAfterMs} ms`);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason, p.events[0].observed], [src, 'slow_request', false]);
  assert.deepEqual(
    p.up.seen.map((s) => s[0]),
    ['/1']
  );
  assert.equal(p.proxy.metrics().listeners[0].blockedByReason.slow_request, 1);
});

test('past maxRequestsPerConnection: the last request carries Connection: close and a further one is not forwarded', async (t) => {
  const p = await httpProxy(t, { slowRequest: { maxRequestsPerConnection: 2 } });
  const c = await client(p.port, '127.0.20.4');
  c.send(GET('/1'));
  assert.match((await c.response()).head, /^HTTP\/1\.1 200 OK\r\n/);
  // The second (last) request and a third pipelined behind it.
  c.send(GET('/2') + GET('/3'));
  const second = await c.response();
  assert.match(second.head, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(second.head, /\r\nConnection: close\r\n/i);
  assert.equal(await c.response(), null);
  await c.closed;
  assert.deepEqual(p.up.seen, [
    ['/1', undefined],
    ['/2', 'close'],
  ]);
  assert.equal(p.events.length, 0);
});
