// Drives hearth's Responses and Messages routes with the official clients, unchanged: the
// OpenAI Node SDK's responses.create / stream / parse and a function-call round trip, the
// Anthropic SDK's messages.create / stream / countTokens with tool use and a tool_result
// round trip, and the Vercel AI SDK's generateText / streamText through its Anthropic and
// OpenAI Responses providers; embeddings through the OpenAI SDK's embeddings.create (which
// asks for base64 and decodes it) and the Vercel AI SDK's embedMany. Each check prints one
// JSON line; the exit status is 0 only when all pass.
//   HEARTH_URL=http://127.0.0.1:PORT/v1 HEARTH_KEY=KEY node dialects_check.mjs
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { embedMany, generateText, streamText, tool } from 'ai';
import { z } from 'zod';
import { check, expect, exitStatus } from './checks.mjs';

const baseURL = process.env.HEARTH_URL;           // .../v1
const apiKey = process.env.HEARTH_KEY;
const root = baseURL.replace(/\/v1$/, '');
const openai = new OpenAI({ baseURL, apiKey });
const anthropic = new Anthropic({ baseURL: root, apiKey, maxRetries: 0 });

const Pet = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(30),
  kind: z.enum(['cat', 'dog']),
});
const weather = {
  type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
};


// ---- OpenAI Responses ------------------------------------------------------------------

await check('openai.responses.create', async () => {
  const r = await openai.responses.create({
    model: 'llama', instructions: 'Tell a story.', input: 'Once upon a time', max_output_tokens: 12,
    temperature: 0,
  });
  expect(r.object === 'response' && r.status === 'incomplete', 'status ' + r.status);
  expect(r.incomplete_details.reason === 'max_output_tokens', 'incomplete_details');
  expect(typeof r.output_text === 'string' && r.output_text.length > 0, 'output_text ' + r.output_text);
  expect(r.usage.output_tokens === 12 && r.usage.input_tokens > 0, 'usage ' + JSON.stringify(r.usage));
  return { text: r.output_text, usage: r.usage };
});

await check('openai.responses.stream', async () => {
  const stream = await openai.responses.create({
    model: 'llama', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
    max_output_tokens: 10, temperature: 0, stream: true,
  });
  const types = new Set();
  let deltas = '', completed = null, last = -1;
  for await (const e of stream) {
    expect(e.sequence_number === last + 1, 'sequence_number ' + e.sequence_number);
    last = e.sequence_number;
    types.add(e.type);
    if (e.type === 'response.output_text.delta') deltas += e.delta;
    if (e.type === 'response.incomplete' || e.type === 'response.completed') completed = e.response;
  }
  for (const t of ['response.created', 'response.output_item.added', 'response.output_text.delta',
                   'response.output_text.done', 'response.output_item.done']) {
    expect(types.has(t), 'no ' + t);
  }
  expect(completed && completed.output[0].content[0].text === deltas, 'final text differs from the deltas');
  // The same request, not streamed, gives the same text at temperature 0.
  const whole = await openai.responses.create({
    model: 'llama', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
    max_output_tokens: 10, temperature: 0,
  });
  expect(whole.output_text === deltas, `streamed ${JSON.stringify(deltas)} vs ${JSON.stringify(whole.output_text)}`);
  return { events: [...types], text: deltas };
});

await check('openai.responses.parse', async () => {
  const r = await openai.responses.parse({
    model: 'llama', input: 'A pet.', temperature: 1, text: { format: zodTextFormat(Pet, 'pet') },
  });
  Pet.parse(r.output_parsed);
  return r.output_parsed;
});

await check('openai.responses.tools', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: weather,
                   strict: true }];
  const input = [{ role: 'user', content: 'Weather in Paris?' }];
  const r = await openai.responses.create({ model: 'llama', input, tools, tool_choice: 'required', temperature: 1 });
  const call = r.output.find((o) => o.type === 'function_call');
  expect(call && call.name === 'get_weather', 'no call: ' + JSON.stringify(r.output));
  expect(typeof JSON.parse(call.arguments).city === 'string', 'arguments ' + call.arguments);
  // The round trip: the call and its output go back as input items.
  const next = await openai.responses.create({
    model: 'llama', max_output_tokens: 8, temperature: 0,
    input: [...input, ...r.output, { type: 'function_call_output', call_id: call.call_id, output: '{"sky":"sunny"}' }],
  });
  expect(next.status === 'incomplete' || next.status === 'completed', 'status ' + next.status);
  // Streamed: the arguments arrive as function_call_arguments events.
  const stream = await openai.responses.create({ model: 'llama', input, tools, tool_choice: 'required', stream: true });
  let args = null;
  for await (const e of stream) if (e.type === 'response.function_call_arguments.done') args = e.arguments;
  expect(args && typeof JSON.parse(args).city === 'string', 'streamed arguments ' + args);
  return { call, streamed: args, after: next.output_text };
});

await check('openai.responses.refused', async () => {
  try {
    await openai.responses.create({ model: 'llama', input: 'x', previous_response_id: 'resp_1' });
  } catch (e) {
    expect(e.status === 400 && e.param === 'previous_response_id', 'error ' + e.status + ' ' + e.param);
    return e.message;
  }
  throw new Error('previous_response_id was accepted');
});

// ---- Anthropic Messages ----------------------------------------------------------------

await check('anthropic.messages.create', async () => {
  const m = await anthropic.messages.create({
    model: 'llama', max_tokens: 12, system: 'Tell a story.', temperature: 0,
    messages: [{ role: 'user', content: 'Once upon a time' }],
  });
  expect(m.type === 'message' && m.role === 'assistant', 'type ' + m.type);
  expect(m.stop_reason === 'max_tokens' && m.usage.output_tokens === 12, 'stop_reason ' + m.stop_reason);
  expect(m.content[0].type === 'text' && m.content[0].text.length > 0, 'content ' + JSON.stringify(m.content));
  return m;
});

await check('anthropic.messages.stop_sequences', async () => {
  const m = await anthropic.messages.create({
    model: 'llama', max_tokens: 200, temperature: 0, stop_sequences: ['e', 'a'],
    messages: [{ role: 'user', content: 'Once upon a time' }],
  });
  expect(m.stop_reason === 'stop_sequence' && ['e', 'a'].includes(m.stop_sequence), 'stop ' + m.stop_reason);
  const text = m.content.length ? m.content[0].text : '';
  expect(!text.includes('e') && !text.includes('a'), 'text holds a stop sequence: ' + text);
  return { text, stop_sequence: m.stop_sequence };
});

await check('anthropic.messages.stream', async () => {
  const stream = anthropic.messages.stream({
    model: 'llama', max_tokens: 10, temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }],
  });
  const types = [];
  let deltas = '';
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') deltas += e.delta.text;
  }
  const m = await stream.finalMessage();
  expect(types[0] === 'message_start' && types[types.length - 1] === 'message_stop', 'events ' + types.join());
  expect(m.content[0].text === deltas && m.stop_reason === 'max_tokens', 'final ' + JSON.stringify(m));
  const whole = await anthropic.messages.create({
    model: 'llama', max_tokens: 10, temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }],
  });
  expect(whole.content[0].text === deltas, 'streamed and whole differ');
  return { text: deltas };
});

await check('anthropic.messages.tools', async () => {
  const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: weather }];
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const m = await anthropic.messages.create({
    model: 'llama', max_tokens: 64, temperature: 1, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages,
  });
  const use = m.content.find((b) => b.type === 'tool_use');
  expect(m.stop_reason === 'tool_use' && use && typeof use.input.city === 'string', 'content ' + JSON.stringify(m));
  const next = await anthropic.messages.create({
    model: 'llama', max_tokens: 8, temperature: 0, tools, messages: [
      ...messages, { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C' }] }],
  });
  expect(next.type === 'message', 'after the tool_result ' + JSON.stringify(next));
  // Streamed: the SDK assembles input_json_delta into the tool_use's input.
  const stream = anthropic.messages.stream({
    model: 'llama', max_tokens: 64, temperature: 1, tools, tool_choice: { type: 'any' }, messages,
  });
  const final = await stream.finalMessage();
  const streamed = final.content.find((b) => b.type === 'tool_use');
  expect(streamed && typeof streamed.input.city === 'string', 'streamed ' + JSON.stringify(final));
  return { use, streamed: streamed.input };
});

await check('anthropic.messages.countTokens', async () => {
  const body = { model: 'llama', system: 'Be brief.', messages: [{ role: 'user', content: 'Once upon a time' }] };
  const counted = await anthropic.messages.countTokens(body);
  const m = await anthropic.messages.create({ ...body, max_tokens: 1 });
  const read = m.usage.input_tokens + m.usage.cache_read_input_tokens;
  expect(counted.input_tokens === read, `${counted.input_tokens} vs ${read}`);
  return counted;
});

await check('anthropic.errors', async () => {
  const bad = new Anthropic({ baseURL: root, apiKey: apiKey + 'x', maxRetries: 0 });
  let unauthorized = null;
  try {
    await bad.messages.create({ model: 'llama', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] });
  } catch (e) {
    unauthorized = e;
  }
  expect(unauthorized instanceof Anthropic.AuthenticationError, 'wrong key: ' + unauthorized);
  let invalid = null;
  try {
    await anthropic.messages.create({ model: 'llama', max_tokens: 4,
                                      messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] });
  } catch (e) {
    invalid = e;
  }
  expect(invalid instanceof Anthropic.BadRequestError && invalid.error.error.type === 'invalid_request_error',
         'image block: ' + invalid);
  return { unauthorized: unauthorized.message, invalid: invalid.error.error.message };
});

// ---- Vercel AI SDK ---------------------------------------------------------------------

const aiAnthropic = createAnthropic({ baseURL, apiKey });
const aiOpenAI = createOpenAI({ baseURL, apiKey });
const once = { maxRetries: 0 };

for (const [name, model] of [['anthropic', aiAnthropic('llama')], ['openai.responses', aiOpenAI.responses('llama')]]) {
  await check(`ai.${name}.generateText`, async () => {
    const r = await generateText({ ...once, model, prompt: 'Once upon a time', maxOutputTokens: 10, temperature: 0 });
    expect(r.text.length > 0 && r.finishReason === 'length', `text ${r.text} finish ${r.finishReason}`);
    expect(r.usage.outputTokens === 10, 'usage ' + JSON.stringify(r.usage));
    return { text: r.text, usage: r.usage };
  });
  await check(`ai.${name}.streamText`, async () => {
    let error = null;
    const r = streamText({ ...once, model, prompt: 'Once upon a time', maxOutputTokens: 10, temperature: 0,
                           onError: ({ error: e }) => { error = e; } });
    let text = '';
    for await (const piece of r.textStream) text += piece;
    if (error) throw error;
    expect(text.length > 0 && (await r.finishReason) === 'length', 'text ' + text);
    return { text };
  });
  await check(`ai.${name}.tools`, async () => {
    const r = await generateText({
      ...once, model, prompt: 'Weather in Paris?', temperature: 1, toolChoice: 'required', maxOutputTokens: 64,
      tools: { get_weather: tool({ description: 'The weather in a city', inputSchema: z.object({ city: z.string().max(12) }) }) },
    });
    expect(r.toolCalls.length > 0 && typeof r.toolCalls[0].input.city === 'string', 'calls ' + JSON.stringify(r.toolCalls));
    return r.toolCalls[0].input;
  });
}

// ---- Embeddings ------------------------------------------------------------------------

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

await check('openai.embeddings.create', async () => {
  const inputs = ['Once upon a time', 'The cat sat on the mat.'];
  const r = await openai.embeddings.create({ model: 'llama', input: inputs });  // base64 on the wire
  expect(r.object === 'list' && r.data.length === 2, 'data ' + r.data.length);
  expect(r.data.every((d, i) => d.index === i && d.embedding.length === 64), 'shape');
  expect(r.data.every((d) => Math.abs(norm(d.embedding) - 1) < 1e-5), 'not unit length');
  expect(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens, 'usage ' + JSON.stringify(r.usage));
  const floats = await openai.embeddings.create({ model: 'llama', input: inputs, encoding_format: 'float' });
  const same = r.data.every((d, i) => d.embedding.every((x, k) => Math.abs(x - floats.data[i].embedding[k]) < 1e-6));
  expect(same, 'base64 and float differ');
  const cut = await openai.embeddings.create({ model: 'llama', input: 'Once upon a time', dimensions: 16 });
  expect(cut.data[0].embedding.length === 16 && Math.abs(norm(cut.data[0].embedding) - 1) < 1e-5, 'dimensions');
  return { usage: r.usage, first: r.data[0].embedding.slice(0, 4) };
});

await check('ai.openai.embedMany', async () => {
  const values = ['Once upon a time', 'a little girl', 'a big red ball'];
  const r = await embedMany({ ...once, model: aiOpenAI.textEmbeddingModel('llama'), values });
  expect(r.embeddings.length === 3 && r.embeddings.every((e) => e.length === 64), 'shape');
  expect(r.usage.tokens > 0, 'usage ' + JSON.stringify(r.usage));
  return { tokens: r.usage.tokens };
});

process.exit(exitStatus());
