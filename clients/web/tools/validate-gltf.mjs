// Validates .glb/.gltf files with the Khronos glTF validator (npm gltf-validator, installed into
// clients/web/node_modules by scripts/install-deps.sh). Prints each file's counts and issues;
// exits 1 when any file has an error or a warning, 2 on bad usage.
//   node clients/web/tools/validate-gltf.mjs FILE.glb [...]
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const validator = require('gltf-validator');

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: validate-gltf.mjs FILE.glb [...]');
  process.exit(2);
}
let failed = false;
for (const file of files) {
  const bytes = new Uint8Array(await readFile(file));
  const report = await validator.validateBytes(bytes, { maxIssues: 100, uri: file });
  const i = report.issues;
  console.log(`${file}: glTF validator ${report.validatorVersion}: ${i.numErrors} errors, ${i.numWarnings} warnings, ` +
              `${i.numInfos} infos, ${i.numHints} hints; ${report.info.drawCallCount} draw calls, ` +
              `${report.info.totalVertexCount} vertices, ${report.info.animationCount} animations, ` +
              `morph targets: ${report.info.hasMorphTargets}`);
  for (const m of i.messages) console.log(`  ${['error', 'warning', 'info', 'hint'][m.severity]} ${m.code} at ${m.pointer ?? ''}: ${m.message}`);
  if (i.numErrors > 0 || i.numWarnings > 0) failed = true;
}
process.exit(failed ? 1 : 0);
