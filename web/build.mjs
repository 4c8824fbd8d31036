// Bundles the dashboard into OUTDIR: index.html, app.js (one IIFE with Chart.js
// inside), app.css and favicon.svg. Run by web/CMakeLists.txt; by hand:
//   node build.mjs --outdir /tmp/dist [--dev]
// --dev skips minification and adds inline source maps (never embedded: the
// served CSP allows no eval, and the maps only help reading stack traces).
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

function die(message) {
  console.error(`web/build.mjs: ${message}`);
  process.exit(1);
}

// node_modules must match package-lock.json, or the bundle would silently use
// other library versions than the ones the repository pins.
function checkNodeModules() {
  const hidden = join(here, 'node_modules', '.package-lock.json');
  if (!existsSync(hidden)) {
    die('web/node_modules is missing: run (cd web && npm ci), as scripts/setup.sh does');
  }
  const want = JSON.parse(readFileSync(join(here, 'package-lock.json'), 'utf8')).packages;
  const have = JSON.parse(readFileSync(hidden, 'utf8')).packages;
  for (const [path, meta] of Object.entries(want)) {
    if (path === '') continue;
    const got = have[path];
    if (!got && meta.optional) continue;  // another platform's binary
    if (!got || got.version !== meta.version) {
      die(`web/node_modules does not match package-lock.json (${path}: ` +
          `have ${got ? got.version : 'none'}, want ${meta.version}): ` +
          'run (cd web && npm ci)');
    }
  }
}

const args = process.argv.slice(2);
const outIndex = args.indexOf('--outdir');
if (outIndex < 0 || !args[outIndex + 1]) die('usage: node build.mjs --outdir DIR [--dev]');
const outdir = resolve(args[outIndex + 1]);
const dev = args.includes('--dev');

checkNodeModules();
const esbuild = await import('esbuild');

rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });
const result = await esbuild.build({
  absWorkingDir: here,
  // main.js imports app.css, so esbuild writes app.js and app.css.
  entryPoints: { app: 'src/main.js' },
  outdir,
  entryNames: '[name]',
  bundle: true,
  format: 'iife',
  target: ['es2020', 'chrome90', 'firefox90', 'safari15'],
  minify: !dev,
  sourcemap: dev ? 'inline' : false,
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': '"production"' },
});
copyFileSync(join(here, 'src', 'index.html'), join(outdir, 'index.html'));
copyFileSync(join(here, 'src', 'favicon.svg'), join(outdir, 'favicon.svg'));

for (const [file, info] of Object.entries(result.metafile.outputs)) {
  console.log(`web: ${file.split('/').pop()} ${(info.bytes / 1024).toFixed(1)} KiB`);
}
