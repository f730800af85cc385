// The HTTP face's edge, through real processes and sockets: HTTPS with the official openai SDK
// (and a client refused for not trusting the CA), slow and trickling clients that must not stop
// a well-behaved request, per-address connection limits, and a stream whose client stops
// reading. Run by ctest (http_edge) with the binaries' paths in the environment:
//   WALSH_WORKER_BIN WALSH_GATEWAY_BIN WALSH_MKMODEL_BIN WALSH_SOURCE_DIR
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { eventually, metric, startGateway, startScriptedWorker, startWalsh } from
  "./walsh_processes.mjs";

const { WALSH_WORKER_BIN, WALSH_MKMODEL_BIN, WALSH_SOURCE_DIR } = process.env;
const work = mkdtempSync(path.join(tmpdir(), "walsh-edge-"));
after(() => rmSync(work, { recursive: true, force: true }));

const chat = (content) => ({ model: "scripted", messages: [{ role: "user", content }] });

// Runs the SDK in a child node whose trust store is its own (NODE_EXTRA_CA_CERTS is read at
// start): a streamed chat and a listing, printed as JSON.
function sdkOverHttps(baseURL, ca) {
  const script = `
    import OpenAI from "openai";
    const c = new OpenAI({ apiKey: "x", baseURL: ${JSON.stringify(baseURL)}, maxRetries: 0 });
    try {
      const models = await c.models.list();
      let text = "";
      const stream = await c.chat.completions.create({ model: "scripted", stream: true,
        messages: [{ role: "user", content: "SCRIPT:over tls" }] });
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content || "";
      console.log(JSON.stringify({ model: models.data[0].id, text }));
    } catch (e) {
      const why = e.cause?.cause || e.cause || e;  // the SDK's error wraps fetch's, which wraps TLS's
      console.log(JSON.stringify({ error: String(why.code || why) }));
    }`;
  const env = { ...process.env };
  delete env.NODE_EXTRA_CA_CERTS;
  if (ca) env.NODE_EXTRA_CA_CERTS = ca;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script],
                      { cwd: path.join(WALSH_SOURCE_DIR, "tests/node"), env, encoding: "utf8" });
  return JSON.parse(r.stdout.trim().split("\n").at(-1));
}

// A raw connection that writes `first` at once, then `trickle` one byte every `everyMs`; resolves
// with what the server answered (or "" if it only closed) and when, from the first byte.
function slowClient(port, first, trickle, everyMs, localAddress = "127.0.0.1") {
  return new Promise((resolve) => {
    const start = Date.now();
    let answer = "", timer = null, at = 0;
    const s = net.connect({ port, host: "127.0.0.1", localAddress }, () => {
      s.write(first);
      timer = setInterval(() => {
        if (at < trickle.length && s.writable) s.write(trickle[at++]);
      }, everyMs);
    });
    s.on("data", (d) => { answer += d; });
    s.on("error", () => {});
    s.on("close", () => {
      clearInterval(timer);
      resolve({ answer, ms: Date.now() - start, end: Date.now() });
    });
    slowClient.open.push(s);
  });
}
slowClient.open = [];

describe("HTTPS on the HTTP face", () => {
  let gw, ca;
  before(async () => {
    execFileSync(path.join(WALSH_SOURCE_DIR, "scripts/make-test-ca"), [path.join(work, "ca")]);
    ca = path.join(work, "ca/ca.pem");
    const w = await startScriptedWorker();
    gw = await startGateway(`127.0.0.1:${w.port}`, [
      "--tls-cert-file", path.join(work, "ca/server.pem"),
      "--tls-key-file", path.join(work, "ca/server.key")]);
  });

  test("the SDK speaks HTTPS to it, trusting the test CA", () => {
    const r = sdkOverHttps(`https://localhost:${gw.http_port}/v1`, ca);
    assert.deepEqual(r, { model: "scripted", text: "over tls" });
  });

  test("a client that does not trust the CA is refused, and plaintext is not served", () => {
    const r = sdkOverHttps(`https://localhost:${gw.http_port}/v1`, null);
    assert.match(r.error, /SELF_SIGNED|UNABLE_TO_VERIFY|self.signed|unable to verify/i);
    const plain = sdkOverHttps(`http://localhost:${gw.http_port}/v1`, ca);
    assert.ok(plain.error, JSON.stringify(plain));
  });
});

describe("slow clients", () => {
  let gw, client, usual;
  before(async () => {
    const w = await startScriptedWorker();
    gw = await startGateway(`127.0.0.1:${w.port}`, [
      "--http-header-timeout-seconds", "4", "--http-body-timeout-seconds", "4",
      "--http-idle-timeout-seconds", "3", "--http-max-connections", "2000",
      "--http-max-connections-per-client", "1000"]);
    client = new OpenAI({ apiKey: "x", baseURL: gw.base, maxRetries: 0 });
    const start = Date.now();
    await client.chat.completions.create(chat("SCRIPT:warm"));
    usual = Date.now() - start;
  });
  after(() => { for (const s of slowClient.open) s.destroy(); });

  async function timedChat(content) {
    const start = Date.now();
    const r = await client.chat.completions.create(chat(content));
    return { text: r.choices[0].message.content, ms: Date.now() - start, end: Date.now() };
  }

  test("500 slow-header connections: a normal request is served at once; they get 408", async () => {
    const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
    const slow = Array.from({ length: 500 }, () =>
      slowClient(gw.http_port, head, "X-Slow: " + "a".repeat(100), 500));
    await new Promise((r) => setTimeout(r, 500));  // every slow client is connected and sending
    const normal = await timedChat("SCRIPT:still here");
    assert.equal(normal.text, "still here");
    assert.ok(normal.ms < Math.max(2000, 10 * usual), `${normal.ms} ms (usually ${usual} ms)`);
    const ends = await Promise.all(slow);
    // Served while every slow client still held its connection, not after they were dropped.
    assert.ok(normal.end < Math.min(...ends.map((e) => e.end)));
    for (const e of ends) {
      assert.match(e.answer, /^HTTP\/1\.1 408/);
      assert.ok(e.ms >= 3900 && e.ms < 9000, `408 after ${e.ms} ms`);
    }
    assert.equal((await timedChat("SCRIPT:after")).text, "after");
  });

  test("150 trickled bodies end with 408 at their deadline while others are served", async () => {
    const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                 "Content-Length: 1000\r\n\r\n";
    const trickled = Array.from({ length: 150 }, () =>
      slowClient(gw.http_port, head, "{".repeat(1000), 200));
    await new Promise((r) => setTimeout(r, 500));
    const normal = await timedChat("SCRIPT:served");
    assert.equal(normal.text, "served");
    const ends = await Promise.all(trickled);
    assert.ok(normal.end < Math.min(...ends.map((e) => e.end)));
    for (const e of ends) {
      assert.match(e.answer, /^HTTP\/1\.1 408[^]*the body took longer than 4 s/);
      assert.ok(e.ms >= 3900 && e.ms < 9000, `408 after ${e.ms} ms`);
    }
    // Counted when the server has closed each connection, just after its client saw the close.
    await eventually("every 408 to be counted", async () => await metric(gw.metrics_port,
      'walsh_gateway_http_requests_total{route="/v1/chat/completions",code="408"}') >= 150);
  });

  test("a connection that starts no request is closed after the idle timeout", async () => {
    const idle = await slowClient(gw.http_port, "", "", 1000);
    assert.equal(idle.answer, "");
    assert.ok(idle.ms >= 2900 && idle.ms < 7000, `closed after ${idle.ms} ms`);
  });
});

describe("connection limits", () => {
  test("one address gets --http-max-connections-per-client; another is still served", async () => {
    const w = await startScriptedWorker();
    const gw = await startGateway(`127.0.0.1:${w.port}`,
                                  ["--http-max-connections-per-client", "20"]);
    const held = Array.from({ length: 20 }, () => slowClient(gw.http_port, "", "", 1000));
    await new Promise((r) => setTimeout(r, 300));
    const refused = await slowClient(gw.http_port, "", "", 1000);
    assert.ok(refused.ms < 1000, `the 21st connection lived ${refused.ms} ms`);
    // 127.0.0.2 is loopback too (Linux routes 127/8 there), but another address.
    const other = await new Promise((resolve, reject) => {
      const s = net.connect({ port: gw.http_port, host: "127.0.0.1", localAddress: "127.0.0.2" },
                            () => s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
      s.once("data", (d) => { resolve(String(d)); s.destroy(); });
      s.on("error", reject);
    });
    assert.match(other, /^HTTP\/1\.1 200/);
    for (const s of slowClient.open) s.destroy();
    await Promise.all(held);
  });
});

describe("the global connection limit", () => {
  // One request on a fresh connection from `localAddress`; what came back before the close.
  const ask = (port, localAddress, target) => new Promise((resolve) => {
    let answer = "";
    const s = net.connect({ port, host: "127.0.0.1", localAddress },
                          () => s.write(`GET ${target} HTTP/1.1\r\nHost: x\r\n\r\n`));
    s.on("data", (d) => { answer += d; if (/\r\n\r\n/.test(answer)) s.destroy(); });
    s.on("error", () => {});
    s.on("close", () => resolve(answer));
  });
  test("fills from few addresses: /health still answers, others get 503, then close at once",
       async () => {
    const w = await startScriptedWorker();
    const gw = await startGateway(`127.0.0.1:${w.port}`, ["--http-max-connections", "20",
      "--http-max-connections-per-client", "5"]);
    const hold = (from, n) => Array.from({ length: n },
                                         () => slowClient(gw.http_port, "", "", 1000, from));
    const held = [];
    for (const a of [1, 2, 3, 4]) held.push(...hold(`127.0.0.${a}`, 5));
    await new Promise((r) => setTimeout(r, 300));
    // A fifth address finds the reserve: its health check is served, anything else is told to
    // come back (503, Retry-After), at once.
    assert.match(await ask(gw.http_port, "127.0.0.5", "/health"), /^HTTP\/1\.1 200/);
    const busy = await ask(gw.http_port, "127.0.0.5", "/v1/models");
    assert.match(busy, /^HTTP\/1\.1 503/);
    assert.match(busy, /\r\nRetry-After: 1\r\n/i);
    // The reserve's 16 held too: the next connection is closed as it arrives, not left waiting.
    for (const a of [6, 7, 8, 9]) held.push(...hold(`127.0.0.${a}`, 4));
    await new Promise((r) => setTimeout(r, 300));
    const closed = await slowClient(gw.http_port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "",
                                    1000, "127.0.0.10");
    assert.equal(closed.answer, "");
    assert.ok(closed.ms < 1000, `the connection past the reserve lived ${closed.ms} ms`);
    for (const s of slowClient.open) s.destroy();
    await Promise.all(held);
    // Room again once they went.
    await eventually("room after the held connections closed", async () =>
      /^HTTP\/1\.1 200/.test(await ask(gw.http_port, "127.0.0.11", "/v1/models")));
  });
});

describe("a stream whose client stops reading", () => {
  // A worker, a gateway with `gatewayFlags`, and a streamed chat whose client never reads: each
  // token's event carries 20 alternatives, megabytes in all, more than the sockets hold.
  async function unreadStream(name, gatewayFlags) {
    const file = path.join(work, `${name}.gguf`);
    execFileSync(WALSH_MKMODEL_BIN, ["--preset", "tiny", "--format", "pq2_0", "--out", file]);
    const worker = await startWalsh(WALSH_WORKER_BIN, ["--model", file, "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0"]);
    const gw = await startGateway(`127.0.0.1:${worker.grpc_port}`, gatewayFlags);
    const body = JSON.stringify({ model: "", stream: true, max_tokens: 4000, ignore_eos: true,
      logprobs: true, top_logprobs: 20, messages: [{ role: "user", content: "hi" }] });
    const socket = net.connect(gw.http_port, "127.0.0.1", () => {
      socket.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" +
                   "Content-Type: application/json\r\n" +
                   `Content-Length: ${body.length}\r\n\r\n${body}`);
      socket.pause();  // never reads
    });
    socket.on("error", () => {});
    return { worker, gw, socket };
  }

  test("is closed after --http-stall-timeout-seconds and frees the worker's slot", async () => {
    const { worker, gw, socket } = await unreadStream("tiny-stall",
      ["--http-max-buffered-bytes", "16384", "--http-stall-timeout-seconds", "2"]);
    await eventually("the stalled stream to be closed", async () =>
      await metric(gw.metrics_port, "walsh_gateway_http_stalled_streams_total") === 1, 60000);
    await eventually("the worker's slot to be free", async () =>
      await metric(worker.metrics_port, "walsh_worker_requests_running") === 0 &&
      await metric(gw.metrics_port, "walsh_gateway_inflight_streams") === 0);
    assert.equal(await metric(gw.metrics_port,
      'walsh_gateway_http_requests_total{route="/v1/chat/completions",code="499"}'), 1);
    socket.destroy();
  });

  test("holds bytes of --max-buffered-total: new requests get 429 naming it until it goes",
    async () => {
      const { gw, socket } = await unreadStream("tiny-total",
        ["--http-max-buffered-bytes", "16384", "--max-buffered-total", "16384"]);
      await eventually("the unread stream to hold the total", async () =>
        await metric(gw.metrics_port, "walsh_gateway_buffered_bytes") >= 16384, 60000);
      const ask = () => fetch(`http://127.0.0.1:${gw.http_port}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "", max_tokens: 2, messages: [{ role: "user", content: "x" }] }),
      });
      // The bytes move on into the sockets for a while after they first reach the total: ask
      // until the total is held for good.
      let refused;
      for (let i = 0; i < 100 && !refused; ++i) {
        const r = await ask();
        if (r.status === 429) {
          refused = r;
        } else {
          assert.equal(r.status, 200);
          await r.text();
          await new Promise((done) => setTimeout(done, 100));
        }
      }
      assert.ok(refused, "never refused");
      assert.match((await refused.json()).error.message, /--max-buffered-total/);
      assert.equal(await metric(gw.metrics_port, "walsh_gateway_buffer_refusals_total"), 1);
      socket.destroy();  // the stream goes, and its bytes with it
      await eventually("the bytes to be released", async () =>
        await metric(gw.metrics_port, "walsh_gateway_buffered_bytes") === 0, 60000);
      assert.equal((await ask()).status, 200);
    });
});
