// Reference tokenizer throughput for bench/tokenize.sh on a machine without Python's
// tiktoken: npm's tiktoken (tiktoken's Rust core built to WebAssembly), one thread.
// usage: node tokenize_ref.mjs CORPUS.jsonl NODE_MODULES_DIR
// Prints "name 1 MB/s tokens", timing the encode calls only.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [corpus, modules] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(modules), "x.js"));
const { get_encoding } = require("tiktoken");
const docs = [];
for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const v = JSON.parse(line).text;
  if (typeof v === "string") docs.push(v);
  else if (Array.isArray(v)) for (const s of v) if (typeof s === "string") docs.push(s);
}
const enc8 = new TextEncoder();
const bytes = docs.reduce((n, d) => n + enc8.encode(d).length, 0);
for (const [name, label] of [["gpt2", "tiktoken-wasm-gpt2"], ["cl100k_base", "tiktoken-wasm-cl100k"]]) {
  const enc = get_encoding(name);
  const t = process.hrtime.bigint();
  let n = 0;
  for (const d of docs) n += enc.encode_ordinary(d).length;
  const s = Number(process.hrtime.bigint() - t) / 1e9;
  console.log(`${label} 1 ${(bytes / s / 1e6).toFixed(2)} ${n}`);
  enc.free();
}
