#!/usr/bin/env bash
# Runs Symphony's own test suite (HarperFast/symphony, __test__/*.spec.ts) against this checkout's
# SymphonyProxy, with only an import alias: the spec files are copied unchanged into a temporary
# directory, and the modules they import from Symphony's ts/ (index, proxy, admin, server) are
# replaced there by one-line shims that re-export this checkout's SymphonyProxy, the admin
# endpoint's renderPrometheus and the symphony-server command. Nothing of Symphony is copied into
# this project; nothing of this project is changed.
#
# Usage: scripts/symphony-crosscheck.sh [SYMPHONY]
#   SYMPHONY: a Symphony checkout (a directory holding __test__/) or a bare git directory of one
#   (its HEAD is used). Default: $SYMPHONY_SRC, else the first HarperFast+symphony* git directory
#   under $MIRROR_DIR (default /work/.mirror), else a fresh clone of $SYMPHONY_REPO (default
#   https://github.com/HarperFast/symphony) into the temporary directory: `git clone --depth 1`,
#   or, with SYMPHONY_REF (a commit, tag or branch), that ref fetched at depth 1.
# Env: SPECS="metrics proxy ..." runs only those spec files; KEEP=1 keeps the temp directory;
#   SYMPHONY_REF pins the commit of a clone (or, for a given git directory, the commit read).
# The temporary directory's package.json carries this checkout's version: the specs compare
# status.json's version with the package.json of the package under test, which is this one.
# Needs: node (>= 20), npm (installs typescript and @types/node into the temp directory),
# openssl (Symphony's util.ts makes its certificates with it), curl and nghttp for some specs.
# Prints one line per test (PASS / FAIL / SKIP, file, suite > test), then the totals; a spec file
# that cannot load counts its tests as not run. Exit status 0 when the run completed (whatever
# failed), 1 when it could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${1:-${SYMPHONY_SRC:-}}
if [[ -z "$SRC" ]]; then
  for d in "${MIRROR_DIR:-/work/.mirror}"/HarperFast+symphony*; do
    [[ -e "$d" ]] && SRC=$d && break
  done
fi
if [[ -n "$SRC" && ! -e "$SRC" ]]; then
  echo "symphony-crosscheck: $SRC does not exist: pass a checkout of HarperFast/symphony (or its git directory), or nothing to clone it" >&2
  exit 1
fi
[[ -f "$ROOT/rampart.linux-x64-gnu.node" || -n "$(ls "$ROOT"/rampart.*.node 2>/dev/null)" ]] || {
  echo "symphony-crosscheck: build the addon first (npm run build)" >&2
  exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/symphony-crosscheck.XXXXXX")
if [[ "${KEEP:-}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; fi

# No source given or found: clone Symphony (its HEAD, or SYMPHONY_REF) into the temp directory.
if [[ -z "$SRC" ]]; then
  REPO=${SYMPHONY_REPO:-https://github.com/HarperFast/symphony}
  SRC=$WORK/symphony
  if [[ -n "${SYMPHONY_REF:-}" ]]; then
    echo "symphony-crosscheck: fetching $REPO at $SYMPHONY_REF" >&2
    git init -q "$SRC"
    git -C "$SRC" fetch -q --depth 1 "$REPO" "$SYMPHONY_REF" || {
      echo "symphony-crosscheck: could not fetch $SYMPHONY_REF from $REPO" >&2
      exit 1
    }
    git -C "$SRC" checkout -q FETCH_HEAD
  else
    echo "symphony-crosscheck: cloning $REPO" >&2
    git clone -q --depth 1 "$REPO" "$SRC" || {
      echo "symphony-crosscheck: could not clone $REPO: pass a checkout as the argument or in SYMPHONY_SRC" >&2
      exit 1
    }
  fi
fi

# The suite at the source's commit.
if [[ -d "$SRC/__test__" ]]; then
  cp -r "$SRC/__test__" "$WORK/__test__"
  COMMIT=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
else
  GIT_DIR=$SRC
  [[ -d "$SRC/.git" ]] && GIT_DIR=$SRC/.git
  # A snapshot directory may hold the bare git directory one or two levels down.
  if [[ ! -f "$GIT_DIR/HEAD" ]]; then
    head=$(find "$SRC" -maxdepth 3 -name HEAD -type f | head -n 1)
    [[ -n "$head" ]] || { echo "symphony-crosscheck: $SRC holds neither __test__/ nor a git directory" >&2; exit 1; }
    GIT_DIR=$(dirname "$head")
  fi
  REV=${SYMPHONY_REF:-HEAD}
  COMMIT=$(git --git-dir="$GIT_DIR" rev-parse "$REV^{commit}")
  git --git-dir="$GIT_DIR" archive "$COMMIT" __test__ | tar -x -C "$WORK"
fi
echo "symphony-crosscheck: Symphony __test__ at commit $COMMIT; rampart at $(git -C "$ROOT" rev-parse --short HEAD)"

# The import alias: Symphony's ts/ modules as shims onto this checkout.
mkdir -p "$WORK/ts"
cat >"$WORK/ts/index.ts" <<EOF
export { SymphonyProxy } from '$ROOT';
EOF
cp "$WORK/ts/index.ts" "$WORK/ts/proxy.ts"
cat >"$WORK/ts/admin.ts" <<EOF
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const { renderPrometheus } = require('$ROOT/server/symphony-admin.js');
export type MetricsSnapshot = any;
EOF
cat >"$WORK/ts/server.ts" <<EOF
require('$ROOT/bin/symphony-server.js');
EOF
cat >"$WORK/tsconfig.json" <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022", "module": "commonjs", "moduleResolution": "node", "outDir": "dist-test",
    "rootDir": ".", "esModuleInterop": true, "skipLibCheck": true, "strict": false, "noEmitOnError": false,
    "types": ["node"]
  },
  "include": ["__test__/**/*.ts", "ts/**/*.ts"]
}
EOF
# The test runner: node's own (node --test); TypeScript compiles the specs as Symphony's does.
VERSION=$(node -p "require('$ROOT/package.json').version")
(cd "$WORK" && npm init -y >/dev/null && npm pkg set version="$VERSION" && npm install --no-save --no-audit --no-fund --loglevel=error typescript@5 @types/node@20 >/dev/null)
# Type errors (the shims carry this project's types, not Symphony's) do not stop the emit.
(cd "$WORK" && npx tsc -p tsconfig.json >"$WORK/tsc.log" 2>&1) || true
[[ -d "$WORK/dist-test/__test__" ]] || { cat "$WORK/tsc.log" >&2; echo "symphony-crosscheck: compile failed" >&2; exit 1; }
cp -r "$WORK/__test__/fixtures" "$WORK/dist-test/__test__/" 2>/dev/null || true

# One line per test, from node's test events.
cat >"$WORK/reporter.mjs" <<'EOF'
export default async function* reporter(source) {
  for await (const ev of source) {
    if (ev.type !== 'test:pass' && ev.type !== 'test:fail') continue;
    const d = ev.data;
    if (d.details && d.details.type === 'suite') continue;
    const status = d.skip !== undefined || d.todo !== undefined ? 'SKIP' : ev.type === 'test:pass' ? 'PASS' : 'FAIL';
    const why = status === 'FAIL' && d.details && d.details.error ? ` :: ${String(d.details.error.cause ?? d.details.error.message ?? d.details.error).split('\n')[0].slice(0, 200)}` : '';
    yield `${status}\t${d.nesting}\t${d.name}${why}\n`;
  }
}
EOF

SPECS=${SPECS:-$(cd "$WORK/dist-test/__test__" && ls -- *.spec.js | sed 's/\.spec\.js$//')}
pass=0 fail=0 skip=0 notrun=0
for spec in $SPECS; do
  file="$WORK/dist-test/__test__/$spec.spec.js"
  if [[ "$spec" == harper-integration ]]; then
    echo "NOT RUN	$spec	(needs a Harper installation: @harperfast/integration-testing)"
    notrun=$((notrun + 1))
    continue
  fi
  out=$(cd "$WORK" && timeout 600 node --test --test-force-exit --test-concurrency=1 --test-timeout=60000 --test-reporter="$WORK/reporter.mjs" "$file" 2>"$WORK/$spec.stderr") || true
  if [[ -z "$out" ]]; then
    echo "NOT RUN	$spec	(no test ran; stderr: $(head -c 300 "$WORK/$spec.stderr" | tr '\n' ' '))"
    notrun=$((notrun + 1))
    continue
  fi
  # Suite names: the nearest enclosing entries are reported after their tests; keep names flat.
  while IFS=$'\t' read -r status _nesting name; do
    echo "$status	$spec	$name"
    case $status in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; SKIP) skip=$((skip + 1)) ;; esac
  done <<<"$out"
done
echo "symphony-crosscheck: $pass passed, $fail failed, $skip skipped, $notrun spec files not run"
