#!/usr/bin/env node
'use strict';
// The package's `install` script, following napi-rs' convention for prebuilt binaries:
// - an installed package (a tarball from `npm pack`, no .git) that already holds a
//   `rampart.<platform>.node` for this machine and its loader `binding.js` uses them as they are:
//   no cargo, no Rust needed;
// - otherwise (no prebuilt for this platform, one that does not load, or a git checkout where the
//   sources may have changed since the last build) it builds from source with `npm run build`'s
//   command (`napi build`), which needs Rust. `napi` comes from `@napi-rs/cli`, a devDependency:
//   installed in a checkout and in npm's clone of a git URL; a consumer's source install (a
//   tarball without the .node) runs it with `npm exec` at the devDependency's version (fetched
//   into npm's cache, never into the consumer's node_modules).
// RAMPART_BUILD_FROM_SOURCE=1 always builds.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const pkgDir = path.join(__dirname, '..');
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
const name = pkg.napi.binaryName;

function log(line) {
  console.log(`rampart install: ${line}`);
}

function isMusl() {
  try {
    return fs.readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
  } catch {
    const report = process.report && process.report.getReport && process.report.getReport();
    return !(report && report.header && report.header.glibcVersionRuntime);
  }
}

/** The platform triple napi's loader looks for (`linux-x64-gnu`, ...), or null when it has none. */
function platformTriple() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const libc = isMusl() ? 'musl' : 'gnu';
    if (arch === 'arm') return `linux-arm-${libc === 'musl' ? 'musleabihf' : 'gnueabihf'}`;
    if (['x64', 'arm64', 'loong64', 'riscv64'].includes(arch)) return `linux-${arch}-${libc}`;
    if (arch === 'ppc64' || arch === 's390x') return `linux-${arch}-gnu`;
    return null;
  }
  if (platform === 'darwin') return `darwin-${arch}`;
  if (platform === 'freebsd') return `freebsd-${arch}`;
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return null;
}

/** Why the prebuilt addon in this package cannot be used, or null when it can. */
function prebuiltProblem(file) {
  if (process.env.RAMPART_BUILD_FROM_SOURCE === '1') return 'RAMPART_BUILD_FROM_SOURCE=1 asks for a build from source';
  if (fs.existsSync(path.join(pkgDir, '.git'))) {
    return 'this is a git checkout (the sources may be newer than any earlier build; cargo rebuilds only what changed)';
  }
  if (!file) return `no prebuilt addon for ${process.platform}-${process.arch}`;
  if (!fs.existsSync(path.join(pkgDir, file))) return `no prebuilt ${file} in this package`;
  if (!fs.existsSync(path.join(pkgDir, 'binding.js'))) return `${file} is here but its loader binding.js is not`;
  // Load it in a child, so that a binary that does not fit this machine cannot take this process down.
  // The .node itself first: its dlopen error says why (wrong ELF, missing GLIBC_x.y symbol...).
  const script = `require('./${file}'); require('./binding.js').NativeProxy || process.exit(3)`;
  const probe = spawnSync(process.execPath, ['-e', script], {
    cwd: pkgDir,
    encoding: 'utf8',
  });
  if (probe.status !== 0) {
    const why = (probe.stderr || '').split('\n').find((l) => /Error/.test(l)) || `exit ${probe.status}`;
    return `the prebuilt ${file} does not load here (${why.trim()})`;
  }
  return null;
}

/**
 * The command that runs `napi` with `args`: `[file, argv]`. The installed `@napi-rs/cli` when
 * there is one (a checkout, npm's clone of a git URL), else `npm exec` of the devDependency's
 * version (npm_execpath: the npm running this install script).
 */
function napiCommand(args) {
  let cliPkgPath = null;
  try {
    cliPkgPath = require.resolve('@napi-rs/cli/package.json', { paths: [pkgDir] });
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
  }
  if (cliPkgPath) {
    const cliPkg = JSON.parse(fs.readFileSync(cliPkgPath, 'utf8'));
    const bin = typeof cliPkg.bin === 'string' ? cliPkg.bin : cliPkg.bin.napi;
    log(`using @napi-rs/cli ${cliPkg.version} from ${path.dirname(cliPkgPath)}`);
    return [process.execPath, [path.join(path.dirname(cliPkgPath), bin), ...args]];
  }
  const spec = `@napi-rs/cli@${pkg.devDependencies['@napi-rs/cli']}`;
  log(`@napi-rs/cli is not installed (a devDependency): running ${spec} with npm exec`);
  const npmArgs = ['exec', '--yes', `--package=${spec}`, '--', 'napi', ...args];
  const npmCli = process.env.npm_execpath;
  if (npmCli && /\.[cm]?js$/.test(npmCli)) return [process.execPath, [npmCli, ...npmArgs]];
  return [npmCli || 'npm', npmArgs];
}

function buildFromSource(reason) {
  log(`${reason}: building from source.`);
  log('This needs Rust stable (cargo) and, for the XDP filter, clang + libbpf-dev (Debian: apt-get install clang llvm libbpf-dev);');
  log('without clang the addon still builds and attachXdp() rejects naming what is missing.');
  log('A release build from scratch takes about 4-5 minutes on 2 cores (as a dependency, npm shows its output only with --foreground-scripts).');
  const cargo = spawnSync(process.env.CARGO || 'cargo', ['--version'], { encoding: 'utf8' });
  if (cargo.status !== 0) {
    log('cargo was not found or does not run: install Rust stable (rustup), then run npm install again.');
    process.exit(1);
  }
  log(`using ${cargo.stdout.trim()}`);
  // The same command as `npm run build`, one definition: package.json's scripts.build.
  const [tool, ...args] = pkg.scripts.build.split(/\s+/);
  if (tool !== 'napi') throw new Error(`scripts.build must start with napi, got: ${pkg.scripts.build}`);
  const started = Date.now();
  const [file, argv] = napiCommand(args);
  const r = spawnSync(file, argv, { cwd: pkgDir, stdio: 'inherit' });
  if (r.status !== 0) {
    log(`the build failed (${r.error ? r.error.message : `exit ${r.status}`}); see the cargo output above.`);
    process.exit(r.status || 1);
  }
  log(`built from source in ${Math.round((Date.now() - started) / 1000)} s.`);
}

function main() {
  const triple = platformTriple();
  const file = triple && `${name}.${triple}.node`;
  const problem = prebuiltProblem(file);
  if (problem === null) {
    log(`using the prebuilt ${file} shipped in this package (no Rust build).`);
    return;
  }
  buildFromSource(problem);
}

main();
