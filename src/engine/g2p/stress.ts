// The phoneme alphabet's stress marks and vowels, and how a word's stress is raised or lowered
// for its place in the sentence (misaki's convention: ˈ primary, ˌ secondary, written before
// the stressed vowel).

export const PRIMARY = 'ˈ';
export const SECONDARY = 'ˌ';
export const VOWELS = new Set('AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ');
export const CONSONANTS = new Set('bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ');
/** Diphthongs and affricates weigh two in a word's stress weight. */
const HEAVY = new Set('AIOQWYʤʧ');

/** A word's weight for choosing which stresses of a compound to lower. */
export function stressWeight(ps: string): number {
  let w = 0;
  for (const c of ps) w += HEAVY.has(c) ? 2 : 1;
  return w;
}

const hasStress = (ps: string) => ps.includes(PRIMARY) || ps.includes(SECONDARY);
const hasVowel = (ps: string) => [...ps].some((c) => VOWELS.has(c));

/** Puts `mark` before the first vowel. */
function stressFirstVowel(ps: string, mark: string): string {
  const chars = [...ps];
  const i = chars.findIndex((c) => VOWELS.has(c));
  return i < 0 ? ps : [...chars.slice(0, i), mark, ...chars.slice(i)].join('');
}

/**
 * The word's phonemes at a stress level: below -1 unstressed; -1 (or 0 and -0.5 where it has
 * a primary stress) primaries lowered to secondary; 0 .. 1 a secondary stress added to an
 * unstressed word; 1 and up its secondary raised to primary where it has no primary; above 1
 * a primary stress added to an unstressed word. Undefined leaves it as it is.
 */
export function applyStress(ps: string, stress: number | undefined): string {
  if (stress === undefined) return ps;
  if (stress < -1) return ps.replaceAll(PRIMARY, '').replaceAll(SECONDARY, '');
  if (stress === -1 || ((stress === 0 || stress === -0.5) && ps.includes(PRIMARY))) return ps.replaceAll(SECONDARY, '').replaceAll(PRIMARY, SECONDARY);
  if ((stress === 0 || stress === 0.5 || stress === 1) && !hasStress(ps)) return hasVowel(ps) ? stressFirstVowel(ps, SECONDARY) : ps;
  if (stress >= 1 && !ps.includes(PRIMARY) && ps.includes(SECONDARY)) return ps.replaceAll(SECONDARY, PRIMARY);
  if (stress > 1 && !hasStress(ps)) return hasVowel(ps) ? stressFirstVowel(ps, PRIMARY) : ps;
  return ps;
}
