// English number words, as the text front end reads digits aloud: cardinals ("one hundred
// twenty-three": no "and", as misaki reads them), ordinals ("twenty-first"), years ("nineteen
// eighty-four", "nineteen oh-five", "two thousand five") and decimals ("three point one four").
// Each function returns the words in order, hyphenated compounds split ("twenty", "three"), so
// every word is one lexicon entry.

const ONES = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen'];
const TENS = ['', '', 'twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety'];
/** Powers of a thousand, up to 10^33. */
const SCALES = ['', 'thousand', 'million', 'billion', 'trillion', 'quadrillion', 'quintillion', 'sextillion', 'septillion', 'octillion', 'nonillion', 'decillion'];

/** 0 .. 999 (0: no words). */
function belowThousand(n: number): string[] {
  const words: string[] = [];
  if (n >= 100) words.push(ONES[Math.floor(n / 100)]!, 'hundred');
  const rest = n % 100;
  if (rest >= 20) words.push(TENS[Math.floor(rest / 10)]!, ...(rest % 10 ? [ONES[rest % 10]!] : []));
  else if (rest > 0) words.push(ONES[rest]!);
  return words;
}

/** A non-negative integer's words; past 10^36 its digits one by one. */
export function cardinal(n: bigint): string[] {
  if (n === 0n) return ['zero'];
  const groups: number[] = [];
  for (let v = n; v > 0n; v /= 1000n) groups.push(Number(v % 1000n));
  if (groups.length > SCALES.length) return [...n.toString()].map((d) => ONES[Number(d)]!);
  const words: string[] = [];
  for (let i = groups.length - 1; i >= 0; i--) {
    if (groups[i] === 0) continue;
    words.push(...belowThousand(groups[i]!), ...(SCALES[i] ? [SCALES[i]!] : []));
  }
  return words;
}

const IRREGULAR_ORDINALS: Record<string, string> = { one: 'first', two: 'second', three: 'third', five: 'fifth', eight: 'eighth', nine: 'ninth', twelve: 'twelfth' };

/** The ordinal's words: the cardinal's with its last word made ordinal. */
export function ordinal(n: bigint): string[] {
  const words = cardinal(n);
  const last = words.pop()!;
  const made = IRREGULAR_ORDINALS[last] ?? (last.endsWith('y') ? `${last.slice(0, -1)}ieth` : `${last}th`);
  return [...words, made];
}

/** A four-digit year read in pairs ("nineteen eighty-four", "nineteen hundred", "nineteen oh-five"); a round thousand's first decade as a cardinal. */
export function year(n: number): string[] {
  const high = Math.floor(n / 100);
  const low = n % 100;
  if (high === 0 || (high % 10 === 0 && low < 10) || high >= 100) return cardinal(BigInt(n));
  const lowWords = low === 0 ? ['hundred'] : low < 10 ? ['oh', ONES[low]!] : belowThousand(low);
  return [...belowThousand(high), ...lowWords];
}

/** "12.05" -> twelve point zero five (the digits after the point one by one). */
export function decimal(text: string): string[] {
  const [whole, fraction = ''] = text.split('.');
  return [...(whole ? cardinal(BigInt(whole)) : []), 'point', ...[...fraction].map((d) => ONES[Number(d)]!)];
}

/** Digits read one by one ("0", "007"), as for a code or a leading zero. */
export function digits(text: string): string[] {
  return [...text].map((d) => ONES[Number(d)]!);
}
