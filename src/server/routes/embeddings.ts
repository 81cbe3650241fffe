// POST /v1/embeddings (OpenAI's shape) and POST /embedding, /embeddings (llama-server's
// native shape: a bare array of {index, embedding: [pooled row]}). Every input is checked
// and tokenized before any is queued; the embedder batches them (../../engine/embedder.ts)
// and pools and normalises on the GPU.
import { Router, type Request } from 'express';
import { EmbedTimeoutError, type Embedder, type EmbedInput } from '../../engine/embedder.js';
import type { EmbedderState } from '../embedder-state.js';
import { ApiError, badRequest, serverError } from '../errors.js';
import { tokenizeText } from '../generation-params.js';
import { validateBody, validateEmbedding, type EmbeddingBody, type EmbeddingInput } from '../schemas.js';

const PATHS = ['/v1/embeddings', '/embedding', '/embeddings'];

/**
 * The routes' 501 when the server has no embedding model, ahead of the body parser (a
 * malformed body gets the same answer, as the other unavailable routes give).
 */
export function embeddingUnavailableRoutes(embedders: EmbedderState): Router {
  const router = Router();
  router.post(PATHS, (_req, _res, next) => {
    if (!embedders.configured) embedders.require();
    next();
  });
  return router;
}

/** embd_normalize's default: euclidean (llama-server's). */
const DEFAULT_NORMALIZE = 2;

/** `defaultNormalize`: embd_normalize for requests that set none (--embd-normalize). */
export function embeddingRoutes(embedders: EmbedderState, defaultNormalize = DEFAULT_NORMALIZE): Router {
  const router = Router();
  router.post('/v1/embeddings', async (req, res) => {
    const { embedder, body, vectors, promptTokens } = await embed(embedders, req, defaultNormalize);
    const base64 = body.encoding_format === 'base64';
    res.json({
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: base64 ? toBase64(v) : Array.from(v) })),
      model: embedder.info.id,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    });
  });
  router.post(['/embedding', '/embeddings'], async (req, res) => {
    const { body, vectors } = await embed(embedders, req, defaultNormalize);
    const base64 = body.encoding_format === 'base64';
    res.json(vectors.map((v, index) => ({ index, embedding: [base64 ? toBase64(v) : Array.from(v)] })));
  });
  return router;
}

/** Little-endian f32 bytes, as OpenAI's SDK decodes them. */
function toBase64(v: Float32Array): string {
  const bytes = Buffer.alloc(v.length * 4);
  v.forEach((x, i) => bytes.writeFloatLE(x, i * 4));
  return bytes.toString('base64');
}

async function embed(embedders: EmbedderState, req: Request, defaultNormalize: number): Promise<{ embedder: Embedder; body: EmbeddingBody; vectors: Float32Array[]; promptTokens: number }> {
  const embedder = embedders.require();
  const body = validateBody(validateEmbedding, req.body);
  checkModel(embedder, body.model);
  const { hidden } = embedder.info;
  const dims = body.dimensions ?? hidden;
  if (dims < 1 || dims > hidden) throw badRequest(`\`dimensions\` must be between 1 and ${hidden} (the model's embedding size), got ${dims}`);
  const tokens = await inputTokens(embedder, body.input ?? body.content, body.instruction ?? undefined);
  const normalize = body.embd_normalize ?? defaultNormalize;
  const inputs: EmbedInput[] = tokens.map((t) => ({ tokens: t, dims, normalize }));
  let vectors: Float32Array[];
  try {
    vectors = await embedder.embed(inputs);
  } catch (e) {
    if (e instanceof EmbedTimeoutError) throw new ApiError(504, 'timeout_error', e.message);
    throw e;
  }
  vectors.forEach((v, i) => {
    if (!v.every(Number.isFinite)) throw serverError(`the embedding of input[${i}] is not finite (the model produced NaN or infinity)`);
  });
  return { embedder, body, vectors, promptTokens: tokens.reduce((n, t) => n + t.length, 0) };
}

/** A request's `model`, when given, must name the served model. */
export function checkModel(embedder: Embedder, model: string | null | undefined): void {
  if (model != null && model !== embedder.info.id) {
    throw badRequest(`model \`${model}\` is not served here; this server's embedding model is \`${embedder.info.id}\``, 'model_not_found');
  }
}

/**
 * Each input as token ids: text tokenized with the model's special tokens (BERT's
 * [CLS] .. [SEP], Qwen3-Embedding's closing <|endoftext|>), `instruction` prefixed to it;
 * token ids as given. Refused when empty, or longer than one pass (the model's context).
 */
async function inputTokens(embedder: Embedder, input: EmbeddingInput | null | undefined, instruction: string | undefined): Promise<number[][]> {
  if (input == null) throw badRequest('"input" or "content" must be provided');
  // A flat array of numbers is one token-id input.
  const items: Array<string | number[]> = typeof input === 'string' ? [input] : input.every((x) => typeof x === 'number') && input.length > 0 ? [input as number[]] : (input as Array<string | number[]>);
  if (items.length === 0) throw badRequest('`input` must not be empty');
  const { vocabSize, contextSize } = embedder.info;
  items.forEach((item, i) => {
    if (typeof item === 'string' && item.length === 0) throw badRequest(`input[${i}] is an empty string`);
    if (typeof item !== 'string') {
      if (item.length === 0) throw badRequest(`input[${i}] is an empty token list`);
      const bad = item.find((id) => id >= vocabSize);
      if (bad !== undefined) throw badRequest(`input[${i}] contains token id ${bad}, which is >= vocab_size ${vocabSize}`);
    }
  });
  const out: number[][] = [];
  for (const [i, item] of items.entries()) {
    const tokens = typeof item === 'string' ? await tokenizeText(embedder, (instruction ?? '') + item, true) : item;
    if (tokens.length > contextSize) {
      throw badRequest(`input[${i}] has ${tokens.length} tokens, more than the ${contextSize} the embedding model takes in one pass (it is not truncated); shorten it or raise --batch-size`, 'context_length_exceeded', { n_prompt_tokens: tokens.length, n_ctx: contextSize });
    }
    out.push(tokens);
  }
  return out;
}
