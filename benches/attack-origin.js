#!/usr/bin/env node
'use strict';
// The origin of `npm run bench:attack`, in its own process: a plain Node HTTP/1.1 server (the
// kind of server these attacks exhaust: default headersTimeout 60 s, one socket and parser per
// connection) and an h2c (prior knowledge) server for the h2 probe. Answers every request with a
// small 200. Counts connections and requests; IPC: { cmd: 'stats' } → { stats }.
//   node benches/attack-origin.js '{"h1Port":N,"h2Port":M}'
const http = require('node:http');
const http2 = require('node:http2');

const { h1Port, h2Port } = JSON.parse(process.argv[2]);
const BODY = Buffer.alloc(64, 'x');
const st = { h1Connections: 0, h1Requests: 0, h2Sessions: 0, h2Requests: 0, open: 0 };

const h1 = http.createServer((req, res) => {
  st.h1Requests++;
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
  res.end(BODY);
});
h1.on('connection', (s) => {
  st.h1Connections++;
  st.open++;
  s.on('close', () => st.open--);
});
h1.keepAliveTimeout = 10000;

const h2 = http2.createServer();
h2.on('session', () => st.h2Sessions++);
h2.on('stream', (stream) => {
  st.h2Requests++;
  stream.respond({ ':status': 200, 'content-type': 'text/plain', 'content-length': BODY.length });
  stream.end(BODY);
});
h2.on('sessionError', () => {});

let up = 0;
const ready = () => {
  if (++up === 2) process.send({ ready: true, pid: process.pid });
};
h1.listen(h1Port, '127.0.0.1', ready);
h2.listen(h2Port, '127.0.0.1', ready);
process.on('message', (m) => {
  if (m && m.cmd === 'stats') process.send({ stats: { ...st } });
});
process.on('disconnect', () => process.exit(0));
