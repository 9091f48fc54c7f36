// Loads the unbundled build in out/unit/ with `vscode` and `vscode-languageclient/node` replaced by the
// stubs in ./stubs, so extension logic runs under plain `node --test`.
const Module = require("node:module");
const path = require("node:path");

const STUBS = {
  vscode: path.join(__dirname, "stubs", "vscode.cjs"),
  "vscode-languageclient/node": path.join(__dirname, "stubs", "languageclient.cjs"),
};
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  return STUBS[request] ?? resolve.call(this, request, ...rest);
};

const OUT = path.join(__dirname, "..", "..", "out", "unit");

/** require() of a compiled module, e.g. load("settings"). */
function load(name) {
  return require(path.join(OUT, `${name}.js`));
}

module.exports = { load, vscode: require(STUBS.vscode), lc: require(STUBS["vscode-languageclient/node"]) };
