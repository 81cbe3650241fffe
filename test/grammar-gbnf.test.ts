// GBNF grammars without a model: the parser on llama.cpp's sample grammars and on every
// construct, its errors (with line and column), the byte automaton accepting and refusing
// strings, and token masks on the real Qwen3 and stories260k vocabularies.
import { beforeAll, describe, expect, it } from 'vitest';
import { universe as U } from '../src/grammar/automaton.js';
import { compileGbnf, gbnfConstraint, GrammarError } from '../src/grammar/index.js';
import { MAX_GRAMMAR_REPEAT } from '../src/grammar/limits.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { makeRng, tokenizerDir } from './helpers/random-checkpoint.js';

const enc = new TextEncoder();

/** Whether `text` (UTF-8, or raw bytes) is a complete match of the grammar. */
function accepts(grammar: string, text: string | Uint8Array): boolean {
  let id = U.closure([U.stack(compileGbnf(grammar).root, 0, 0, U.bottom)]).id;
  for (const b of typeof text === 'string' ? enc.encode(text) : text) {
    id = U.next(id, b);
    if (id < 0) return false;
  }
  return U.configs[id]!.exit;
}

function grammarError(grammar: string): GrammarError {
  try {
    compileGbnf(grammar);
  } catch (err) {
    if (err instanceof GrammarError) return err;
    throw err;
  }
  throw new Error('no GrammarError');
}

// llama.cpp's grammars/ samples (arithmetic, list, json, chess), verbatim.
const ARITHMETIC = `root  ::= (expr "=" ws term "\\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \\t\\n]*
`;

const LIST = `root ::= item+

# Excludes various line break characters
item ::= "- " [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ "\\n"
`;

const JSON_GBNF = `root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\\"" (
    [^"\\\\\\x7F\\x00-\\x1F] |
    "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\\n" [ \\t]{0,20}
`;

const CHESS = `# Specifies chess moves as a list in algebraic notation, using PGN conventions

# Force first move to "1. ", then any 1-2 digit number after, relying on model to follow the pattern
root    ::= "1. " move " " move "\\n" ([1-9] [0-9]? ". " move " " move "\\n")+
move    ::= (pawn | nonpawn | castle) [+#]?

# piece type, optional file/rank, optional capture, dest file & rank
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]

# optional file & capture, dest file & rank, optional promotion
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?

castle  ::= "O-O" "-O"?
`;

describe("llama.cpp's sample grammars", () => {
  it('arithmetic', () => {
    expect(accepts(ARITHMETIC, 'a=1\n')).toBe(true);
    expect(accepts(ARITHMETIC, 'x1 +(y *2)= 42\nb=c\n')).toBe(true);
    expect(accepts(ARITHMETIC, 'a=1')).toBe(false);
    expect(accepts(ARITHMETIC, '1a=1\n')).toBe(false);
    expect(accepts(ARITHMETIC, 'a=(1\n')).toBe(false);
  });

  it('list', () => {
    expect(accepts(LIST, '- milk\n- bread\n')).toBe(true);
    expect(accepts(LIST, '- é ☃ 😀\n')).toBe(true);
    expect(accepts(LIST, '')).toBe(false);
    expect(accepts(LIST, '- \n')).toBe(false);
    expect(accepts(LIST, '- a\u2028b\n')).toBe(false);
    expect(accepts(LIST, '* a\n')).toBe(false);
  });

  it('json', () => {
    for (const doc of ['{}', '{"a": [1, -2.5, 3e7, true, null], "b": {"c": "d\\u00e9\\n"}}', '{ "x":\n  "y" }', '{"k": "π"}']) {
      expect(accepts(JSON_GBNF, doc), doc).toBe(true);
    }
    for (const doc of ['[]', '{"a"}', '{"a": 01}', '{"a": "\\q"}', '{"a": "\x01"}', '{"a": 1,}', '{"a": 1']) {
      expect(accepts(JSON_GBNF, doc), doc).toBe(false);
    }
  });

  it('chess', () => {
    expect(accepts(CHESS, '1. e4 e5\n2. Nf3 Nc6\n')).toBe(true);
    expect(accepts(CHESS, '1. e4 e5\n2. O-O-O Qxd8#\n10. exd8=Q+ Ke7\n')).toBe(true);
    expect(accepts(CHESS, '1. e4 e5\n')).toBe(false);
    expect(accepts(CHESS, '1. e9 e5\n2. a3 a6\n')).toBe(false);
  });
});

describe('constructs', () => {
  it('literals with every escape, spelled as UTF-8', () => {
    const g = 'root ::= "a\\n\\t\\r\\\\\\"\\[\\]\\x41\\u00e9\\U0001F600☃"';
    expect(accepts(g, 'a\n\t\r\\"[]Aé😀☃')).toBe(true);
    expect(accepts(g, 'a\n\t\r\\"[]Aé😀')).toBe(false);
    // \xNN is a code point: \xE9 is é (C3 A9), not the raw byte E9.
    expect(accepts('root ::= "\\xE9"', 'é')).toBe(true);
    expect(accepts('root ::= "\\xE9"', Uint8Array.of(0xe9))).toBe(false);
  });

  it('character classes: ranges, negation, escapes, any character', () => {
    const g = 'root ::= [a-cx\\-\\]] [^0-9\\n] .';
    expect(accepts(g, 'b!z')).toBe(true);
    expect(accepts(g, '-é😀')).toBe(true);
    expect(accepts(g, ']\n\n')).toBe(false);
    expect(accepts(g, 'd!z')).toBe(false);
    expect(accepts(g, 'a5z')).toBe(false);
    // A trailing "-" is a literal dash.
    expect(accepts('root ::= [a-]', '-')).toBe(true);
    expect(accepts('root ::= [ぁ-ゟ]+', 'ひらがな')).toBe(true);
    expect(accepts('root ::= [ぁ-ゟ]+', 'カタカナ')).toBe(false);
    // Only valid UTF-8 passes `.`.
    expect(accepts('root ::= .', Uint8Array.of(0xc3))).toBe(false);
    expect(accepts('root ::= .', Uint8Array.of(0xed, 0xa0, 0x80))).toBe(false);
  });

  it('alternatives, groups, optional, star, plus', () => {
    const g = 'root ::= ("ab" | "c")+ "d"? ("e" "f"*)*';
    for (const s of ['ab', 'cabc', 'abd', 'cdeffe', 'ce']) expect(accepts(g, s), s).toBe(true);
    for (const s of ['', 'd', 'a', 'abdd', 'f', 'cf']) expect(accepts(g, s), s).toBe(false);
    // An optional group after a prefix cannot be entered in its middle.
    expect(accepts('root ::= ("b" "a"+)? "c"', 'ac')).toBe(false);
    expect(accepts('root ::= ("b" "a"+)? "c"', 'baac')).toBe(true);
  });

  it('counted repetitions {m} {m,} {m,n} {0,n}, nested, of rules and groups', () => {
    const cases: Array<[string, string[], string[]]> = [
      ['root ::= "ab"{3}', ['ababab'], ['abab', 'abababab']],
      ['root ::= [0-9]{2,}', ['12', '12345'], ['1']],
      ['root ::= [0-9]{2,4}', ['12', '1234'], ['1', '12345']],
      ['root ::= "x"{0,2} "y"', ['y', 'xy', 'xxy'], ['xxxy']],
      ['root ::= ("a" [0-9]{1,2}){2}', ['a1a22', 'a11a2'], ['a1', 'a123a1']],
      ['root ::= d{ 2 , 3 }\nd ::= [0-9]', ['12', '123'], ['1', '1234']],
      ['root ::= ("a"?){2,3} "b"', ['b', 'ab', 'aab', 'aaab'], ['aaaab']],
      ['root ::= "a"{0} "b"', ['b'], ['ab']],
      // Items that may be empty count only when they are not.
      ['root ::= ("a"? "b"?){2} "c"', ['c', 'abc', 'bac', 'aac', 'abbc'], ['aaac', 'abababc']],
      ['root ::= e{1,2} "c"\ne ::= ws "x"?\nws ::= " "*', ['c', ' c', ' x c', 'x c', 'x   xc'], ['xxxc', ' x x xc']],
      ['root ::= ("a"{0}){3} "b"', ['b'], ['ab']],
    ];
    for (const [g, yes, no] of cases) {
      for (const s of yes) expect(accepts(g, s), `${g} / ${s}`).toBe(true);
      for (const s of no) expect(accepts(g, s), `${g} / ${s}`).toBe(false);
    }
  });

  it('comments, multi-line rules, CRLF, continuation after |, empty alternatives, recursion', () => {
    const g = [
      '# a comment line',
      'root ::= item ("," item)*  # trailing comment',
      'item ::=',
      '  "(" (',
      '    item # nested comment',
      '  )? ")" |',
      '  "x" |',
      '',
    ].join('\r\n');
    for (const s of ['x', '()', '((x))', 'x,(),', 'x,,x']) expect(accepts(g, s), s).toBe(true);
    for (const s of ['(', '(x', 'y']) expect(accepts(g, s), s).toBe(false);
    // A newline outside a group ends the rule: "b" on its own line is a syntax error.
    expect(grammarError('root ::= "a"\n  "b"').message).toMatch(/line 2, column 3/);
  });

  it('wraps the text in a literal prefix and suffix', () => {
    const grammar = compileGbnf('root ::= [0-9]+', { prefix: '</think>\n\n', suffix: '!' });
    let id = U.closure([U.stack(grammar.root, 0, 0, U.bottom)]).id;
    for (const b of enc.encode('</think>\n\n42!')) id = U.next(id, b);
    expect(id >= 0 && U.configs[id]!.exit).toBe(true);
  });
});

describe('errors', () => {
  const at = (grammar: string) => grammarError(grammar).message;

  it('says where the parse failed', () => {
    expect(at('root = "a"')).toMatch(/expecting "::=" at line 1, column 6/);
    expect(at('root ::= "a"\nitem ::= "unterminated')).toMatch(/unterminated literal at line 2, column 10/);
    expect(at('root ::= "a\\q"')).toMatch(/unknown escape "\\\\q" at line 1, column 12/);
    expect(at('root ::= "\\x4"')).toMatch(/expecting 2 hex digits at line 1, column 11/);
    expect(at('root ::= [a-')).toMatch(/unterminated character class at line 1, column 10/);
    expect(at('root ::= [z-a]')).toMatch(/runs backwards at line 1, column 11/);
    expect(at('root ::= ("a" | "b"')).toMatch(/expecting "\)" at line 1, column 20/);
    expect(at('root ::= * "a"')).toMatch(/expecting an item before "\*" at line 1, column 10/);
    expect(at('root ::= "a"{3,2}')).toMatch(/maximum below its minimum at line 1, column 13/);
    expect(at('root ::= "a"{x}')).toMatch(/expecting an integer at line 1, column 14/);
    expect(at('root ::= "a" )')).toMatch(/unexpected "\)".* at line 1, column 14/);
    expect(at('root ::= "\\uD800"')).toMatch(/surrogate/);
    // Columns count characters, not UTF-16 units or bytes.
    expect(at('root ::= "😀" ]')).toMatch(/column 14/);
  });

  it('names undefined rules and refuses a missing root or a rule defined twice', () => {
    expect(at('root ::= item\nitem ::= "a" other')).toMatch(/undefined rule "other" at line 2, column 14/);
    expect(at('item ::= "a"')).toMatch(/no "root" rule/);
    expect(at('')).toMatch(/no "root" rule/);
    expect(at('root ::= "a"\nroot ::= "b"')).toMatch(/"root" is defined twice at line 2, column 1/);
  });

  it('refuses left recursion, also through nullable rules', () => {
    expect(at('root ::= root "a" | "b"')).toMatch(/left recursion: rule "root" .*\(root -> root\) at line 1, column 10/);
    expect(at('root ::= expr\nexpr ::= term "+" expr | term\nterm ::= expr "*" | "1"')).toMatch(/left recursion.*expr -> term -> expr/);
    expect(at('root ::= ws root "a" | "b"\nws ::= [ ]*')).toMatch(/left recursion.*root -> root/);
    // Right recursion and recursion after a character are fine.
    expect(accepts('root ::= "a" root | "b"', 'aab')).toBe(true);
    expect(accepts('root ::= ws "(" root? ")"\nws ::= " "*', ' ( ())')).toBe(true);
  });

  it('refuses token references', () => {
    expect(at('root ::= <think> "a"')).toMatch(/token references .* not supported.* at line 1, column 10/);
    expect(at('root ::= !<[1000]>*')).toMatch(/token references/);
  });

  it('enforces the limits before building rules', () => {
    expect(at(`root ::= "${'a'.repeat(70 * 1024)}"`)).toMatch(/larger than 64 KiB/);
    expect(at(`root ::= "a"{${MAX_GRAMMAR_REPEAT + 1}}`)).toMatch(/over the limit of 10000 at line 1, column 14/);
    expect(at(`root ::= "a"{2,99999999999999999999}`)).toMatch(/over the limit/);
    expect(at(`root ::= ${'('.repeat(70)}"a"${')'.repeat(70)}`)).toMatch(/nest deeper than 64/);
    const many = Array.from({ length: 1100 }, (_, i) => `r${i} ::= "a"`).join('\n');
    expect(at(`root ::= "a"\n${many}`)).toMatch(/more than 1024 rules/);
    // A bound at the limit costs nothing: the repetition is counted, not unrolled.
    const t0 = performance.now();
    expect(accepts(`root ::= [a-z]{${MAX_GRAMMAR_REPEAT}}`, 'q'.repeat(MAX_GRAMMAR_REPEAT))).toBe(true);
    expect(performance.now() - t0).toBeLessThan(5000);
  });
});

describe('token masks', () => {
  let qwen: TextTokenizer;
  let stories: TextTokenizer;
  const QWEN_V = 151936;
  const QWEN_EOS = [151645, 151643];

  beforeAll(async () => {
    [qwen, stories] = await Promise.all([TextTokenizer.load(tokenizerDir('qwen3')), TextTokenizer.load(tokenizerDir('stories'))]);
  });

  const allowedIds = (mask: Uint32Array): number[] => {
    const out: number[] = [];
    for (let i = 0; i < mask.length * 32; i++) if ((mask[i >>> 5]! >>> (i & 31)) & 1) out.push(i);
    return out;
  };

  it('random walks over allowed tokens spell only matching text (Qwen3, stories260k)', () => {
    const rng = makeRng(11);
    let finished = 0;
    const setups = [
      { tok: () => qwen, vocabSize: QWEN_V, eos: QWEN_EOS },
      { tok: () => stories, vocabSize: 512, eos: [2] },
    ];
    for (const grammar of [ARITHMETIC, LIST, JSON_GBNF, CHESS, 'root ::= "yes" | "no" | [0-9]{1,3}']) {
      for (const { tok, vocabSize, eos } of setups) {
        const tokenizer = tok();
        for (let walk = 0; walk < 3; walk++) {
          const c = gbnfConstraint(grammar, tokenizer, vocabSize, eos);
          const ids: number[] = [];
          let ended = false;
          for (let step = 0; step < 60 && !ended; step++) {
            const allowed = allowedIds(c.allowed());
            expect(allowed.length).toBeGreaterThan(0);
            // Prefer ending once allowed, half the time, so some walks finish.
            const id = allowed.some((t) => eos.includes(t)) && rng.uniform() < 0.5 ? eos[0]! : allowed[Math.floor(rng.uniform() * allowed.length)]!;
            if (eos.includes(id)) {
              expect(c.complete).toBe(true);
              ended = true;
              break;
            }
            c.accept(id);
            ids.push(id);
          }
          const text = tokenizer.decode(ids, false);
          if (!ended) continue;
          expect(accepts(grammar, text), JSON.stringify(text)).toBe(true);
          finished++;
        }
      }
    }
    expect(finished).toBeGreaterThanOrEqual(10);
  });

  it('masks long counted repetitions of ambiguous or possibly empty items quickly', () => {
    // Without subsumed stacks pruned, each step would hold one stack per reachable count.
    const rng = makeRng(3);
    const t0 = performance.now();
    for (const grammar of ['root ::= ("a"? "b"?){0,10000} "c"', 'root ::= ([a-z]{1,3}){0,10000} "."', 'root ::= ([a-z] | [a-z] [a-z]){2,10000} "."']) {
      const c = gbnfConstraint(grammar, qwen, QWEN_V, QWEN_EOS);
      const ids: number[] = [];
      for (let i = 0; i < 100; i++) {
        // A random allowed token that does not end the text.
        const allowed = allowedIds(c.allowed()).filter((t) => !QWEN_EOS.includes(t));
        let id: number;
        do id = allowed[Math.floor(rng.uniform() * allowed.length)]!;
        while (/[.c]/.test(qwen.decode([id], false)));
        c.accept(id);
        ids.push(id);
      }
      const text = qwen.decode(ids, false);
      const end = grammar.includes('"c"') ? 'c' : '.';
      expect(accepts(grammar, `${text}${end}`), text).toBe(true);
    }
    expect(performance.now() - t0).toBeLessThan(20_000);
  });

  it('allows end of generation exactly when the text is complete', () => {
    const c = gbnfConstraint('root ::= "ab" "c"?', qwen, QWEN_V, QWEN_EOS);
    for (const id of qwen.encode('ab', false)) c.accept(id);
    const allowed = allowedIds(c.allowed());
    expect(QWEN_EOS.every((e) => allowed.includes(e))).toBe(true);
    expect(allowed).toContain(qwen.encode('c', false)[0]);
    expect(allowed).not.toContain(qwen.encode('b', false)[0]);
  });
});
