#!/usr/bin/env node
'use strict';
// Attack clients of `npm run bench:attack` (DESIGN §7.9), each mode in its own process, spreading
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
//
// IPC: { cmd: 'stats' } → { stats }; { cmd: 'stop' } → final { stats } and exit.
//   node benches/attack-clients.js <mode> '<json opts>'
const net = require('node:net');
const tls = require('node:tls');
const crypto = require('node:crypto');
const { answerStats } = require('./lib');

const st = { attempts: 0, served: 0, refused: 0, established: 0, closedByProxy: 0, open: 0, bytesSent: 0 };
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

const MODES = { hsflood, slowloris, slowhs, garbage };
const [mode, json] = process.argv.slice(2);
if (!MODES[mode]) {
  console.error(`unknown mode ${mode} (${Object.keys(MODES).join(' | ')})`);
  process.exit(2);
}
MODES[mode](JSON.parse(json));
answerStats(st, () => (stopped = true));
