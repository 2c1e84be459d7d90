#!/usr/bin/env node
// tokenizer_npm_diff.js — mha's GPT-2 tokenizer against the npm package
// gpt-3-encoder 1.1.4 (the reference), on a corpus of hand-picked and seeded
// random texts: every text must encode to the same ids, decode back to its
// bytes, and random id lists must decode to what the package's decode() gives.
//
//   node tests/tokenizer_npm_diff.js --driver build/tests/tok_driver [--bin build/mha]
//
// The package is looked for in $MHA_GPT3_ENCODER, then tests/.npm/node_modules
// (scripts/deps.sh --test installs it there). When it is not installed: exit
// 77 (a skip for ctest), or 1 under CI (missingOracle below); 1 on any
// difference.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const root = path.resolve(__dirname, '..');
const dataDir = path.join(root, 'data', 'gpt2');
const VERSION = '1.1.4';

function arg(name) {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}
const driver = arg('--driver') || process.env.MHA_TOK_DRIVER;
const bin = arg('--bin') || process.env.MHA_BIN;
const quick = process.argv.includes('--quick');
if (!driver) {
  console.error('usage: tokenizer_npm_diff.js --driver PATH/tok_driver [--bin PATH/mha] [--quick]');
  process.exit(2);
}

// ---- the reference -------------------------------------------------------

// A missing reference: a skip (77) for a developer, a failure where CI is set
// and not empty or MHA_REQUIRE_ORACLES=1 (0 makes it a skip again), or CI
// would pass without the check: tests/oracle.py's rule, for node.
function missingOracle(what) {
  const req = process.env.MHA_REQUIRE_ORACLES || '';
  const why = req ? (req === '1' ? 'MHA_REQUIRE_ORACLES=1' : '') : (process.env.CI ? `CI=${process.env.CI}` : '');
  const install = 'scripts/deps.sh --test installs it';
  if (why) {
    console.log(`tokenizer_npm_diff: FAIL: ${what}; ${install} ` +
                `(${why}: a missing oracle fails; MHA_REQUIRE_ORACLES=0 makes it a skip)`);
    process.exit(1);
  }
  console.log(`tokenizer_npm_diff: skipped: ${what}; ${install}`);
  process.exit(77);
}

const pkgDir = process.env.MHA_GPT3_ENCODER ||
  path.join(root, 'tests', '.npm', 'node_modules', 'gpt-3-encoder');
if (!fs.existsSync(path.join(pkgDir, 'Encoder.js'))) {
  missingOracle(`npm's gpt-3-encoder is not installed in ${pkgDir} ` +
                `(npm install --prefix tests/.npm gpt-3-encoder@${VERSION})`);
}
const pkgVersion = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
const ref = require(pkgDir);

let failures = 0;
function fail(msg) {
  failures++;
  if (failures <= 20) console.log('FAIL ' + msg);
}

if (pkgVersion !== VERSION) fail(`gpt-3-encoder is ${pkgVersion}, the test is written for ${VERSION}`);
for (const f of ['encoder.json', 'vocab.bpe']) {
  if (!fs.readFileSync(path.join(pkgDir, f)).equals(fs.readFileSync(path.join(dataDir, f))))
    fail(`${f} of the package differs from data/gpt2/${f}`);
}

// The Unicode classes: mha's tables are generated from some Node.js; this one
// may have another Unicode version. Then the code points it classes otherwise
// are left out of the random texts (said so below); the same version with a
// different class is a failure.
const tables = require(path.join(root, 'scripts', 'gen_unicode_tables.js'));
const cmp = tables.compare(path.join(root, 'src', 'tokenizer', 'unicode_tables.c'));
const excluded = new Set();
if (cmp.diffs.length) {
  const eg = cmp.diffs.slice(0, 3).map(([cp, a, b]) => `U+${cp.toString(16).toUpperCase()} ${a}->${b}`).join(', ');
  if (cmp.version === process.versions.unicode) {
    fail(`unicode_tables.c (Unicode ${cmp.version}) and node ${process.version} (the same version) ` +
         `class ${cmp.diffs.length} code points differently, e.g. ${eg}`);
  } else {
    console.log(`note: unicode_tables.c is Unicode ${cmp.version}, node ${process.version} has ` +
                `Unicode ${process.versions.unicode}: ${cmp.diffs.length} code points are classed ` +
                `differently (e.g. ${eg}) and left out of the random texts; ` +
                `node scripts/gen_unicode_tables.js regenerates the tables for this node`);
  }
  for (const [cp] of cmp.diffs) excluded.add(cp);
}

// ---- the corpus ------------------------------------------------------------

// mulberry32: a small seeded generator, so the corpus is the same every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20240601);
const pick = a => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const cps = s => Array.from(s, c => c.codePointAt(0));
const chars = s => Array.from(s);

const hand = [
  'Hello, I am', 'Hello, world!', 'Every effort moves you', '',
  // contractions, upper case ones are not special in GPT-2
  "I'm sure it's what we'd've said, you'll see they're and we've", "don't can't won't",
  "DON'T IT'S WE'RE I'M YOU'LL THEY'VE HE'D", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D",
  "''s '''t x's 'sss 'Ll 'rE", "rock 'n' roll", "’s curly apostrophe’s", " 's", "'", "''",
  // white space: runs, mixes, ends
  'a  b   c    d', '   leading', 'trailing   ', '\n', '\n\n', '\n\n\nx', 'x\n\n\n', 'a\n b', 'a \nb',
  '\t\tindented\n\t\tcode', ' \t \t x', '\r\n', 'line1\r\nline2\r\n', 'a\u00a0b', 'a \u00a0 b',
  '\u3000\u3000ideographic', 'x\u2028y\u2029z', 'nel\u0085here', 'bom\ufeffhere', '\u180emongolian',
  'fs\u001c\u001d\u001e\u001fsep', 'v\u000bf\u000c', ' '.repeat(100) + 'x', '\n'.repeat(50),
  '  \n  \n', ' \u2003 x', '\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f',
  // digits
  '0123456789', '3.14159265358979', '1,000,000', ' 42', '1st 2nd 3rd', 'abc123def456',
  '٣٤٥ ۱۲۳ १२३ ১২৩', 'Ⅻ ½ ² ₃ ①', '12345678901234567890',
  // scripts
  '日本語のテキストです。東京', '中文字符和标点符号，还有数字123。', '한국어 텍스트 입니다',
  'مرحبا بالعالم، هذا نص عربي', 'שלום עולם', 'नमस्ते दुनिया, यह हिन्दी है', 'क्षत्रिय कि की कु',
  'Привет, мир! Это русский текст.', 'Ελληνικά γράμματα', 'ภาษาไทย', 'ქართული',
  'é (e + U+0301: e\u0301) ñ n\u0303', 'Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǫ̗͕̹͔ ̯̮͓t̝̬͆e̙̾͛x̣͍t̳͟',
  // emoji
  '😀😃😄', '🤗 hugging face', '👨‍👩‍👧‍👦 family', '🇫🇷🇯🇵 flags', '👍🏽 skin', '❤️ heart', 'a😀b',
  '🏳️‍🌈', ' 😀 😀  😀',
  // special-looking text
  '<|endoftext|>', 'Hello<|endoftext|>World', '<|endoftext|><|endoftext|>',
  'https://example.com/path?q=1&r=2#frag', 'user@example.com', '{"key": [1, 2, {"a": null}]}',
  'int main(void) { return 0; }\n', '#include <stdio.h>\n\nint x = 1;\n', '$$\\frac{a}{b}$$',
  // punctuation runs around the comma keys
  '",""', '"},{"', '"],"', '"),"', '\'],\'', '"],["', '.",","', ',,,,', ',",",",', '\'",\'"', '.,"',
  '... !!! ??? ---', '—–-', '«»“”‘’', '\u0000nul\u0000', '\u0001\u0002\u007f',
  'a'.repeat(300), 'ab'.repeat(200), 'é'.repeat(100), '😀'.repeat(50), '!'.repeat(200),
];

// Pools for random text.
const ws = [' ', ' ', ' ', '\n', '\t', '\r', '\u000b', '\u000c', '\u00a0', '\u1680', '\u2000', '\u200a',
            '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff', '\u0085', '\u001c', '\u180e'];
const words = ['the', 'of', 'and', 'to', 'in', 'is', 'that', 'attention', 'model', 'token', 'GPT',
               'Transformer', 'naïve', 'café', 'über', 'São', 'Zürich', 'Москва', '東京', 'مرحبا',
               'हिन्दी', '😀', 'x', 'I', 'A', "it's", "I'm", "we'll", "IT'S", 'll', 're', 's', 't',
               '2024', '3.5', '100%', '$5', '#1', '@home', 'e.g.', 'U.S.A.', 'don\'t', '"quoted"',
               '(paren)', '[bracket]', '{brace}', 'snake_case', 'camelCase', 'x86-64'];
const punct = chars('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…•§¶†‡°±×÷');
const commaPunct = chars('",\'])}.[({ ');
const blocks = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff], [0xe00, 0xe7f], [0x1100, 0x11ff],
  [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2100, 0x218f], [0x2460, 0x24ff],
  [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xfe00, 0xfe0f],
  [0xff00, 0xffef], [0x1f300, 0x1f64f], [0x1f900, 0x1f9ff], [0x1d400, 0x1d7ff], [0x10000, 0x1007f],
  [0x20000, 0x2a6df], [0xe0000, 0xe007f], [0xf0000, 0xf00ff],
];

function cpOk(cp) {
  return !(cp >= 0xd800 && cp <= 0xdfff) && !excluded.has(cp);
}
function randCp() {
  let cp;
  do {
    const r = rand();
    if (r < 0.5) { const b = pick(blocks); cp = int(b[0], b[1]); }
    else if (r < 0.6) cp = pick(ws).codePointAt(0);
    else if (r < 0.7) cp = int(0, 0x7f);
    else cp = int(0, 0x10ffff); // anything, assigned or not
  } while (!cpOk(cp));
  return String.fromCodePoint(cp);
}
function randomCodePoints(n) {
  let s = '';
  for (let i = 0; i < n; i++) s += randCp();
  return s;
}
function randomWords(n) {
  let s = '';
  for (let i = 0; i < n; i++) {
    const r = rand();
    if (r < 0.6) s += pick(words);
    else if (r < 0.75) s += pick(punct);
    else if (r < 0.85) s += String(int(0, 99999));
    else s += randCp();
    const w = rand();
    s += w < 0.7 ? ' ' : w < 0.8 ? '' : w < 0.9 ? pick(ws) : pick(ws).repeat(int(2, 6));
  }
  return s;
}
function randomPunct(n) {
  let s = '';
  for (let i = 0; i < n; i++) s += pick(rand() < 0.8 ? commaPunct : punct);
  return s;
}
function randomSpaces(n) {
  let s = '';
  for (let i = 0; i < n; i++) s += rand() < 0.6 ? pick(ws) : pick(['a', 'Z', '1', '.', "'", '😀', 'é', 's']);
  return s;
}

const scale = quick ? 0.25 : 1;
const corpus = hand.slice();
for (let i = 0; i < 1200 * scale; i++) corpus.push(randomCodePoints(int(1, 24)));
for (let i = 0; i < 600 * scale; i++) corpus.push(randomWords(int(1, 30)));
for (let i = 0; i < 600 * scale; i++) corpus.push(randomPunct(int(2, 12)));
for (let i = 0; i < 600 * scale; i++) corpus.push(randomSpaces(int(1, 16)));
for (let i = 0; i < 40 * scale; i++) corpus.push(randomWords(int(200, 600)));
for (let i = 0; i < 40 * scale; i++) corpus.push(randomCodePoints(int(200, 1000)));

// ---- run ------------------------------------------------------------------

function runDriver(requests) {
  const r = spawnSync(driver, [dataDir], { input: Buffer.concat(requests), maxBuffer: 1 << 30 });
  if (r.error || r.status !== 0) {
    console.log(`FAIL ${driver}: ${r.error || `exit ${r.status}: ${r.stderr}`}`);
    process.exit(1);
  }
  return r.stdout.toString('utf8').split('\n').slice(0, -1);
}

const show = s => JSON.stringify(s.length > 80 ? s.slice(0, 80) + '…' : s);

const t0 = Date.now();
const expected = corpus.map(s => ref.encode(s).join(','));
const tRef = Date.now() - t0;
const t1 = Date.now();
const answers = runDriver(corpus.map(s => {
  const b = Buffer.from(s, 'utf8');
  return Buffer.concat([Buffer.from(`E ${b.length}\n`), b]);
}));
const tMha = Date.now() - t1;
let bytes = 0, nIds = 0;
corpus.forEach((s, i) => {
  bytes += Buffer.byteLength(s);
  nIds += expected[i] ? expected[i].split(',').length : 0;
  if (answers[i] !== expected[i])
    fail(`encode ${show(s)}: gpt-3-encoder ${expected[i]}, mha ${answers[i]}`);
});
console.log(`encode: ${corpus.length} texts (${hand.length} by hand, ${corpus.length - hand.length} ` +
            `random), ${bytes} bytes, ${nIds} ids; gpt-3-encoder ${tRef} ms, mha ${tMha} ms ` +
            `(a process, round trip checked)`);

// Decoding random id lists, halves of characters included: the package
// decodes the bytes with TextDecoder (U+FFFD for what is not UTF-8); mha
// gives the bytes, which TextDecoder must turn into the same text.
const V = 50257;
const idLists = [];
for (let i = 0; i < 1000 * scale; i++) {
  const n = int(1, 12), ids = [];
  for (let k = 0; k < n; k++) ids.push(rand() < 0.3 ? int(0, 255) : int(0, V - 1));
  idLists.push(ids);
}
idLists.push([V - 1], [0], [188, 189, 190], ref.encode('🤗').slice(0, 1), ref.encode('🤗').slice(1));
const hexes = runDriver(idLists.map(ids => Buffer.from(`D ${ids.join(',')}\n`)));
const td = new TextDecoder('utf-8');
idLists.forEach((ids, i) => {
  const mine = td.decode(Buffer.from(hexes[i], 'hex'));
  const theirs = ref.decode(ids);
  if (mine !== theirs) fail(`decode [${ids}]: gpt-3-encoder ${show(theirs)}, mha ${show(mine)}`);
});
console.log(`decode: ${idLists.length} random id lists`);

// Refused input: ids out of range, invalid UTF-8.
const refused = runDriver([Buffer.from(`D 1,${V}\n`), Buffer.from('D -1\n'),
                           Buffer.concat([Buffer.from('E 3\n'), Buffer.from([0x61, 0xff, 0x62])])]);
if (!/^ERR MHA_ERR_ARGUMENT .*\[1\] = 50257/.test(refused[0])) fail(`id ${V}: ${refused[0]}`);
if (!/^ERR MHA_ERR_ARGUMENT .*-1/.test(refused[1])) fail(`id -1: ${refused[1]}`);
if (!/^ERR MHA_ERR_ARGUMENT .*byte 1 /.test(refused[2])) fail(`invalid UTF-8: ${refused[2]}`);

// The CLI on a long mixed text through stdin, and on an argument.
if (bin) {
  const text = hand.join('\n') + randomWords(300);
  const r = spawnSync(bin, ['tokenize', '--vocab', dataDir, '-'], { input: Buffer.from(text) });
  const want = ref.encode(text).join(',') + '\n';
  if (r.status !== 0 || r.stdout.toString() !== want)
    fail(`mha tokenize - (${text.length} characters): exit ${r.status}, ${r.stderr}`);
  const a = "Hello, I'm 😀 ٣٤ naïve\n";
  const r2 = spawnSync(bin, ['tokenize', '--vocab', dataDir, '--json', a]);
  if (r2.status !== 0 || JSON.stringify(JSON.parse(r2.stdout.toString())) !== JSON.stringify(ref.encode(a)))
    fail(`mha tokenize --json ${show(a)}: ${r2.stdout}${r2.stderr}`);
  const ids = ref.encode('🤗x').slice(1);
  const r3 = spawnSync(bin, ['tokenize', '--vocab', dataDir, '--json', '--decode', ids.join(',')]);
  if (r3.status !== 0 || JSON.parse(r3.stdout.toString()) !== ref.decode(ids))
    fail(`mha tokenize --json --decode ${ids}: ${r3.stdout}${r3.stderr}`);
  console.log('cli: mha tokenize -, --json, --json --decode');
}

if (failures) {
  console.log(`${failures} difference(s) from gpt-3-encoder ${pkgVersion}`);
  process.exit(1);
}
console.log(`identical to gpt-3-encoder ${pkgVersion} on node ${process.version} (Unicode ${process.versions.unicode})`);
