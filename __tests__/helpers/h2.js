'use strict';
// HTTP/2 by hand, for the guard specs and the h2 benchmark: frames built byte by byte (RFC 9113
// §4.1, §6), a raw client over node:tls with ALPN h2 that reads every frame the proxy sends back,
// and an upstream that counts what reaches it — a frame-counting TCP relay in front of a
// node:http2 (h2c) server, so a frame the upstream's HTTP/2 stack would reject still counts.
const net = require('node:net');
const tls = require('node:tls');
const http2 = require('node:http2');

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const T = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 };
const F = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 };
const ENHANCE_YOUR_CALM = 0xb;
const TYPE_NAMES = Object.fromEntries(Object.entries(T).map(([k, v]) => [v, k]));

/** One frame: 9-byte header + payload. */
function frame(type, flags, stream, payload = Buffer.alloc(0)) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([h, payload]);
}

/**
 * An HPACK block for `GET <path>` (`:method GET`, `:scheme https`, `:path`, `:authority`), with
 * literals that never touch the dynamic table, so the same bytes can open any number of streams.
 */
function requestBlock(path = '/', authority = 'localhost', method = 'GET') {
  const lit = (index, value) => Buffer.concat([Buffer.from([index, value.length]), Buffer.from(value)]);
  return Buffer.concat([Buffer.from([method === 'POST' ? 0x83 : 0x82, 0x87]), path === '/' ? Buffer.from([0x84]) : lit(0x04, path), lit(0x01, authority)]);
}

const headers = (stream, { path, endStream = true, endHeaders = true, method } = {}) =>
  frame(T.HEADERS, (endStream ? F.END_STREAM : 0) | (endHeaders ? F.END_HEADERS : 0), stream, requestBlock(path, undefined, method));
const rst = (stream, code = 0x8) => frame(T.RST_STREAM, 0, stream, u32(code));
const ping = (ack = false) => frame(T.PING, ack ? F.ACK : 0, 0, Buffer.alloc(8));
/** HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the bits above the prefix. */
function hpackInt(value, n, first = 0) {
  const max = (1 << n) - 1;
  if (value < max) return Buffer.from([first | value]);
  const out = [first | max];
  let v = value - max;
  while (v >= 128) {
    out.push((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out.push(v);
  return Buffer.from(out);
}

/** One literal header field without indexing, new name (RFC 7541 §6.2.2): a self-contained fragment. */
function literalField(name, value) {
  return Buffer.concat([Buffer.from([0x00]), hpackInt(name.length, 7), Buffer.from(name), hpackInt(value.length, 7), Buffer.from(value)]);
}

const settings = (entries = []) => {
  const p = Buffer.alloc(6 * entries.length);
  entries.forEach(([id, v], i) => {
    p.writeUInt16BE(id, 6 * i);
    p.writeUInt32BE(v, 6 * i + 2);
  });
  return frame(T.SETTINGS, 0, 0, p);
};
const settingsAck = () => frame(T.SETTINGS, F.ACK, 0);
const windowUpdate = (stream, increment) => frame(T.WINDOW_UPDATE, 0, stream, u32(increment));
const continuation = (stream, payload = Buffer.alloc(0), endHeaders = false) => frame(T.CONTINUATION, endHeaders ? F.END_HEADERS : 0, stream, payload);

function u32(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

/** Splits a byte stream into frames; `onFrame({ type, flags, stream, payload })`. `skip`: bytes to pass first (a preface). */
function frameReader(onFrame, skip = 0) {
  let buf = Buffer.alloc(0);
  let toSkip = skip;
  return (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    if (toSkip) {
      const n = Math.min(toSkip, buf.length);
      buf = buf.subarray(n);
      toSkip -= n;
    }
    while (buf.length >= 9) {
      const len = buf.readUIntBE(0, 3);
      if (buf.length < 9 + len) break;
      onFrame({ type: buf[3], flags: buf[4], stream: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + len) });
      buf = buf.subarray(9 + len);
    }
  };
}

/**
 * A raw HTTP/2 client over node:tls (ALPN h2). `client.frames` is every frame received;
 * `client.goaway` the first GOAWAY `{ lastStreamId, errorCode }`; `client.closed` once the
 * proxy closed; `client.serverSettings` the entries of the server's first SETTINGS (Rampart's own,
 * sent right after the handshake), `client.settings` those of every non-ACK SETTINGS in order
 * (the upstream's follow). `onFrame(f)`, when given, sees each frame as it arrives.
 */
function rawClient({ port, servername = 'localhost', localAddress, host = '127.0.0.1', onFrame }) {
  return new Promise((resolve, reject) => {
    const c = { frames: [], goaway: null, closed: false, serverSettings: null, settings: [], count: {} };
    const sock = tls.connect({ port, host, servername, localAddress, ALPNProtocols: ['h2'], rejectUnauthorized: false });
    c.socket = sock;
    const read = frameReader((f) => {
      c.frames.push(f);
      const name = TYPE_NAMES[f.type] || `0x${f.type.toString(16)}`;
      c.count[name] = (c.count[name] || 0) + 1;
      if (f.type === T.SETTINGS && !(f.flags & F.ACK)) {
        const entries = {};
        for (let i = 0; i + 6 <= f.payload.length; i += 6) entries[f.payload.readUInt16BE(i)] = f.payload.readUInt32BE(i + 2);
        c.settings.push(entries);
        if (!c.serverSettings) c.serverSettings = entries;
      }
      if (f.type === T.GOAWAY && !c.goaway) {
        c.goaway = { lastStreamId: f.payload.readUInt32BE(0) & 0x7fffffff, errorCode: f.payload.readUInt32BE(4) };
      }
      if (onFrame) onFrame(f);
    });
    sock.on('data', read);
    sock.on('error', () => {});
    sock.on('close', () => (c.closed = true));
    c.write = (buf) => new Promise((r) => (sock.destroyed ? r(false) : sock.write(buf, (e) => r(!e))));
    sock.once('secureConnect', () => {
      c.alpn = sock.alpnProtocol;
      resolve(c);
    });
    sock.once('error', reject);
  });
}

/**
 * The counting upstream: a TCP relay (what Rampart connects to) that parses every frame it
 * receives and forwards the bytes to a node:http2 h2c server. `up.conns[i]` is one relayed
 * connection: `{ frames: { HEADERS: n, ... }, closed }` (frames received from Rampart);
 * `up.frames` sums them; `up.streams` counts the requests node:http2 saw; `handler(stream,
 * headers)` answers them (default: 200 'ok'). `up.closedConnections` counts closed connections.
 * `settings` override the node:http2 server's (SETTINGS_MAX_CONCURRENT_STREAMS 1000 by default;
 * `{ maxConcurrentStreams: undefined }` sends SETTINGS without it, as node:http2 does by default).
 */
async function countingUpstream({ handler, settings } = {}) {
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: 1000, ...settings } });
  const up = { frames: {}, streams: 0, connections: 0, closedConnections: 0, sessions: new Set() };
  h2.on('session', (s) => {
    up.sessions.add(s);
    s.on('close', () => up.sessions.delete(s));
    s.on('error', () => {});
  });
  h2.on('stream', (stream, hdrs) => {
    up.streams++;
    stream.on('error', () => {});
    if (handler) handler(stream, hdrs);
    else {
      stream.respond({ ':status': 200 });
      stream.end('ok');
    }
  });
  await new Promise((r) => h2.listen(0, '127.0.0.1', r));
  const open = new Set();
  up.conns = [];
  const relay = net.createServer((inbound) => {
    up.connections++;
    const conn = { frames: {}, closed: false };
    up.conns.push(conn);
    open.add(inbound);
    inbound.on('close', () => open.delete(inbound));
    const out = net.connect(h2.address().port, '127.0.0.1');
    const read = frameReader((f) => {
      const name = TYPE_NAMES[f.type] || `0x${f.type.toString(16)}`;
      up.frames[name] = (up.frames[name] || 0) + 1;
      conn.frames[name] = (conn.frames[name] || 0) + 1;
    }, PREFACE.length);
    inbound.on('data', (d) => {
      read(d);
      out.write(d);
    });
    out.pipe(inbound);
    let closed = 0;
    const done = () => {
      if (++closed === 2) {
        conn.closed = true;
        up.closedConnections++;
      }
    };
    inbound.on('close', () => {
      out.destroy();
      done();
    });
    out.on('close', () => {
      inbound.destroy();
      done();
    });
    inbound.on('error', () => {});
    out.on('error', () => {});
  });
  await new Promise((r) => relay.listen(0, '127.0.0.1', r));
  up.port = relay.address().port;
  up.h2 = h2;
  up.close = async () => {
    for (const s of up.sessions) s.destroy();
    for (const s of open) s.destroy();
    await new Promise((r) => relay.close(() => r()));
    await new Promise((r) => h2.close(() => r()));
  };
  up.relay = relay;
  return up;
}

/**
 * Rampart on a free port with one `http2: true` route to a fresh counting upstream (`settings`:
 * its SETTINGS; `protection`: the listener's; `route`: more fields of the route), stopped with the upstream after the test
 * `t`. Returns `{ up, port, proxy, events ('blocked'), metrics() (the listener's) }`.
 */
async function proxiedUpstream(t, { protection, handler, settings, route = {} } = {}) {
  const h = require('./index');
  const { RampartProxy } = require('../..');
  const up = await countingUpstream({ handler, settings });
  const port = await h.freePort();
  const listener = { host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) };
  if (protection) listener.protection = protection;
  const proxy = new RampartProxy({
    listeners: [listener],
    routes: [{ sni: '', terminateTls: true, http2: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: up.port }], ...route }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await up.close();
  });
  return { up, port, proxy, events, metrics: () => proxy.metrics().listeners[0] };
}

/** node:http2 GETs (`session.request`) on one session: resolves `[status, body]` per request. */
function getter(session) {
  return (path) =>
    new Promise((resolve, reject) => {
      const r = session.request({ ':path': path });
      let status;
      let body = '';
      r.on('response', (hd) => (status = hd[':status']));
      r.on('data', (d) => (body += d));
      r.on('end', () => resolve([status, body]));
      r.on('error', reject);
    });
}

module.exports = {
  getter,
  PREFACE,
  T,
  F,
  ENHANCE_YOUR_CALM,
  frame,
  requestBlock,
  hpackInt,
  literalField,
  headers,
  rst,
  ping,
  settings,
  settingsAck,
  windowUpdate,
  continuation,
  frameReader,
  rawClient,
  countingUpstream,
  proxiedUpstream,
};
