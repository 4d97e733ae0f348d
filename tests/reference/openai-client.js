// OpenAI's official client (npm's openai, installed by fetch.sh) against a server:
//
//   node openai-client.js BASE_URL < calls.jsonl > answers.jsonl
//
// Each input line is {"call": "completions" | "models" | "model", "params": {...}} (model:
// {"id": ...}); each output line is what the client returned (the parsed response), or
// {"status": N, "error": {...}} when it threw an APIError (the error object the client
// parsed from the body), or {"thrown": "..."} for anything else. The client makes no
// retries, so an error answer is seen once.
'use strict';
const path = require('path');
const readline = require('readline');
const mod = require(path.join(__dirname, '.cache', 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
	const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	const rl = readline.createInterface({ input: process.stdin });
	for await (const line of rl) {
		if (!line.trim())
			continue;
		const { call, params } = JSON.parse(line);
		let out;
		try {
			if (call === 'completions')
				out = await client.completions.create(params);
			else if (call === 'models')
				out = { data: (await client.models.list()).data };
			else if (call === 'model')
				out = await client.models.retrieve(params.id);
			else
				throw new Error('unknown call ' + call);
		} catch (e) {
			out = e instanceof OpenAI.APIError ? { status: e.status, error: e.error } : { thrown: String(e) };
		}
		process.stdout.write(JSON.stringify(out) + '\n');
	}
}
main().catch((e) => {
	process.stderr.write('openai-client.js: ' + e + '\n');
	process.exit(1);
});
