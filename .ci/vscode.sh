#!/usr/bin/env bash
# CI for the VS Code client (called by .ci/run from the repository root):
#   1. npm dependencies from the lock file, build, unit tests, .vsix package;
#   2. what the end-to-end test needs: Debian chromium, code-server 4.100.3
#      (installed offline-safe, see below), structspec-lsp on PATH;
#   3. the end-to-end test in code-server + headless Chromium on the default model.
#
# Environment: STRUCTSPEC_VSCODE_CACHE (default ~/.cache/structspec-vscode-e2e)
# holds code-server between runs; STRUCTSPEC_E2E_* are passed to the test
# (see vscode-client/test/e2e/e2e.mjs); SKIP_VSCODE_E2E=1 stops after step 1.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
step() { printf '\n==> %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root for: $*" >&2; return 1; fi
}

step "npm ci"
# npm 11 skips dependency install scripts it has not been told to allow
# (esbuild's postinstall is an optimisation; its binary comes as an optional
# dependency), so nothing here downloads anything but npm packages.
npm ci --no-audit --no-fund

step "build"
npm run build

step "unit tests"
npm test

step "package the .vsix"
npm run package
ls -l vscode-client/structspec.vsix

if [ "${SKIP_VSCODE_E2E:-0}" = 1 ]; then
  echo "SKIP_VSCODE_E2E=1: not running the end-to-end test"
  exit 0
fi

# -- what the end-to-end test needs -------------------------------------------
# Debian packages: chromium for the browser; a C/C++ toolchain and these -dev
# packages to build code-server's native modules; ripgrep replaces the rg
# binary that @vscode/ripgrep would download from GitHub.
apt_packages=(chromium ripgrep libkrb5-dev libxkbfile-dev libsecret-1-dev libx11-dev build-essential python3)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

cache=${STRUCTSPEC_VSCODE_CACHE:-$HOME/.cache/structspec-vscode-e2e}
cs_dir=$cache/code-server
cs_version=4.100.3
code_server=$cs_dir/node_modules/.bin/code-server
if [ "$(cat "$cs_dir/.ready" 2>/dev/null || true)" != "$cs_version" ]; then
  step "install code-server $cs_version into $cs_dir"
  # code-server's own postinstall refuses to run as root without unsafe-perm
  # and lets @vscode/ripgrep download rg from GitHub, so its steps are done
  # here by hand: install without scripts, then build each native module.
  rm -rf "$cs_dir"
  mkdir -p "$cs_dir"
  (
    cd "$cs_dir"
    echo '{"name":"structspec-code-server","private":true}' >package.json
    npm install --no-audit --no-fund --ignore-scripts "code-server@$cs_version"
    npm rebuild argon2
    cd node_modules/code-server/lib/vscode
    npm install --no-audit --no-fund --omit=dev --ignore-scripts
    # node-pty's postinstall wants npx to fetch node-gyp; build it with npm's own.
    node_gyp="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
    npm rebuild kerberos @parcel/watcher @vscode/spdlog native-watchdog @vscode/deviceid
    nodedir=$(npm config get nodedir)  # Debian: /usr (local headers, no download)
    (cd node_modules/node-pty && node "$node_gyp" rebuild ${nodedir:+--nodedir="$nodedir"} >/dev/null)
    mkdir -p node_modules/@vscode/ripgrep/bin
    ln -sf "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
    ln -sfn node_modules node_modules.asar
    (cd bin/remote-cli && ln -sf code-linux.sh code-server)
    (cd bin/helpers && ln -sf browser-linux.sh browser.sh)
    (cd extensions && npm install --no-audit --no-fund --omit=dev --ignore-scripts)
  )
  "$code_server" --version >/dev/null
  echo "$cs_version" >"$cs_dir/.ready"
fi
"$code_server" --version | head -1

if ! command -v structspec-lsp >/dev/null; then
  step "pip install -e . --no-deps (structspec-lsp is not on PATH)"
  python3 -m pip install -q -e "$root" --no-deps
fi

# -- the end-to-end test --------------------------------------------------------
step "end-to-end: code-server + headless Chromium + structspec-lsp (default model)"
mkdir -p test-artifacts
rm -f test-artifacts/vscode-*  # no stale screenshots from an earlier run
CODE_SERVER=$code_server CHROMIUM=${CHROMIUM:-/usr/bin/chromium} npm run e2e
echo "artifacts: $(ls test-artifacts/vscode-* | tr '\n' ' ')"
