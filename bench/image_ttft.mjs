// Time to first token of one-image chats (walsh.v1 Generate, a user message of text and one PNG)
// against a walsh worker or gateway: the worker's own measure (Finished.timings, from arrival, so
// decoding, preprocessing and encoding the image are in it) and the client's, with the prompt's
// tokens. The requests go one at a time; the first is a warm-up and is not counted.
//   node bench/image_ttft.mjs HOST:PORT SIDE [RUNS]   (SIDE: the square image's side in pixels)
// Uses the test clients' packages (tests/node; scripts/install-deps installs them).
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { png } from "../tests/node/png.mjs";

const require = createRequire(new URL("../tests/node/package.json", import.meta.url));
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const [target, side, runs = "5"] = process.argv.slice(2);
if (!target || !side) {
  console.error("usage: node bench/image_ttft.mjs HOST:PORT SIDE [RUNS]");
  process.exit(2);
}
const protoRoot = fileURLToPath(new URL("../proto", import.meta.url));
const walsh = grpc.loadPackageDefinition(protoLoader.loadSync("walsh/v1/generator.proto", {
  includeDirs: [protoRoot], keepCase: true, longs: Number, defaults: true, oneofs: true,
})).walsh.v1;
const client = new walsh.Generator(target, grpc.credentials.createInsecure());

function chat(seed) {
  const request = {
    chat: { messages: [{ role: "user", parts: [{ text: "Describe this image." },
                                               { image: png(Number(side), Number(side), seed) }] }] },
    sampling: { temperature: 0 },
    stopping: { max_tokens: 1, ignore_eos: true },
  };
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    let first = null;
    let out = {};
    const call = client.Generate(request, { deadline: Date.now() + 600000 });
    call.on("data", (m) => {
      if (m.started) out.prompt_tokens = m.started.prompt_tokens;
      if (m.tokens && first === null) first = process.hrtime.bigint();
      if (m.finished) out.worker_ttft = m.finished.timings.time_to_first_token_seconds;
    });
    call.on("error", reject);
    call.on("end", () => resolve({ ...out, client_ttft: Number(first - start) / 1e9 }));
  });
}

await chat(0);  // warm-up
const results = [];
for (let i = 1; i <= Number(runs); i++) results.push(await chat(i));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({
  side: Number(side), runs: results.length, prompt_tokens: results[0].prompt_tokens,
  worker_ttft_median_s: median(results.map((r) => r.worker_ttft)),
  client_ttft_median_s: median(results.map((r) => r.client_ttft)),
}));
client.close();
