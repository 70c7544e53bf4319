import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const rampart = require('./index.js');
export const { RampartProxy, SymphonyProxy, ConfigError, generateSelfSignedCert, fingerprintClientHello, MAX_CONFIG_DEPTH } = rampart;
export default rampart;
