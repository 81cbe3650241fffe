// A tiny random-weight Whisper checkpoint in transformers' layout (model.encoder.*,
// model.decoder.*; conv weights [out, in, 3]; k_proj without bias; no proj_out: the head is
// the token embedding), with a byte-level BPE tokenizer.json laid out as Whisper's: the
// byte pieces and a few merges, then <|endoftext|>, <|startoftranscript|>, the language
// tokens (WHISPER_TEST_LANGUAGES), <|translate|>, <|transcribe|>, <|startoflm|>,
// <|startofprev|>, <|nospeech|>, <|notimestamps|> and the 1501 timestamps <|0.00|> ..
// <|30.00|>; and a generation_config.json naming them as transformers' does.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type SafetensorsWriteTensor } from '../../src/models/safetensors.js';
import { makeRng } from './random-checkpoint.js';

export const WHISPER_TEST_LANGUAGES = ['en', 'de', 'fr', 'es'] as const;

export interface WhisperShape {
  dModel: number;
  encoderLayers: number;
  decoderLayers: number;
  heads: number;
  ffn: number;
  melBins: number;
  /** Decoder positions (a window decodes at most half of them). */
  targetPositions: number;
  /** Text tokens before <|endoftext|> (Whisper's 50257): the byte pieces and merges, padded with placeholder pieces. */
  textVocab?: number;
}

export const TINY_WHISPER: WhisperShape = { dModel: 64, encoderLayers: 2, decoderLayers: 2, heads: 2, ffn: 256, melBins: 80, targetPositions: 64 };

/** GPT-2's byte -> printable character map (byte-level BPE's alphabet). */
function byteChars(): string[] {
  const keep = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out: string[] = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(keep(b) ? b : 256 + extra++));
  return out;
}

/** Merges of frequent English pairs, each building on the alphabet and earlier merges. */
const MERGES = ['Ġ t', 'h e', 'Ġt he', 'Ġ a', 'i n', 'Ġ s', 'e r', 'o n', 'r e', 'Ġ w', 'Ġ o', 'a n', 'e n', 'Ġ c', 'o r', 'i s', 'Ġ b', 'Ġ f', 'e s', 'a t', 'i t', 'Ġ h', 'Ġ m', 'Ġ d', 'Ġ p', 'in g', 'Ġa n', 'Ġan d', 'o u', 'e d'];

export interface WhisperIds {
  vocab: number;
  eot: number;
  sot: number;
  languages: Record<string, number>;
  translate: number;
  transcribe: number;
  sotPrev: number;
  noSpeech: number;
  noTimestamps: number;
  timestampBegin: number;
}

/** The tokenizer.json and the special ids. */
function whisperTokenizer(textVocab = 0): { json: unknown; ids: WhisperIds } {
  const vocab: Record<string, number> = {};
  byteChars().forEach((c, i) => (vocab[c] = i));
  for (const m of MERGES) vocab[m.replace(' ', '')] = Object.keys(vocab).length;
  // Placeholders no merge produces: they only decode.
  for (let i = Object.keys(vocab).length; i < textVocab; i++) vocab[`Ġpad${i}`] = i;
  let next = Object.keys(vocab).length;
  const added: Array<{ id: number; content: string; special: boolean }> = [];
  const add = (content: string, special = true) => {
    added.push({ id: next, content, special });
    return next++;
  };
  const eot = add('<|endoftext|>');
  const sot = add('<|startoftranscript|>');
  const languages: Record<string, number> = {};
  for (const code of WHISPER_TEST_LANGUAGES) languages[code] = add(`<|${code}|>`);
  const translate = add('<|translate|>');
  const transcribe = add('<|transcribe|>');
  add('<|startoflm|>');
  const sotPrev = add('<|startofprev|>');
  const noSpeech = add('<|nospeech|>');
  const noTimestamps = add('<|notimestamps|>');
  const timestampBegin = next;
  for (let i = 0; i <= 1500; i++) add(`<|${(i * 0.02).toFixed(2)}|>`, false);
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges: MERGES },
  };
  return { json, ids: { vocab: next, eot, sot, languages, translate, transcribe, sotPrev, noSpeech, noTimestamps, timestampBegin } };
}

/** Writes the checkpoint into `dir`; returns the special ids. */
export function makeWhisperCheckpoint(dir: string, seed: number, shape: WhisperShape = TINY_WHISPER): WhisperIds {
  const { json, ids } = whisperTokenizer(shape.textVocab);
  const rng = makeRng(seed);
  const D = shape.dModel;
  const tensors: SafetensorsWriteTensor[] = [];
  const gaussian = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
  const put = (name: string, dims: number[], data: Float32Array) => tensors.push({ name, dtype: 'F32', shape: dims, data });
  const linear = (name: string, rows: number, cols: number, bias = true) => {
    put(`${name}.weight`, [rows, cols], gaussian(rows * cols, 1 / Math.sqrt(cols)));
    if (bias) put(`${name}.bias`, [rows], gaussian(rows, 0.1));
  };
  const norm = (name: string) => {
    put(`${name}.weight`, [D], Float32Array.from({ length: D }, () => 0.75 + 0.5 * rng.uniform()));
    put(`${name}.bias`, [D], gaussian(D, 0.1));
  };
  const attention = (p: string) => {
    linear(`${p}.q_proj`, D, D);
    linear(`${p}.k_proj`, D, D, false);
    linear(`${p}.v_proj`, D, D);
    linear(`${p}.out_proj`, D, D);
  };
  const mlp = (l: string) => {
    linear(`${l}.fc1`, shape.ffn, D);
    linear(`${l}.fc2`, D, shape.ffn);
    norm(`${l}.final_layer_norm`);
  };
  put('model.encoder.conv1.weight', [D, shape.melBins, 3], gaussian(D * shape.melBins * 3, 1 / Math.sqrt(shape.melBins * 3)));
  put('model.encoder.conv1.bias', [D], gaussian(D, 0.1));
  put('model.encoder.conv2.weight', [D, D, 3], gaussian(D * D * 3, 1 / Math.sqrt(D * 3)));
  put('model.encoder.conv2.bias', [D], gaussian(D, 0.1));
  // transformers stores the encoder's sinusoids; these are random, so a reader that
  // computed them instead would not match.
  put('model.encoder.embed_positions.weight', [1500, D], gaussian(1500 * D, 0.5));
  for (let i = 0; i < shape.encoderLayers; i++) {
    const l = `model.encoder.layers.${i}`;
    attention(`${l}.self_attn`);
    norm(`${l}.self_attn_layer_norm`);
    mlp(l);
  }
  norm('model.encoder.layer_norm');
  put('model.decoder.embed_tokens.weight', [ids.vocab, D], gaussian(ids.vocab * D, 1));
  put('model.decoder.embed_positions.weight', [shape.targetPositions, D], gaussian(shape.targetPositions * D, 0.5));
  for (let i = 0; i < shape.decoderLayers; i++) {
    const l = `model.decoder.layers.${i}`;
    attention(`${l}.self_attn`);
    norm(`${l}.self_attn_layer_norm`);
    attention(`${l}.encoder_attn`);
    norm(`${l}.encoder_attn_layer_norm`);
    mlp(l);
  }
  norm('model.decoder.layer_norm');
  mkdirSync(dir, { recursive: true });
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });
  const config = {
    model_type: 'whisper', architectures: ['WhisperForConditionalGeneration'], activation_function: 'gelu',
    d_model: D, encoder_layers: shape.encoderLayers, decoder_layers: shape.decoderLayers,
    encoder_attention_heads: shape.heads, decoder_attention_heads: shape.heads, encoder_ffn_dim: shape.ffn, decoder_ffn_dim: shape.ffn,
    num_mel_bins: shape.melBins, max_source_positions: 1500, max_target_positions: shape.targetPositions, vocab_size: ids.vocab,
    scale_embedding: false, tie_word_embeddings: true, torch_dtype: 'float32',
    bos_token_id: ids.eot, eos_token_id: ids.eot, decoder_start_token_id: ids.sot, pad_token_id: ids.eot,
    // The legacy forced ids: a request's language and the detection win over them.
    forced_decoder_ids: [[1, ids.languages.en], [2, ids.transcribe], [3, ids.noTimestamps]],
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({
    decoder_start_token_id: ids.sot, eos_token_id: ids.eot, pad_token_id: ids.eot, bos_token_id: ids.eot,
    is_multilingual: true, no_timestamps_token_id: ids.noTimestamps, prev_sot_token_id: ids.sotPrev, max_initial_timestamp_index: 50,
    lang_to_id: Object.fromEntries(Object.entries(ids.languages).map(([code, id]) => [`<|${code}|>`, id])),
    task_to_id: { transcribe: ids.transcribe, translate: ids.translate },
    // The space and a few byte pieces, as Whisper suppresses a blank start and non-speech symbols.
    begin_suppress_tokens: [byteChars().indexOf('Ġ'), ids.eot],
    suppress_tokens: [1, 2, 7, 8, 9],
  }, null, 2));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>' }));
  return ids;
}
