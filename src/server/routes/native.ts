// llama-server's native routes: POST /completion, /tokenize and /detokenize.
import { Router } from 'express';
import { collectText, generateText, type TextGenerationResult } from '../../chat/text-generation.js';
import type { Engine } from '../../engine/engine.js';
import { serverError } from '../errors.js';
import { generationParams, tokenizePrompt } from '../generation-params.js';
import { logitBiasFrom } from '../logit-bias.js';
import { completionProbabilities } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { requestContext } from '../request-context.js';
import { reasoningBudgetConstraint, requestedBudget } from '../reasoning-budget.js';
import { rejectResponseFormat, structuredOutputConstraint } from '../response-format.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { validateBody, validateDetokenize, validateNativeCompletion, validateTokenize } from '../schemas.js';
import { endSse, runSse, sendSse } from '../sse.js';

export function nativeRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics): Router {
  const router = Router();

  router.post('/completion', async (req, res) => {
    const body = validateBody(validateNativeCompletion, req.body);
    rejectResponseFormat(body.response_format);
    const budget = requestedBudget(body);
    const model = models.require();
    const { engine } = model;
    const promptTokens = tokenizePrompt(engine, body.prompt);
    // json_schema or grammar constrains the whole continuation; else the thinking budget caps
    // a reasoning block the prompt opens or the model writes.
    const promptText = () => (typeof body.prompt === 'string' ? body.prompt : engine.tokenizer.decode(promptTokens, false));
    const constraint =
      structuredOutputConstraint(engine, body) ?? (budget === undefined ? undefined : reasoningBudgetConstraint(model, promptText(), budget, body.reasoning_budget_message ?? ''));
    // n_predict -1 (the default) means the server's -n, by default until the context is full.
    const nPredict = body.n_predict == null || body.n_predict < 0 ? undefined : body.n_predict;
    // n_probs > 0: llama-server's completion_probabilities (per chunk when streaming).
    const nProbs = body.n_probs ?? 0;
    const params = {
      ...generationParams(engine, promptTokens, body, nPredict, requestContext(req, res), defaults, logitBiasFrom(engine, body.logit_bias)),
      ...(nProbs > 0 ? { logprobs: nProbs } : {}),
      ...(constraint ? { constraint } : {}),
    };
    // The REST reference leaves streaming /completion out of /metrics' request counts.
    const events = metrics.track(generateText(engine, params), !body.stream);

    if (body.stream) {
      await runSse(res, async () => {
        for await (const event of events) {
          if (event.type === 'text') {
            const probs = nProbs > 0 && event.token ? { completion_probabilities: completionProbabilities(engine.tokenizer, [event.token]) } : {};
            sendSse(res, { index: 0, content: event.text, stop: false, ...probs });
            continue;
          }
          sendSse(res, finalResponse(engine, event.result, ''));
          endSse(res, false);
        }
      });
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    const probs = nProbs > 0 && result.tokens ? { completion_probabilities: completionProbabilities(engine.tokenizer, result.tokens) } : {};
    res.json({ ...finalResponse(engine, result, result.text), ...probs });
  });

  router.post('/tokenize', (req, res) => {
    const body = validateBody(validateTokenize, req.body);
    const { engine } = models.require();
    res.json({ tokens: engine.tokenizer.encode(body.content, body.add_special ?? false) });
  });

  router.post('/detokenize', (req, res) => {
    const body = validateBody(validateDetokenize, req.body);
    const { tokenizer } = models.require().engine;
    // Checked before decoding so no partial text comes back; 500 is llama-server's status.
    const bad = body.tokens.find((id) => id < 0 || id >= tokenizer.vocabSize);
    if (bad !== undefined) {
      throw serverError(`token id ${bad} is out of vocabulary range (vocab_size ${tokenizer.vocabSize})`);
    }
    // Special tokens are shown, as llama-server's detokenize shows them; tokenizers.js
    // rejects an empty list.
    res.json({ content: body.tokens.length === 0 ? '' : tokenizer.decode(body.tokens, false) });
  });

  return router;
}

/** The non-streaming body, and (with empty content) the last event of a stream. */
function finalResponse(engine: Engine, result: TextGenerationResult, content: string) {
  const stopType = result.stopString !== undefined ? 'word' : result.finishReason === 'stop' ? 'eos' : 'limit';
  return {
    index: 0,
    content,
    stop: true,
    model: engine.info.id,
    tokens_predicted: result.usage.completion_tokens,
    tokens_evaluated: result.usage.prompt_tokens,
    // llama-server's names: the prompt tokens reused from the prompt cache; timings.prompt_n
    // counts only the ones evaluated.
    tokens_cached: result.cachedTokens,
    stop_type: stopType,
    stopping_word: result.stopString ?? '',
    truncated: false,
    timings: { cache_n: result.cachedTokens, ...result.timings },
  };
}
