// The English text front end (src/engine/g2p) without a model. The word list is
// misaki's EN_PHONES.md, verbatim (its American taps ɾ written T, as the front end writes
// them for Kokoro v1.0; "get" and "her" in a sentence, where the lexicon gives their
// unstressed forms). The first sentence is misaki's README example, except that "a" is ɐ,
// which misaki's en.py gives a determiner (the README's ə predates it). The other sentences
// are what en.py's rules give over its gold lexicon: numbers read by num2words without "and",
// four digits as a year, money as dollars and cents, ordinals, decimals with an unstressed
// "point", "the" and "to" by the next word's first sound, stressed forms before a pause,
// capitalised words stressed. Heteronyms follow this front end's rule (the word before:
// after "to"/a modal/a pronoun the verb, after have or be the participle, after a
// determiner the noun), and words outside the lexicon its fallback (compounds of known
// words, letters for capitals, letter-to-sound rules), as misaki's own fallback is a neural
// network or espeak.
import { describe, expect, it } from 'vitest';
import { phonemize, sentences } from '../src/engine/g2p/english.js';

describe('phonemize', () => {
  it('reads EN_PHONES.md\'s example words', () => {
    const us: Array<[string, string]> = [
      ['yes', 'jˈɛs'], ['sung', 'sˈʌŋ'], ['red', 'ɹˈɛd'], ['shin', 'ʃˈɪn'], ['Asia', 'ˈAʒə'], ['than', 'ðən'], ['thin', 'θˈɪn'],
      ['jump', 'ʤˈʌmp'], ['lunge', 'lˈʌnʤ'], ['chump', 'ʧˈʌmp'], ['lunch', 'lˈʌnʧ'], ['easy', 'ˈizi'], ['flu', 'flˈu'], ['spa', 'spˈɑ'],
      ['all', 'ˈɔl'], ['hair', 'hˈɛɹ'], ['bed', 'bˈɛd'], ['brick', 'bɹˈɪk'], ['wood', 'wˈʊd'], ['sun', 'sˈʌn'], ['hey', 'hˈA'],
      ['high', 'hˈI'], ['how', 'hˌW'], ['soy', 'sˈY'], ['pixel', 'pˈɪksᵊl'], ['ash', 'ˈæʃ'], ['boxes', 'bˈɑksᵻz'], ['butter', 'bˈʌTəɹ'],
      ['merchantship', 'mˈɜɹʧəntʃˌɪp'],
    ];
    expect(us.map(([w]) => phonemize(w, 'us'))).toEqual(us.map(([, ps]) => ps));
    expect(phonemize('I get her book.', 'us')).toBe('ˌI ɡɛt hɜɹ bˈʊk.');
    const gb: Array<[string, string]> = [['ash', 'ˈaʃ'], ['on', 'ˌɒn'], ['or', 'ɔː']];
    expect(gb.map(([w]) => phonemize(w, 'gb'))).toEqual(gb.map(([, ps]) => ps));
  });

  it.each([
    ['[Misaki](/misˈɑki/) is a G2P engine designed for [Kokoro](/kˈOkəɹO/) models.', 'misˈɑki ɪz ɐ ʤˈitəpˈi ˈɛnʤən dəzˈInd fɔɹ kˈOkəɹO mˈɑdᵊlz.'],
    // Numbers, money, years, ordinals, decimals, percentages, leading zeros.
    ['I paid $5.50 for 3 apples on January 5th, 1984.', 'ˌI pˈAd fˈIv dˈɑləɹz ænd fˈɪfti sˈɛnts fɔɹ θɹˈi ˈæpᵊlz ˌɔn ʤˈænjəwˌɛɹi fˈɪfθ, nˌIntˈin ˈATi fˈɔɹ.'],
    ['It costs $1, £100 or €2.05.', 'ˌɪt kˈɔsts wˈʌn dˈɑləɹ, wˈʌn hˈʌndɹəd pˈWndz ɔɹ tˈu jˈʊɹOz ænd fˈIv sˈɛnts.'],
    ['The U.S. economy grew 2.5% in the 1990s.', 'ðə jˌuˈɛs ikˈɑnəmi ɡɹˈu tˈu pYnt fˈIv pəɹsˈɛnt ɪn ðə nˌIntˈin nˈIndiz.'],
    ['She has 1,234,567 dollars and -42 cents.', 'ʃˌi hæz wˈʌn mˈɪljᵊn tˈu hˈʌndɹəd θˈɜɹTi fˈɔɹ θˈWzᵊnd fˈIv hˈʌndɹəd sˈɪksti sˈɛvən dˈɑləɹz ænd mˈInəs fˈɔɹTi tˈu sˈɛnts.'],
    ['Call 007 at 3.14.', 'kˈɔl zˈɪɹO zˈɪɹO sˈɛvən æt θɹˈi pYnt wˈʌn fˈɔɹ.'],
    ['In 2005 and 1905, the 21st and 100th.', 'ɪn tˈu θˈWzᵊnd fˈIv ænd nˌIntˈin ˈO fˈIv, ðə twˈɛnti fˈɜɹst ænd wˈʌn hˈʌndɹədθ.'],
    // Abbreviations.
    ['Dr. Jones met Mrs. Smith, e.g. at St. Paul, etc.', 'dˈɑktəɹ ʤˈOnz mˈɛt mˈɪsɪz smˈɪθ, fɔɹ ɪɡzˈæmpəl æt sˈAnt pˈɔl, ɛtsˈɛTəɹə'],
    // Heteronyms, and words read by the next word's first sound.
    ['I will read it. I have read it.', 'ˌI wɪl ɹˈid ɪt. ˌI hæv ɹˈɛd ɪt.'],
    ['We live here. The live show ends.', 'wˌi lˈɪv hˈɪɹ. ðə lˈIv ʃˈO ˈɛndz.'],
    ['I want to record the record.', 'ˌI wˈɑnt tə ɹəkˈɔɹd ðə ɹˈɛkəɹd.'],
    ['Eat the apple, not the pear; to eat is to live.', 'ˈit ði ˈæpᵊl, nˌɑt ðə pˈɛɹ; tʊ ˈit ɪz tə lˈɪv.'],
    ["He's used to it.", 'hˌiz jˈust tʊ ɪt.'],
    // Outside the lexicon: a compound, letter-to-sound rules, capitals as letters, accents.
    ['Now outofdictionary words like Kokoro and XQJ are read.', 'nˈW ˈWtʌvdˈɪkʃənˌɛɹi wˈɜɹdz lˈIk kˈɑkɔɹɑ ænd ˌɛkskjˌuʤˈA ɑɹ ɹˈɛd.'],
    ['Misaki reads café and naïve.', 'mˌisˈæki ɹˈidz kæfˈA ænd nɑˈiv.'],
  ])('American: %s', (text, expected) => {
    expect(phonemize(text, 'us')).toBe(expected);
  });

  it('reads British English from the British lexicon (pence take no -s)', () => {
    expect(phonemize('I paid £5.50 for the colour.', 'gb')).toBe('ˌI pˈAd fˈIv pˈWndz and fˈɪfti pˈɛns fɔː ðə kˈʌlə.');
    expect(phonemize('Our neighbour lives here.', 'gb')).toBe('ˌWə nˈAbə lˈIvz hˈɪə.');
  });
});

describe('sentences', () => {
  it('cuts after . ! ? and … (with closing quotes), not after a title or e.g.', () => {
    expect(sentences('Mr. Smith went home. He said "hi!" Then e.g. this… Done')).toEqual(['Mr. Smith went home.', 'He said "hi!"', 'Then e.g. this…', 'Done']);
  });
});
