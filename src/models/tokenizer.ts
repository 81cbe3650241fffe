// The checkpoint's Hugging Face tokenizer (tokenizer.json + tokenizer_config.json),
// run by @huggingface/tokenizers, plus the special-token facts generation needs.
import { readFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { TokenizerWorker, WORKER_MIN_CHARS } from './tokenizer-worker.js';

type TokenLike = string | { content: string } | null | undefined;

function tokenText(t: TokenLike): string | undefined {
  if (t == null) return undefined;
  return typeof t === 'string' ? t : t.content;
}

export interface TokenizerConfig {
  bos_token?: TokenLike;
  eos_token?: TokenLike;
  add_bos_token?: boolean;
  chat_template?: string | Array<{ name: string; template: string }>;
  [key: string]: unknown;
}

export class TextTokenizer {
  readonly vocabSize: number;
  readonly bosToken: string | undefined;
  readonly eosToken: string | undefined;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  private readonly specialIds: Set<number>;
  /** tokenizer.json's model.type ("BPE", "Unigram", "WordPiece"...). */
  readonly modelType: string | undefined;
  /** tokenizer.json's decoder types, a Sequence flattened ("ByteLevel", "Replace", "ByteFallback"...). */
  readonly decoderTypes: string[];
  /** Added tokens, special or not: never pieces of ordinary text. */
  readonly addedIds: ReadonlySet<number>;
  /**
   * An upper bound on the UTF-8 bytes of text one token stands for, so a text of B bytes
   * has at least B / maxTokenBytes tokens; undefined where one token may stand for any
   * amount (an unknown-word token, as WordPiece and Unigram have and BPE without byte
   * fallback fuses). Pieces are measured as stored, which over-counts ("Ġ", "▁", "<0x0A>"),
   * never under-counts.
   */
  readonly maxTokenBytes: number | undefined;
  private readonly worker: TokenizerWorker;

  constructor(
    private readonly tok: Tokenizer,
    readonly config: TokenizerConfig,
    /** The default chat template and any named variants ('default' key for the main one). */
    readonly chatTemplates: Map<string, string>,
    /** The tokenizer.json `tok` was built from, which the worker loads too. */
    tokenizerJson: string,
  ) {
    this.worker = new TokenizerWorker(tokenizerJson, config);
    const vocab = tok.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    this.bosToken = tokenText(config.bos_token);
    this.eosToken = tokenText(config.eos_token);
    this.bosId = this.bosToken === undefined ? undefined : tok.token_to_id(this.bosToken);
    this.eosId = this.eosToken === undefined ? undefined : tok.token_to_id(this.eosToken);
    this.specialIds = new Set([...tok.get_added_tokens_decoder()].filter(([, t]) => t.special).map(([id]) => id));
    this.addedIds = new Set(tok.get_added_tokens_decoder().keys());
    this.modelType = (tok.model?.config as { type?: string } | undefined)?.type;
    type DecoderConfig = { type?: string; decoders?: DecoderConfig[] };
    const flatten = (d: DecoderConfig | undefined): string[] =>
      d == null ? [] : d.type === 'Sequence' ? (d.decoders ?? []).flatMap(flatten) : d.type ? [d.type] : [];
    this.decoderTypes = flatten(tok.decoder?.config as DecoderConfig | undefined);
    const model = tok.model?.config as { fuse_unk?: boolean; byte_fallback?: boolean } | undefined;
    if (this.modelType === 'BPE' && !(model?.fuse_unk && !model.byte_fallback)) {
      // An unfused unknown token stands for one character: 4 bytes at most.
      let max = 4;
      for (const piece of vocab.keys()) max = Math.max(max, Buffer.byteLength(piece, 'utf8'));
      this.maxTokenBytes = max;
    }
  }

  static async load(dir: string): Promise<TextTokenizer> {
    const jsonPath = join(dir, 'tokenizer.json');
    const json = JSON.parse(await readFile(jsonPath, 'utf8'));
    const configPath = join(dir, 'tokenizer_config.json');
    const config: TokenizerConfig = existsSync(configPath) ? JSON.parse(await readFile(configPath, 'utf8')) : {};
    const templates = new Map<string, string>();
    const ct = config.chat_template;
    if (typeof ct === 'string') templates.set('default', ct);
    else if (Array.isArray(ct)) for (const { name, template } of ct) templates.set(name, template);
    // Newer checkpoints ship the template as its own file; it wins over the config copy.
    const jinjaPath = join(dir, 'chat_template.jinja');
    if (existsSync(jinjaPath)) templates.set('default', await readFile(jinjaPath, 'utf8'));
    return new TextTokenizer(new Tokenizer(json, config), config, templates, jsonPath);
  }

  /** A tokenizer.json alone (no config, no chat template). */
  static fromFile(jsonPath: string): TextTokenizer {
    return new TextTokenizer(new Tokenizer(JSON.parse(readFileSync(jsonPath, 'utf8')), {}), {}, new Map(), jsonPath);
  }

  /** `addSpecial` runs the tokenizer's post-processor (e.g. prepends BOS). */
  encode(text: string, addSpecial: boolean): number[] {
    return this.tok.encode(text, { add_special_tokens: addSpecial }).ids;
  }

  /** A text pair with the special tokens of the tokenizer's pair template ([CLS] a [SEP] b [SEP]; XLM-R's <s> a </s></s> b </s>): a cross-encoder's input. */
  encodePair(a: string, b: string): number[] {
    return this.tok.encode(a, { text_pair: b, add_special_tokens: true }).ids;
  }

  /** encode() for request text: long texts are tokenized on a worker thread, so a
   *  multi-megabyte prompt never blocks the event loop. */
  encodeAsync(text: string, addSpecial: boolean): Promise<number[]> {
    if (text.length < WORKER_MIN_CHARS) return Promise.resolve(this.encode(text, addSpecial));
    return this.worker.encode(text, addSpecial);
  }

  /** Stops the worker thread, if one was started. */
  close(): Promise<void> {
    return this.worker.close();
  }

  /** `cleanUpSpaces` false keeps the pieces' text exactly (no " ," -> "," clean-up), as
   *  constrained decoding needs; undefined follows tokenizer_config.json. */
  decode(ids: number[], skipSpecial = true, cleanUpSpaces?: boolean): string {
    // tokenizers.js throws on an empty list.
    if (ids.length === 0) return '';
    return this.tok.decode(ids, { skip_special_tokens: skipSpecial, clean_up_tokenization_spaces: cleanUpSpaces });
  }

  /** The id of a vocabulary piece or added token, as stored; undefined when it has none. */
  tokenId(piece: string): number | undefined {
    return this.tok.token_to_id(piece) ?? undefined;
  }

  /** The vocabulary piece of one id, as stored (e.g. "▁the", "Ġthe", "<0x0A>"). */
  idToToken(id: number): string | undefined {
    return this.tok.id_to_token(id);
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }
}
