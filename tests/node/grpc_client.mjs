// A Node client of walsh.v1 (@grpc/grpc-js + @grpc/proto-loader): Generate, health, reflection.
//   node grpc_client.mjs HOST:PORT PROTO_ROOT TEST_PROTO_ROOT
// Prints one JSON object with what it saw; exits non-zero on failure.
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const [target, protoRoot, testProtoRoot] = process.argv.slice(2);
const load = (file) => grpc.loadPackageDefinition(protoLoader.loadSync(file, {
  includeDirs: [protoRoot, testProtoRoot], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
}));
const walsh = load("walsh/v1/generator.proto").walsh.v1;
const health = load("grpc/health/v1/health.proto").grpc.health.v1;
const reflection = load("grpc/reflection/v1alpha/reflection.proto").grpc.reflection.v1alpha;
const creds = grpc.credentials.createInsecure();

const generate = (request) => new Promise((resolve, reject) => {
  const client = new walsh.Generator(target, creds);
  const seen = { ids: [], text: "", finish: null };
  const call = client.Generate(request, { deadline: Date.now() + 30000 });
  call.on("data", (m) => {
    if (m.tokens) { for (const t of m.tokens.tokens) seen.ids.push(t.id); seen.text += m.tokens.text; }
    if (m.finished) seen.finish = m.finished.reason;
  });
  call.on("error", reject);
  call.on("end", () => resolve(seen));
});

const unary = (client, method, req) => new Promise((resolve, reject) =>
  client[method](req, { deadline: Date.now() + 10000 }, (err, res) => (err ? reject(err) : resolve(res))));

const out = {};
Object.assign(out, await generate({ text: "Hello from Node", sampling: { temperature: 0 },
                                    stopping: { max_tokens: 8, ignore_eos: true } }));
try {
  await generate({ text: "x", stopping: { max_tokens: 0 } });
  out.bad = "accepted";
} catch (e) {
  out.bad = `${e.code} ${e.details}`;
}
out.health = (await unary(new health.Health(target, creds), "Check", { service: "" })).status;
out.services = await new Promise((resolve, reject) => {
  const call = new reflection.ServerReflection(target, creds).ServerReflectionInfo();
  call.on("data", (m) => { resolve(m.list_services_response.service.map((s) => s.name).sort()); call.end(); });
  call.on("error", reject);
  call.write({ list_services: "" });
});
console.log(JSON.stringify(out));
process.exit(0);
