// Steers Debian's chromium (headless) through the server's chat page with playwright-core: types a message, waits
// for the streamed reply, checks the live panel, stops a second reply, reloads (the conversation stays), and saves
// a screenshot. Prints one JSON object for the test to check.
//   node page_check.mjs PORT SCREENSHOT MESSAGE MAX_TOKENS
import { chromium } from 'playwright-core';

const [port, screenshot, message, maxTokens] = process.argv.slice(2);
const origin = `http://127.0.0.1:${port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
         '--disable-component-update', '--disable-default-apps', '--disable-sync', '--disable-extensions',
         '--no-first-run', '--metrics-recording-only', '--disable-domain-reliability',
         '--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication'],
});
const out = { foreign: [], console_errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 720 } });
  page.on('request', (r) => { if (!r.url().startsWith(origin + '/')) out.foreign.push(r.url()); });
  page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
  page.setDefaultTimeout(240000);
  await page.goto(origin + '/');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', maxTokens);
  await page.fill('#prompt', message);
  await page.click('#send');
  await page.waitForSelector('#messages .msg.assistant[data-state="done"]');
  out.reply = await page.textContent('#messages .msg.assistant .content');
  out.meta = await page.textContent('#messages .msg.assistant .meta');

  // The panel: filled from /metrics once a second; its decode rate (over the last seconds) counts the reply.
  await page.waitForFunction(() => document.getElementById('m-disk').textContent.includes('B') &&
                                   parseFloat(document.getElementById('m-decode').textContent) > 0);
  out.panel = {};
  for (const id of ['m-decode', 'm-prompt', 'm-gpu', 'm-ram', 'm-hits', 'm-disk', 'm-slots']) {
    out.panel[id] = await page.textContent('#' + id);
  }

  // A long reply, stopped after its first words.
  await page.fill('#max-tokens', '1500');
  await page.fill('#prompt', 'And then?');
  await page.click('#send');
  await page.waitForFunction(() => {
    const m = document.querySelectorAll('#messages .msg.assistant');
    return m.length === 2 && m[1].querySelector('.content').textContent.length > 0;
  });
  await page.click('#stop');
  await page.waitForSelector('#messages .msg.assistant[data-state="stopped"]');
  out.stopped_reply = await page.textContent('#messages .msg.assistant:last-child .content');

  // The conversation is kept by the page.
  await page.reload();
  await page.waitForSelector('#messages .msg');
  out.messages_after_reload = await page.$$eval('#messages .msg', (els) => els.map((e) => e.className));
  await page.waitForFunction(() => document.getElementById('m-disk').textContent.includes('B'));
  await page.screenshot({ path: screenshot, fullPage: true });
  out.screenshot = screenshot;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
