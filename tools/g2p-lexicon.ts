// Builds the text front end's pronunciation lexicons (src/engine/g2p/data/{us,gb}.lex.gz) from
// misaki's Apache-2.0 dictionaries (github.com/hexgrad/misaki, misaki/data/{us,gb}_{gold,silver}.json):
//   npx tsx tools/g2p-lexicon.ts DIR_WITH_THE_FOUR_JSON_FILES
// One line per word, gold entries first, then a line "#silver" and the silver entries (which the
// gold ones shadow); each part sorted by word (UTF-16 code units), for a binary search. A line is `word<TAB>phonemes`, or for a word whose pronunciation depends on
// its part of speech `word<TAB>TAG=phonemes|TAG=phonemes...` (an empty value: misaki's null).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

const dir = process.argv[2];
if (!dir) throw new Error('usage: tsx tools/g2p-lexicon.ts DIR (holding us_gold.json, us_silver.json, gb_gold.json, gb_silver.json)');
const out = new URL('../src/engine/g2p/data/', import.meta.url);

type Entry = string | Record<string, string | null>;

function lines(file: string, gold: Record<string, Entry> = {}): string[] {
  const words = JSON.parse(readFileSync(join(dir!, file), 'utf8')) as Record<string, Entry>;
  return Object.entries(words)
    .filter(([word]) => !(word in gold))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([word, v]) => {
      if (/[\t\n]/.test(word)) throw new Error(`${file}: a word with a tab or newline: ${JSON.stringify(word)}`);
      const value = typeof v === 'string' ? v : Object.entries(v).map(([tag, ps]) => `${tag}=${ps ?? ''}`).join('|');
      return `${word}\t${value}`;
    });
}

for (const dialect of ['us', 'gb']) {
  const gold = JSON.parse(readFileSync(join(dir, `${dialect}_gold.json`), 'utf8')) as Record<string, Entry>;
  const text = [...lines(`${dialect}_gold.json`), '#silver', ...lines(`${dialect}_silver.json`, gold)].join('\n');
  const bytes = gzipSync(text, { level: 9 });
  writeFileSync(new URL(`${dialect}.lex.gz`, out), bytes);
  console.log(`${dialect}.lex.gz: ${bytes.length} bytes`);
}
