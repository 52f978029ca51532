// Bundles the extension into one file (out/extension.js) so that the .vsix
// needs no node_modules: `vscode` is provided by the editor at run time.
import { build } from 'esbuild';

await build({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  outfile: 'out/extension.js',
  external: ['vscode'],
  format: 'cjs',
  platform: 'node',
  target: 'node18',
  sourcemap: true,
  minify: process.argv.includes('--minify'),
  logLevel: 'info',
});
