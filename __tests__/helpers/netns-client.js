'use strict';
// Client for the XDP end-to-end spec, run inside the clients' namespace:
// `node netns-client.js <mode> <host> <port> <localAddress> <timeoutMs>` prints one word:
// mode 'tls' → 'ok' after a TLS echo round trip, else 'refused' / 'closed' / 'timeout';
// mode 'plain' → 'ok' when the server answers 'plain-ok';
// mode 'tls4' → four TLS attempts in a row from one process (fast), results joined by ','.
// mode 'tlsmany' → argv[7] TLS round trips in a row, each within timeoutMs: prints 'ok=N,fail=M'.
// mode 'udp' → argv[7] datagrams of argv[8] bytes (a datagram over the MTU leaves as IP
// fragments), then prints 'sent'.
const net = require('node:net');
const tls = require('node:tls');

const dgram = require('node:dgram');

const [mode, host, port, localAddress, timeoutMs, countArg, sizeArg] = process.argv.slice(2);
let done = false;
function finish(word) {
  if (done) return;
  done = true;
  process.stdout.write(word);
  process.exit(0);
}
const many = mode === 'tlsmany';
if (!many) setTimeout(() => finish('timeout'), Number(timeoutMs) * (mode === 'udp' ? 10 : 1));
function tlsOnce(timeout) {
  return new Promise((resolve) => {
    let settled = false;
    const end = (w) => {
      if (settled) return;
      settled = true;
      clearTimeout(t);
      s.destroy();
      resolve(w);
    };
    const t = setTimeout(() => end('timeout'), timeout);
    const s = tls.connect({ host, port: Number(port), localAddress, servername: 'xdp.test', rejectUnauthorized: false });
    s.on('secureConnect', () => s.write('ping'));
    s.on('data', (d) => end(d.toString() === 'ping' ? 'ok' : 'bad'));
    s.on('error', (e) => end(e.code === 'ECONNREFUSED' ? 'refused' : 'closed'));
    s.on('close', () => end('closed'));
  });
}
if (mode === 'tlsmany') {
  (async () => {
    let ok = 0;
    let fail = 0;
    for (let i = 0; i < Number(countArg); i++) {
      if ((await tlsOnce(Number(timeoutMs))) === 'ok') ok++;
      else fail++;
    }
    finish(`ok=${ok},fail=${fail}`);
  })();
} else if (mode === 'udp') {
  const sock = dgram.createSocket('udp4');
  sock.bind(0, localAddress, async () => {
    const payload = Buffer.alloc(Number(sizeArg), 0x61);
    for (let i = 0; i < Number(countArg); i++) {
      await new Promise((r, j) => sock.send(payload, Number(port), host, (e) => (e ? j(e) : r())));
    }
    sock.close();
    finish('sent');
  });
} else if (mode === 'tls4') {
  (async () => {
    const out = [];
    for (let i = 0; i < 4; i++) out.push(await tlsOnce(Number(timeoutMs) / 4));
    finish(out.join(','));
  })();
} else if (mode === 'tls') {
  const s = tls.connect({ host, port: Number(port), localAddress, servername: 'xdp.test', rejectUnauthorized: false });
  s.on('secureConnect', () => s.write('ping'));
  s.on('data', (d) => finish(d.toString() === 'ping' ? 'ok' : 'bad'));
  s.on('error', (e) => finish(e.code === 'ECONNREFUSED' ? 'refused' : 'closed'));
  s.on('close', () => finish('closed'));
} else {
  const s = net.connect({ host, port: Number(port), localAddress });
  let out = '';
  s.on('data', (d) => (out += d));
  s.on('end', () => finish(out === 'plain-ok' ? 'ok' : 'bad'));
  s.on('error', (e) => finish(e.code === 'ECONNREFUSED' ? 'refused' : 'closed'));
}
