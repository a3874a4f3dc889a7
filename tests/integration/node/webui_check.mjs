// Drives hearth's chat page in headless Chromium over the DevTools protocol: it loads with
// no console error, asks for the API key when the server has one, sends a message, shows
// the streamed answer and the server's figures from /metrics, and keeps the conversation
// across a reload. Prints one JSON line per check; exit status 0 only when all pass.
//   HEARTH_ROOT=http://127.0.0.1:PORT [HEARTH_KEY=KEY] [HEARTH_SCREENSHOT=out.png] \
//   CHROMIUM=/usr/bin/chromium node webui_check.mjs
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'undici';

import { check, exitStatus, report } from './checks.mjs';

const root = process.env.HEARTH_ROOT;
const key = process.env.HEARTH_KEY || '';
const profile = mkdtempSync(join(tmpdir(), 'hearth-chromium-'));
const browser = spawn(process.env.CHROMIUM || 'chromium', [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', '--no-default-browser-check',
  '--disable-extensions', '--remote-debugging-port=0', `--user-data-dir=${profile}`, 'about:blank',
], { stdio: ['ignore', 'ignore', 'pipe'] });

let ws = null;  // the DevTools connection
// Closes the browser (politely, then not), removes its profile, exits.
function finish() {
  const done = () => {
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 });
    } catch (e) {
      console.error('could not remove the profile ' + profile + ': ' + e.message);
    }
    process.exit(exitStatus());
  };
  if (browser.exitCode !== null) return done();
  browser.once('exit', done);
  try { if (ws) ws.send(JSON.stringify({ id: 0, method: 'Browser.close' })); } catch { /* not connected */ }
  setTimeout(() => browser.kill('SIGKILL'), 3000);
}
setTimeout(() => { report('webui.timeout', false, 'the checks took longer than 60 s'); finish(); }, 60000);

const endpoint = await new Promise((resolve, reject) => {
  let err = '';
  browser.stderr.on('data', (d) => {
    err += d;
    const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) resolve(m[1]);
  });
  browser.on('exit', (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
});

ws = new WebSocket(endpoint);
await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
let nextId = 1;
const pending = new Map();
const listeners = [];
ws.onmessage = (event) => {
  const msg = JSON.parse(event.data);
  if (msg.id && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.error) reject(new Error(JSON.stringify(msg.error))); else resolve(msg.result);
  } else if (msg.method) {
    for (const l of listeners) l(msg);
  }
};
function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params, sessionId }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
const page = (method, params) => send(method, params, sessionId);
const consoleErrors = [];
listeners.push((msg) => {
  if (msg.sessionId !== sessionId) return;
  if (msg.method === 'Runtime.exceptionThrown') consoleErrors.push(msg.params.exceptionDetails.text);
  if (msg.method === 'Runtime.consoleAPICalled' && msg.params.type === 'error') {
    consoleErrors.push(msg.params.args.map((a) => a.value ?? a.description).join(' '));
  }
  if (msg.method === 'Log.entryAdded' && msg.params.entry.level === 'error') consoleErrors.push(msg.params.entry.text);
});
await page('Runtime.enable');
await page('Log.enable');
await page('Page.enable');

async function evaluate(expression) {
  const r = await page('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
  if (r.exceptionDetails) throw new Error(r.exceptionDetails.text + ': ' + expression);
  return r.result.value;
}
async function until(expression, what, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await evaluate(expression);
    if (v) return v;
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}
async function load() {
  const loaded = new Promise((resolve) => listeners.push((m) => { if (m.method === 'Page.loadEventFired') resolve(); }));
  await page('Page.navigate', { url: root + '/' });
  await loaded;
}

await check('webui.loads', async () => {
  await load();
  const title = await evaluate('document.title');
  if (title !== 'hearth') throw new Error('title ' + title);
  if (key) {
    await until("document.getElementById('key-dialog').open", 'the key dialog');
    await evaluate(`document.getElementById('key-input').value = ${JSON.stringify(key)};
                    document.getElementById('key-form').requestSubmit(); true`);
  }
  return await until("document.getElementById('model').textContent", 'the model line');
});

await check('webui.chat', async () => {
  await evaluate(`document.getElementById('max-tokens').value = '24';
                  document.getElementById('max-tokens').dispatchEvent(new Event('input'));
                  document.getElementById('input').value = 'Once upon a time';
                  document.getElementById('composer').requestSubmit(); true`);
  const meta = await until(
    "(document.querySelector('.message.assistant .meta') || {}).textContent", 'the answer to finish');
  const answer = await evaluate("document.querySelector('.message.assistant .body').textContent");
  if (!/^24 tokens/.test(meta) || answer.length === 0) throw new Error(`meta ${meta}, answer ${answer}`);
  const user = await evaluate("document.querySelector('.message.user .body').textContent");
  if (user !== 'Once upon a time') throw new Error('user message ' + user);
  return { answer, meta };
});

await check('webui.metrics', async () => {
  const running = await until(
    "document.getElementById('stat-running').textContent !== '–' && document.getElementById('stat-engine').className",
    'the figures from /metrics', 6000);
  if (!running.includes('up')) throw new Error('engine dot ' + running);
  return {
    running: await evaluate("document.getElementById('stat-running').textContent"),
    kv: await evaluate("document.getElementById('stat-kv').textContent"),
  };
});

if (process.env.HEARTH_SCREENSHOT) {
  const shot = await page('Page.captureScreenshot', { format: 'png' });
  writeFileSync(process.env.HEARTH_SCREENSHOT, Buffer.from(shot.data, 'base64'));
}

await check('webui.kept', async () => {
  await load();
  const n = await until("document.querySelectorAll('.message').length", 'the kept conversation');
  if (n !== 2) throw new Error(`${n} messages after a reload`);
  return n;
});

await check('webui.console', async () => {
  if (consoleErrors.length) throw new Error(consoleErrors.join('\n'));
  return 'no console error';
});

finish();
