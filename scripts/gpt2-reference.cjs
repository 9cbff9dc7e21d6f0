// The reference GPT-2 tokenizers for xtrain's tests and benchmark: js-tiktoken's `gpt2` encoding,
// and Hugging Face's tokenizers (Tokenizers.js) on a model directory's tokenizer.json, from the
// cache that scripts/fetch-gpt2-reference.sh fills (the ranks ship in the package; nothing is
// fetched at run time).
//
// tiktoken proper matches \s with the Rust regex crate, where it is Unicode's White_Space; in
// JavaScript \s is a different set (it adds U+FEFF and lacks U+0085). The default pattern is
// therefore the gpt2 pattern with \s and \S spelled \p{White_Space} and \P{White_Space}; --stock
// keeps js-tiktoken's own.
//
// Usage: node scripts/gpt2-reference.cjs CACHE_DIR COMMAND ...
//   encode [--stock] DOCS OUT   DOCS: documents, each a uint32 (little-endian) byte count and its
//                               UTF-8; OUT: per document a uint32 token count and int32 tokens
//   classes OUT                 one byte per code point 0..0x10FFFF as this engine's regex sees it:
//                               1 \p{L}, 2 \p{N}, 3 White_Space, 4 unassigned (\p{Cn}), 0 other;
//                               prints the engine's Unicode version
//   bench FILE SECONDS          encodes FILE (one document) repeatedly with js-tiktoken as shipped,
//                               after a warm-up pass; prints "TOKENS WALL_MB_PER_S CPU_MB_PER_S"
//                               (CPU: the process's user + system time)
//   hf-encode DIR DOCS OUT      DOCS as encode's, through Tokenizers.js loading DIR's
//                               tokenizer.json and tokenizer_config.json, as from_pretrained
//                               would; OUT: per document its tokens as encode writes them, then a
//                               uint32 byte count and the UTF-8 that decoding those tokens gives
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [cacheDir, command, ...args] = process.argv.slice(2);
if (!cacheDir || !command) {
  console.error("usage: node gpt2-reference.cjs CACHE_DIR encode|classes|bench|hf-encode ...");
  process.exit(2);
}
const requireFromCache = createRequire(path.join(path.resolve(cacheDir), "package.json"));

function tokenizer(stock) {
  const { Tiktoken } = requireFromCache("js-tiktoken/lite");
  const gpt2 = requireFromCache("js-tiktoken/ranks/gpt2");
  const pat_str = stock ? gpt2.pat_str : gpt2.pat_str.replaceAll("\\s", "\\p{White_Space}").replaceAll("\\S", "\\P{White_Space}");
  return new Tiktoken({ ...gpt2, pat_str });
}

function readDocuments(file) {
  const buf = fs.readFileSync(file);
  const docs = [];
  for (let pos = 0; pos < buf.length; ) {
    const n = buf.readUInt32LE(pos);
    docs.push(buf.toString("utf8", pos + 4, pos + 4 + n));
    pos += 4 + n;
  }
  return docs;
}

function encode(argv) {
  const stock = argv[0] === "--stock";
  const [docsFile, outFile] = stock ? argv.slice(1) : argv;
  const enc = tokenizer(stock);
  const parts = [];
  for (const doc of readDocuments(docsFile)) {
    const tokens = enc.encode(doc, [], []);  // <|endoftext|> in the text is ordinary text
    const out = Buffer.alloc(4 + 4 * tokens.length);
    out.writeUInt32LE(tokens.length, 0);
    tokens.forEach((t, i) => out.writeInt32LE(t, 4 + 4 * i));
    parts.push(out);
  }
  fs.writeFileSync(outFile, Buffer.concat(parts));
}

function hfEncode([dir, docsFile, outFile]) {
  const { Tokenizer } = requireFromCache("@huggingface/tokenizers");
  const json = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
  const tokenizer = new Tokenizer(json("tokenizer.json"), json("tokenizer_config.json"));
  const parts = [];
  for (const doc of readDocuments(docsFile)) {
    const ids = tokenizer.encode(doc).ids;
    const text = Buffer.from(ids.length > 0 ? tokenizer.decode(ids) : "", "utf8");
    const out = Buffer.alloc(8 + 4 * ids.length);
    out.writeUInt32LE(ids.length, 0);
    ids.forEach((t, i) => out.writeInt32LE(t, 4 + 4 * i));
    out.writeUInt32LE(text.length, 4 + 4 * ids.length);
    parts.push(out, text);
  }
  fs.writeFileSync(outFile, Buffer.concat(parts));
}

function classes([outFile]) {
  const letter = /\p{L}/u, number = /\p{N}/u, space = /\p{White_Space}/u, unassigned = /\p{Cn}/u;
  const out = Buffer.alloc(0x110000);
  for (let c = 0; c < 0x110000; c++) {
    const s = String.fromCodePoint(c);
    out[c] = letter.test(s) ? 1 : number.test(s) ? 2 : space.test(s) ? 3 : unassigned.test(s) ? 4 : 0;
  }
  fs.writeFileSync(outFile, out);
  console.log(process.versions.unicode);
}

function bench([file, seconds]) {
  const text = fs.readFileSync(file, "utf8");
  const bytes = Buffer.byteLength(text);
  const enc = tokenizer(false);
  enc.encode(text, [], []);  // warm up: JIT, the engine's regex compilation
  let runs = 0, tokens = 0, elapsed = 0;
  const start = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();
  do {
    tokens = enc.encode(text, [], []).length;
    ++runs;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  } while (elapsed < Number(seconds));
  const cpu = process.cpuUsage(cpuStart);
  const mb = (bytes * runs) / 1e6;
  console.log(`${tokens} ${(mb / elapsed).toFixed(2)} ${(mb / ((cpu.user + cpu.system) / 1e6)).toFixed(2)}`);
}

const commands = { encode, classes, bench, "hf-encode": hfEncode };
if (!(command in commands)) {
  console.error(`gpt2-reference: unknown command ${command}`);
  process.exit(2);
}
commands[command](args);
