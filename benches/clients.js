#!/usr/bin/env node
'use strict';
// Load clients for `npm run bench` that wrk cannot play because they need a chosen source address:
//
// (The single-IP connection flood of the flood row is `attack-clients.js hsflood` with one source.)
// - idle (child process): opens `count` TLS connections (full handshakes), spread over several
//   127.0.0.0/8 source addresses so no source runs out of ports, optionally sends one kept-alive
//   `GET /` on each and reads `requestBytes` of response, then holds them open, idle.
// - legitProbe (in-process function): an open-loop client from another source address that
//   starts one TLS connection + `GET /` every 1/rate s and records success and latency.
//
//   node benches/clients.js idle '<json opts>'
const net = require('node:net');
const tls = require('node:tls');

/** Records the raw ClientHello node:tls sends for `servername` (one TLS record, Buffer). */
async function recordClientHello(servername) {
  let done;
  const got = new Promise((r) => (done = r));
  const server = net.createServer((s) => {
    let buf = Buffer.alloc(0);
    s.on('error', () => {});
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length >= 5 && buf.length >= 5 + buf.readUInt16BE(3)) {
        done(buf.subarray(0, 5 + buf.readUInt16BE(3)));
        s.destroy();
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const c = tls.connect({ port: server.address().port, host: '127.0.0.1', servername, rejectUnauthorized: false });
  c.on('error', () => {});
  const hello = await got;
  c.destroy();
  await new Promise((r) => server.close(r));
  return hello;
}

function idle({ host, port, count, concurrency, sources, servername, requestBytes = 0, timeoutMs = 20000 }) {
  const req = Buffer.from(`GET / HTTP/1.1\r\nHost: ${servername}\r\n\r\n`);
  const held = [];
  const st = { established: 0, failed: 0, dropped: 0 };
  let next = 0;
  let inflight = 0;
  let reported = false;
  const report = () => {
    if (!reported && st.established + st.failed === count) {
      reported = true;
      process.send({ done: true, ...st });
    }
  };
  const one = () => {
    if (next >= count) return;
    const i = next++;
    inflight++;
    const s = tls.connect({ host, port, servername, localAddress: sources[i % sources.length], rejectUnauthorized: false });
    let ok = false;
    const t = setTimeout(() => s.destroy(new Error('handshake timeout')), timeoutMs);
    const established = () => {
      clearTimeout(t);
      ok = true;
      st.established++;
      held.push(s);
      inflight--;
      report();
      one();
    };
    s.on('secureConnect', () => {
      if (!requestBytes) return established();
      // One kept-alive request first (the response is read whole), then the connection idles.
      let got = 0;
      s.on('data', (d) => {
        got += d.length;
        if (got >= requestBytes && !ok) established();
      });
      s.write(req);
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(t);
      if (ok) st.dropped++;
      else {
        st.failed++;
        inflight--;
        report();
        one();
      }
    });
  };
  for (let k = 0; k < concurrency; k++) one();
  process.on('message', (m) => {
    if (m && m.cmd === 'stats') process.send({ stats: { ...st, inflight } });
  });
  process.on('disconnect', () => process.exit(0));
}

/**
 * Open-loop probe: every 1000/rate ms starts a TLS connection from `localAddress`, sends
 * `GET / HTTP/1.1` with `Connection: close` and reads to the end. Success = status 200 and at
 * least `minBytes` bytes within `timeoutMs`. Resolves `{ attempts, ok, latenciesMs }` (latency of
 * successful requests, connect start to last byte).
 */
function legitProbe({ host, port, localAddress, servername, rate, durationMs, minBytes, timeoutMs = 5000 }) {
  return new Promise((resolve) => {
    // `phasesMs`: per answered attempt, [TCP connect, TLS handshake, response] in ms.
    const res = { attempts: 0, ok: 0, latenciesMs: [], phasesMs: [] };
    let pending = 0;
    let ended = false;
    const req = Buffer.from(`GET / HTTP/1.1\r\nHost: ${servername}\r\nConnection: close\r\n\r\n`);
    const maybeDone = () => {
      if (ended && pending === 0) resolve(res);
    };
    const one = () => {
      res.attempts++;
      pending++;
      const t0 = process.hrtime.bigint();
      let bytes = 0;
      let head = '';
      let settled = false;
      const s = tls.connect({ host, port, servername, localAddress, rejectUnauthorized: false });
      const settle = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (head.startsWith('HTTP/1.1 200') && bytes >= minBytes) {
          res.ok++;
          const now = process.hrtime.bigint();
          res.latenciesMs.push(Number(now - t0) / 1e6);
          const ms = (a, b) => Math.round(Number(b - a) / 1e4) / 100;
          res.phasesMs.push([ms(t0, tConnect || now), ms(tConnect || now, tSecure || now), ms(tSecure || now, now)]);
        }
        s.destroy();
        pending--;
        maybeDone();
      };
      const timer = setTimeout(settle, timeoutMs);
      let tConnect = 0n;
      let tSecure = 0n;
      s.on('connect', () => (tConnect = process.hrtime.bigint()));
      s.on('secureConnect', () => {
        tSecure = process.hrtime.bigint();
        s.write(req);
      });
      s.on('data', (d) => {
        if (head.length < 16) head += d.toString('latin1', 0, 16);
        bytes += d.length;
        if (bytes >= minBytes) settle();
      });
      s.on('error', settle);
      s.on('close', settle);
    };
    const iv = setInterval(one, 1000 / rate);
    one();
    setTimeout(() => {
      clearInterval(iv);
      ended = true;
      maybeDone();
    }, durationMs);
  });
}

module.exports = { recordClientHello, legitProbe };

if (require.main === module) {
  const [mode, json] = process.argv.slice(2);
  const opts = JSON.parse(json);
  if (mode === 'idle') idle(opts);
  else {
    console.error(`unknown mode ${mode} (idle; the handshake flood is attack-clients.js hsflood)`);
    process.exit(2);
  }
}
