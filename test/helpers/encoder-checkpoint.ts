// Random-weight BERT-style encoder checkpoints in Hugging Face layout, for the embedding
// and rerank tests: config.json, model.safetensors (f32), a small WordPiece tokenizer
// (BertNormalizer lower-casing, BertPreTokenizer, [CLS] .. [SEP] template: no BERT
// tokenizer ships as a package, so its vocabulary is a few hundred letters, pieces and
// words), and sentence-transformers' modules.json + 1_Pooling/config.json naming the pooling.
// `arch: 'xlm-roberta'` lays the tensors out under roberta. with positions from
// pad_token_id + 1, and `classifier: true` adds XLMRobertaForSequenceClassification's
// head (dense + tanh, out_proj to one label).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type SafetensorsWriteTensor } from '../../src/models/safetensors.js';
import { makeRng } from './random-checkpoint.js';

export interface EncoderCheckpointOptions {
  arch: 'bert' | 'xlm-roberta';
  hidden: number;
  layers: number;
  heads: number;
  intermediate: number;
  seed: number;
  maxPositions?: number;
  /** sentence-transformers pooling written to 1_Pooling/config.json; none: no pooling files. */
  pooling?: 'mean' | 'cls' | 'last';
  /** A sequence-classification head with one label (a reranker). */
  classifier?: boolean;
}

export const SPECIAL = { pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 } as const;

const WORDS = [
  'the', 'a', 'an', 'is', 'was', 'of', 'and', 'to', 'in', 'on', 'cat', 'dog', 'fox', 'quick', 'brown', 'lazy', 'jumps', 'over', 'once', 'upon', 'time',
  'small', 'village', 'there', 'lived', 'curious', 'named', 'what', 'capital', 'france', 'paris', 'city', 'berlin', 'germany', 'hello', 'world', 'hi',
  'weather', 'today', 'sunny', 'rain', 'panda', 'bear', 'animal', 'china', 'giant', 'eats', 'bamboo', 'machine', 'learning', 'model', 'text',
];

/** The vocabulary: specials, letters and digits, ##-continuations of each, punctuation, whole words. */
function vocabulary(): string[] {
  const letters = 'abcdefghijklmnopqrstuvwxyz0123456789'.split('');
  const punct = '.,!?;:\'"()-'.split('');
  return [...new Set(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', ...letters, ...letters.map((l) => `##${l}`), ...punct, ...WORDS])];
}

/** `xlmr`: XLM-R's pair template, <s> A </s></s> B </s> (here [CLS] A [SEP] [SEP] B [SEP]). */
function tokenizerJson(vocab: string[], xlmr: boolean): unknown {
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  const special = (id: string) => ({ SpecialToken: { id, type_id: 0 } });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specials.map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [special('[CLS]'), { Sequence: { id: 'A', type_id: 0 } }, special('[SEP]')],
      pair: [
        special('[CLS]'), { Sequence: { id: 'A', type_id: 0 } }, special('[SEP]'), ...(xlmr ? [special('[SEP]')] : []),
        { Sequence: { id: 'B', type_id: xlmr ? 0 : 1 } }, { SpecialToken: { id: '[SEP]', type_id: xlmr ? 0 : 1 } },
      ],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [SPECIAL.cls], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [SPECIAL.sep], tokens: ['[SEP]'] },
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  };
}

export function makeEncoderCheckpoint(opts: EncoderCheckpointOptions, dir: string): { vocabSize: number } {
  const { hidden: H, intermediate: I, layers } = opts;
  const rng = makeRng(opts.seed);
  const vocab = vocabulary();
  const V = vocab.length;
  const xlmr = opts.arch === 'xlm-roberta';
  // XLM-R's positions start at pad_token_id + 1 = 2.
  const maxPositions = (opts.maxPositions ?? 128) + (xlmr ? 2 : 0);
  const typeVocab = xlmr ? 1 : 2;
  const prefix = xlmr ? 'roberta.' : '';
  const tensors: SafetensorsWriteTensor[] = [];
  const store = (name: string, shape: number[], data: Float32Array) => tensors.push({ name, dtype: 'F32', shape, data });
  const gaussian = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
  const matrix = (name: string, rows: number, cols: number) => {
    store(`${name}.weight`, [rows, cols], gaussian(rows * cols, 1 / Math.sqrt(cols)));
    store(`${name}.bias`, [rows], gaussian(rows, 0.1));
  };
  const layerNorm = (name: string) => {
    store(`${name}.weight`, [H], Float32Array.from({ length: H }, () => 1 + 0.2 * rng.normal()));
    store(`${name}.bias`, [H], gaussian(H, 0.1));
  };
  const e = `${prefix}embeddings`;
  store(`${e}.word_embeddings.weight`, [V, H], gaussian(V * H, 1));
  store(`${e}.position_embeddings.weight`, [maxPositions, H], gaussian(maxPositions * H, 0.5));
  store(`${e}.token_type_embeddings.weight`, [typeVocab, H], gaussian(typeVocab * H, 0.5));
  layerNorm(`${e}.LayerNorm`);
  for (let i = 0; i < layers; i++) {
    const l = `${prefix}encoder.layer.${i}`;
    for (const n of ['query', 'key', 'value']) matrix(`${l}.attention.self.${n}`, H, H);
    matrix(`${l}.attention.output.dense`, H, H);
    layerNorm(`${l}.attention.output.LayerNorm`);
    matrix(`${l}.intermediate.dense`, I, H);
    matrix(`${l}.output.dense`, H, I);
    layerNorm(`${l}.output.LayerNorm`);
  }
  if (opts.classifier) {
    matrix('classifier.dense', H, H);
    store('classifier.out_proj.weight', [1, H], gaussian(H, 2 / Math.sqrt(H)));
    store('classifier.out_proj.bias', [1], gaussian(1, 0.1));
  }
  tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  mkdirSync(dir, { recursive: true });
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });
  const architectures = opts.classifier ? ['XLMRobertaForSequenceClassification'] : [xlmr ? 'XLMRobertaModel' : 'BertModel'];
  const config = {
    architectures, model_type: opts.arch, hidden_size: H, num_hidden_layers: layers, num_attention_heads: opts.heads, intermediate_size: I,
    hidden_act: 'gelu', max_position_embeddings: maxPositions, type_vocab_size: typeVocab, vocab_size: V, layer_norm_eps: 1e-12,
    pad_token_id: xlmr ? 1 : 0, position_embedding_type: 'absolute', torch_dtype: 'float32',
    ...(opts.classifier ? { id2label: { 0: 'LABEL_0' }, label2id: { LABEL_0: 0 } } : {}),
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tokenizerJson(vocab, xlmr)));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({
    tokenizer_class: 'BertTokenizer', do_lower_case: true, cls_token: '[CLS]', sep_token: '[SEP]', pad_token: '[PAD]', unk_token: '[UNK]', mask_token: '[MASK]', model_max_length: maxPositions,
  }));
  if (opts.pooling) {
    writeFileSync(join(dir, 'modules.json'), JSON.stringify([
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
      { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
      { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' },
    ]));
    mkdirSync(join(dir, '1_Pooling'), { recursive: true });
    writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({
      word_embedding_dimension: H, pooling_mode_cls_token: opts.pooling === 'cls', pooling_mode_mean_tokens: opts.pooling === 'mean',
      pooling_mode_max_tokens: false, pooling_mode_mean_sqrt_len_tokens: false, pooling_mode_weightedmean_tokens: false, pooling_mode_lasttoken: opts.pooling === 'last',
    }));
  }
  return { vocabSize: V };
}
