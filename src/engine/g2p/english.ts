// English text to Kokoro's phonemes (misaki's alphabet), American or British. The text is cut
// into words and punctuation; each word is read right to left, so a word knows where the next
// one starts (a vowel, a consonant, or a pause: "the" is ði before a vowel, "to" tʊ, and a few
// words have a stressed form before a pause). A word is, in order: a phoneme override
// ([word](/phonemes/)), a function word with a contextual form, a lexicon word (./lexicon.ts),
// a number (cardinal, ordinal, year, decimal, money after $ £ €, with an -s/-ed/-ing suffix),
// an abbreviation, dotted letters ("U.S."), its parts (hyphens, symbols, digits and letters
// read one after another), and otherwise ./fallback.ts.
//
// Heteronyms (an entry with one pronunciation per part of speech) are chosen by the word
// before: after to, a modal, "do" or a subject pronoun the verb; after have or be the past
// participle; after a determiner, possessive or preposition the noun; otherwise the entry's
// default. Punctuation that Kokoro voices (;:,.!?—…"“”()) is kept. American taps are written
// T, as Kokoro-82M v1.0 was trained (misaki's default output version).
import { cardinal, decimal, digits, ordinal, year } from './numbers.js';
import { fallback, joinStressed } from './fallback.js';
import { Lexicon, SYMBOLS, type Context, type Dialect, type Tag } from './lexicon.js';
import { CONSONANTS, PRIMARY, SECONDARY, VOWELS } from './stress.js';

export type { Dialect } from './lexicon.js';

/** Punctuation kept in the phonemes. */
const PUNCTUATION = new Set(';:,.!?—…"“”()');
/** Punctuation that is a pause (a quote is not). */
const PAUSES = new Set(';:,.!?—…');
/** Characters that leave a word's start or end as punctuation. */
const LEADING = /^["“”‘'(\[{]+/;
const TRAILING = /["“”’')\]},.!?;:…]+$/;
const SENTENCE_END = /[.!?…]["”’')\]]*$/;

const CURRENCIES: Readonly<Record<string, [string, string]>> = { $: ['dollar', 'cent'], '£': ['pound', 'pence'], '€': ['euro', 'cent'] };

/** Abbreviations the lexicon lacks, read as words. */
const ABBREVIATIONS: Readonly<Record<string, string>> = {
  'e.g.': 'for example', 'i.e.': 'that is', 'vs.': 'versus', vs: 'versus', 'Jr.': 'junior', 'Sr.': 'senior', 'Prof.': 'professor',
  'Ave.': 'avenue', 'Inc.': 'incorporated', 'Ltd.': 'limited', 'Co.': 'company', 'Corp.': 'corporation', 'Mt.': 'mount', 'Gen.': 'general',
  'Gov.': 'governor', 'Dept.': 'department', 'approx.': 'approximately', 'Jan.': 'January', 'Feb.': 'February', 'Apr.': 'April',
  'Aug.': 'August', 'Sep.': 'September', 'Sept.': 'September', 'Oct.': 'October', 'Nov.': 'November', 'Dec.': 'December',
};
/** Abbreviations after which a period does not end the sentence. */
const TITLES = new Set(['Mr.', 'Mrs.', 'Ms.', 'Dr.', 'St.', 'Prof.', 'Mt.', 'Gen.', 'Gov.', 'e.g.', 'i.e.', 'vs.', 'No.', 'approx.']);

const VERB_BEFORE = new Set(['to', 'will', 'would', 'shall', 'should', 'can', 'could', 'may', 'might', 'must', 'do', 'does', 'did', "don't", "doesn't", "didn't", "won't", "wouldn't", "can't", 'cannot', "couldn't", "shouldn't", "let's", 'please', 'i', 'you', 'we', 'they']);
const PARTICIPLE_BEFORE = new Set(['have', 'has', 'had', 'having', "i've", "you've", "we've", "they've", 'was', 'were', 'is', 'are', 'be', 'been', 'being', 'am']);
const NOUN_BEFORE = new Set(['the', 'a', 'an', 'this', 'that', 'these', 'those', 'my', 'your', 'his', 'her', 'its', 'our', 'their', 'no', 'every', 'each', 'some', 'any', 'of', 'for', 'with', 'in', 'on', 'at', 'by', 'from', 'into', 'about']);

interface Token {
  text: string;
  /** Whitespace after it in the output. */
  space: boolean;
  punct?: boolean;
  /** Given phonemes (a [word](/phonemes/) link). */
  phonemes?: string;
  /** The currency symbol before a number. */
  currency?: string;
}

/** A word's heteronym tag from the word before it. */
function tagAfter(previous: string | undefined): Tag | undefined {
  const p = previous?.toLowerCase().replace(/’/g, "'");
  if (p === undefined) return undefined;
  if (PARTICIPLE_BEFORE.has(p)) return 'VBN';
  if (VERB_BEFORE.has(p)) return 'VERB';
  if (NOUN_BEFORE.has(p)) return 'NOUN';
  return undefined;
}

/** Splits one whitespace-free chunk into leading punctuation, the word, trailing punctuation. */
function splitChunk(chunk: string, lexicon: Lexicon, out: Token[]): void {
  const lead = LEADING.exec(chunk)?.[0] ?? '';
  let word = chunk.slice(lead.length);
  let trail = TRAILING.exec(word)?.[0] ?? '';
  word = word.slice(0, word.length - trail.length);
  // A period that belongs to the word: an abbreviation, or dotted letters.
  if (trail.startsWith('.') && word !== '') {
    const dotted = `${word}.`;
    if (lexicon.hasGold(dotted) || dotted in ABBREVIATIONS || TITLES.has(dotted) || /^([A-Za-z]\.)+[A-Za-z]$/.test(word)) {
      word = dotted;
      trail = trail.slice(1);
    }
  }
  // A possessive plural keeps its apostrophe.
  if (trail.startsWith("'") && /s$/i.test(word) && !lead.includes("'")) {
    word += "'";
    trail = trail.slice(1);
  }
  for (const c of lead) out.push({ text: c, space: false, punct: true });
  const money = /^([$£€])(\d[\d,]*(?:\.\d+)?)$/.exec(word);
  if (money) out.push({ text: money[2]!, space: false, currency: money[1] });
  else if (/^[-–—]+$/.test(word)) out.push({ text: '—', space: false, punct: true });
  else if (word !== '') out.push({ text: word, space: false });
  for (const c of trail) out.push({ text: c, space: false, punct: true });
}

function tokenize(text: string, lexicon: Lexicon): Token[] {
  const tokens: Token[] = [];
  const normal = text.normalize('NFKC').replace(/[‘’]/g, (c, at: number) => (/\w/.test(text[at - 1] ?? '') ? "'" : c));
  for (const m of normal.matchAll(/\[([^\]]+)\]\(\/([^/)]*)\/\)|(\s+)|([^\s[]+|\[)/g)) {
    if (m[3] !== undefined) {
      if (tokens.length > 0) tokens[tokens.length - 1]!.space = true;
    } else if (m[1] !== undefined) tokens.push({ text: m[1], space: false, phonemes: m[2] });
    else splitChunk(m[4]!, lexicon, tokens);
  }
  return tokens;
}

/** misaki's context from the phonemes of the token after: whether they start with a vowel (null: a pause). */
function contextOf(ctx: Context, ps: string, text: string): Context {
  let futureVowel = ctx.futureVowel;
  for (const c of ps) {
    if (PAUSES.has(c)) {
      futureVowel = null;
      break;
    }
    if (VOWELS.has(c) || CONSONANTS.has(c)) {
      futureVowel = VOWELS.has(c);
      break;
    }
  }
  return { futureVowel, futureTo: text === 'to' || text === 'To' || text === 'TO' };
}

/** A number word's text: digits with , and . and an optional leading minus and suffix. */
const NUMBER = /^(-?)([\d,]*\.?\d+(?:\.\d+)*)(st|nd|rd|th|s|'s|ed|'d|ing)?$/;

class Reader {
  constructor(private readonly lexicon: Lexicon) {}

  private words(words: string[], stressOf: (w: string) => number | undefined = () => undefined): string {
    return words.map((w) => this.lexicon.lookup(w, undefined, stressOf(w), undefined) ?? '').join(' ');
  }

  /** A number's phonemes (money with its currency), or undefined when the text is not one. */
  number(text: string, currency: string | undefined): string | undefined {
    const m = NUMBER.exec(text);
    if (!m) return undefined;
    const [, minus, body, suffix] = m as unknown as [string, string, string, string | undefined];
    const plain = body.replaceAll(',', '');
    if (body.includes(',') && !/^\d{1,3}(,\d{3})+(\.\d+)?$/.test(body)) return undefined;
    let words: string[];
    if (/^\d+$/.test(plain) && suffix && ['st', 'nd', 'rd', 'th'].includes(suffix)) words = ordinal(BigInt(plain));
    else if (currency && /^\d+(\.\d{1,2})?$/.test(plain)) return (minus ? `${this.words(['minus'])} ` : '') + this.money(plain, currency);
    else if (!minus && !currency && /^\d{4}$/.test(body)) words = year(Number(body));
    else if ((plain.match(/\./g) ?? []).length > 1) words = plain.split('.').flatMap((part, i) => [...(i > 0 ? ['dot'] : []), ...(part ? cardinal(BigInt(part)) : [])]);
    else if (plain.includes('.')) words = decimal(plain);
    else if (plain.length > 1 && plain.startsWith('0')) words = digits(plain);
    else words = cardinal(BigInt(plain));
    let ps = this.words([...(minus ? ['minus'] : []), ...words], (w) => (w === 'point' ? -2 : undefined));
    if (suffix === 's' || suffix === "'s") ps = this.lexicon.plural(ps);
    else if (suffix === 'ed' || suffix === "'d") ps = this.lexicon.past(ps);
    else if (suffix === 'ing') ps = this.lexicon.progressive(ps) ?? ps;
    if (currency) ps += ` ${this.lexicon.plural(this.words([CURRENCIES[currency]![0]]))}`;
    return ps;
  }

  /** "5.50" dollars: five dollars and fifty cents (a zero part left out; one without -s; pence never takes one). */
  private money(amount: string, currency: string): string {
    const [major, minor] = CURRENCIES[currency]!;
    const [whole = '0', cents = ''] = amount.split('.');
    let parts: Array<[bigint, string]> = [[BigInt(whole), major]];
    if (cents) parts.push([BigInt(cents.padEnd(2, '0')), minor]);
    if (parts.length > 1 && parts[1]![0] === 0n) parts = parts.slice(0, 1);
    else if (parts.length > 1 && parts[0]![0] === 0n) parts = parts.slice(1);
    return parts.map(([n, unit], i) => {
      const name = this.words([unit]);
      const counted = n === 1n || unit === 'pence' ? name : this.lexicon.plural(name);
      return `${i > 0 ? `${this.words(['and'])} ` : ''}${this.words(cardinal(n))} ${counted}`;
    }).join(' ');
  }

  /** Words whose form depends on the next word, or that the lexicon reads differently alone. */
  private special(w: string, previous: string | undefined, ctx: Context): string | undefined {
    const lex = this.lexicon;
    switch (w) {
      case 'a':
      case 'A':
        return ctx.futureVowel === null || (w === 'A' && previous !== undefined && /^[A-Z]/.test(previous)) ? lex.plain('A') : 'ɐ';
      case 'an':
      case 'An':
        return 'ɐn';
      case 'am':
      case 'Am':
        return ctx.futureVowel === null || w === 'Am' ? lex.plain('am') : 'ɐm';
      case 'I':
        return `${SECONDARY}I`;
      case 'to':
      case 'To':
        return ctx.futureVowel === null ? lex.plain('to') : ctx.futureVowel ? 'tʊ' : 'tə';
      case 'in':
      case 'In':
        return `${ctx.futureVowel === null ? PRIMARY : ''}ɪn`;
      case 'the':
      case 'The':
        return ctx.futureVowel === true ? 'ði' : 'ðə';
      case 'used':
      case 'Used':
        return lex.lookup('used', ctx.futureTo ? 'VBD' : undefined, undefined, undefined);
      case 'St.':
        return this.words([previous !== undefined && /^[A-Z]/.test(previous) ? 'street' : 'saint']);
    }
    const expanded = ABBREVIATIONS[w];
    if (expanded) return joinStressed([this.words(expanded.split(' '))]);
    // Dotted letters: U.S., a.m.
    if (/^([A-Za-z]{1,2}\.)+[A-Za-z]{0,2}\.?$/.test(w) && w.replace(/\./g, '').length > 1 && !lex.hasGold(w)) return lex.letters(w);
    return undefined;
  }

  /** One word's phonemes, read in context. */
  word(text: string, previous: string | undefined, ctx: Context, currency?: string): string {
    const w = text.replace(/’/g, "'");
    const special = this.special(w, previous, ctx);
    if (special !== undefined) return special;
    const stress = w === w.toLowerCase() ? undefined : w === w.toUpperCase() ? 2 : 0.5;
    const tag = w.length > 1 && w === w.toUpperCase() && /[A-Z]/.test(w) ? 'NNP' : tagAfter(previous);
    const known = this.lexicon.word(w, tag, stress, ctx);
    if (known !== undefined) return known;
    const number = this.number(w, currency);
    if (number !== undefined) return number;
    // Accented letters read as their base letters (café, naïve).
    const stripped = w.normalize('NFKD').replace(/[\u0300-\u036f]/g, '');
    if (stripped !== w) return this.word(stripped, previous, ctx, currency);
    const parts = [...w.matchAll(/-?\d[\d,.]*(?:st|nd|rd|th|s)?|[A-Z]+(?![a-z])|[A-Z]?[a-z]+(?:'[a-z]+)*|[A-Z][a-z]*|[%&+@]/g)].map((m) => m[0]);
    if (parts.length > 1 || (parts.length === 1 && parts[0] !== w && parts[0]!.length < w.length)) return this.parts(w, parts, ctx);
    return fallback(w, this.lexicon);
  }

  /** A word of several parts read one after another; separated by spaces where it mixes letters, digits and symbols. */
  private parts(w: string, parts: string[], ctx: Context): string {
    const read: string[] = [];
    let c = ctx;
    const letters = (p: string | undefined) => p !== undefined && /^[A-Za-z]/.test(p);
    // A 2 between letters is "to" (G2P).
    const isTo = (i: number) => parts[i] === '2' && letters(parts[i - 1]) && letters(parts[i + 1]);
    for (let i = parts.length - 1; i >= 0; i--) {
      const p = parts[i]!;
      const ps = isTo(i) ? this.special('to', undefined, c)!
        : p in SYMBOLS ? this.words([SYMBOLS[p]!])
        : /^-?\d/.test(p) ? (this.number(p, undefined) ?? '')
        : this.word(p, undefined, c);
      read.unshift(ps);
      c = contextOf(c, ps, p);
    }
    const spelled = parts.map((p, i) => (isTo(i) ? 'to' : p)).join('');
    const kinds = new Set([...spelled].filter((ch) => !"',-._/".includes(ch)).map((ch) => (/[A-Za-z]/.test(ch) ? 0 : /\d/.test(ch) ? 1 : 2)));
    return kinds.size > 1 || w.includes('/') ? read.filter((ps) => ps).join(' ') : joinStressed(read);
  }
}

/** The text's phonemes in the dialect's alphabet (American or British). */
export function phonemize(text: string, dialect: Dialect): string {
  const lexicon = Lexicon.of(dialect);
  const reader = new Reader(lexicon);
  const tokens = tokenize(text, lexicon);
  const out: string[] = new Array<string>(tokens.length);
  let ctx: Context = { futureVowel: null, futureTo: false };
  for (let i = tokens.length - 1; i >= 0; i--) {
    const t = tokens[i]!;
    let ps: string;
    if (t.punct) ps = PUNCTUATION.has(t.text) ? t.text : '';
    else if (t.phonemes !== undefined) ps = t.phonemes;
    else {
      const previous = tokens.slice(0, i).reverse().find((p) => !p.punct)?.text;
      ps = reader.word(t.text, previous, ctx, t.currency);
    }
    out[i] = ps;
    ctx = t.punct && !PAUSES.has(t.text) ? ctx : contextOf(ctx, ps, t.text);
  }
  let result = '';
  tokens.forEach((t, i) => {
    result += out[i]!;
    if (t.space && out[i] !== '') result += ' ';
  });
  result = result.replace(/ +/g, ' ').trim();
  return dialect === 'us' ? result.replaceAll('ɾ', 'T').replaceAll('ʔ', 't') : result;
}

/**
 * The text cut into sentences: after . ! ? or … (and any closing quote or bracket) followed by
 * whitespace, except after a title or abbreviation that does not end one (Mr., e.g.).
 */
export function sentences(text: string): string[] {
  const out: string[] = [];
  let current = '';
  for (const m of text.matchAll(/(\S+)(\s*)/g)) {
    current += m[0];
    const chunk = m[1]!;
    if (m[2] && SENTENCE_END.test(chunk) && !TITLES.has(chunk.replace(/^["“(]+/, ''))) {
      out.push(current.trim());
      current = '';
    }
  }
  if (current.trim()) out.push(current.trim());
  return out;
}
