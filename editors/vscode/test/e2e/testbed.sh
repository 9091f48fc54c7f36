# Sourced by scripts/test.sh and test/e2e/setup.sh (needs EXT_DIR): the real-editor test bed (code-server with its
# native builds: about 2.5 minutes cold on 2 cores, Node 24, playwright-core) lives outside the checkout, as the
# vLLM venv does, so fresh clones reuse it: editors/vscode/.e2e links to a cache folder named by the hash of
# setup.sh, which pins its versions (a version change gets a new folder). An existing .e2e (a folder or a link) is
# kept as it is.
if [ ! -e "$EXT_DIR/.e2e" ] && [ ! -L "$EXT_DIR/.e2e" ]; then
  E2E_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/dg-lsp/vscode-e2e-$(sha256sum "$EXT_DIR/test/e2e/setup.sh" | cut -c1-16)"
  mkdir -p "$E2E_CACHE" && ln -s "$E2E_CACHE" "$EXT_DIR/.e2e"
fi
