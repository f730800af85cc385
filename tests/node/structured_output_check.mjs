// Structured output checked by validators walsh does not share code with: every JSON Schema of
// the JSON Schema Test Suite (draft 2020-12) goes to a real worker as a json_schema constraint,
// and each output must parse and pass ajv; regex outputs must match ECMAScript RegExp; grammar
// outputs must parse with the recursive-descent parser below.
//   node structured_output_check.mjs HOST:PORT PROTO_ROOT TEST_PROTO_ROOT SUITE_DIR
// Prints one JSON object with what it saw; exits non-zero on a transport failure.
import fs from "fs";
import path from "path";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [target, protoRoot, testProtoRoot, suiteDir] = process.argv.slice(2);
const walsh = grpc.loadPackageDefinition(protoLoader.loadSync("walsh/v1/generator.proto", {
  includeDirs: [protoRoot, testProtoRoot], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
})).walsh.v1;
const client = new walsh.Generator(target, grpc.credentials.createInsecure());

const generate = (request) => new Promise((resolve) => {
  const seen = { text: "", finish: null, error: null };
  const call = client.Generate(request, { deadline: Date.now() + 600000 });
  call.on("data", (m) => {
    if (m.tokens) seen.text += m.tokens.text;
    if (m.finished) seen.finish = m.finished.reason;
  });
  call.on("error", (e) => { seen.error = `${grpc.status[e.code]} ${e.details}`; resolve(seen); });
  call.on("end", () => resolve(seen));
});

async function runAll(jobs, width) {
  const results = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < jobs.length) { const i = next++; results[i] = await jobs[i](); }
  }));
  return results;
}

const base = (seed) => ({ text: "Answer:", sampling: { temperature: 1, seed }, stopping: { max_tokens: 1024 } });

// JSON schemas: every test group with at least one valid instance.
const groups = [];
const walk = (dir) => {
  for (const name of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    if (fs.statSync(p).isDirectory()) walk(p);
    else if (name.endsWith(".json")) {
      for (const g of JSON.parse(fs.readFileSync(p, "utf8"))) {
        if (g.tests.some((t) => t.valid)) groups.push({ file: path.relative(suiteDir, p), description: g.description, schema: g.schema });
      }
    }
  }
};
walk(suiteDir);
// ownProperties: a member named like an Object.prototype property ("constructor") is absent
// unless the document has it.
const ajv = new Ajv2020({ strict: false, validateFormats: true, ownProperties: true });
addFormats(ajv);
const report = { schemas: groups.length, accepted: 0, refused: [], stop: 0, length: 0, invalid: [], unparsed: [], ajv_cannot_compile: [] };
const outputs = await runAll(groups.map((g, i) => () => generate({ ...base(1000 + i), json_schema: JSON.stringify(g.schema) })), 16);
groups.forEach((g, i) => {
  const o = outputs[i];
  const where = `${g.file}: ${g.description}`;
  if (o.error) {
    report.refused.push({ where, error: o.error });
    return;
  }
  report.accepted++;
  if (o.finish !== "stop") { report.length++; return; }
  report.stop++;
  let doc;
  try { doc = JSON.parse(o.text); } catch (e) { report.unparsed.push({ where, text: o.text, error: String(e) }); return; }
  let validate;
  try { validate = ajv.compile(g.schema); } catch (e) { report.ajv_cannot_compile.push({ where, text: o.text, error: String(e) }); return; }
  if (!validate(doc)) report.invalid.push({ where, text: o.text, errors: validate.errors });
});

// Regular expressions, each matched in full.
const patterns = ["[a-z]{3,8}", "(yes|no|maybe)", "\\d{3}-\\d{4}", "[A-Z][a-z]+( [A-Z][a-z]+)*",
  "(0|[1-9]\\d*)(\\.\\d+)?", "#[0-9a-fA-F]{6}", "(ab|cd)+e?", "[^\\s]{1,12}", "\\w+@\\w+\\.(com|org)",
  "(\\+|-)?\\d{1,4}(,\\d{3})*", "[αβγ]{2,5}!", "\\u00e9+\\.", "(x|y|z){4}", "[a-c]*d[a-c]*",
  "(true|false|null)", "v\\d+\\.\\d+\\.\\d+(-rc\\d)?", "[0-1]{8}", "\"[^\"]{0,10}\"", "a.{2}b", "(?:[a-z]\\d)+"];
report.regex = { patterns: patterns.length, stop: 0, length: 0, invalid: [] };
const regexOut = await runAll(patterns.flatMap((p, i) => [0, 1, 2].map((k) => () => generate({ ...base(i * 10 + k), regex: p }))), 16);
regexOut.forEach((o, j) => {
  const p = patterns[Math.floor(j / 3)];
  if (o.error) { report.regex.invalid.push({ p, error: o.error }); return; }
  if (o.finish !== "stop") { report.regex.length++; return; }
  report.regex.stop++;
  if (!new RegExp(`^(?:${p})$`, "u").test(o.text)) report.regex.invalid.push({ p, text: o.text });
});

// A grammar of arithmetic over integers, and an independent parser for it.
const arithmetic = `
root   ::= expr
expr   ::= term ( ( "+" | "-" ) term )*
term   ::= factor ( ( "*" | "/" ) factor )*
factor ::= [0-9]{1,3} | "(" expr ")" | "-" factor
`;
const parseArithmetic = (s) => {
  let i = 0;
  const factor = () => {
    if (s[i] === "(") { i++; expr(); if (s[i++] !== ")") throw new Error(`')' expected at ${i}`); return; }
    if (s[i] === "-") { i++; factor(); return; }
    const start = i;
    while (i < s.length && s[i] >= "0" && s[i] <= "9") i++;
    if (i === start || i - start > 3) throw new Error(`a number expected at ${start}`);
  };
  const term = () => { factor(); while (s[i] === "*" || s[i] === "/") { i++; factor(); } };
  const expr = () => { term(); while (s[i] === "+" || s[i] === "-") { i++; term(); } };
  expr();
  if (i !== s.length) throw new Error(`trailing text at ${i}`);
};
report.grammar = { stop: 0, length: 0, invalid: [] };
const grammarOut = await runAll(Array.from({ length: 24 }, (_, k) => () => generate({ ...base(500 + k), grammar: arithmetic })), 16);
for (const o of grammarOut) {
  if (o.error) { report.grammar.invalid.push({ error: o.error }); continue; }
  if (o.finish !== "stop") { report.grammar.length++; continue; }
  report.grammar.stop++;
  try { parseArithmetic(o.text); } catch (e) { report.grammar.invalid.push({ text: o.text, error: String(e) }); }
}

console.log(JSON.stringify(report));
process.exit(0);
