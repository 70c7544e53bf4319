#!/usr/bin/env node
'use strict';
// testssl.sh against Rampart (default `tls`, and `preferServerCipherOrder: true`), HAProxy and
// nginx serving the same self-signed certificate, each with its distribution's TLS defaults; prints
// (and with --write, replaces in BENCHMARKS.md between the testssl markers) a summary table:
// findings by severity, the protocols offered, whether the server orders the ciphers, and whether
// the post-quantum hybrid X25519MLKEM768 is offered.
//
//   node benches/testssl.js [--only rampart,rampart-prefer,haproxy,nginx] [--write]
//
// testssl.sh (apt-get install testssl.sh) runs `--quiet --color 0 --warnings batch --jsonfile`;
// one run takes 1-4 minutes per server. Findings are counted per severity as testssl rates them
// (CRITICAL, HIGH, MEDIUM, LOW; INFO/OK/WARN are not findings). A finding that is about the
// self-signed test certificate (its trust chain, revocation info, CT, CAA) is counted apart: it is
// the certificate's, not the server's, and the same for all three.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const L = require('./lib');

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : dflt;
};
const WRITE = argv.includes('--write');
const ONLY = opt('--only', 'rampart,rampart-prefer,haproxy,nginx').split(',').filter(Boolean);
const RAMPART_PATH = process.env.RAMPART_PATH || path.resolve(__dirname, '..');
const SNI = 'testssl.test';

/** testssl ids that judge the certificate, not the server's TLS configuration. */
const CERT_IDS = /^(cert_|chain_of_trust|OCSP_|DNS_CAArecord|certificate_transparency|intermediate_cert)/;
const SEVERITIES = ['CRITICAL', 'HIGH', 'MEDIUM', 'LOW'];
const PROTOCOLS = [
  ['SSLv2', 'SSLv2'],
  ['SSLv3', 'SSLv3'],
  ['TLS1', 'TLS 1.0'],
  ['TLS1_1', 'TLS 1.1'],
  ['TLS1_2', 'TLS 1.2'],
  ['TLS1_3', 'TLS 1.3'],
];

/** A TCP origin that accepts and discards (testssl never gets past the handshake's purpose). */
function origin() {
  return new Promise((resolve) => {
    const s = net.createServer((c) => {
      c.on('error', () => {});
      c.resume();
    });
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}

async function startRampart(ctx, tls) {
  const { RampartProxy } = require(RAMPART_PATH);
  const port = await L.freePort();
  const p = new RampartProxy({
    listeners: [
      {
        port,
        host: '127.0.0.1',
        defaultCert: { certChain: ctx.cert, privateKey: ctx.key },
        ...(tls ? { tls } : {}),
      },
    ],
    routes: [{ sni: SNI, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: ctx.originPort }] }],
  });
  p.on('error', () => {});
  await p.start();
  return { port, stop: () => p.stop() };
}

async function startHaproxy(ctx) {
  const port = await L.freePort();
  const cfg = path.join(ctx.dir, 'haproxy.cfg');
  fs.writeFileSync(
    cfg,
    L.haproxyConfig({
      port,
      pem: ctx.pemFile,
      upstreams: [{ host: '127.0.0.1', port: ctx.originPort }],
      threads: 1,
      maxconn: 1000,
      statsSocket: path.join(ctx.dir, 'haproxy.sock'),
    })
  );
  const h = await L.startHaproxy(cfg, port);
  return { port, stop: h.stop };
}

async function startNginx(ctx) {
  const st = await L.nginxStream();
  if (!st.ok) throw new Error(`nginx: ${st.why}`);
  const port = await L.freePort();
  const cfg = path.join(ctx.dir, 'nginx.conf');
  // The bench config pins TLS 1.3 (the handshake benchmarks); here nginx keeps its default protocols.
  const text = L.nginxConfig({
    dir: ctx.dir,
    port,
    certFile: ctx.certFile,
    keyFile: ctx.keyFile,
    upstreams: [{ host: '127.0.0.1', port: ctx.originPort }],
    workers: 1,
    maxconn: 1000,
    loadModule: st.loadModule,
  }).replace(/^\s*ssl_protocols .*\n/m, '');
  fs.writeFileSync(cfg, text);
  const n = await L.startNginx(cfg, port, ctx.dir, 1);
  return { port, stop: n.stop };
}

/** Runs testssl.sh against 127.0.0.1:`port`; returns its JSON findings. */
async function testssl(ctx, name, port) {
  const json = path.join(ctx.dir, `${name}.json`);
  const args = ['--quiet', '--color', '0', '--warnings', 'batch', '--ip', '127.0.0.1', '--jsonfile', json, `${SNI}:${port}`];
  const r = await L.run('testssl', args, { timeoutMs: 15 * 60000 });
  if (!fs.existsSync(json)) throw new Error(`testssl wrote no JSON (exit ${r.code}): ${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`);
  return JSON.parse(fs.readFileSync(json, 'utf8'));
}

function summarize(findings) {
  const by = Object.fromEntries(SEVERITIES.map((s) => [s, []]));
  const certBy = Object.fromEntries(SEVERITIES.map((s) => [s, []]));
  for (const f of findings) {
    if (!SEVERITIES.includes(f.severity)) continue;
    (CERT_IDS.test(f.id) ? certBy : by)[f.severity].push(f.id);
  }
  const offered = (id) => {
    const f = findings.find((x) => x.id === id);
    return f && /^offered/.test(f.finding);
  };
  const protocols = PROTOCOLS.filter(([id]) => offered(id)).map(([, n]) => n);
  const order = findings.find((x) => x.id === 'cipher_order');
  return { by, certBy, protocols, cipherOrder: order ? order.finding : '?' };
}

async function main() {
  if (!L.haveTool('testssl')) {
    console.error('missing tool: testssl (apt-get install testssl.sh)');
    process.exit(2);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-testssl-'));
  const { generateSelfSignedCert } = require(RAMPART_PATH);
  const [cert, key] = generateSelfSignedCert([SNI, '127.0.0.1']);
  const o = await origin();
  const ctx = {
    dir,
    cert,
    key,
    certFile: path.join(dir, 'cert.pem'),
    keyFile: path.join(dir, 'key.pem'),
    pemFile: path.join(dir, 'both.pem'),
    originPort: o.address().port,
  };
  fs.writeFileSync(ctx.certFile, cert);
  fs.writeFileSync(ctx.keyFile, key);
  fs.writeFileSync(ctx.pemFile, cert + key);
  const targets = {
    rampart: { label: 'Rampart (default `tls`)', start: () => startRampart(ctx, null), pq: 'offered (rustls aws-lc-rs default)' },
    'rampart-prefer': {
      label: 'Rampart (`preferServerCipherOrder: true`)',
      start: () => startRampart(ctx, { preferServerCipherOrder: true }),
      pq: 'offered (rustls aws-lc-rs default)',
    },
    haproxy: {
      label: `HAProxy ${((await L.run('haproxy', ['-v'])).stdout.match(/version (\S+)/) || [])[1]} (\`ssl crt\`, distribution defaults)`,
      start: () => startHaproxy(ctx),
      pq: 'no (OpenSSL 3.0)',
    },
    nginx: { label: `${(await L.nginxStream()).version} (stream, default \`ssl_protocols\`)`, start: () => startNginx(ctx), pq: 'no (OpenSSL 3.0)' },
  };
  const rows = [];
  for (const name of ONLY) {
    const t = targets[name];
    if (!t) throw new Error(`unknown target ${name}`);
    console.error(`testssl: ${t.label} ...`);
    const s = await t.start();
    try {
      const findings = await testssl(ctx, name, s.port);
      rows.push({ name, label: t.label, pq: t.pq, ...summarize(findings) });
    } finally {
      await s.stop();
    }
  }
  o.close();
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips the ANSI colour escapes (ESC [ ... m) testssl prints
  const plain = (await L.run('testssl', ['--version'])).stdout.replace(/\x1b\[[0-9;]*m/g, '');
  const testsslVersion = (plain.match(/testssl\S*\s+(\d\S*)/) || [])[1] || '?';
  const cell = (ids) => (ids.length ? `${ids.length} (${ids.join(', ')})` : '0');
  const out = [
    '<!-- testssl:begin -->',
    `testssl.sh ${testsslVersion}, same self-signed certificate (ECDSA P-256) on every server, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC: \`node benches/testssl.js\` (\`testssl --quiet --color 0 --warnings batch --ip 127.0.0.1 --jsonfile out.json host:port\`).`,
    '',
    '| server | CRITICAL | HIGH | MEDIUM | LOW | protocols | server cipher order (testssl) | X25519MLKEM768 | rated checks about the test certificate |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.label} | ${cell(r.by.CRITICAL)} | ${cell(r.by.HIGH)} | ${cell(r.by.MEDIUM)} | ${cell(r.by.LOW)} | ${r.protocols.join(', ')} | ${r.cipherOrder} | ${r.pq} | ${
          SEVERITIES.map((s) => r.certBy[s].length && `${s} ${r.certBy[s].join(', ')}`)
            .filter(Boolean)
            .join('; ') || 'none'
        } |`
    ),
    '<!-- testssl:end -->',
  ].join('\n');
  console.log(out);
  fs.writeFileSync(path.join(dir, 'summary.md'), `${out}\n`);
  if (WRITE) {
    const file = path.join(__dirname, '..', 'BENCHMARKS.md');
    const text = fs.readFileSync(file, 'utf8');
    const re = /<!-- testssl:begin -->[\s\S]*<!-- testssl:end -->/;
    if (!re.test(text)) throw new Error('BENCHMARKS.md has no testssl markers');
    fs.writeFileSync(file, text.replace(re, out));
  }
  console.error(`raw JSON in ${dir}`);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
