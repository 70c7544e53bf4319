'use strict';
// Client for the XDP end-to-end spec, run inside the clients' namespace:
// `node netns-client.js <mode> <host> <port> <localAddress> <timeoutMs>` prints one word:
// mode 'tls' → 'ok' after a TLS echo round trip, else 'refused' / 'closed' / 'timeout';
// mode 'plain' → 'ok' when the server answers 'plain-ok';
// mode 'tls4' → four TLS attempts in a row from one process (fast), results joined by ','.
const net = require('node:net');
const tls = require('node:tls');

const [mode, host, port, localAddress, timeoutMs] = process.argv.slice(2);
let done = false;
function finish(word) {
  if (done) return;
  done = true;
  process.stdout.write(word);
  process.exit(0);
}
setTimeout(() => finish('timeout'), Number(timeoutMs));
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
if (mode === 'tls4') {
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
