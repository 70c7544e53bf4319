#!/usr/bin/env bash
# Installs the package the way a consumer does, from `npm pack` tarballs, in fresh projects:
#   1. prebuilt: the tarball of this tree (with the rampart.<platform>.node that `npm install`
#      built) installs with a fake `cargo` first on PATH that fails loudly: no Rust build may run,
#      and nothing but rampart lands in node_modules (no build tool: @napi-rs/cli is a devDependency);
#   2. from source: the same tarball without the .node and its loader builds with napi/cargo
#      (napi through `npm exec`, since the consumer has no @napi-rs/cli; CARGO_TARGET_DIR = a copy
#      of this tree's target/, so registry crates are not recompiled; the crate itself is) and then
#      works, again with nothing but rampart in node_modules.
# Each case ends require('rampart') constructing a RampartProxy, and prints PASS or FAIL.
# Run after `npm install` (the build) in the repo root; exits non-zero when a case fails.
# RAMPART_PACK_FROM_SCRATCH=1 builds case 2 in an empty target dir (a full build, several minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

shopt -s nullglob
prebuilt=(rampart.*.node)
shopt -u nullglob
if [ "${#prebuilt[@]}" -eq 0 ] || [ ! -f binding.js ]; then
  echo "pack-install: FAIL: no rampart.*.node / binding.js in $repo (run npm install first)"
  exit 1
fi

work=$(mktemp -d /tmp/rampart-pack-install.XXXXXX)
# RAMPART_PACK_KEEP=1 keeps the folder (tarballs, install logs) for a look afterwards.
if [ "${RAMPART_PACK_KEEP:-}" = 1 ]; then echo "pack-install: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
failed=0

pass() { echo "pack-install: PASS: $*"; }
fail() {
  echo "pack-install: FAIL: $*"
  failed=1
}

# A consumer project (`npm init -y`) that allows the install script of the tarball $2 (npm >= 11
# warns about, and with strict-allow-scripts refuses, unapproved ones; the key of a tarball
# dependency is its file: spec).
new_project() {
  mkdir -p "$1" && (cd "$1" && npm init -y >/dev/null) &&
    node -e "const fs = require('fs'); const p = JSON.parse(fs.readFileSync('$1/package.json', 'utf8'));
      p.allowScripts = { rampart: true, ['file:$2']: true }; fs.writeFileSync('$1/package.json', JSON.stringify(p, null, 2));"
}

# True when the project $1's node_modules holds rampart and nothing else: no other package, no
# other command in .bin (npm's own .package-lock.json aside).
only_rampart() {
  [ "$(ls -A "$1/node_modules" | grep -vx '\.package-lock\.json\|\.bin' | tr '\n' ' ')" = "rampart " ] &&
    [ "$(ls -A "$1/node_modules/.bin" | tr '\n' ' ')" = "rampart symphony-server " ]
}

# `node -e` in the consumer: require('rampart') and construct a RampartProxy.
SMOKE="const { RampartProxy, ConfigError, generateSelfSignedCert } = require('rampart');
const [certChain, privateKey] = generateSelfSignedCert(['localhost']);
const p = new RampartProxy({ listeners: [{ host: '127.0.0.1', port: 1, defaultCert: { certChain, privateKey } }],
  routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 2 }] }] });
if (typeof p.blockedIps !== 'function' || typeof ConfigError !== 'function') process.exit(2);
console.log('constructed a RampartProxy from', require.resolve('rampart'));"

echo "pack-install: npm pack"
tarball=$(npm pack --silent --pack-destination "$work" | tail -n 1)
tarball="$work/$tarball"
if [ ! -f "$tarball" ]; then
  echo "pack-install: FAIL: npm pack produced no tarball"
  exit 1
fi
listing=$(tar -tzf "$tarball")
for f in package/index.js package/index.d.ts package/binding.js "package/${prebuilt[0]}" package/scripts/install.js package/src/lib.rs package/Cargo.toml package/benches/admission.rs package/benches/rescale.rs package/bin/rampart.js package/server/serve.js package/bin/symphony-server.js package/server/symphony-server.js package/symphony/proxy.js; do
  grep -qx "$f" <<<"$listing" || fail "the tarball lacks $f"
done
if grep -qE '^package/(__tests__|tests|target|\.ci)/' <<<"$listing"; then
  fail "the tarball ships test/CI/build folders: $(grep -E '^package/(__tests__|tests|target|\.ci)/' <<<"$listing" | head -3 | tr '\n' ' ')"
fi

# 1. Prebuilt: a fake cargo that fails loudly and leaves a mark.
fakebin="$work/fakebin"
mkdir -p "$fakebin"
cat >"$fakebin/cargo" <<EOF
#!/bin/sh
echo "FAKE CARGO INVOKED: \$*: the prebuilt install must not run cargo" >&2
touch "$work/cargo-was-run"
exit 97
EOF
chmod +x "$fakebin/cargo"

echo "pack-install: case 1: install $(basename "$tarball") with the prebuilt ${prebuilt[0]}, cargo disabled"
new_project "$work/prebuilt" "$tarball"
start=$(date +%s)
if (cd "$work/prebuilt" && PATH="$fakebin:$PATH" npm install --foreground-scripts --no-audit --no-fund "$tarball") >"$work/prebuilt.log" 2>&1; then
  secs=$(($(date +%s) - start))
  if [ -e "$work/cargo-was-run" ] || grep -q "FAKE CARGO" "$work/prebuilt.log"; then
    fail "prebuilt install ran cargo (log: see below)"
    cat "$work/prebuilt.log"
  elif ! grep -q "using the prebuilt ${prebuilt[0]}" "$work/prebuilt.log"; then
    fail "prebuilt install did not say it used ${prebuilt[0]}"
    cat "$work/prebuilt.log"
  elif ! only_rampart "$work/prebuilt"; then
    fail "prebuilt install brought more than rampart: $(ls -A "$work/prebuilt/node_modules" | tr '\n' ' ')"
  elif out=$(cd "$work/prebuilt" && PATH="$fakebin:$PATH" node -e "$SMOKE" 2>&1); then
    pass "prebuilt install in ${secs} s, no cargo; $out"
  else
    fail "prebuilt install: require('rampart') failed: $out"
  fi
else
  fail "prebuilt install: npm install failed"
  cat "$work/prebuilt.log"
fi

# 2. From source: the same package without the .node and its generated loader.
echo "pack-install: case 2: install a tarball without the prebuilt .node (builds from source)"
mkdir -p "$work/src-pkg"
tar -xzf "$tarball" -C "$work/src-pkg"
rm -f "$work/src-pkg/package/"rampart.*.node "$work/src-pkg/package/binding.js" "$work/src-pkg/package/binding.d.ts"
srctarball="$work/src-pkg/$(cd "$work/src-pkg/package" && npm pack --silent --pack-destination .. | tail -n 1)"
if tar -tzf "$srctarball" | grep -qE '\.node$|^package/binding\.js$'; then
  fail "the source tarball still holds a prebuilt binary"
fi
# Registry crates come from a copy of this tree's target/ (the crate itself still compiles);
# a copy, so that this build cannot overwrite the tree's own librampart artifacts.
# napi builds with --target <triple>, so the crates sit in target/<triple>/ and target/release/;
# the debug/ of cargo clippy is not needed.
mkdir -p "$work/target"
if [ -d target ] && [ "${RAMPART_PACK_FROM_SCRATCH:-}" != 1 ]; then
  for entry in target/* target/.rustc_info.json; do
    [ -e "$entry" ] && [ "$(basename "$entry")" != debug ] && cp -a "$entry" "$work/target/"
  done
fi
new_project "$work/fromsource" "$srctarball"
start=$(date +%s)
if (cd "$work/fromsource" && CARGO_TARGET_DIR="$work/target" npm install --foreground-scripts --no-audit --no-fund "$srctarball") >"$work/fromsource.log" 2>&1; then
  secs=$(($(date +%s) - start))
  if ! grep -q "building from source" "$work/fromsource.log"; then
    fail "source install did not say it builds from source"
    cat "$work/fromsource.log"
  elif ! ls "$work/fromsource/node_modules/rampart/"rampart.*.node >/dev/null 2>&1; then
    fail "source install left no rampart.*.node"
    cat "$work/fromsource.log"
  elif ! only_rampart "$work/fromsource"; then
    fail "source install left more than rampart in node_modules: $(ls -A "$work/fromsource/node_modules" | tr '\n' ' ')"
  elif out=$(cd "$work/fromsource" && node -e "$SMOKE" 2>&1); then
    pass "install from source in ${secs} s (cargo: $(grep -c ' Compiling ' "$work/fromsource.log") crates compiled); $out"
  else
    fail "source install: require('rampart') failed: $out"
  fi
else
  fail "source install: npm install failed"
  tail -n 60 "$work/fromsource.log"
fi

if [ "$failed" -ne 0 ]; then
  echo "pack-install: FAIL"
  exit 1
fi
echo "pack-install: PASS (both cases)"
