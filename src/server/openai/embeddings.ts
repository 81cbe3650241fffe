// POST /v1/embeddings (OpenAI's shape) and POST /embedding, /embeddings (llama-server's
// native shape: a bare array of {index, embedding: [pooled row]}), their inputs in
// llama-server's forms. Every input is checked and tokenized before any is queued; the
// embedder batches them (../../engine/embedder.ts) and pools and normalises on the GPU.
import { Router, type Request } from 'express';
import { EmbedTimeoutError, type Embedder, type EmbedInput } from '../../engine/embedder.js';
import type { EmbedderState } from '../embedder-state.js';
import { ApiError, badRequest, serverError } from '../errors.js';
import { tokenizeText } from '../generation-params.js';
import { tokenPieces } from '../prompt-forms.js';
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
 * Each input as token ids, in llama-server's forms: text, token ids, or ids mixed with text
 * (`[12, 34, "text", 56]`, the pieces concatenated) are one input; any other array is a list
 * of inputs, each of those forms. Text is tokenized with the model's special tokens (BERT's
 * [CLS] .. [SEP], Qwen3-Embedding's closing <|endoftext|>) and `instruction` prefixed to it,
 * only when it starts its input, as llama-server does; ids are taken as given. Refused when
 * empty, or longer than one pass (the model's context).
 */
async function inputTokens(embedder: Embedder, input: EmbeddingInput | null | undefined, instruction: string | undefined): Promise<number[][]> {
  if (input == null) throw badRequest('"input" or "content" must be provided');
  const one = typeof input === 'string' ? input : tokenPieces(input);
  const items = one === undefined ? (input as unknown[]) : [one];
  if (items.length === 0) throw badRequest('`input` must not be empty');
  const { vocabSize, contextSize } = embedder.info;
  const inputs = items.map((item, i): Array<string | number> => {
    if (typeof item === 'string') {
      if (item.length === 0) throw badRequest(`input[${i}] is an empty string`);
      return [item];
    }
    if (Array.isArray(item) && item.length === 0) throw badRequest(`input[${i}] is an empty token list`);
    const pieces = Array.isArray(item) ? tokenPieces(item) : undefined;
    if (!pieces) throw badRequest(`input[${i}] must be a string, token ids, or token ids mixed with strings`);
    const bad = pieces.find((id) => typeof id === 'number' && id >= vocabSize);
    if (bad !== undefined) throw badRequest(`input[${i}] contains token id ${bad}, which is >= vocab_size ${vocabSize}`);
    return pieces;
  });
  const out: number[][] = [];
  for (const [i, pieces] of inputs.entries()) {
    const tokens: number[] = [];
    for (const [j, piece] of pieces.entries()) {
      if (typeof piece === 'number') tokens.push(piece);
      else tokens.push(...(await tokenizeText(embedder, j === 0 ? (instruction ?? '') + piece : piece, j === 0)));
    }
    if (tokens.length > contextSize) {
      throw badRequest(`input[${i}] has ${tokens.length} tokens, more than the ${contextSize} the embedding model takes in one pass (it is not truncated); shorten it or raise --batch-size`, 'context_length_exceeded', { n_prompt_tokens: tokens.length, n_ctx: contextSize });
    }
    out.push(tokens);
  }
  return out;
}
