'use strict';
// The docs as a reader meets them: every relative link and #anchor of README.md, BENCHMARKS.md and
// docs/*.md resolves (scripts/check-doc-links.js), the README front door stays under 15 KB, no page
// cites a file outside the repository, and the README's 20-line example runs as written.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const https = require('node:https');
const { spawn } = require('node:child_process');
const h = require('./helpers');
const { checkDocLinks, anchorsOf, docFiles } = require('../scripts/check-doc-links');

const ROOT = path.join(__dirname, '..');
const read = (f) => fs.readFileSync(path.join(ROOT, f), 'utf8');

test('every relative link and anchor in README.md, BENCHMARKS.md and docs/*.md resolves', () => {
  const { files, links, problems } = checkDocLinks();
  assert.deepEqual(problems, []);
  assert.ok(files.includes('README.md') && files.includes('docs/config.md'), files.join());
  assert.ok(links >= 150, `only ${links} relative links checked`);
});

test('the checker reports a missing file, a missing anchor and a link out of the repository', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-doclinks-'));
  fs.mkdirSync(path.join(dir, 'docs'));
  fs.writeFileSync(
    path.join(dir, 'README.md'),
    [
      '# Title',
      '[ok](docs/a.md#a-page-2) [gone](docs/b.md) [anchor](#nope) [out](../x.md)',
      '`[code](not-a-link.md)` and [web](https://example.com/#x)',
      '```',
      '[in a block](nowhere.md)',
      '```',
    ].join('\n')
  );
  fs.writeFileSync(path.join(dir, 'docs', 'a.md'), '# A page\n\n## A page\n\n## A page\n\n[back](../README.md#title)\n');
  const { files, links, problems } = checkDocLinks(dir);
  assert.deepEqual(files, ['README.md', 'docs/a.md']);
  assert.equal(links, 5);
  assert.deepEqual(problems, [
    { file: 'README.md', line: 2, link: 'docs/b.md', message: 'no such file: docs/b.md' },
    { file: 'README.md', line: 2, link: '#nope', message: 'no heading with anchor #nope in README.md' },
    { file: 'README.md', line: 2, link: '../x.md', message: 'points outside the repository' },
  ]);
  assert.deepEqual([...anchorsOf('## HTTP/2 guard\n## `explain(ip)`?\n## HTTP/2 guard\n')], ['http2-guard', 'explainip', 'http2-guard-1']);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the README front door is at most 15 KB and links every docs page', () => {
  const readme = read('README.md');
  assert.ok(Buffer.byteLength(readme) <= 15 * 1024, `README.md is ${Buffer.byteLength(readme)} bytes`);
  for (const f of docFiles().filter((x) => x.startsWith('docs/'))) {
    assert.ok(readme.includes(`](${f})`), `README.md does not link ${f}`);
  }
});

test('every docs page opens with a contents list of its own sections', () => {
  for (const f of docFiles().filter((x) => x.startsWith('docs/'))) {
    const text = read(f);
    const at = text.indexOf('\nContents:\n\n- [');
    assert.ok(at > 0 && at < text.indexOf('\n## '), `${f}: no contents list before its first section`);
  }
});

test('no page cites a file outside the repository or an internal note', () => {
  for (const f of docFiles()) {
    const text = read(f);
    for (const bad of [/DESIGN(\.md)?\b/, /\.\.\/shared/, /\bissue \d+/i, /\bfindings\b/i]) {
      assert.equal(bad.exec(text), null, `${f} cites ${bad}`);
    }
  }
});

test('BENCHMARKS.md holds the sections the benches rewrite (attack.js --write, xdp-flood.js --write, testssl.js --write)', () => {
  const md = read('BENCHMARKS.md');
  for (const section of ['attack', 'attack-capacity', 'testssl']) {
    const begin = md.indexOf(`<!-- ${section}:begin -->`);
    const end = md.indexOf(`<!-- ${section}:end -->`);
    assert.ok(begin > 0 && end > begin, `${section} markers`);
    assert.equal(md.indexOf(`<!-- ${section}:begin -->`, begin + 1), -1, `${section}: one begin marker`);
  }
  const xdp = /^const SECTION = '(## [^']+)';$/m.exec(fs.readFileSync(path.join(ROOT, 'benches', 'xdp-flood.js'), 'utf8'))[1];
  assert.equal(md.split('\n').filter((l) => l === xdp).length, 1, xdp);
  assert.equal(read('docs/benchmarks-archive.md').includes('<!--'), false);
});

/** The README's "A protected port in Node" block, with its ports replaced and `rampart` resolved. */
function readmeExample(appPort, proxyPort) {
  const readme = read('README.md');
  const section = readme.slice(readme.indexOf('## A protected port in Node'));
  const code = /```js\n([\s\S]*?)```/.exec(section)[1];
  assert.ok(code.split('\n').length <= 21, `the example is ${code.split('\n').length} lines`);
  return code
    .replace("require('rampart')", `require(${JSON.stringify(ROOT)})`)
    .replaceAll('8443', String(proxyPort))
    .replaceAll('3000', String(appPort));
}

function get(port) {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port, servername: 'localhost', path: '/', rejectUnauthorized: false, agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
  });
}

test("the README's protected port runs as written: an answer, then the flood it shows is refused", async (t) => {
  const [appPort, proxyPort] = await h.freePorts(2);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-readme-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'protect.js');
  fs.writeFileSync(file, readmeExample(appPort, proxyPort));
  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  t.after(() => child.exitCode === null && child.kill('SIGKILL'));
  await h.waitFor(() => out.includes('is protected'), { what: `the example's start line (${out})` });
  assert.equal(out, `https://localhost:${proxyPort}/ is protected: curl -k https://localhost:${proxyPort}/\n`);
  assert.deepEqual(await get(proxyPort), { status: 200, body: 'hello from the app\n' });
  // The README's flood: 100 connections from this address (the README runs 8 curls at a
  // time; one after the other from node is faster than the limit too).
  const refused = [];
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < 100; i++) await get(proxyPort).catch((e) => refused.push(e.code));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  // Burst 40 (one used by the GET above), then 20/s: what the limit lets through in that time.
  const admitted = 100 - refused.length;
  assert.ok(admitted >= 39 && admitted <= 39 + Math.ceil(20 * seconds), `${admitted} admitted in ${seconds} s`);
  assert.deepEqual(new Set(refused), new Set(['ECONNRESET']));
  await h.waitFor(() => out.includes('refused 127.0.0.1 rate_limited\n') && out.includes('refused 127.0.0.1 penalty_boxed\n'), {
    what: `the refusals (${out})`,
  });
  // Only the per-client limits refuse: the first refusal exhausts the rate, the rest find the box.
  const reasons = new Set(out.split('\n').filter((l) => l.startsWith('refused ')));
  assert.deepEqual([...reasons].sort(), ['refused 127.0.0.1 penalty_boxed', 'refused 127.0.0.1 rate_limited']);
  child.kill('SIGINT');
  assert.deepEqual(await exited, { code: 0, signal: null });
});
