#!/usr/bin/env node
// Usage: node tiktoken-ranks.js CACHE_DIR
// Writes CACHE_DIR/{r50k,cl100k,o200k}_base.tiktoken, tiktoken's rank-file format
// (one "base64(token bytes) rank" line per token, ascending rank, as OpenAI publishes
// them), from the npm tiktoken package's encoders/*.json, whose bpe_ranks field is
// compact: lines of "! START tok tok ...", each base64 token taking the next rank.
// Then cross-checks, so a test never compares against inconsistent data:
//   - every rank's bytes equal what the wasm encoder itself decodes that rank to;
//   - GPT-2's vocab.json/merges.txt (copied there by fetch.sh) equal r50k_base.
"use strict";
const fs = require("fs");
const path = require("path");

const cache = process.argv[2];
if (!cache || process.argv.length !== 3) {
	console.error("usage: node tiktoken-ranks.js CACHE_DIR");
	process.exit(2);
}
const modules = path.join(cache, "node_modules");
const { get_encoding } = require(path.join(modules, "tiktoken"));

function fail(msg) {
	console.error(`tiktoken-ranks.js: error: ${msg}`);
	process.exit(1);
}

// bpe_ranks string -> array of Buffers indexed by rank (contiguous from 0).
function parseCompact(name, bpeRanks) {
	const tokens = [];
	for (const line of bpeRanks.split("\n")) {
		if (line === "") continue;
		const fields = line.split(" ");
		if (fields[0] !== "!") fail(`${name}: bpe_ranks line does not start with "!"`);
		let rank = Number(fields[1]);
		if (!Number.isInteger(rank)) fail(`${name}: bad start rank "${fields[1]}"`);
		for (const b64 of fields.slice(2)) tokens[rank++] = Buffer.from(b64, "base64");
	}
	for (let r = 0; r < tokens.length; r++)
		if (!tokens[r]) fail(`${name}: rank ${r} is missing`);
	return tokens;
}

function convert(name) {
	const json = require(path.join(modules, "tiktoken", "encoders", `${name}.json`));
	const tokens = parseCompact(name, json.bpe_ranks);
	const enc = get_encoding(name);
	const seen = new Set();
	const lines = tokens.map((bytes, rank) => {
		const b64 = bytes.toString("base64");
		if (seen.has(b64)) fail(`${name}: two ranks have the bytes ${b64}`);
		seen.add(b64);
		if (!bytes.equals(Buffer.from(enc.decode_single_token_bytes(rank))))
			fail(`${name}: rank ${rank} differs from the wasm encoder's`);
		return `${b64} ${rank}\n`;
	});
	enc.free();
	const out = path.join(cache, `${name}.tiktoken`);
	fs.writeFileSync(out + ".tmp", lines.join(""));
	fs.renameSync(out + ".tmp", out);
	return tokens;
}

// GPT-2's reversible byte <-> printable-character map (bytes_to_unicode in
// openai/gpt-2 encoder.py), inverted: character -> byte.
function unicodeToByte() {
	const map = new Map();
	let extra = 0;
	for (let b = 0; b < 256; b++) {
		const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
		map.set(String.fromCodePoint(printable ? b : 256 + extra++), b);
	}
	return map;
}

function checkGpt2(r50k) {
	const u2b = unicodeToByte();
	const toBytes = (s) => Buffer.from([...s].map((c) => {
		if (!u2b.has(c)) fail(`gpt2 vocab/merges: unexpected character U+${c.codePointAt(0).toString(16)}`);
		return u2b.get(c);
	}));
	const vocab = JSON.parse(fs.readFileSync(path.join(cache, "gpt2-vocab.json"), "utf8"));
	const entries = Object.entries(vocab).filter(([tok]) => tok !== "<|endoftext|>");
	if (vocab["<|endoftext|>"] !== 50256 || entries.length !== r50k.length)
		fail(`gpt2-vocab.json: ${entries.length} tokens and <|endoftext|>=${vocab["<|endoftext|>"]}`);
	for (const [tok, id] of entries)
		if (!r50k[id] || !toBytes(tok).equals(r50k[id])) fail(`gpt2-vocab.json: id ${id} differs from r50k_base`);
	// merges.txt: a "#version" line, then merge i ("A B") creates token 256 + i.
	const merges = fs.readFileSync(path.join(cache, "gpt2-merges.txt"), "utf8").split("\n").slice(1).filter((l) => l);
	if (merges.length !== r50k.length - 256) fail(`gpt2-merges.txt: ${merges.length} merges`);
	merges.forEach((line, i) => {
		const parts = line.split(" ");
		if (parts.length !== 2 || !Buffer.concat(parts.map(toBytes)).equals(r50k[256 + i]))
			fail(`gpt2-merges.txt: merge ${i + 1} "${line}" does not make r50k_base rank ${256 + i}`);
	});
}

const r50k = convert("r50k_base");
convert("cl100k_base");
convert("o200k_base");
checkGpt2(r50k);
