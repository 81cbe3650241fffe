// llama-server's native routes: POST /completion (and /completions, as in llama-server),
// /apply-template, /tokenize and /detokenize.
import { Router } from 'express';
import { collectText, generateText, type GeneratedToken } from '../../chat/text-generation.js';
import type { PromptProgress } from '../../engine/types.js';
import type { TextTokenizer } from '../../models/tokenizer.js';
import { prepareTurn } from '../chat-turn.js';
import { badRequest } from '../errors.js';
import { generationParams, tokenizePrompt, tokenizeText } from '../generation-params.js';
import { logitBiasFrom } from '../logit-bias.js';
import { completionProbabilities, postSamplingProbabilities } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { finalResponse, generationSettings, projectFields } from '../native-response.js';
import { requestContext } from '../request-context.js';
import { reasoningBudgetConstraint, requestedBudget } from '../reasoning-budget.js';
import { rejectResponseFormat, structuredOutputConstraint } from '../response-format.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { validateBody, validateChatCompletion, validateDetokenize, validateNativeCompletion, validateTokenize } from '../schemas.js';
import { endSse, runSse, sendSse } from '../sse.js';
import { tokenBytes } from '../token-pieces.js';

/** /tokenize and /detokenize take up to this many context windows (a document to be split). */
const TOKENIZE_CONTEXTS = 4;

export interface NativeRouteOptions {
  /** --chat-template-kwargs, for /apply-template's rendering. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export function nativeRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: NativeRouteOptions = {}): Router {
  const router = Router();

  router.post(['/completion', '/completions'], async (req, res) => {
    const body = validateBody(validateNativeCompletion, req.body);
    rejectResponseFormat(body.response_format);
    const budget = requestedBudget(body);
    const model = models.require();
    const { engine } = model;
    const promptTokens = await tokenizePrompt(engine, body.prompt);
    // The processed prompt, special tokens shown (llama-server's "prompt" field).
    const prompt = engine.tokenizer.decode(promptTokens, false);
    // json_schema or grammar constrains the whole continuation; else the thinking budget caps
    // a reasoning block the prompt opens or the model writes.
    const promptText = typeof body.prompt === 'string' ? body.prompt : prompt;
    const constraint =
      structuredOutputConstraint(engine, body) ?? (budget === undefined ? undefined : reasoningBudgetConstraint(model, promptText, budget, body.reasoning_budget_message ?? ''));
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
    // return_progress (streams only): a prompt_progress chunk after each prefill chunk.
    const onProgress = stream && body.return_progress === true ? (p: PromptProgress) => sendSse(res, progressChunk(p, promptTokens.length)) : undefined;
    const params = {
      ...generationParams(engine, promptTokens, body, nPredict, requestContext(req, res), defaults, logitBiasFrom(engine, body.logit_bias)),
      ...(nProbs > 0 ? { logprobs: nProbs, postSamplingProbs: postSampling } : {}),
      ...(constraint ? { constraint } : {}),
      // A stream's chunks carry their token ids; a body carries them all with return_tokens.
      ...(stream ? { everyToken: true, timingsPerToken } : { collectTokens: body.return_tokens === true }),
      ...(onProgress ? { onProgress } : {}),
    };
    const settings = generationSettings(
      {
        sampling: params.sampling,
        nPredict: nPredict ?? defaults.n_predict,
        stop: params.stop,
        stream,
        nProbs,
        timingsPerToken: body.timings_per_token === true,
        postSamplingProbs: postSampling,
      },
      defaults,
    );
    // The REST reference leaves streaming /completion out of /metrics' request counts.
    const events = metrics.track(generateText(engine, params), !stream);

    if (stream) {
      await runSse(res, async () => {
        // Tokens whose text is still held back (an unfinished character, a possible stop
        // string) go out with the chunk that releases it.
        let pending: GeneratedToken[] = [];
        let predicted = 0;
        for await (const event of events) {
          if (event.type === 'text') {
            if (event.token) {
              pending.push(event.token);
              predicted++;
            }
            if (event.text === '' && nProbs === 0) continue;
            const probs = nProbs > 0 && event.token ? { completion_probabilities: probabilities([event.token]) } : {};
            sendSse(res, {
              index: 0,
              content: event.text,
              tokens: pending.map((t) => t.id),
              stop: false,
              tokens_predicted: predicted,
              tokens_evaluated: promptTokens.length,
              ...(event.timings ? { timings: event.timings } : {}),
              ...probs,
            });
            pending = [];
            continue;
          }
          sendSse(res, finalResponse(engine, event.result, { content: '', tokens: [], prompt, settings }));
          endSse(res, false);
        }
      });
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    const tokens = body.return_tokens === true ? (result.tokens ?? []).map((t) => t.id) : [];
    const probs = nProbs > 0 && result.tokens ? { completion_probabilities: probabilities(result.tokens) } : {};
    const full = { ...finalResponse(engine, result, { content: result.text, tokens, prompt, settings }), ...probs };
    res.json(body.response_fields?.length ? projectFields(full, body.response_fields) : full);
  });

  // The chat prompt a chat completion with this body would generate from, rendered by the
  // same pipeline (tools, tool_choice, kwargs, reasoning rules), without generating.
  router.post('/apply-template', async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const warn = (message: string) => console.warn(`mlxcel-server: /apply-template: ${message}`);
    const { chat } = await prepareTurn(model, body, { serverKwargs: options.chatTemplateKwargs, warn });
    res.json({ prompt: chat.prompt });
  });

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
    // Checked before decoding so no partial text comes back (llama-server answers 500 here:
    // a client's mistake is a 400 in this server).
    const bad = body.tokens.find((id) => id < 0 || id >= tokenizer.vocabSize);
    if (bad !== undefined) throw badRequest(`token id ${bad} is out of vocabulary range (vocab_size ${tokenizer.vocabSize})`);
    // Special tokens are shown, as llama-server's detokenize shows them; tokenizers.js
    // rejects an empty list.
    res.json({ content: body.tokens.length === 0 ? '' : tokenizer.decode(body.tokens, false) });
  });

  return router;
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

/** llama-server's progress chunk: no text yet, and prompt_progress in its names. */
function progressChunk(p: PromptProgress, promptLength: number) {
  return {
    index: 0,
    content: '',
    tokens: [],
    stop: false,
    tokens_predicted: 0,
    tokens_evaluated: promptLength,
    prompt_progress: { total: p.total, cache: p.cache, processed: p.processed, time_ms: p.timeMs },
  };
}
