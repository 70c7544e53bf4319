import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const rampart = require('./index.js');
export const { RampartProxy, ConfigError, generateSelfSignedCert } = rampart;
export default rampart;
