// Drives a running `diskformer serve` with the official openai package: the model list, a chat completion whole
// and streamed, a text completion, and an error. Prints one JSON object for the test to check.
//   node openai_check.mjs PORT [API_KEY]
import OpenAI from 'openai';

const [port, key] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key || 'unused', maxRetries: 0, timeout: 300000,
});
const messages = [{ role: 'user', content: 'Who was king of Judah?' }];
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const whole = await client.chat.completions.create({ model: out.models[0], messages, temperature: 0, max_tokens: 24 });
out.whole = whole.choices[0].message.content;
out.whole_finish = whole.choices[0].finish_reason;
out.whole_usage = whole.usage;

const stream = await client.chat.completions.create({
  model: out.models[0], messages, temperature: 0, max_tokens: 24, stream: true, stream_options: { include_usage: true },
});
out.streamed = '';
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (choice && choice.delta && choice.delta.content) out.streamed += choice.delta.content;
  if (choice && choice.finish_reason) out.stream_finish = choice.finish_reason;
  if (chunk.usage) out.stream_usage = chunk.usage;
}

const completion = await client.completions.create({
  model: out.models[0], prompt: 'In the beginning', temperature: 0, max_tokens: 16,
});
out.completion = completion.choices[0].text;

try {
  await client.chat.completions.create({ model: out.models[0], messages: [] });
  out.error_status = 0;
} catch (e) {
  out.error_status = e.status;
  out.error_message = e.message;
}

console.log(JSON.stringify(out));
