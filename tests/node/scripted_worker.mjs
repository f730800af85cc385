// A stand-in walsh worker for tests of what the gateway makes of a model's text (reasoning,
// tool calls): it speaks walsh.v1 like walsh-worker but answers every Generate with the text its
// prompt asks for, since the synthetic models only write noise. The gateway, its HTTP API and
// the clients stay the real ones.
//   node scripted_worker.mjs PROTO_ROOT TEST_PROTO_ROOT   -> prints {"port": N} when listening
// The answer is the text after the last "SCRIPT:" in the prompt, up to "<|im_end|>"; when the
// prompt holds a tool result, it is "tool said: " and that result. "DELAY_MS:N" in the prompt
// waits N ms before each token. Each token is 2 characters of the answer. "FAIL_FIRST:N" in the
// prompt fails the first N such Generate calls UNAVAILABLE (a worker-side failure).
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const [protoRoot, testProtoRoot] = process.argv.slice(2);
const load = (file) => grpc.loadPackageDefinition(protoLoader.loadSync(file, {
  includeDirs: [protoRoot, testProtoRoot], keepCase: true, longs: Number, enums: String,
  defaults: true, oneofs: true,
}));
const walsh = load("walsh/v1/generator.proto").walsh.v1;
const health = load("grpc/health/v1/health.proto").grpc.health.v1;

const info = {
  architecture: "qwen35", weight_format: "PQ2_0", layers: 1, hidden_size: 8, vocab_size: 1000,
  max_context: 4096, max_output_tokens: 4096, eos_token_ids: [0], bos_token_id: -1,
  contract_fingerprint: "5c1e7ed0".repeat(8), name: "scripted", kv_page_size: 16,
  prefix_cache_min_tokens: 0,
};

function answerFor(prompt) {
  const tool = prompt.lastIndexOf("<tool_response>\n");
  if (tool >= 0) {
    const start = tool + "<tool_response>\n".length;
    return "tool said: " + prompt.slice(start, prompt.indexOf("\n</tool_response>", start));
  }
  const at = prompt.lastIndexOf("SCRIPT:");
  if (at < 0) return "no script";
  const start = at + "SCRIPT:".length;
  const end = prompt.indexOf("<|im_end|>", start);
  return prompt.slice(start, end < 0 ? undefined : end);
}

const failuresLeft = new Map();  // FAIL_FIRST:N marker -> failures still to give

function generate(call) {
  const req = call.request;
  // The gateway sends chats as pieces (markup apart from the client's text).
  const prompt = req.text || (req.pieces ? req.pieces.pieces.map((p) => p.text).join("") : "");
  const failFirst = prompt.match(/FAIL_FIRST:(\d+)/);
  if (failFirst) {
    const left = failuresLeft.has(failFirst[0]) ? failuresLeft.get(failFirst[0])
                                                : Number(failFirst[1]);
    if (left > 0) {
      failuresLeft.set(failFirst[0], left - 1);
      call.emit("error", { code: grpc.status.UNAVAILABLE, details: "scripted failure" });
      return;
    }
    failuresLeft.set(failFirst[0], 0);
  }
  const delay = Number((prompt.match(/DELAY_MS:(\d+)/) || [0, 0])[1]);
  const answer = answerFor(prompt);
  const max = req.stopping && req.stopping.max_tokens ? req.stopping.max_tokens : 256;
  const pieces = [];
  for (let i = 0; i < answer.length; i += 2) pieces.push(answer.slice(i, i + 2));
  const n = Math.min(pieces.length, max);
  const promptTokens = Math.ceil(prompt.length / 4);
  let cancelled = false;
  call.on("cancelled", () => { cancelled = true; });
  call.write({ started: { request_id: req.request_id, prompt_tokens: promptTokens, seed: 1 } });
  let i = 0;
  const step = () => {
    if (cancelled) return;
    if (i === n) {
      call.write({ finished: { reason: n < pieces.length ? "length" : "stop",
                               usage: { prompt_tokens: promptTokens, completion_tokens: n } } });
      call.end();
      return;
    }
    const top = Array.from({ length: req.logprobs }, (_, k) => ({ id: k, logprob: -1 - k }));
    call.write({ tokens: { tokens: [{ id: 100 + i, index: i, logprob: -0.5, top_logprobs: top }],
                           text: pieces[i] } });
    i += 1;
    setTimeout(step, delay);
  };
  setTimeout(step, delay);
}

const server = new grpc.Server();
server.addService(health.Health.service, {
  Check: (_call, cb) => cb(null, { status: "SERVING" }),
});
server.addService(walsh.Generator.service, {
  Generate: generate,
  GetModelInfo: (_call, cb) => cb(null, info),
  Tokenize: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
  Detokenize: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
});
server.addService(walsh.Worker.service, {
  GetLoad: (_call, cb) => cb(null, { running: 0, waiting: 0, kv_pages_total: 100,
                                     state_slots_total: 8 }),
  Resume: (call) => call.emit("error", { code: grpc.status.UNIMPLEMENTED }),
});
server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err;
  console.log(JSON.stringify({ port }));
});
