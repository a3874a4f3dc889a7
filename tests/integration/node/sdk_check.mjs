// Drives hearth with the client SDKs users reach for: the OpenAI Node SDK's
// chat.completions.parse with a zod schema (streamed and not) and forced tool calls, and
// the Vercel AI SDK's generateObject / streamObject. Each check prints one JSON line; the
// exit status is 0 only when all pass.
//   HEARTH_URL=http://127.0.0.1:PORT/v1 node sdk_check.mjs
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, streamObject } from 'ai';
import { z } from 'zod';
import { check, exitStatus } from './checks.mjs';

const baseURL = process.env.HEARTH_URL;
const client = new OpenAI({ baseURL, apiKey: 'unused' });
const Pet = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(30),
  kind: z.enum(['cat', 'dog']),
  toys: z.array(z.string().max(8)).max(2),
  owner: z.string().max(10).nullable(),
});


await check('openai.parse', async () => {
  const r = await client.chat.completions.parse({
    model: 'llama', messages: [{ role: 'user', content: 'A pet.' }], temperature: 1, seed: 3,
    response_format: zodResponseFormat(Pet, 'pet'),
  });
  const m = r.choices[0].message;
  if (!m.parsed) throw new Error('no parsed message: ' + JSON.stringify(r));
  Pet.parse(m.parsed);
  return m.parsed;
});

await check('openai.stream.parse', async () => {
  const stream = client.chat.completions.stream({
    model: 'llama', messages: [{ role: 'user', content: 'A pet.' }], temperature: 1, seed: 4,
    response_format: zodResponseFormat(Pet, 'pet'),
  });
  let chunks = 0;
  for await (const _ of stream) chunks += 1;
  const done = await stream.finalChatCompletion();
  const parsed = done.choices[0].message.parsed;
  Pet.parse(parsed);
  return { chunks, parsed };
});

await check('openai.tools.required', async () => {
  const r = await client.chat.completions.create({
    model: 'llama', messages: [{ role: 'user', content: 'Weather?' }], temperature: 1, seed: 5,
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: {
      type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] } } }],
    tool_choice: 'required',
  });
  const c = r.choices[0];
  if (c.finish_reason !== 'tool_calls') throw new Error('finish_reason ' + c.finish_reason);
  const args = JSON.parse(c.message.tool_calls[0].function.arguments);
  if (typeof args.city !== 'string') throw new Error('arguments ' + JSON.stringify(args));
  return c.message.tool_calls;
});

const hearth = createOpenAICompatible({ name: 'hearth', baseURL, supportsStructuredOutputs: true });

await check('ai.generateObject', async () => {
  const { object } = await generateObject({ model: hearth.chatModel('llama'), schema: Pet, prompt: 'A pet.',
                                            temperature: 1, seed: 6 });
  Pet.parse(object);
  return object;
});

await check('ai.streamObject', async () => {
  const result = streamObject({ model: hearth.chatModel('llama'), schema: Pet, prompt: 'A pet.', temperature: 1,
                                seed: 7 });
  let partials = 0;
  for await (const _ of result.partialObjectStream) partials += 1;
  const object = await result.object;
  Pet.parse(object);
  return { partials, object };
});

process.exit(exitStatus());
