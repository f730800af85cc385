// Real walsh processes for the node tests: started, waited for by their JSON logs, and killed
// when the test file ends; and the small polling helpers those tests share.
//   WALSH_GATEWAY_BIN WALSH_SOURCE_DIR (environment, from ctest)
import { after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import readline from "node:readline";

const { WALSH_GATEWAY_BIN, WALSH_SOURCE_DIR } = process.env;
const children = [];
after(() => {
  for (const c of children) c.kill("SIGKILL");
});

// Starts a walsh process and resolves with its "listening" fields once it logs `readyEvent`.
export function startWalsh(bin, args, readyEvent = "serving") {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
    children.push(child);
    let fields = {};
    const log = [];
    const timer = setTimeout(() => reject(new Error(`${bin} did not start:\n${log.join("\n")}`)),
                             30000);
    readline.createInterface({ input: child.stderr }).on("line", (line) => {
      log.push(line);
      let j;
      try { j = JSON.parse(line); } catch { return; }
      if (j.event === "listening") fields = j;
      if (j.event === readyEvent) { clearTimeout(timer); resolve({ child, log, ...fields }); }
    });
    child.on("exit", (code) => reject(new Error(`${bin} exited ${code}:\n${log.join("\n")}`)));
  });
}

export function startScriptedWorker() {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [
      path.join(WALSH_SOURCE_DIR, "tests/node/scripted_worker.mjs"),
      path.join(WALSH_SOURCE_DIR, "proto"), path.join(WALSH_SOURCE_DIR, "tests/protos")],
      { stdio: ["ignore", "pipe", "inherit"] });
    children.push(child);
    readline.createInterface({ input: child.stdout }).once("line", (l) => resolve(JSON.parse(l)));
    child.on("exit", (code) => reject(new Error(`scripted worker exited ${code}`)));
  });
}

export async function startGateway(workers, extra = [], readyEvent = "serving") {
  const g = await startWalsh(WALSH_GATEWAY_BIN, ["--workers", workers, "--listen", "127.0.0.1:0",
    "--metrics-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", ...extra], readyEvent);
  return { ...g, base: `http://127.0.0.1:${g.http_port}/v1` };
}

export async function metric(port, name) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split("\n").find((l) => l.slice(0, l.lastIndexOf(" ")) === name);
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1));
}

export async function eventually(what, check, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
