// llama-server's native routes: POST /completion (and /completions, as in llama-server),
// /infill and /apply-template (generation: nativeRoutes), /tokenize and /detokenize
// (tokenizerRoutes). /completion and /infill render the completion pipeline
// (../completion.ts). /completion takes every prompt form of ../prompt-forms.ts; a batch, or
// n_cmpl > 1, answers an array of results (prompt p's j-th at index p * n_cmpl + j), one
// result the object itself.
import type { IncomingMessage } from 'node:http';
import { Router, type Request, type Response } from 'express';
import type { GeneratedToken, TextGenerationEvent } from '../../chat/text-generation.js';
import { arrayElements, objectMembers, scanJsonValue } from '../../chat/tool-calls/json-scan.js';
import type { Engine } from '../../engine/engine.js';
import type { PromptProgress } from '../../engine/types.js';
import type { TextTokenizer } from '../../models/tokenizer.js';
import { renderTurn } from '../chat-turn.js';
import { sampleVideos } from '../turn-images.js';
import { choicesScope, mergeChoices } from '../choices.js';
import { collectCompletions, infillPieces, prepareCompletion, startCompletions, TOKENIZE_CONTEXTS } from '../completion.js';
import { ApiError, badRequest, serverError } from '../errors.js';
import { tokenizeText } from '../generation-params.js';
import { completionProbabilities, postSamplingProbabilities } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { finalResponse, generationSettings, projectFields, promptProgress } from './response.js';
import { promptList, type PromptPieces } from '../prompt-forms.js';
import { requestContext } from '../request-context.js';
import { reasoningBudgetConstraint, requestedBudget } from '../reasoning-budget.js';
import { rejectResponseFormat, structuredOutputConstraint } from '../response-format.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import {
  validateBody,
  validateChatCompletion,
  validateDetokenize,
  validateInfill,
  validateNativeCompletion,
  validateTokenize,
  type InfillBody,
  type NativeCompletionBody,
} from '../schemas.js';
import { endSse, runSse, sendSse } from '../sse.js';
import { tokenBytes } from '../token-pieces.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** The raw JSON of the /detokenize bodies, kept by keepRawBody while their requests live. */
const rawBodies = new WeakMap<IncomingMessage, Buffer>();

/** For /detokenize's body parser: keeps the raw text, so that an id JSON.parse rounds
 *  (beyond 2^53) is named as the client wrote it. */
export function keepRawBody(req: IncomingMessage, body: Buffer): void {
  rawBodies.set(req, body);
}

/** tokens[i] as the client wrote it, when JSON.parse may have rounded it. */
function writtenId(req: Request, i: number, parsed: number): string {
  if (Number.isSafeInteger(parsed)) return String(parsed);
  const raw = rawBodies.get(req)?.toString('utf8');
  // JSON.parse keeps the last of repeated keys.
  const member = raw === undefined ? undefined : objectMembers(raw, 0).members.filter((m) => m.key === 'tokens').at(-1);
  const start = member && arrayElements(raw!, member.valueStart).starts[i];
  const scan = start === undefined ? undefined : scanJsonValue(raw!, start, true);
  return scan?.status === 'complete' ? raw!.slice(start, scan.end) : String(parsed);
}

export interface NativeRouteOptions {
  /** --chat-template-kwargs, for /apply-template's rendering. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** --spm-infill: /infill lays the suffix before the prefix. */
  spmInfill?: boolean;
}

export function nativeRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: NativeRouteOptions = {}): Router {
  const router = Router();

  /** Generates from `prompts` as /completion does: the body /completion and /infill share. */
  const complete = async (req: Request, res: Response, body: Omit<NativeCompletionBody, 'prompt'>, prompts: PromptPieces[]) => {
    rejectResponseFormat(body.response_format);
    const budget = requestedBudget(body);
    const model = models.require();
    const { engine } = model;
    // llama-server's n_cmpl (n as its alias): completions of each prompt.
    const prepared = await prepareCompletion(engine, { prompts, n: body.n_cmpl ?? body.n ?? 1, nField: 'n_cmpl', logitBias: body.logit_bias });
    // n_predict -1 (the default) means the server's -n, by default until the context is full.
    const nPredict = body.n_predict == null || body.n_predict < 0 ? undefined : body.n_predict;
    // n_probs > 0: llama-server's completion_probabilities (per chunk when streaming).
    const nProbs = body.n_probs ?? 0;
    // post_sampling_probs: of the distribution each token was drawn from, computed by the sampler.
    const postSampling = body.post_sampling_probs === true;
    const probabilities = (tokens: GeneratedToken[]) =>
      postSampling ? postSamplingProbabilities(engine.tokenizer, tokens) : completionProbabilities(engine.tokenizer, tokens);
    const stream = body.stream === true;
    const timingsPerToken = stream && body.timings_per_token === true;
    // The processed prompts, special tokens shown (llama-server's "prompt" field).
    const processed = prepared.prompts.map((p) => engine.tokenizer.decode(p.tokens, false));
    const promptLength = (index: number) => prepared.prompts[Math.floor(index / prepared.n)]!.tokens.length;
    const scope = choicesScope(requestContext(req, res));
    try {
      const { params, streams } = startCompletions(engine, prepared, {
        sampling: body,
        maxTokens: nPredict,
        context: scope.context,
        defaults,
        metrics,
        countRequests: !stream,
        // json_schema or grammar constrains the whole continuation; else the thinking budget
        // caps a reasoning block the prompt opens or the model writes.
        constraint: (p) => {
          const { pieces } = prepared.prompts[p]!;
          return (
            structuredOutputConstraint(engine, body) ??
            (budget === undefined ? undefined : reasoningBudgetConstraint(model, typeof pieces === 'string' ? pieces : processed[p]!, budget, body.reasoning_budget_message ?? ''))
          );
        },
        reporting: {
          ...(nProbs > 0 ? { logprobs: nProbs, postSamplingProbs: postSampling } : {}),
          // A stream's chunks carry their token ids; a body carries them all with return_tokens.
          ...(stream ? { everyToken: true, timingsPerToken } : { collectTokens: body.return_tokens === true }),
        },
        // return_progress (streams only): a prompt_progress chunk after each prefill chunk.
        ...(stream && body.return_progress === true ? { onProgress: (index: number, pp: PromptProgress) => sendSse(res, progressChunk(index, pp, promptLength(index))) } : {}),
      });
      // Result p * n + j: prompt p's j-th completion, with what its body reports.
      const results = params.map((p, index): NativeResult => ({
        prompt: processed[Math.floor(index / prepared.n)]!,
        promptLength: promptLength(index),
        settings: generationSettings(
          {
            sampling: p.sampling,
            nPredict: nPredict ?? defaults.n_predict,
            stop: p.stop,
            stream,
            nProbs,
            timingsPerToken: body.timings_per_token === true,
            postSamplingProbs: postSampling,
            ignoreEos: body.ignore_eos === true,
          },
          defaults,
        ),
      }));
      if (stream) {
        await streamNativeCompletion(res, engine, streams, results, nProbs > 0 ? probabilities : undefined);
        return;
      }
      const done = await collectCompletions(streams);
      if (!done) return;
      const bodies = done.map((result, index) => {
        const { prompt, settings } = results[index]!;
        const tokens = body.return_tokens === true ? (result.tokens ?? []).map((t) => t.id) : [];
        const probs = nProbs > 0 && result.tokens ? { completion_probabilities: probabilities(result.tokens) } : {};
        const full = { ...finalResponse(engine, result, { content: result.text, tokens, prompt, settings }), index, ...probs };
        return body.response_fields?.length ? projectFields(full, body.response_fields) : full;
      });
      // One result is an object, several an array, as llama-server answers.
      res.json(bodies.length === 1 ? bodies[0] : bodies);
    } finally {
      scope.close();
    }
  };

  router.post(['/completion', '/completions'], async (req, res) => {
    const body = validateBody(validateNativeCompletion, req.body);
    await complete(req, res, body, promptList(body.prompt).prompts);
  });

  // Code completion: the prompt is laid out for the model's fill-in-the-middle tokens
  // (../completion.ts, infillPieces); the rest is /completion.
  router.post('/infill', async (req, res) => {
    const body = infillBody(req.body);
    const { engine } = models.require();
    await complete(req, res, body, [await infillPieces(engine, body, options.spmInfill === true)]);
  });

  // The chat prompt a chat completion with this body would generate from, rendered by the
  // same pipeline (tools, tool_choice, kwargs, reasoning rules), without generating: any
  // length renders. As llama-server's, it leaves out a leading BOS the tokenizer adds
  // itself, so the text sent to /completion gets one. A video is sampled, as a generation
  // would sample it, to render its frames.
  router.post('/apply-template', async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const warn = (message: string) => console.warn(`mlxcel-server: /apply-template: ${message}`);
    const messages = await sampleVideos(model, body.messages, requestContext(req, res).signal);
    const { prompt } = renderTurn(model, { ...body, messages }, { serverKwargs: options.chatTemplateKwargs, warn });
    const { tokenizer } = model.engine;
    const bos = tokenizer.bosToken;
    const addsBos = tokenizer.bosId !== undefined && tokenizer.encode('', true)[0] === tokenizer.bosId;
    res.json({ prompt: bos && addsBos && prompt.startsWith(bos) ? prompt.slice(bos.length) : prompt });
  });

  return router;
}

/** /tokenize and /detokenize: the model's tokenizer, on a generation server or an embedding-only one alike. */
export function tokenizerRoutes(models: ModelState): Router {
  const router = Router();

  router.post('/tokenize', async (req, res) => {
    const body = validateBody(validateTokenize, req.body);
    const { engine } = models.require();
    const { tokenizer } = engine;
    const limit = TOKENIZE_CONTEXTS * engine.info.contextSize;
    const tokens = await tokenizeText(engine, body.content, body.add_special ?? false, limit);
    res.json({ tokens: body.with_pieces === true ? tokens.map((id) => ({ id, piece: tokenPiece(tokenizer, id) })) : tokens });
  });

  router.post('/detokenize', (req, res) => {
    const body = validateBody(validateDetokenize, req.body);
    const { engine } = models.require();
    const { tokenizer } = engine;
    const limit = TOKENIZE_CONTEXTS * engine.info.contextSize;
    if (body.tokens.length > limit) throw badRequest(`tokens has ${body.tokens.length} ids; at most ${limit} are taken (${TOKENIZE_CONTEXTS} context windows)`);
    // Ids are read as 64-bit integers, so one beyond the 32-bit range (or 2^53) reaches the
    // vocabulary check under its own value.
    const written = (i: number) => writtenId(req, i, body.tokens[i]!);
    body.tokens.forEach((id, i) => {
      if (Number.isSafeInteger(id)) return;
      const text = written(i);
      const exact = /^-?\d+$/.test(text) ? BigInt(text) : BigInt(id);
      if (exact < INT64_MIN || exact > INT64_MAX) throw badRequest(`tokens[${i}] must be a 64-bit integer, got ${text}`);
    });
    // The reference's answer (llama-server's status and type): 500 naming the first bad id,
    // checked before decoding so no partial text comes back.
    const bad = body.tokens.findIndex((id) => id < 0 || id >= tokenizer.vocabSize);
    if (bad >= 0) throw serverError(`token id ${written(bad)} is out of vocabulary range (vocab_size ${tokenizer.vocabSize})`);
    // Special tokens are shown, as llama-server's detokenize shows them; tokenizers.js
    // rejects an empty list.
    res.json({ content: body.tokens.length === 0 ? '' : tokenizer.decode(body.tokens, false) });
  });

  return router;
}

/** The /infill body, its refusals worded as llama-server words them. */
function infillBody(raw: unknown): InfillBody {
  try {
    return validateBody(validateInfill, raw);
  } catch (err) {
    if (err instanceof ApiError) throw badRequest(`Invalid infill request: ${err.message}`);
    throw err;
  }
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** A token's piece as llama-server's with_pieces shows it: its text when its bytes are valid UTF-8 on their own, else the bytes. */
function tokenPiece(tokenizer: TextTokenizer, id: number): string | number[] {
  const bytes = tokenBytes(tokenizer, id);
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return [...bytes];
  }
}

/** llama-server's progress chunk of result `index`: no text yet, and prompt_progress in its names. */
function progressChunk(index: number, p: PromptProgress, promptLength: number) {
  return {
    index,
    content: '',
    tokens: [],
    stop: false,
    tokens_predicted: 0,
    tokens_evaluated: promptLength,
    prompt_progress: promptProgress(p),
  };
}

/** What result i's chunks and final event carry besides its text. */
interface NativeResult {
  /** The processed prompt (llama-server's "prompt" field). */
  prompt: string;
  promptLength: number;
  settings: ReturnType<typeof generationSettings>;
}

/**
 * One chunk per generated piece, tagged with its result's index, and each result's final
 * event; the stream ends after the last one. `probabilities` (n_probs > 0) gives every
 * token's chunk its completion_probabilities.
 */
async function streamNativeCompletion(
  res: Response,
  engine: Engine,
  streams: AsyncIterable<TextGenerationEvent>[],
  results: NativeResult[],
  probabilities: ((tokens: GeneratedToken[]) => unknown) | undefined,
): Promise<void> {
  await runSse(res, async () => {
    // Per result: tokens whose text is still held back (an unfinished character, a
    // possible stop string) go out with the chunk that releases it.
    const pending: GeneratedToken[][] = results.map(() => []);
    const predicted = results.map(() => 0);
    let finished = 0;
    for await (const { index, event } of mergeChoices(streams)) {
      const r = results[index]!;
      if (event.type === 'text') {
        if (event.token) {
          pending[index]!.push(event.token);
          predicted[index]!++;
        }
        if (event.text === '' && !probabilities) continue;
        const probs = probabilities && event.token ? { completion_probabilities: probabilities([event.token]) } : {};
        sendSse(res, {
          index,
          content: event.text,
          tokens: pending[index]!.map((t) => t.id),
          stop: false,
          tokens_predicted: predicted[index],
          tokens_evaluated: r.promptLength,
          ...(event.timings ? { timings: event.timings } : {}),
          ...probs,
        });
        pending[index] = [];
        continue;
      }
      sendSse(res, { ...finalResponse(engine, event.result, { content: '', tokens: [], prompt: r.prompt, settings: r.settings }), index });
      if (++finished === streams.length) endSse(res, false);
    }
  });
}
