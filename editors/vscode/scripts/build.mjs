// Bundles the extension with esbuild: src/extension.ts -> out/extension.js (CommonJS, `vscode` external).
//   --production  minified, no source map (what the .vsix ships)
//   --unit        also compiles each src/*.ts unbundled to out/unit/ for `node --test` (the stub `vscode`
//                 module and the fake language client are injected by test/unit/helpers.cjs)
import { build } from "esbuild";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const production = process.argv.includes("--production");
const unit = process.argv.includes("--unit");

await build({
  entryPoints: [join(root, "src/extension.ts")],
  outfile: join(root, "out/extension.js"),
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["vscode"],
  minify: production,
  sourcemap: !production,
  logLevel: "warning",
});

if (unit) {
  const sources = readdirSync(join(root, "src")).filter((f) => f.endsWith(".ts"));
  await build({
    entryPoints: sources.map((f) => join(root, "src", f)),
    outdir: join(root, "out/unit"),
    bundle: false,
    platform: "node",
    format: "cjs",
    target: "node20",
    sourcemap: "inline",
    logLevel: "warning",
  });
}
