// The vocabulary as byte strings, and a trie over them for the mask walk. Built once per
// (tokenizer, model vocabulary size) and cached. Ordinary tokens only: special and added
// tokens never spell document text (added ones may spell a literal prefix or suffix; see
// `literalTokens`), and ids the model has beyond the tokenizer (padding) are never allowed.
import type { TextTokenizer } from '../models/tokenizer.js';
import { UnsupportedTokenizerError } from './errors.js';

/** How the tokenizer's pieces spell bytes. */
export type PieceEncoding = 'byte-level' | 'sentencepiece';

/**
 * Constrained decoding needs a Hugging Face BPE tokenizer.json (model.type "BPE") whose
 * pieces map to bytes exactly: byte-level BPE (a ByteLevel decoder: GPT-2's byte-to-unicode
 * alphabet, as Qwen and Llama 3 use) or SentencePiece-converted BPE (a Replace "▁" or
 * Metaspace decoder, with or without <0xNN> byte fallback, as Llama 2 and stories260k
 * use). Unigram, WordPiece and WordLevel models, and decoders we cannot invert, are refused.
 */
export function pieceEncoding(tokenizer: TextTokenizer): PieceEncoding {
  if (tokenizer.modelType !== 'BPE') {
    throw new UnsupportedTokenizerError(
      `structured output needs a Hugging Face BPE tokenizer (tokenizer.json); this model's is ${tokenizer.modelType ?? 'of unknown type'}`,
    );
  }
  const d = tokenizer.decoderTypes;
  if (d.includes('ByteLevel')) return 'byte-level';
  if (d.includes('Replace') || d.includes('Metaspace') || d.includes('ByteFallback')) return 'sentencepiece';
  throw new UnsupportedTokenizerError('structured output needs a byte-level or SentencePiece-style BPE tokenizer; this tokenizer.json has a decoder it cannot map to bytes');
}

/** GPT-2's bytes_to_unicode, inverted: piece character -> byte. */
function byteLevelDecoder(): Map<number, number> {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const map = new Map<number, number>();
  bs.forEach((b, i) => map.set(cs[i]!, b));
  return map;
}

const utf8 = new TextEncoder();

export function pieceBytes(piece: string, encoding: PieceEncoding, decoder = BYTE_LEVEL): Uint8Array | undefined {
  if (encoding === 'byte-level') {
    const out = new Uint8Array(piece.length);
    let i = 0;
    for (const ch of piece) {
      const b = decoder.get(ch.codePointAt(0)!);
      if (b === undefined) return undefined;
      out[i++] = b;
    }
    return out.subarray(0, i);
  }
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
  if (m) return Uint8Array.of(parseInt(m[1]!, 16));
  return utf8.encode(piece.replace(/\u2581/g, ' '));
}

const BYTE_LEVEL = byteLevelDecoder();

let nextVocabId = 1;

export interface LiteralToken {
  id: number;
  bytes: Uint8Array;
}

/**
 * Trie in preorder: node 0 is the root (the empty prefix); node n spells the bytes on its
 * path, `byte[n]` being the last one at depth `depth[n]`; its subtree is n+1 .. end[n]-1.
 * Tokens ending at node n are tokIds[tokStart[n] .. tokStart[n+1]-1].
 */
export class Vocab {
  readonly id = nextVocabId++;
  /** Mask words: the model's vocabulary, padded ids included (never allowed). */
  readonly words: number;
  /** Byte string of each ordinary token id; undefined for ids never allowed in a document. */
  readonly tokenBytes: Array<Uint8Array | undefined>;
  /** Added tokens (special ones included) that may spell literal prefix/suffix text. */
  readonly literalTokens: LiteralToken[];
  readonly byte: Uint8Array;
  readonly depth: Uint16Array;
  readonly end: Int32Array;
  readonly tokStart: Int32Array;
  readonly tokIds: Int32Array;
  /** The token ending at node n: its id, -1 for none, -2 for several (see tokStart). */
  readonly tokAt: Int32Array;
  readonly nodes: number;
  /** Longest token in bytes. */
  readonly maxTokenBytes: number;

  constructor(tokenizer: TextTokenizer, readonly vocabSize: number, eosIds: readonly number[]) {
    const encoding = pieceEncoding(tokenizer);
    this.words = Math.ceil(vocabSize / 32);
    const eos = new Set(eosIds);
    const limit = Math.min(vocabSize, tokenizer.vocabSize);
    this.tokenBytes = new Array(vocabSize).fill(undefined);
    this.literalTokens = [];
    const entries: Array<{ key: string; id: number }> = [];
    let maxLen = 0;
    for (let id = 0; id < limit; id++) {
      const piece = tokenizer.idToToken(id);
      if (piece === undefined || piece === '') continue;
      if (tokenizer.addedIds.has(id) || tokenizer.isSpecial(id)) {
        if (!eos.has(id)) this.literalTokens.push({ id, bytes: utf8.encode(piece) });
        continue;
      }
      const bytes = pieceBytes(piece, encoding);
      if (!bytes || bytes.length === 0) continue;
      this.tokenBytes[id] = bytes;
      maxLen = Math.max(maxLen, bytes.length);
      // A latin1 string sorts by byte values.
      entries.push({ key: String.fromCharCode(...bytes), id });
    }
    this.maxTokenBytes = maxLen;
    entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id - b.id));

    // Preorder construction from the sorted keys.
    const byte: number[] = [0];
    const depth: number[] = [0];
    const end: number[] = [0];
    const tokNode: number[] = [];
    const open: number[] = [0]; // open[d] = node at depth d on the current path
    let prev = '';
    for (const { key } of entries) {
      let l = 0;
      const max = Math.min(prev.length, key.length);
      while (l < max && prev.charCodeAt(l) === key.charCodeAt(l)) l++;
      // Close nodes deeper than the common prefix.
      while (open.length - 1 > l) end[open.pop()!] = byte.length;
      for (let d = l; d < key.length; d++) {
        const n = byte.length;
        byte.push(key.charCodeAt(d));
        depth.push(d + 1);
        end.push(0);
        open.push(n);
      }
      tokNode.push(open[key.length]!);
      prev = key;
    }
    while (open.length > 0) end[open.pop()!] = byte.length;
    this.nodes = byte.length;
    this.byte = Uint8Array.from(byte);
    this.depth = Uint16Array.from(depth);
    this.end = Int32Array.from(end);
    // Tokens per node, CSR: entries are in preorder of their nodes already.
    this.tokStart = new Int32Array(this.nodes + 1);
    for (const n of tokNode) this.tokStart[n + 1]!++;
    for (let n = 0; n < this.nodes; n++) this.tokStart[n + 1]! += this.tokStart[n]!;
    this.tokIds = new Int32Array(entries.length);
    const fill = this.tokStart.slice(0, this.nodes);
    entries.forEach(({ id }, i) => {
      this.tokIds[fill[tokNode[i]!]!++] = id;
    });
    this.tokAt = new Int32Array(this.nodes).fill(-1);
    for (let n = 0; n < this.nodes; n++) {
      const k = this.tokStart[n + 1]! - this.tokStart[n]!;
      if (k === 1) this.tokAt[n] = this.tokIds[this.tokStart[n]!]!;
      else if (k > 1) this.tokAt[n] = -2;
    }
  }
}

const cache = new WeakMap<TextTokenizer, Map<string, Vocab>>();

/** The vocabulary of a tokenizer, for a model vocabulary of `vocabSize` ids (cached). */
export function vocabFor(tokenizer: TextTokenizer, vocabSize: number, eosIds: readonly number[]): Vocab {
  let byKey = cache.get(tokenizer);
  if (!byKey) cache.set(tokenizer, (byKey = new Map()));
  const key = `${vocabSize}:${[...eosIds].sort((a, b) => a - b).join(',')}`;
  let vocab = byKey.get(key);
  if (!vocab) byKey.set(key, (vocab = new Vocab(tokenizer, vocabSize, eosIds)));
  return vocab;
}
