#!/usr/bin/env bash
# The system packages the real-editor tiers need, installed by `make test` (its test-deps step) where it can:
#   tmux           the Neovim screenshot tests (tests/editors/test_neovim*.py)
#   inotify-tools  Neovim's file watcher on Linux (files written outside the editor reach the index; :checkhealth dg
#                  warns without it)
#   emacs-nox, elpa-eglot  the Emacs tier (tests/editors/test_emacs.py)
# As root with apt-get: installs what is missing (one `apt-get update` first when a package is not found).
# Otherwise: lists what is missing and how to get it; the tiers that need it then fail naming the package
# (tests/editors/tiers.py). Exits 0 either way: the tests say which tier could not run.
set -uo pipefail

missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v inotifywait >/dev/null 2>&1 || missing+=(inotify-tools)
if ! emacs --batch -q --eval "(require 'eglot)" >/dev/null 2>&1; then
  command -v emacs >/dev/null 2>&1 || missing+=(emacs-nox)
  missing+=(elpa-eglot)
fi
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: missing ${missing[*]} (not root with apt-get: install them, e.g." \
       "sudo apt-get install -y ${missing[*]}); the tests that need them will fail" >&2
  exit 0
fi
echo "test-deps: apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  apt-get update -qq >/dev/null 2>&1
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "test-deps: apt-get could not install ${missing[*]}; the tests that need them will fail" >&2
fi
exit 0
