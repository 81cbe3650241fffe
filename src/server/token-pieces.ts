// A token's own text and bytes, for logprobs and /tokenize's pieces: the raw bytes of its vocabulary piece
// (byte-level and SentencePiece pieces mapped to bytes by ../grammar/vocab.ts; special and
// added tokens as the UTF-8 of their text), not its share of the decoded completion. Also
// the default DRY sequence breakers, which are defined over token text.
import { pieceBytes, pieceEncoding, type PieceEncoding } from '../grammar/vocab.js';
import type { TextTokenizer } from '../models/tokenizer.js';

const utf8 = new TextEncoder();
const lenient = new TextDecoder('utf-8');

class Pieces {
  private readonly encoding: PieceEncoding | undefined;
  private readonly cache = new Map<number, Uint8Array>();
  breakers: number[] | undefined;

  constructor(private readonly tokenizer: TextTokenizer) {
    try {
      this.encoding = pieceEncoding(tokenizer);
    } catch {
      // Not a BPE tokenizer.json whose pieces map to bytes: decode each token instead.
      this.encoding = undefined;
    }
  }

  bytes(id: number): Uint8Array {
    let out = this.cache.get(id);
    if (out) return out;
    const t = this.tokenizer;
    const piece = t.idToToken(id);
    if (piece !== undefined) {
      if (t.addedIds.has(id) || t.isSpecial(id)) out = utf8.encode(piece);
      else if (this.encoding) out = pieceBytes(piece, this.encoding);
    }
    if (!out) {
      try {
        out = utf8.encode(t.decode([id], false));
      } catch {
        // An id past the tokenizer (the model's padding rows): no text.
        out = new Uint8Array(0);
      }
    }
    this.cache.set(id, out);
    return out;
  }
}

const byTokenizer = new WeakMap<TextTokenizer, Pieces>();

function pieces(tokenizer: TextTokenizer): Pieces {
  let p = byTokenizer.get(tokenizer);
  if (!p) byTokenizer.set(tokenizer, (p = new Pieces(tokenizer)));
  return p;
}

/** The raw bytes of one token's piece. */
export function tokenBytes(tokenizer: TextTokenizer, id: number): Uint8Array {
  return pieces(tokenizer).bytes(id);
}

/** The token as OpenAI shows it: its bytes as UTF-8, an incomplete character as U+FFFD. */
export function tokenText(tokenizer: TextTokenizer, id: number): string {
  return lenient.decode(tokenBytes(tokenizer, id));
}

/** The token as llama-server shows it: the bytes up to an incomplete trailing character. */
export function tokenTextValidPrefix(tokenizer: TextTokenizer, id: number): string {
  const bytes = tokenBytes(tokenizer, id);
  return lenient.decode(bytes.subarray(0, validUtf8Length(bytes)));
}

/** Length of `bytes` without a UTF-8 sequence cut off at its end (llama.cpp's validate_utf8). */
export function validUtf8Length(bytes: Uint8Array): number {
  const n = bytes.length;
  for (let back = 1; back <= Math.min(4, n); back++) {
    const b = bytes[n - back]!;
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const need = (b & 0xe0) === 0xc0 ? 2 : (b & 0xf0) === 0xe0 ? 3 : (b & 0xf8) === 0xf0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

/** llama.cpp's default DRY sequence breakers. */
const DEFAULT_BREAKER_BYTES = [0x0a, 0x3a, 0x22, 0x2a]; // '\n' ':' '"' '*'

/**
 * The default dry_sequence_breakers as token ids: every token whose text contains one of
 * llama.cpp's default breakers ("\n", ":", "\"", "*"). llama.cpp matches its breaker strings
 * inside token text, which for one-character breakers is exactly this set. Computed once
 * per tokenizer.
 */
export function defaultDryBreakers(tokenizer: TextTokenizer): number[] {
  const p = pieces(tokenizer);
  if (!p.breakers) {
    const out: number[] = [];
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      if (p.bytes(id).some((b) => DEFAULT_BREAKER_BYTES.includes(b))) out.push(id);
    }
    p.breakers = out;
  }
  return p.breakers;
}
