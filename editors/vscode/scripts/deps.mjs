// `npm run package` runs this first (prepackage): in a fresh clone node_modules is missing, and the package step
// needs esbuild and vsce from it, so install the locked versions (npm ci, package-lock.json) once.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const needed = ["esbuild", "@vscode/vsce", "vscode-languageclient"];
const missing = needed.filter((name) => !existsSync(join(root, "node_modules", name, "package.json")));
if (missing.length > 0) {
  console.log(`installing the extension's build dependencies (missing: ${missing.join(", ")}): npm ci`);
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const run = spawnSync(npm, ["ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], {
    cwd: root,
    stdio: "inherit",
    shell: process.platform === "win32",
  });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
