// The pronunciation lexicon of one dialect (American or British English): misaki's gold
// dictionary and, behind it, its silver one (./data, built by tools/g2p-lexicon.ts), read
// lazily on first use. A word is found as written, or in the other of its lowercase and
// Capitalised forms; some words have one pronunciation per part of speech. Words the
// dictionaries lack are tried as a stem with -s, -ed or -ing (the suffix's sound following the
// stem's last phoneme), as letters (an acronym), then by ./fallback.ts.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { applyStress, PRIMARY, SECONDARY } from './stress.js';

export type Dialect = 'us' | 'gb';

/** A word's pronunciation: phonemes, or phonemes per part-of-speech tag (DEFAULT always; an empty string: spell it out). */
type Entry = string | ReadonlyMap<string, string>;

const DATA_DIR = fileURLToPath(new URL('../../../src/engine/g2p/data/', import.meta.url));

/** Where the following word starts (a vowel, a consonant, or nothing: a pause or the end) and whether it is "to". */
export interface Context {
  futureVowel: boolean | null;
  futureTo: boolean;
}

/** Tags the lexicon distinguishes: DEFAULT, NOUN, VERB (with VBD, VBN, VBP), ADJ, ADV, DT; NNP marks a proper noun (an acronym). */
export type Tag = 'NOUN' | 'VERB' | 'VBD' | 'VBN' | 'VBP' | 'ADJ' | 'ADV' | 'DT' | 'NNP' | 'IN';

function parentTag(tag: Tag | undefined): string | undefined {
  return tag === 'VBD' || tag === 'VBN' || tag === 'VBP' ? 'VERB' : tag;
}

/** One part of the lexicon: its lines (`word<TAB>entry`), sorted by word, searched in place. */
class Dictionary {
  constructor(private readonly lines: string[]) {}

  get(word: string): Entry | undefined {
    let lo = 0;
    let hi = this.lines.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const line = this.lines[mid]!;
      const tab = line.indexOf('\t');
      const key = line.slice(0, tab);
      if (key === word) {
        const value = line.slice(tab + 1);
        return value.includes('=') ? new Map(value.split('|').map((kv) => kv.split('=') as [string, string])) : value;
      }
      if (key < word) lo = mid + 1;
      else hi = mid - 1;
    }
    return undefined;
  }
}

function parse(text: string): [Dictionary, Dictionary] {
  const lines = text.split('\n');
  const split = lines.indexOf('#silver');
  return [new Dictionary(lines.slice(0, split)), new Dictionary(lines.slice(split + 1))];
}

const isLower = (w: string) => w === w.toLowerCase();
const isUpper = (w: string) => w === w.toUpperCase();
const capitalize = (w: string) => w.charAt(0).toUpperCase() + w.slice(1).toLowerCase();
/** Letters and apostrophes of the lexicon's alphabet. */
const LEXICON_WORD = /^[A-Za-z'-]+$/;
const ALPHA = /^[A-Za-z]+$/;

export class Lexicon {
  private static readonly loaded = new Map<Dialect, Lexicon>();
  /** Each dialect's lexicon, read on first use. */
  static of(dialect: Dialect): Lexicon {
    let lexicon = Lexicon.loaded.get(dialect);
    if (!lexicon) {
      const [gold, silver] = parse(gunzipSync(readFileSync(`${DATA_DIR}${dialect}.lex.gz`)).toString('utf8'));
      lexicon = new Lexicon(dialect === 'gb', gold, silver);
      Lexicon.loaded.set(dialect, lexicon);
    }
    return lexicon;
  }

  private constructor(
    readonly british: boolean,
    private readonly gold: Dictionary,
    private readonly silver: Dictionary,
  ) {}

  /** The entry as written, else under the word's lowercase or Capitalised twin (two letters or more). */
  private static find(dict: Dictionary, w: string): Entry | undefined {
    const hit = dict.get(w);
    if (hit !== undefined || w.length < 2) return hit;
    if (isLower(w)) return dict.get(capitalize(w));
    return w === capitalize(w) ? dict.get(w.toLowerCase()) : undefined;
  }

  hasGold(w: string): boolean {
    return Lexicon.find(this.gold, w) !== undefined;
  }

  private has(w: string): boolean {
    return this.hasGold(w) || Lexicon.find(this.silver, w) !== undefined;
  }

  /** A word in gold that is one pronunciation (a letter's name, "and", "minus"). */
  plain(w: string): string {
    const e = Lexicon.find(this.gold, w);
    if (typeof e === 'string') return e;
    if (e) return e.get('DEFAULT')!;
    throw new Error(`the lexicon has no ${w}`);
  }

  /** Whether the word is in the lexicon or reads as one (a single letter, an acronym). */
  isKnown(w: string): boolean {
    if (this.has(w) || w in SYMBOLS) return true;
    if (!ALPHA.test(w)) return false;
    if (w.length === 1) return true;
    if (isUpper(w) && this.hasGold(w.toLowerCase())) return true;
    return w.slice(1) === w.slice(1).toUpperCase();
  }

  /** The word spelled out letter by letter (an acronym), stressed on its last letter. */
  letters(w: string): string | undefined {
    const ps: string[] = [];
    for (const c of w) {
      if (!/[A-Za-z]/.test(c)) continue;
      const e = Lexicon.find(this.gold, c.toUpperCase());
      if (typeof e !== 'string') return undefined;
      ps.push(e);
    }
    if (ps.length === 0) return undefined;
    const joined = applyStress(ps.join(''), 0);
    const at = joined.lastIndexOf(SECONDARY);
    return at < 0 ? joined : `${joined.slice(0, at)}${PRIMARY}${joined.slice(at + 1)}`;
  }

  /** The word's phonemes (gold, else silver), the tag choosing among an entry's parts of speech. */
  lookup(word: string, tag: Tag | undefined, stress: number | undefined, ctx: Context | undefined): string | undefined {
    let w = word;
    let properNoun = false;
    if (isUpper(w) && !this.hasGold(w)) {
      w = w.toLowerCase();
      properNoun = tag === 'NNP';
    }
    let entry = Lexicon.find(this.gold, w);
    if (entry === undefined && !properNoun) entry = Lexicon.find(this.silver, w);
    let ps: string | undefined;
    if (typeof entry === 'string') ps = entry;
    else if (entry) {
      const key = ctx?.futureVowel === null && entry.has('None') ? 'None' : tag && entry.has(tag) ? tag : parentTag(tag);
      ps = (key !== undefined && entry.has(key) ? entry.get(key) : entry.get('DEFAULT')) || undefined;
    }
    if (ps === undefined || (properNoun && !ps.includes(PRIMARY))) {
      const spelled = this.letters(w);
      if (spelled !== undefined) return spelled;
    }
    return ps === undefined ? undefined : applyStress(ps, stress);
  }

  /** The -s suffix after a stem's phonemes. */
  plural(stem: string): string {
    const last = stem.slice(-1);
    if ('ptkfθ'.includes(last)) return `${stem}s`;
    if ('szʃʒʧʤ'.includes(last)) return `${stem}${this.british ? 'ɪ' : 'ᵻ'}z`;
    return `${stem}z`;
  }

  /** The -ed suffix after a stem's phonemes. */
  past(stem: string): string {
    const last = stem.slice(-1);
    if ('pkfθʃsʧ'.includes(last)) return `${stem}t`;
    if (last === 'd') return `${stem}${this.british ? 'ɪ' : 'ᵻ'}d`;
    if (last !== 't') return `${stem}d`;
    if (this.british || stem.length < 2) return `${stem}ɪd`;
    return US_TAPS.has(stem.slice(-2, -1)) ? `${stem.slice(0, -1)}ɾᵻd` : `${stem}ᵻd`;
  }

  /** The -ing suffix after a stem's phonemes (none for a British stem ending in a schwa or length mark). */
  progressive(stem: string): string | undefined {
    const last = stem.slice(-1);
    if (this.british) return 'əː'.includes(last) ? undefined : `${stem}ɪŋ`;
    if (stem.length > 1 && last === 't' && US_TAPS.has(stem.slice(-2, -1))) return `${stem.slice(0, -1)}ɾɪŋ`;
    return `${stem}ɪŋ`;
  }

  private stemmed(w: string, tag: Tag | undefined, stress: number | undefined, ctx: Context | undefined): string | undefined {
    const known = (s: string) => this.isKnown(s);
    const look = (s: string, st = stress) => this.lookup(s, tag, st, ctx);
    if (w.length >= 3 && w.endsWith('s')) {
      let stem: string | undefined;
      if (!w.endsWith('ss') && known(w.slice(0, -1))) stem = w.slice(0, -1);
      else if ((w.endsWith("'s") || (w.length > 4 && w.endsWith('es') && !w.endsWith('ies'))) && known(w.slice(0, -2))) stem = w.slice(0, -2);
      else if (w.length > 4 && w.endsWith('ies') && known(`${w.slice(0, -3)}y`)) stem = `${w.slice(0, -3)}y`;
      const ps = stem === undefined ? undefined : look(stem);
      if (ps) return this.plural(ps);
    }
    if (w.length >= 4 && w.endsWith('d')) {
      let stem: string | undefined;
      if (!w.endsWith('dd') && known(w.slice(0, -1))) stem = w.slice(0, -1);
      else if (w.length > 4 && w.endsWith('ed') && !w.endsWith('eed') && known(w.slice(0, -2))) stem = w.slice(0, -2);
      const ps = stem === undefined ? undefined : look(stem);
      if (ps) return this.past(ps);
    }
    if (w.length >= 5 && w.endsWith('ing')) {
      const base = w.slice(0, -3);
      let stem: string | undefined;
      if (w.length > 5 && known(base)) stem = base;
      else if (known(`${base}e`)) stem = `${base}e`;
      else if (w.length > 5 && /([bcdgklmnprstvxz])\1ing$|cking$/.test(w) && known(w.slice(0, -4))) stem = w.slice(0, -4);
      const ps = stem === undefined ? undefined : look(stem, stress ?? 0.5);
      if (ps) return this.progressive(ps);
    }
    return undefined;
  }

  /**
   * A word's phonemes from the lexicon (as written, lowercased where it is Capitalised or
   * all capitals and the lowercase word is known, possessive, or a stem with a suffix), or
   * undefined.
   */
  word(word: string, tag: Tag | undefined, stress: number | undefined, ctx: Context | undefined): string | undefined {
    if (!LEXICON_WORD.test(word)) return undefined;
    let w = word;
    const lower = w.toLowerCase();
    if (w.length > 1 && ALPHA.test(w.replaceAll("'", '')) && !isLower(w) && (tag !== 'NNP' || w.length > 7) && !this.has(w)
      && (isUpper(w) || w.slice(1) === w.slice(1).toLowerCase())
      && (this.has(lower) || this.stemmed(lower, tag, stress, ctx) !== undefined)) {
      w = lower;
    }
    if (this.isKnown(w)) return this.lookup(w, tag, stress, ctx);
    if (w.endsWith("s'") && this.isKnown(`${w.slice(0, -2)}'s`)) return this.lookup(`${w.slice(0, -2)}'s`, tag, stress, ctx);
    if (w.endsWith("'") && this.isKnown(w.slice(0, -1))) return this.lookup(w.slice(0, -1), tag, stress, ctx);
    return this.stemmed(w, tag, stress, ctx);
  }
}

/** Vowels (and ɹ) after which an American t between vowels is a tap. */
const US_TAPS = new Set('AIOWYiuæɑəɛɪɹʊʌ');

/** Symbols read as words. */
export const SYMBOLS: Readonly<Record<string, string>> = { '%': 'percent', '&': 'and', '+': 'plus', '@': 'at' };
