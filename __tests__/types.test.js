'use strict';
// index.d.ts as a TypeScript consumer sees it: `tsc --noEmit --strict` with @types/node on files
// that import 'rampart' through the package's own "exports"/"types" (node_modules/rampart links
// to this checkout). Positive cases compile; `// @ts-expect-error` lines and a separate file
// prove that wrong usage fails the type-check. Every case runs with TypeScript 5, 6 and 7 and
// @types/node 20 and 22 (devDependencies typescript5/6/7, @types/node and @types/node22), with
// no `--types`: TypeScript 6 and 7 no longer include @types packages unless named, so index.d.ts
// must reference node's types itself, as a consumer's `npm install -D typescript @types/node` and
// `tsc --strict` see it.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const root = path.join(__dirname, '..');
const TYPESCRIPT = ['typescript5', 'typescript6', 'typescript7'];
const TYPES_NODE = { 20: '@types/node', 22: '@types/node22' };
const tscOf = (ts) => path.join(root, 'node_modules', ts, 'bin', 'tsc');
/** Every (TypeScript, @types/node) pair: `{ ts, node, label }`. */
const MATRIX = TYPESCRIPT.flatMap((ts) => Object.keys(TYPES_NODE).map((node) => ({ ts, node, label: `${ts} with @types/node ${node}` })));

const CONSUMER_TS = `
import {
  RampartProxy, SymphonyProxy, ConfigError, generateSelfSignedCert,
  type BlockedIps, type BlockedIpsDetail, type BlockedEvent, type BlockedSummary, type ConfigErrorEntry,
  type UpstreamConfig,
  type SuspendedEvent, type RouteConfig,
} from 'rampart';

const [certChain, privateKey] = generateSelfSignedCert(['localhost']);
const proxy = new RampartProxy({
  listeners: [{ host: '127.0.0.1', port: 8443, defaultCert: { certChain, privateKey },
    tls: { minVersion: 'TLSv1.3', groups: ['X25519MLKEM768', 'X25519'], preferServerCipherOrder: true },
    protection: { rateLimit: { connectionsPerSecond: 20 }, penaltyBox: { durationMs: 60000 } } }],
  routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 8080 }] }],
});

// blockedIps(): string lists by default and with detail: false, objects with detail: true,
// either with a boolean known only at run time.
const plain: BlockedIps = proxy.blockedIps();
const plainFalse: BlockedIps = proxy.blockedIps({ detail: false });
const plainPort: BlockedIps = proxy.blockedIps({ port: 8443 });
const boxed: string[] = plain.penaltyBoxed.concat(plainFalse.rateLimited, plainPort.cidrBlocklist);
const detailed: BlockedIpsDetail = proxy.blockedIps({ detail: true, port: 8443 });
const remaining: number | undefined = detailed.penaltyBoxed[0]?.remainingMs;
declare const b: boolean;
const either: BlockedIps | BlockedIpsDetail = proxy.blockedIps({ detail: b });
// @ts-expect-error with detail: boolean the result may be the detailed shape
const onlyStrings: BlockedIps = proxy.blockedIps({ detail: b });
// @ts-expect-error detail: true gives objects, not strings
const wrongShape: string[] = proxy.blockedIps({ detail: true }).penaltyBoxed;

// Every listener method is typed per event.
function onBlocked(e: BlockedEvent): void {
  const reason: string = e.reason;
  void reason;
}
proxy.on('blocked', (e) => {
  const ip: string = e.ip;
  const port: number = e.port;
  const observed: boolean = e.observed;
  void [ip, port, observed];
});
proxy.once('blockedSummary', (s) => {
  const total: number = s.total;
  const top: { ip: string; count: number }[] = s.topIps;
  void [total, top];
});
proxy.addListener('error', (e) => {
  const code: string = e.code;
  const ip: string | null = e.ip;
  void [code, ip];
});
proxy.prependListener('ready', () => {});
proxy.prependOnceListener('close', () => {});
proxy.on('blocked', onBlocked).once('close', () => {}).off('blocked', onBlocked);
proxy.removeListener('blocked', onBlocked);
// @ts-expect-error 'blocked' carries a BlockedEvent, which has no total
proxy.once('blocked', (e) => e.total);
// @ts-expect-error a BlockedSummary listener does not fit 'blocked'
proxy.off('blocked', (s: BlockedSummary) => void s);
// @ts-expect-error 'ready' has no payload
proxy.addListener('ready', (x: string) => void x);
// @ts-expect-error no such event
proxy.prependListener('blokced', () => {});
// @ts-expect-error no such event
proxy.removeListener('blokced', () => {});

// Suspended routes: the 'suspended' event and resolveConnection with Symphony's one-upstream
// route, a routes[]-shaped one, or null.
proxy.on('suspended', (e: SuspendedEvent) => {
  const id: string = e.id;
  const peer: [string, number] = [e.peerIp, e.peerPort];
  const took: boolean = proxy.resolveConnection(id, { upstream: { kind: 'uds', path: '/run/app.sock' }, terminateTls: true });
  proxy.resolveConnection(id, { upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 8080 }], terminateTls: false });
  proxy.resolveConnection(id, null);
  const problems: ConfigErrorEntry[] = proxy.checkResolveRoute({ upstream: { kind: 'tcp', host: 'a', port: 1 } });
  void problems;
  // @ts-expect-error a resolved route cannot be suspended again
  proxy.resolveConnection(id, { upstream: { kind: 'tcp', host: 'a', port: 1 }, suspended: true });
  // @ts-expect-error upstream or upstreams, not both
  proxy.resolveConnection(id, { upstream: { kind: 'tcp', host: 'a', port: 1 }, upstreams: [] });
  void [peer, took, e.sni, e.listener];
});
const held: RouteConfig = { sni: '*.apps.test', upstreams: [], suspended: true, suspendTimeoutMs: 5000 };
const tunnels: RouteConfig = { sni: 'ws.test', upstreams: [], protocol: 'http', tunnels: { upgrade: ['websocket'], connect: false } };
// @ts-expect-error connect is a boolean
const badTunnels: RouteConfig = { sni: 'x.test', upstreams: [], tunnels: { connect: 'yes' } };
void [held, tunnels, badTunnels];
// SymphonyProxy is a RampartProxy: checkResolveRoute too (resolveConnection's checks for an id no
// connection holds).
const symphonyProblems: ConfigErrorEntry[] = new SymphonyProxy({ listeners: [], routes: [] }).checkResolveRoute(null);
void symphonyProblems;

// ConfigError is exported with code and errors.
try {
  proxy.updateConfig({ protection: [{ port: 8443, protection: null }] });
  proxy.blockIp('192.0.2.0/24', { ttlMs: 60000, reason: 'incident' });
} catch (err) {
  if (err instanceof ConfigError) {
    const code: 'ERR_RAMPART_CONFIG' = err.code;
    const entries: ConfigErrorEntry[] = err.errors;
    for (const { path, message } of err.errors) console.error(path + ': ' + message, code, entries.length);
  }
}

async function lifecycle(): Promise<void> {
  await proxy.start();
  const m = proxy.metrics();
  const active: number = m.listeners[0].activeConnections;
  void active;
  await proxy.stop({ drainMs: 1000 });
}
// upstreams[].protocol: 'h2' | 'http/1.1' (the ALPN split).
const split: UpstreamConfig[] = [
  { kind: 'tcp', host: '127.0.0.1', port: 8081, protocol: 'h2' },
  { kind: 'uds', path: '/run/app.sock', protocol: 'http/1.1' },
];
// @ts-expect-error 'h2c' is not an upstream protocol
const badProtocol: UpstreamConfig = { kind: 'tcp', host: '127.0.0.1', port: 8081, protocol: 'h2c' };
void [boxed, remaining, either, onlyStrings, wrongShape, lifecycle, split, badProtocol];
`;

const CONSUMER_MTS = `
import rampart, { RampartProxy, ConfigError } from 'rampart';
const same: typeof RampartProxy = rampart.RampartProxy;
const isConfigError = (e: unknown): e is ConfigError => e instanceof ConfigError;
void [same, isConfigError];
`;

// A listener that reads a field the 'blocked' payload does not have: line 3 must be reported.
const NEGATIVE_TS = `import { RampartProxy } from 'rampart';
declare const proxy: RampartProxy;
proxy.on('blocked', (e) => console.log(e.count));
`;

/** A consumer project: node_modules/rampart → this checkout, node_modules/@types/node → @types/node `node`. */
function project(node) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-types-'));
  fs.mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true });
  fs.symlinkSync(root, path.join(dir, 'node_modules', 'rampart'), 'dir');
  fs.symlinkSync(path.join(root, 'node_modules', TYPES_NODE[node]), path.join(dir, 'node_modules', '@types', 'node'), 'dir');
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'types-consumer', private: true }));
  return dir;
}

function typeCheck(ts, dir, files) {
  const args = [tscOf(ts), '--noEmit', '--strict', '--module', 'nodenext', '--target', 'es2022', ...files];
  const r = spawnSync(process.execPath, args, { cwd: dir, encoding: 'utf8', timeout: 120000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

test('TypeScript 5, 6 and 7 and @types/node 20 and 22 are installed (devDependencies)', () => {
  const major = (dir) => Number(JSON.parse(fs.readFileSync(path.join(root, 'node_modules', dir, 'package.json'), 'utf8')).version.split('.')[0]);
  assert.deepEqual(
    TYPESCRIPT.map((ts) => fs.existsSync(tscOf(ts)) && major(ts)),
    [5, 6, 7],
    'run npm install'
  );
  assert.deepEqual(Object.values(TYPES_NODE).map(major), [20, 22], 'run npm install');
});

for (const { ts, node, label } of MATRIX) {
  test(`${label}: index.d.ts type-checks with --strict for CommonJS and ESM consumers, overloads and per-event listeners included`, () => {
    const dir = project(node);
    try {
      fs.writeFileSync(path.join(dir, 'consumer.ts'), CONSUMER_TS);
      fs.writeFileSync(path.join(dir, 'consumer.mts'), CONSUMER_MTS);
      const r = typeCheck(ts, dir, ['consumer.ts', 'consumer.mts']);
      assert.equal(r.code, 0, `tsc failed:\n${r.out}`);
      assert.equal(r.out.trim(), '');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test(`${label}: a listener that misuses the event payload fails the type-check`, () => {
    const dir = project(node);
    try {
      fs.writeFileSync(path.join(dir, 'negative.ts'), NEGATIVE_TS);
      const r = typeCheck(ts, dir, ['negative.ts']);
      assert.notEqual(r.code, 0, 'tsc accepted a wrong payload');
      assert.match(r.out, /negative\.ts\(3,\d+\): error TS2339: Property 'count' does not exist on type 'BlockedEvent'/);
      assert.equal(r.out.match(/error TS/g).length, 1, r.out);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
