#!/usr/bin/env node
'use strict';
// The origin of `npm run bench:attack`, in its own process: a plain Node HTTP/1.1 server (the
// kind of server these attacks exhaust: default headersTimeout 60 s, one socket and parser per
// connection) and an h2c (prior knowledge) server for the h2 probe. Answers every request with a
// small 200.
//
// `workMs` > 0 makes it an application that drowns: each request (HTTP/1.1 or h2 stream) waits
// its turn (setImmediate, as after an await) and then spends `workMs` of CPU (a busy loop) before
// the answer, like a Node app rendering a page. An h2 stream the client reset is worked all the
// same (the app does not check: that is what rapid reset exploits).
//
// Counts connections, requests (`attackRequests`: those carrying `x-attack`, the benches' flood
// marker), answers (`served`), and requests taken in but not yet answered (`inFlight`, with its
// peak since the previous `stats`). IPC: { cmd: 'stats' } → { stats } (resets the peak).
//   node benches/attack-origin.js '{"h1Port":N,"h2Port":M,"workMs":1}'
const http = require('node:http');
const http2 = require('node:http2');

const { h1Port, h2Port, workMs = 0 } = JSON.parse(process.argv[2]);
const BODY = Buffer.alloc(64, 'x');
const st = { h1Connections: 0, h1Requests: 0, h2Sessions: 0, h2Requests: 0, attackRequests: 0, served: 0, inFlight: 0, inFlightPeak: 0, open: 0 };

/** Spends `ms` of CPU in a busy loop. */
function burn(ms) {
  const end = process.hrtime.bigint() + BigInt(Math.round(ms * 1e6));
  while (process.hrtime.bigint() < end);
}

/** Takes one request in: `answer()` runs after the work (at once when `workMs` is 0). */
function work(isAttack, answer) {
  if (isAttack) st.attackRequests++;
  st.inFlight++;
  if (st.inFlight > st.inFlightPeak) st.inFlightPeak = st.inFlight;
  const done = () => {
    st.inFlight--;
    st.served++;
    answer();
  };
  if (workMs <= 0) return done();
  setImmediate(() => {
    burn(workMs);
    done();
  });
}

const h1 = http.createServer((req, res) => {
  st.h1Requests++;
  work(req.headers['x-attack'] !== undefined, () => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
    res.end(BODY);
  });
});
h1.on('connection', (s) => {
  st.h1Connections++;
  st.open++;
  s.on('close', () => st.open--);
});
h1.keepAliveTimeout = 10000;

const h2 = http2.createServer();
h2.on('session', (s) => {
  st.h2Sessions++;
  s.on('error', () => {});
});
h2.on('stream', (stream, headers) => {
  st.h2Requests++;
  stream.on('error', () => {});
  work(headers['x-attack'] !== undefined, () => {
    if (stream.destroyed || stream.closed) return;
    stream.respond({ ':status': 200, 'content-type': 'text/plain', 'content-length': BODY.length });
    stream.end(BODY);
  });
});
h2.on('sessionError', () => {});

let up = 0;
const ready = () => {
  if (++up === 2) process.send({ ready: true, pid: process.pid });
};
h1.listen(h1Port, '127.0.0.1', ready);
h2.listen(h2Port, '127.0.0.1', ready);
process.on('message', (m) => {
  if (m && m.cmd === 'stats') {
    process.send({ stats: { ...st } });
    st.inFlightPeak = st.inFlight;
  }
});
process.on('disconnect', () => process.exit(0));
