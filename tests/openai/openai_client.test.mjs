// `flashroll serve` driven by the official openai npm client (4.x), over
// the shipped default model: completions (text, token ids,
// return_token_ids), chat, streaming, n, logprobs, tools, seeds, errors, and
// the extensions seen through fetch (sequence_id, /v1/sequences, /v1/score).
//
// Run by ctest from the repository root with FLASHROLL_BIN set to the
// built binary; `npm ci` in tests/openai installs the client
// (scripts/install-deps.sh does it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch (err) {
  throw new Error(`the openai package is missing: run "npm ci" in tests/openai (scripts/install-deps.sh does): ${err.message}`);
}

const BIN = process.env.FLASHROLL_BIN;
const MODEL = process.env.FLASHROLL_MODEL ?? 'models/default';
const MODEL_NAME = 'default';
const API_KEY = 'test-key-0123';
const CHAT_PROMPT = '<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n';
// The json_tools scaffold's system prompt (rollout/scaffold.cc), which the
// default model was trained on.
const AGENT_SYSTEM =
  'You are an agent that solves tasks by running shell commands in a working directory.\n' +
  'To run a command, call the bash tool with a JSON object:\n' +
  '<tool_call>\n{"name": "bash", "arguments": {"command": "COMMAND"}}\n</tool_call>' +
  '\nRun one command per message and wait for its output. Think inside <think>...</think> ' +
  'before each message. When you know the result, reply with <answer>RESULT</answer>.\n' +
  'Reasoning Effort: 50';
const BASH_TOOL = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

let server;
let client;
let baseURL;
let keyDir;

// Starts `flashroll serve` on a free port and waits for its "serving ... on URL" line.
function startServer() {
  assert.ok(BIN, 'FLASHROLL_BIN must name the flashroll binary');
  keyDir = mkdtempSync(join(tmpdir(), 'flashroll-openai-'));
  const keyFile = join(keyDir, 'key');
  writeFileSync(keyFile, API_KEY + '\n', { mode: 0o600 });
  const child = spawn(BIN, ['serve', '--model', MODEL, '--port', '0', '--threads', '2', '--kv-memory', '256M',
                            '--api-key-file', keyFile], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`serve did not start in 120 s:\n${stderr}`)), 120000);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/serving (\S+) on (\S+)\n/);
      if (m) {
        clearTimeout(timer);
        assert.equal(m[1], MODEL_NAME);
        resolve({ child, url: m[2] });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code} before listening:\n${stderr}`));
    });
  });
}

before(async () => {
  const started = await startServer();
  server = started.child;
  baseURL = started.url;
  client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }
  if (keyDir) rmSync(keyDir, { recursive: true, force: true });
});

test('models.list names the served model', async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [MODEL_NAME]);
});

test('completions from text', async () => {
  const r = await client.completions.create({ model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('completions from token ids with return_token_ids', async () => {
  const text = await client.completions.create({
    model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 10, temperature: 0, return_token_ids: true,
  });
  const promptIds = text.prompt_token_ids;
  assert.ok(Array.isArray(promptIds) && promptIds.length === text.usage.prompt_tokens);
  const ids = text.choices[0].token_ids;
  assert.equal(ids.length, text.usage.completion_tokens);
  // The same prompt as ids gives the same greedy tokens and text: no re-tokenising.
  const fromIds = await client.completions.create({
    model: MODEL_NAME, prompt: promptIds, max_tokens: 10, temperature: 0, return_token_ids: true,
  });
  assert.deepEqual(fromIds.prompt_token_ids, promptIds);
  assert.deepEqual(fromIds.choices[0].token_ids, ids);
  assert.equal(fromIds.choices[0].text, text.choices[0].text);
});

test('chat completions', async () => {
  const r = await client.chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content: 'What is 2 + 3?' }], max_tokens: 24, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
});

test('streaming chat gives the same text as one reply, then usage', async () => {
  const request = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 30, seed: 7 };
  const whole = await client.chat.completions.create(request);
  const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);
});

test('streaming completions', async () => {
  const stream = await client.completions.create({
    model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const whole = await client.completions.create({ model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 12, temperature: 0 });
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
});

test('n = 2 gives two distinct choices', async () => {
  const r = await client.completions.create({
    model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 20, temperature: 1.5, n: 2, seed: 11,
    ignore_eos: true, return_token_ids: true,
  });
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
  assert.notDeepEqual(r.choices[0].token_ids, r.choices[1].token_ids);
  assert.equal(r.usage.completion_tokens, 40);
});

test('a seed reproduces tokens and logprobs exactly', async () => {
  const request = {
    model: MODEL_NAME, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 20, temperature: 1.0,
    seed: 42, logprobs: true,
  };
  const a = await client.chat.completions.create(request);
  const b = await client.chat.completions.create(request);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.deepEqual(a.choices[0].logprobs, b.choices[0].logprobs);
});

test('chat logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, logprobs: true, top_logprobs: 3,
    seed: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const entry of content) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes));
    assert.equal(entry.top_logprobs.length, 3);
    assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[2].logprob);
  }
});

test('completions logprobs', async () => {
  const r = await client.completions.create({
    model: MODEL_NAME, prompt: CHAT_PROMPT, max_tokens: 6, temperature: 0, logprobs: 2, ignore_eos: true,
  });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.token_logprobs.length, 6);
  assert.equal(lp.text_offset.length, 6);
  assert.equal(lp.top_logprobs.length, 6);
  for (let i = 0; i < 6; i++) {
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 2);
    assert.ok(lp.token_logprobs[i] <= 0);
  }
});

test('tools: the model writes a tool call that comes back as tool_calls', async () => {
  const messages = [
    { role: 'system', content: AGENT_SYSTEM },
    { role: 'user', content: 'The file data.txt has one integer per line. Add them up and write the total to answer.txt.' },
  ];
  const r = await client.chat.completions.create({
    model: MODEL_NAME, messages, tools: [BASH_TOOL], max_tokens: 300, temperature: 0,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
  const calls = choice.message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].type, 'function');
  assert.match(calls[0].id, /^call_/);
  assert.equal(calls[0].function.name, 'bash');
  const args = JSON.parse(calls[0].function.arguments);
  assert.equal(typeof args.command, 'string');
  assert.ok(args.command.includes('data.txt'), args.command);

  // Streamed: the same call arrives as a tool_calls delta.
  const stream = await client.chat.completions.create({
    model: MODEL_NAME, messages, tools: [BASH_TOOL], max_tokens: 300, temperature: 0, stream: true,
  });
  const streamed = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.tool_calls) streamed.push(...c.delta.tool_calls);
      content += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(streamed.length, 1);
  assert.equal(streamed[0].function.name, 'bash');
  assert.equal(streamed[0].function.arguments, calls[0].function.arguments);
  assert.ok(!content.includes('<tool_call>'), content);

  // The call and its result go back in the history, and the model goes on.
  const next = await client.chat.completions.create({
    model: MODEL_NAME, tools: [BASH_TOOL], max_tokens: 40, temperature: 0,
    messages: [...messages, choice.message, { role: 'tool', tool_call_id: calls[0].id, content: '3\n4\n5\n' }],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(next.choices[0].finish_reason));
});

// reasoning_effort (issue 22, item 3) puts the scaffolds' own effort line
// last in the first system message, so a served model sees what it was
// trained on; absent, nothing is added.
test('reasoning_effort: presets and integers become the effort line of the system prompt', async () => {
  const user = { role: 'user', content: 'What is 2 + 3?' };
  const promptIds = async (body) => (await client.chat.completions.create({
    model: MODEL_NAME, max_tokens: 1, temperature: 0, return_token_ids: true, ...body,
  })).prompt_token_ids;
  const textIds = async (prompt) => (await client.completions.create({
    model: MODEL_NAME, prompt, max_tokens: 1, temperature: 0, return_token_ids: true,
  })).prompt_token_ids;

  assert.deepEqual(await promptIds({ messages: [user] }), await textIds(CHAT_PROMPT), 'absent: no effort line');
  const created = `<|im_start|>system\nReasoning Effort: 100<|im_end|>\n${CHAT_PROMPT}`;
  assert.deepEqual(await promptIds({ messages: [user], reasoning_effort: 'max' }), await textIds(created),
                   'no system message: one is created holding the line');
  const withoutLine = AGENT_SYSTEM.slice(0, AGENT_SYSTEM.lastIndexOf('\n'));
  const trained = await promptIds({ messages: [{ role: 'system', content: AGENT_SYSTEM }, user] });
  for (const effort of ['low', 50, '50']) {
    assert.deepEqual(await promptIds({ messages: [{ role: 'system', content: withoutLine }, user], reasoning_effort: effort }),
                     trained, `reasoning_effort ${JSON.stringify(effort)} is the scaffold's "Reasoning Effort: 50"`);
  }
  const high = AGENT_SYSTEM.replace(/50$/, '75');
  assert.deepEqual(await promptIds({ messages: [{ role: 'system', content: withoutLine }, user], reasoning_effort: 'high' }),
                   await promptIds({ messages: [{ role: 'system', content: high }, user] }));
  for (const bad of ['medium', 'minimal', 0, 101, 50.5, true, '', ' 50']) {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL_NAME, messages: [user], max_tokens: 1, reasoning_effort: bad }),
      (err) => err instanceof OpenAI.BadRequestError && err.param === 'reasoning_effort' &&
               /"low" \(50\), "high" \(75\), "max" \(100\) or an integer 1-100/.test(err.message),
      `reasoning_effort ${JSON.stringify(bad)} is a 400 listing the accepted values`,
    );
  }
});

test('errors are APIErrors with OpenAI status, param and code', async () => {
  await assert.rejects(
    client.completions.create({ model: MODEL_NAME, prompt: 'hi', max_tokens: -1 }),
    (err) => err instanceof OpenAI.APIError && err.status === 400 && err.param === 'max_tokens',
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }], temperature: 9 }),
    (err) => err instanceof OpenAI.BadRequestError && err.param === 'temperature',
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }),
    (err) => err instanceof OpenAI.NotFoundError && err.status === 404 && err.code === 'model_not_found',
  );
  await assert.rejects(
    client.completions.create({ model: MODEL_NAME, prompt: Array(5000).fill(5), max_tokens: 1 }),
    (err) => err.status === 400 && err.code === 'context_length_exceeded' && /4096/.test(err.message),
  );
  const stranger = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(stranger.models.list(), (err) => err instanceof OpenAI.AuthenticationError && err.status === 401);
});

test('choices carry sequence_id; /v1/score gives back the logprobs generation recorded', async () => {
  const promptIds = [1, 2, 3, 4, 5];
  const r = await client.completions.create({
    model: MODEL_NAME, prompt: promptIds, max_tokens: 8, temperature: 0.8, seed: 7, ignore_eos: true, logprobs: 0,
    return_token_ids: true,
  });
  const choice = r.choices[0];
  assert.match(choice.sequence_id, /^[0-9]+$/, JSON.stringify(choice));
  const headers = { Authorization: `Bearer ${API_KEY}`, 'Content-Type': 'application/json' };
  // The choice has finished, so its sequence is gone.
  const gone = await fetch(`${baseURL}/v1/sequences/${choice.sequence_id}`, { headers });
  assert.equal(gone.status, 404);
  const scored = await fetch(`${baseURL}/v1/score`, {
    method: 'POST', headers,
    body: JSON.stringify({ model: MODEL_NAME, prompt_token_ids: promptIds, token_ids: choice.token_ids, temperature: 0.8 }),
  });
  assert.equal(scored.status, 200);
  const { logprobs } = await scored.json();
  // float32 bits: the same after rounding each double to float32.
  assert.deepEqual(logprobs.map(Math.fround), choice.logprobs.token_logprobs.map(Math.fround));
});

test('health and metrics need no key', async () => {
  const health = await fetch(`${baseURL}/health`);
  assert.equal(health.status, 200);
  const metrics = await (await fetch(`${baseURL}/metrics`)).text();
  assert.match(metrics, /^flashroll_generation_tokens_total \d+/m);
  assert.match(metrics, /^flashroll_time_to_first_token_seconds_count [1-9]/m);
});
