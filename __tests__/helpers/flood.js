'use strict';
// Load for the capacity specs: an upstream with a fixed capacity (a node http server that serves
// `concurrency` requests at once, each `serviceMs`, the rest in its own FIFO), an IP-diverse TLS
// keep-alive GET flood from many 127.x addresses (run in a child process, so the spec's event loop
// — upstream, probe — is not the flooder's), and the known-good probe measuring success and
// latency. All bounded in time and counts.
//   node __tests__/helpers/flood.js flood '<json opts>'   (the flood's child process)
const tls = require('node:tls');
const http = require('node:http');
const path = require('node:path');
const { fork } = require('node:child_process');

/** The q-quantile (0..1) of `xs` by nearest rank; NaN when empty. */
function quantile(xs, q) {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}

/**
 * A plain HTTP/1.1 upstream on 127.0.0.1 with a fixed capacity: at most `concurrency` requests are
 * served at once, each answered (200, 64-byte body) `serviceMs` after its service starts; the
 * others wait in a FIFO. Resolves `up` with:
 * - `port`, `close()`;
 * - `inFlight` (requests received and not yet answered: served + queued), `peak` (its maximum
 *   since the start or `resetPeak()`), `resetPeak()`;
 * - `series`: `{ t (ms since start), inFlight (peak within the sample) }` every `sampleMs`;
 * - `requests`, `served`, `marked` (requests carrying the header `marker`, the flood's).
 */
async function capacityUpstream({ concurrency = 20, serviceMs = 10, sampleMs = 10, marker = 'x-flood' } = {}) {
  const body = Buffer.alloc(64, 'u');
  const queue = [];
  let serving = 0;
  let samplePeak = 0;
  const t0 = Date.now();
  const up = { inFlight: 0, peak: 0, series: [], requests: 0, served: 0, marked: 0 };
  const next = () => {
    while (serving < concurrency && queue.length) {
      const res = queue.shift();
      if (res.destroyed || res.writableEnded) {
        up.inFlight--;
        continue;
      }
      serving++;
      setTimeout(() => {
        serving--;
        up.inFlight--;
        up.served++;
        if (!res.destroyed) {
          res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
          res.end(body);
        }
        next();
      }, serviceMs);
    }
  };
  const server = http.createServer((req, res) => {
    up.requests++;
    if (req.headers[marker] !== undefined) up.marked++;
    up.inFlight++;
    if (up.inFlight > up.peak) up.peak = up.inFlight;
    if (up.inFlight > samplePeak) samplePeak = up.inFlight;
    queue.push(res);
    next();
  });
  server.keepAliveTimeout = 30000;
  const sockets = new Set();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const sampler = setInterval(() => {
    up.series.push({ t: Date.now() - t0, inFlight: samplePeak });
    samplePeak = up.inFlight;
  }, sampleMs);
  up.port = server.address().port;
  up.resetPeak = () => {
    up.peak = up.inFlight;
  };
  up.close = async () => {
    clearInterval(sampler);
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(() => r()));
  };
  return up;
}

/** `n` source addresses `<base>.<i % 256>.<floor(i / 256) + 1>`: consecutive ones in different /24s. */
function floodSources(base, n) {
  return Array.from({ length: n }, (_, i) => `${base}.${i % 256}.${Math.floor(i / 256) + 1}`);
}

/**
 * Reads HTTP/1.1 responses off a byte stream: `onResponse(status, close)` per complete response
 * (head + Content-Length body; `close`: the head said `Connection: close`).
 */
function responseReader(onResponse) {
  let buf = Buffer.alloc(0);
  let need = -1;
  let status = 0;
  let close = false;
  return (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    for (;;) {
      if (need < 0) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.toString('latin1', 0, end);
        status = Number(head.slice(9, 12));
        close = /\r\nconnection:\s*close/i.test(head);
        const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        need = m ? Number(m[1]) : 0;
        buf = buf.subarray(end + 4);
      }
      if (buf.length < need) return;
      buf = buf.subarray(need);
      need = -1;
      onResponse(status, close);
    }
  };
}

/**
 * The flood itself (in the child process). `sources × perSource` slots; each holds one TLS
 * keep-alive connection from its source and sends `GET <path>` (with `x-flood: 1`) one at a time,
 * at most one every `intervalMs`; a closed connection is reopened after `reconnectMs` (after
 * `refusedMs` when it was closed before its handshake finished: refused at accept). Stops sending
 * after `durationMs`, then waits at most `timeoutMs` for the answers outstanding.
 */
function runFlood({
  port,
  host = '127.0.0.1',
  servername = 'localhost',
  sources,
  base = '127.1',
  perSource = 1,
  durationMs,
  intervalMs = 100,
  reconnectMs = 500,
  refusedMs = 500,
  timeoutMs = 5000,
  path: reqPath = '/',
}) {
  const req = Buffer.from(`GET ${reqPath} HTTP/1.1\r\nHost: ${servername}\r\nx-flood: 1\r\n\r\n`);
  const st = { requests: 0, answered: 0, status: {}, connections: 0, established: 0, refused: 0, closedByProxy: 0, timeouts: 0 };
  const end = Date.now() + durationMs;
  const live = new Set();
  let pending = 0;
  return new Promise((resolve) => {
    const slot = (src) => {
      let last = 0;
      const open = () => {
        if (Date.now() >= end) return;
        st.connections++;
        const s = tls.connect({ host, port, servername, localAddress: src, ALPNProtocols: ['http/1.1'], rejectUnauthorized: false });
        live.add(s);
        let up = false;
        let waiting = false;
        let timer;
        let pace;
        const send = () => {
          if (s.destroyed || Date.now() >= end) return s.end();
          last = Date.now();
          st.requests++;
          pending++;
          waiting = true;
          s.write(req);
          timer = setTimeout(() => {
            st.timeouts++;
            s.destroy();
          }, timeoutMs);
        };
        const settle = () => {
          if (!waiting) return;
          waiting = false;
          pending--;
          clearTimeout(timer);
        };
        s.on(
          'data',
          responseReader((status) => {
            settle();
            st.answered++;
            st.status[status] = (st.status[status] || 0) + 1;
            pace = setTimeout(send, Math.max(0, last + intervalMs - Date.now()));
          })
        );
        s.on('secureConnect', () => {
          up = true;
          st.established++;
          send();
        });
        s.on('error', () => {});
        s.once('close', () => {
          live.delete(s);
          clearTimeout(pace);
          settle();
          if (!up) st.refused++;
          else if (Date.now() < end) st.closedByProxy++;
          setTimeout(open, up ? reconnectMs : refusedMs);
        });
      };
      open();
    };
    for (const src of floodSources(base, sources)) for (let i = 0; i < perSource; i++) slot(src);
    const done = () => {
      for (const s of live) s.destroy();
      resolve(st);
    };
    setTimeout(() => {
      const hard = setTimeout(done, timeoutMs);
      const poll = setInterval(() => {
        if (pending === 0) {
          clearInterval(poll);
          clearTimeout(hard);
          done();
        }
      }, 10);
    }, durationMs);
  });
}

/**
 * An IP-diverse TLS keep-alive GET flood from `sources` addresses under `base` (127.x; see
 * floodSources), `perSource` connections each, for `durationMs`, in a child process. Resolves
 * `{ requests, answered, status: { '200': n, ... }, connections, established, refused (closed
 * before the handshake), closedByProxy (closed after it, before the end), timeouts }`.
 */
function tlsGetFlood(opts) {
  return new Promise((resolve, reject) => {
    const child = fork(path.join(__dirname, 'flood.js'), ['flood', JSON.stringify(opts)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let result = null;
    child.once('message', (m) => (result = m));
    child.once('exit', (code) => (result ? resolve(result) : reject(new Error(`flood child exited with ${code} and no result`))));
  });
}

/**
 * The known-good client: every 1000/rate ms a new TLS connection from `localAddress` and one
 * `GET <path>` with `Connection: close`, for `durationMs`. Success = status 200 and the whole
 * Content-Length body within `timeoutMs`. Resolves `{ attempts, ok, failures: { reason: n },
 * latenciesMs (successes, connect start to the body's end), startedMs (of each success, ms since
 * the probe began), p50, p99 }`; reasons are `status <code>`, `closed` (before an answer),
 * `timeout`.
 */
function probe({
  port,
  host = '127.0.0.1',
  localAddress = '127.0.0.2',
  servername = 'localhost',
  rate = 20,
  durationMs,
  timeoutMs = 5000,
  path: reqPath = '/',
}) {
  const req = Buffer.from(`GET ${reqPath} HTTP/1.1\r\nHost: ${servername}\r\nConnection: close\r\n\r\n`);
  return new Promise((resolve) => {
    const res = { attempts: 0, ok: 0, failures: {}, latenciesMs: [], startedMs: [] };
    const begun = process.hrtime.bigint();
    let pending = 0;
    let ended = false;
    const finish = () => {
      res.p50 = quantile(res.latenciesMs, 0.5);
      res.p99 = quantile(res.latenciesMs, 0.99);
      resolve(res);
    };
    const one = () => {
      res.attempts++;
      pending++;
      const t0 = process.hrtime.bigint();
      let settled = false;
      const s = tls.connect({ host, port, servername, localAddress, ALPNProtocols: ['http/1.1'], rejectUnauthorized: false });
      const settle = (why) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (why === 'ok') {
          res.ok++;
          res.latenciesMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
          res.startedMs.push(Number(t0 - begun) / 1e6);
        } else res.failures[why] = (res.failures[why] || 0) + 1;
        s.destroy();
        if (--pending === 0 && ended) finish();
      };
      const timer = setTimeout(() => settle('timeout'), timeoutMs);
      s.on('secureConnect', () => s.write(req));
      s.on(
        'data',
        responseReader((status) => settle(status === 200 ? 'ok' : `status ${status}`))
      );
      s.on('error', () => settle('closed'));
      s.on('close', () => settle('closed'));
    };
    const iv = setInterval(one, 1000 / rate);
    one();
    setTimeout(() => {
      clearInterval(iv);
      ended = true;
      if (pending === 0) finish();
    }, durationMs);
  });
}

/** `tlsGetFlood(opts)` on a worker thread (helpers/flood-worker.js): same result, own event loop. */
function tlsGetFloodOnThread(opts) {
  const { Worker } = require('node:worker_threads');
  return new Promise((resolve, reject) => {
    const w = new Worker(require('node:path').join(__dirname, 'flood-worker.js'), { workerData: opts });
    w.once('message', (m) => (m.error ? reject(new Error(m.error)) : resolve(m.ok)));
    w.once('error', reject);
  });
}

module.exports = { capacityUpstream, tlsGetFlood, tlsGetFloodOnThread, probe, floodSources, quantile };

if (require.main === module && process.argv[2] === 'flood') {
  process.on('disconnect', () => process.exit(0));
  runFlood(JSON.parse(process.argv[3])).then((st) => {
    process.send(st, () => process.exit(0));
  });
}
