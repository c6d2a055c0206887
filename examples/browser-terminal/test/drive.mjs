// Drives the example page in headless Chromium for tests/supervisor/test_browser_terminal.py:
// node test/drive.mjs PAGE_URL CHROMIUM_PATH. Prints one JSON object of what it saw.
import { chromium } from "playwright-core";

const [pageUrl, executablePath] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const seen = {};
const lineIs = (text) =>
  window.screenText().split("\n").some((line) => line.trim() === text);
try {
  const page = await browser.newPage({ viewport: { width: 800, height: 600 } });
  page.setDefaultTimeout(20000);
  await page.goto(pageUrl);
  await page.waitForFunction(() => document.body.dataset.ready === "true");
  await page.click("#terminal");
  await page.keyboard.type("echo hello-browser\n");
  await page.waitForFunction(lineIs, "hello-browser");
  seen.echoed = true;

  await page.setViewportSize({ width: 1100, height: 740 });
  await page.waitForFunction(() => window.term.cols > 100);
  seen.size = await page.evaluate(() => [window.term.rows, window.term.cols]);
  await page.keyboard.type("stty size\n");
  await page.waitForFunction(lineIs, `${seen.size[0]} ${seen.size[1]}`);
  seen.stty = `${seen.size[0]} ${seen.size[1]}`;

  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "true");
  await page.waitForFunction(lineIs, "hello-browser");
  seen.replayed = true;
  seen.screen = await page.evaluate(() => window.screenText());
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
