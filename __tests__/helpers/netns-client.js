'use strict';
// Client for the XDP end-to-end spec, run inside the clients' namespace:
// `node netns-client.js <mode> <host> <port> <localAddress> <timeoutMs>` prints one word:
// mode 'tls' → 'ok' after a TLS echo round trip, else 'refused' / 'closed' / 'timeout';
// mode 'plain' → 'ok' when the server answers 'plain-ok'.
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
if (mode === 'tls') {
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
