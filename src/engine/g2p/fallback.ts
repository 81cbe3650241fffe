// Words outside the lexicon. A word of capitals (or one with no vowel letter) is spelled out
// as letters; a word made of known words ("outofdictionary") is read as them, each compound
// part's stress kept on the heaviest; anything else goes through English letter-to-sound
// rules: the longest grapheme pattern matching at each position (with a silent final e that
// lengthens the vowel before it), primary stress on the first vowel.
import { Lexicon } from './lexicon.js';
import { applyStress, PRIMARY, stressWeight, VOWELS } from './stress.js';

/** Longest patterns first; `^` anchors a pattern at the start of the word. */
const RULES: Array<[string, string]> = [
  ['tion', 'ʃən'], ['sion', 'ʒən'], ['ture', 'ʧəɹ'], ['eigh', 'A'],
  ['^kn', 'n'], ['^wr', 'ɹ'], ['^ps', 's'], ['igh', 'I'], ['tch', 'ʧ'], ['dge', 'ʤ'], ['sch', 'sk'], ['que', 'k'],
  ['ch', 'ʧ'], ['sh', 'ʃ'], ['th', 'θ'], ['ph', 'f'], ['wh', 'w'], ['ck', 'k'], ['ng', 'ŋ'], ['qu', 'kw'], ['gh', 'ɡ'],
  ['ee', 'i'], ['ea', 'i'], ['oo', 'u'], ['ou', 'W'], ['ow', 'O'], ['oi', 'Y'], ['oy', 'Y'], ['ai', 'A'], ['ay', 'A'],
  ['au', 'ɔ'], ['aw', 'ɔ'], ['ie', 'i'], ['ei', 'A'], ['ue', 'u'], ['oa', 'O'], ['ey', 'i'],
  ['ar', 'ɑɹ'], ['er', 'əɹ'], ['ir', 'ɜɹ'], ['ur', 'ɜɹ'], ['or', 'ɔɹ'],
  ['a', 'æ'], ['e', 'ɛ'], ['i', 'ɪ'], ['o', 'ɑ'], ['u', 'ʌ'],
  ['b', 'b'], ['d', 'd'], ['f', 'f'], ['h', 'h'], ['j', 'ʤ'], ['k', 'k'], ['l', 'l'], ['m', 'm'], ['n', 'n'],
  ['p', 'p'], ['r', 'ɹ'], ['s', 's'], ['t', 't'], ['v', 'v'], ['w', 'w'], ['x', 'ks'], ['z', 'z'],
];
/** A vowel letter made long by a silent final e after one consonant ("kate", "mile"). */
const LONG: Record<string, string> = { a: 'A', e: 'i', i: 'I', o: 'O', u: 'u' };
/** British readings of the American rule outputs. */
const BRITISH: Array<[RegExp, string]> = [[/æ/g, 'a'], [/O/g, 'Q'], [/ɑɹ/g, 'ɑː'], [/ɑ/g, 'ɒ'], [/əɹ$/g, 'ə'], [/ɜɹ/g, 'ɜː'], [/ɔɹ/g, 'ɔː']];

const isVowelLetter = (c: string | undefined) => c !== undefined && 'aeiouy'.includes(c);

/** Letter-to-sound rules over a lowercase word of letters a-z. */
function letterToSound(word: string, british: boolean): string {
  let w = word;
  let longAt = -1;
  // A silent final e after a single consonant lengthens the vowel before it.
  if (w.length > 3 && w.endsWith('e') && !isVowelLetter(w.at(-2)) && isVowelLetter(w.at(-3)) && !isVowelLetter(w.at(-4))) {
    longAt = w.length - 3;
    w = w.slice(0, -1);
  }
  let ps = '';
  for (let i = 0; i < w.length;) {
    const c = w[i]!;
    const next = w[i + 1];
    if (i === longAt && LONG[c]) {
      ps += LONG[c];
      i++;
      continue;
    }
    // A doubled consonant is one sound.
    if (i > 0 && c === w[i - 1] && !isVowelLetter(c)) {
      i++;
      continue;
    }
    if (c === 'c') {
      ps += next !== undefined && 'eiy'.includes(next) ? 's' : 'k';
      i++;
      continue;
    }
    if (c === 'g' && next !== 'h' && next !== undefined && 'eiy'.includes(next)) {
      ps += 'ʤ';
      i++;
      continue;
    }
    if (c === 'y') {
      ps += i === 0 ? 'j' : i === w.length - 1 ? 'i' : 'ɪ';
      i++;
      continue;
    }
    const rule = RULES.find(([g]) => (g.startsWith('^') ? i === 0 && w.startsWith(g.slice(1)) : w.startsWith(g, i)));
    if (!rule) {
      i++;
      continue;
    }
    ps += rule[1];
    i += rule[0].replace('^', '').length;
  }
  if (british) for (const [from, to] of BRITISH) ps = ps.replace(from, to);
  const first = [...ps].findIndex((c) => VOWELS.has(c));
  return first < 0 ? ps : `${[...ps].slice(0, first).join('')}${PRIMARY}${[...ps].slice(first).join('')}`;
}

/** The fewest known words (two letters or more, at most one part per four letters) the word splits into, or undefined. */
function compound(word: string, lexicon: Lexicon): string[] | undefined {
  const n = word.length;
  const best: Array<string[] | undefined> = [[]];
  for (let end = 1; end <= n; end++) {
    for (let start = Math.max(0, end - 24); start <= end - 2; start++) {
      const before = best[start];
      const part = word.slice(start, end);
      if (!before || !lexicon.isKnown(part) || /^[^aeiouy]+$/.test(part)) continue;
      if (!best[end] || best[end]!.length > before.length + 1) best[end] = [...before, part];
    }
  }
  const parts = best[n];
  return parts && parts.length >= 2 && parts.length <= Math.max(2, Math.floor(n / 4)) ? parts : undefined;
}

/** Joins the parts' phonemes; where several carry a primary stress, the lighter half are lowered to secondary. */
export function joinStressed(parts: string[]): string {
  const stressed = parts.map((ps, i) => ({ primary: ps.includes(PRIMARY), weight: stressWeight(ps), i })).filter((x) => parts[x.i]);
  const primaries = stressed.filter((x) => x.primary).length;
  const out = [...parts];
  if (stressed.length >= 2 && primaries > (stressed.length + 1) >> 1) {
    const lower = [...stressed].sort((a, b) => Number(a.primary) - Number(b.primary) || a.weight - b.weight || a.i - b.i).slice(0, stressed.length >> 1);
    for (const { i } of lower) out[i] = applyStress(out[i]!, -0.5);
  }
  return out.join('');
}

/** Phonemes for a word the lexicon does not have (letters, apostrophes and hyphens). */
export function fallback(word: string, lexicon: Lexicon): string {
  const letters = word.replace(/[^A-Za-z]/g, '');
  if (letters === '') return '';
  if ((letters.length > 1 && letters === letters.toUpperCase()) || !/[aeiouyAEIOUY]/.test(letters)) return lexicon.letters(letters) ?? '';
  const lower = letters.toLowerCase();
  const parts = compound(lower, lexicon);
  if (parts) return joinStressed(parts.map((p) => lexicon.word(p, undefined, undefined, undefined) ?? ''));
  return letterToSound(lower, lexicon.british);
}
