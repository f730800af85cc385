// What the OpenAI-compatible HTTP API costs over the gateway's gRPC API, measured in one run
// on one fleet: the same one-token greedy chat, sent alternately over HTTP (keep-alive fetch)
// and over gRPC (@grpc/grpc-js), and the same 64-token stream both ways. Prints medians and
// their ratios (HTTP / gRPC).
//   node bench/http/openai_overhead.mjs GATEWAY_GRPC_ADDR GATEWAY_HTTP_ADDR PROTO_ROOT [N]
import { createRequire } from "node:module";
import path from "node:path";

// The clients are the test clients' (tests/node/node_modules).
const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(here, "../../tests/node/package.json"));
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const [grpcAddr, httpAddr, protoRoot, n = "200"] = process.argv.slice(2);
const Generator = grpc.loadPackageDefinition(protoLoader.loadSync(
  "walsh/v1/generator.proto", { includeDirs: [protoRoot], keepCase: true, defaults: true,
                                oneofs: true })).walsh.v1.Generator;
const client = new Generator(grpcAddr, grpc.credentials.createInsecure());
const messages = [{ role: "user", content: "Hello there, how are you today?" }];

const viaGrpc = (maxTokens) => new Promise((resolve, reject) => {
  const call = client.Generate({ chat: { messages }, sampling: { temperature: 0 },
                                 stopping: { max_tokens: maxTokens, ignore_eos: true } });
  call.on("data", () => {});
  call.on("error", reject);
  call.on("end", resolve);
});
const viaHttp = async (maxTokens) => {
  const res = await fetch(`http://${httpAddr}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages, temperature: 0, max_tokens: maxTokens, ignore_eos: true,
                           stream: maxTokens > 1 }) });
  await res.text();
  if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
};

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const out = {};
for (const maxTokens of [1, 64]) {
  const t = { grpc: [], http: [] };
  for (let i = 0; i < 5; ++i) { await viaGrpc(maxTokens); await viaHttp(maxTokens); }  // warm-up
  for (let i = 0; i < Number(n); ++i) {
    for (const [name, f] of [["grpc", viaGrpc], ["http", viaHttp]]) {
      const start = process.hrtime.bigint();
      await f(maxTokens);
      t[name].push(Number(process.hrtime.bigint() - start) / 1e6);
    }
  }
  out[`max_tokens_${maxTokens}`] = { grpc_median_ms: +median(t.grpc).toFixed(3),
                                     http_median_ms: +median(t.http).toFixed(3),
                                     ratio: +(median(t.http) / median(t.grpc)).toFixed(3) };
}
console.log(JSON.stringify(out, null, 1));
client.close();
