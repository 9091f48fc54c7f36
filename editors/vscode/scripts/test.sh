#!/usr/bin/env bash
# The VS Code extension's test entry (called by the repository's `make test`):
#   npm ci (from package-lock.json; --prefer-offline uses the npm cache when it can), type-check, bundle,
#   unit tests (node --test, stub vscode module), the .vsix, then the real-editor tests:
#   DG_E2E unset: run them when test/e2e/setup.sh has been run and the repository's .venv has dg_lsp;
#   DG_E2E=1: run setup.sh first and fail if they cannot run;  DG_E2E=0: skip them.
set -euo pipefail
EXT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$EXT_DIR/../.." && pwd)"
cd "$EXT_DIR"

step() { printf '\n== vscode: %s\n' "$*"; }

step "npm ci"
npm ci --no-audit --no-fund --prefer-offline --loglevel=error
step "type-check"
npx tsc --noEmit -p .
step "unit tests"
node scripts/build.mjs --unit
node --test test/unit/*.test.mjs
step "package"
npm run --silent package

PY="$REPO_ROOT/.venv/bin/python"
case "${DG_E2E:-auto}" in
  0) step "e2e: skipped (DG_E2E=0)"; exit 0 ;;
  1) step "e2e setup"; bash test/e2e/setup.sh ;;
  *)
    if [ ! -f .e2e/code-server/.done ] || [ ! -f .e2e/tools/node_modules/playwright-core/package.json ]; then
      step "e2e: skipped (run test/e2e/setup.sh once, or DG_E2E=1)"; exit 0
    fi
    if ! "$PY" -c "import dg_lsp.server" >/dev/null 2>&1; then
      step "e2e: skipped ($PY cannot import dg_lsp.server)"; exit 0
    fi ;;
esac
step "e2e (code-server + chromium + dg-lsp)"
node test/e2e/run.mjs
