#!/usr/bin/env node
'use strict';
// `symphony-server --config FILE [--status PATH]`: Symphony's standalone server command on
// Rampart (docs/symphony.md), the same as `rampart serve` with a symphony-server config file.
// Exit status: 0 after SIGTERM/SIGINT, 1 on bad usage or a fatal error.

const USAGE = `symphony-server (rampart) — SNI-routing TLS proxy from a symphony-server config file

Usage: symphony-server --config <path> [--status <path>]

Options:
  -c, --config <path>   Path to the JSON config file (required). Watched for live reload.
  -s, --status <path>   Path to write the status file. Default: <config-dir>/status.json
  -v, --version         Print the version and exit.
  -h, --help            Show this help.

Signals:
  SIGHUP                Reload the config file immediately.
  SIGTERM, SIGINT       Gracefully stop all listeners and exit.`;

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--version' || a === '-v') out.version = true;
    else if (a === '--help' || a === '-h') out.help = true;
    else if (a === '--config' || a === '-c') out.config = argv[++i];
    else if (a === '--status' || a === '-s') out.status = argv[++i];
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { serveSymphony, version } = require('../server/symphony-server');
  if (args.version) {
    process.stdout.write(`${version}\n`);
    return 0;
  }
  if (args.help || !args.config) {
    process.stdout.write(`${USAGE}\n`);
    return args.help ? 0 : 1;
  }
  return serveSymphony({ configPath: args.config, statusPath: args.status });
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`${new Date().toISOString()} [symphony-server] fatal: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  }
);
