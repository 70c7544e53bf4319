#!/usr/bin/env node
'use strict';
// The `rampart` command: run the proxy from a config file (docs/operating.md, "Running the
// server"). Exit status: 0 ok, 1 invalid config or a failure to start, 2 bad usage.

// Each RampartProxy.stop() holds a libuv pool thread for its drainMs; a few handovers in a row
// must not starve the pool (4 threads by default). Read by libuv at its first use, so set first.
if (!process.env.UV_THREADPOOL_SIZE) process.env.UV_THREADPOOL_SIZE = '16';

const USAGE = `usage:
  rampart serve --config FILE [--log json|text]   run the proxy of FILE until SIGTERM/SIGINT
                                                  (SIGHUP, a change of FILE or of a file it names,
                                                  or POST /reload reloads it)
  rampart serve --config FILE [--status PATH]     FILE a symphony-server config ({ proxies: [...] }):
                                                  run it as symphony-server does (docs/symphony.md);
                                                  status file default <config dir>/status.json
  rampart check --config FILE                     validate FILE (either kind): prints "ok" (and any
                                                  warning), or every problem (path: message), exit 1
  rampart version                                 print the version
`;

function usage(message) {
  if (message) process.stderr.write(`rampart: ${message}\n`);
  process.stderr.write(USAGE);
  return 2;
}

/** `{ command, config, log }` or `{ error }`. */
function parseArgs(argv) {
  const out = { command: argv[0], config: null, log: 'json', status: null };
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.indexOf('=');
    const [flag, inline] = a.startsWith('--') && eq > 0 ? [a.slice(0, eq), a.slice(eq + 1)] : [a, undefined];
    const value = () => {
      if (inline !== undefined) return inline;
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    if (flag === '--config' || flag === '-c') out.config = value();
    else if (flag === '--log') out.log = value();
    else if (flag === '--status' || flag === '-s') out.status = value();
    else throw new Error(`unknown option ${a}`);
  }
  return out;
}

async function main(argv) {
  if (argv.length === 0 || ['help', '--help', '-h'].includes(argv[0])) {
    if (argv.length === 0) return usage('no command given');
    process.stdout.write(USAGE);
    return 0;
  }
  let args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    return usage(e.message);
  }
  switch (args.command) {
    case 'version':
    case '--version':
    case '-v': {
      const { version } = require('../server/serve');
      process.stdout.write(`rampart ${version}\n`);
      return 0;
    }
    case 'check': {
      if (!args.config) return usage('check needs --config FILE');
      const { loadConfigFile, formatErrors, configWarnings } = require('../server/config-file');
      const symphony = require('../server/symphony-server');
      if (symphony.fileIsSymphonyServerConfig(args.config)) {
        const errors = symphony.checkSymphonyFile(args.config);
        if (errors.length === 0) {
          process.stdout.write('ok\n');
          return 0;
        }
        process.stderr.write(`${args.config}: ${errors.length} problem${errors.length === 1 ? '' : 's'}\n`);
        for (const line of formatErrors(errors)) process.stderr.write(`${line}\n`);
        return 1;
      }
      const loaded = loadConfigFile(args.config);
      if (loaded.errors.length === 0) {
        for (const w of configWarnings(loaded)) process.stderr.write(`warning: ${w.path}: ${w.message}\n`);
        process.stdout.write('ok\n');
        return 0;
      }
      const n = loaded.errors.length;
      process.stderr.write(`${loaded.path}: ${n} problem${n === 1 ? '' : 's'}\n`);
      for (const line of formatErrors(loaded.errors)) process.stderr.write(`${line}\n`);
      return 1;
    }
    case 'serve': {
      if (!args.config) return usage('serve needs --config FILE');
      const symphony = require('../server/symphony-server');
      if (symphony.fileIsSymphonyServerConfig(args.config)) return symphony.serveSymphony({ configPath: args.config, statusPath: args.status });
      if (args.status) return usage('--status is for a symphony-server config file ({ proxies: [...] })');
      if (!['json', 'text'].includes(args.log)) return usage(`--log must be json or text, got ${JSON.stringify(args.log)}`);
      const { serve } = require('../server/serve');
      return serve({ configPath: args.config, logFormat: args.log });
    }
    default:
      return usage(`unknown command ${JSON.stringify(args.command)}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`rampart: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  }
);
