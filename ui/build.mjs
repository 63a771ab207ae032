// build.mjs - bundle the dashboard into one JS and one CSS file with content hashes in their
// names, and write index.html pointing at them. Usage: node build.mjs <out-dir>
// The kernel embeds the out-dir's files (scripts/embed_ui.py) and serves them at /ui/.
import * as esbuild from "esbuild";
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const out = process.argv[2];
if (!out) {
  console.error("usage: node build.mjs <out-dir>");
  process.exit(2);
}
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const r = await esbuild.build({
  entryPoints: { app: "src/main.js" },
  bundle: true,
  minify: true,
  format: "esm",
  target: ["chrome100", "firefox100", "safari15"],
  entryNames: "[name]-[hash]",
  chunkNames: "chunk-[hash]",
  splitting: true, // xterm.js (most of the bytes) loads only when a terminal opens
  outdir: out,
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
});
const files = readdirSync(out);
const js = files.find((f) => f.startsWith("app-") && f.endsWith(".js"));
const css = files.find((f) => f.startsWith("app-") && f.endsWith(".css"));
writeFileSync(
  join(out, "index.html"),
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rebuno</title>
<link rel="icon" href="data:,">
${css ? `<link rel="stylesheet" href="${css}">` : ""}
<script type="module" src="${js}"></script>
</head>
<body><div id="app"></div><noscript>The rebuno dashboard needs JavaScript.</noscript></body>
</html>
`,
);
for (const [f, m] of Object.entries(r.metafile.outputs)) console.log(`${f} ${m.bytes} bytes`);
