#!/usr/bin/env node
// Reference token ids for the mt-tokenize tests, from tiktoken's own Rust core
// (npm tiktoken, wasm), installed by fetch.sh.
//   node ref-encode.js ENCODING [--key KEY] [--special] [--bos ID] < corpus.jsonl > ids.txt
// ENCODING: gpt2 (= r50k_base), r50k_base, cl100k_base or o200k_base. KEY: default "text".
// One output line per input line (JSON object):
//   - KEY is a string: its ids, separated by single spaces (nothing for "").
//   - KEY is a list of strings (pre-split sentences): each sentence's ids as above,
//     sentences joined by " | " (so ["a", ""] gives "ids | ").
//   - KEY is absent: "!missing".
// Ids come from encode_ordinary: special-token text such as "<|endoftext|>" is
// encoded as plain text. Lone UTF-16 surrogates (from "\ud800"-style escapes)
// reach the core as U+FFFD, as in Python's tiktoken; checked at start-up.
// Any other value, or a line that is not JSON, is an error (exit 1).
// --special: encode(text, "all") instead: special-token text becomes its id, as a
// tokenizer.json's added tokens are matched in the text. --bos ID: ID before every
// string's ids (a post-processor template's [BOS] $A).
"use strict";
const path = require("path");
const readline = require("readline");

const ENCODINGS = ["gpt2", "r50k_base", "cl100k_base", "o200k_base"];
const USAGE = `usage: node ref-encode.js {${ENCODINGS.join("|")}} [--key KEY] [--special] [--bos ID] < JSONL > IDS`;

function die(msg, code = 1) {
	process.stderr.write(`ref-encode.js: error: ${msg}\n`);
	process.exit(code);
}

const args = process.argv.slice(2);
let key = "text";
let special = false, bos = null;
const si = args.indexOf("--special");
if (si >= 0) {
	special = true;
	args.splice(si, 1);
}
const bi = args.indexOf("--bos");
if (bi >= 0) {
	if (bi + 1 >= args.length) die(`--bos needs a value\n${USAGE}`, 2);
	bos = Number(args.splice(bi, 2)[1]);
}
const ki = args.indexOf("--key");
if (ki >= 0) {
	if (ki + 1 >= args.length) die(`--key needs a value\n${USAGE}`, 2);
	key = args.splice(ki, 2)[1];
}
if (args.length !== 1 || !ENCODINGS.includes(args[0])) die(USAGE, 2);

let tiktoken;
try {
	tiktoken = require(path.join(__dirname, ".cache", "node_modules", "tiktoken"));
} catch (e) {
	die(`cannot load tiktoken (run tests/reference/fetch.sh first): ${e.message}`);
}
const enc = tiktoken.get_encoding(args[0]);

// The claim above about lone surrogates, checked against this very build.
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
if (!same(enc.encode_ordinary("a\ud800b"), enc.encode_ordinary("a\ufffdb")) ||
	!same(enc.encode_ordinary("\udc00\ud800"), enc.encode_ordinary("\ufffd\ufffd")))
	process.stderr.write("ref-encode.js: warning: this tiktoken does not turn lone surrogates into U+FFFD\n");

const encode = (s) => {
	const ids = Array.from(special ? enc.encode(s, "all") : enc.encode_ordinary(s));
	if (bos !== null) ids.unshift(bos);
	return ids.join(" ");
};

// Output is gathered and written in large chunks: one write per line is slow.
let out = [];
let outBytes = 0;
function emit(line) {
	out.push(line);
	outBytes += line.length;
	if (outBytes >= 1 << 20) flush();
}
function flush() {
	if (out.length) process.stdout.write(out.join("\n") + "\n");
	out = [];
	outBytes = 0;
}

let lineNo = 0;
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
	lineNo++;
	let doc;
	try {
		doc = JSON.parse(line);
	} catch (e) {
		die(`line ${lineNo}: not JSON: ${e.message}`);
	}
	if (doc === null || typeof doc !== "object" || Array.isArray(doc))
		die(`line ${lineNo}: not a JSON object`);
	const value = doc[key];
	if (value === undefined) emit("!missing");
	else if (typeof value === "string") emit(encode(value));
	else if (Array.isArray(value) && value.every((s) => typeof s === "string"))
		emit(value.map(encode).join(" | "));
	else die(`line ${lineNo}: "${key}" is neither a string nor a list of strings`);
});
rl.on("close", () => {
	flush();
	enc.free();
});
