// llama-server's native routes: POST /completion, /tokenize and /detokenize. /completion
// takes every prompt form of ../prompt-forms.ts; a batch, or n_cmpl > 1, answers an array
// of results (prompt p's j-th at index p * n_cmpl + j), one result the object itself.
import { Router } from 'express';
import { generateTexts, type TextGenerationResult } from '../../chat/text-generation.js';
import type { Engine } from '../../engine/engine.js';
import { choiceSampling, choicesScope, collectChoices, MAX_RESULTS, mergeChoices } from '../choices.js';
import { badRequest, serverError } from '../errors.js';
import { generationParams } from '../generation-params.js';
import { logitBiasFrom } from '../logit-bias.js';
import { completionProbabilities } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { promptList, tokenizePrompt } from '../prompt-forms.js';
import { requestContext } from '../request-context.js';
import { reasoningBudgetConstraint, requestedBudget } from '../reasoning-budget.js';
import { rejectResponseFormat } from '../response-format.js';
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
    const { prompts } = promptList(body.prompt);
    // llama-server's n_cmpl (n as its alias): completions of each prompt.
    const n = body.n_cmpl ?? body.n ?? 1;
    if (prompts.length * n > MAX_RESULTS) throw badRequest(`${prompts.length} prompts times n_cmpl = ${n} asks for more than ${MAX_RESULTS} completions`);
    // n_predict -1 (the default) means the server's -n, by default until the context is full.
    const nPredict = body.n_predict == null || body.n_predict < 0 ? undefined : body.n_predict;
    // n_probs > 0: llama-server's completion_probabilities (per chunk when streaming).
    const nProbs = body.n_probs ?? 0;
    const logitBias = logitBiasFrom(engine, body.logit_bias);
    const scope = choicesScope(requestContext(req, res));
    // Every prompt is checked before anything is queued.
    const groups = prompts.map((prompt) => {
      const promptTokens = tokenizePrompt(engine, prompt);
      const base = generationParams(engine, promptTokens, body, nPredict, scope.context, defaults, logitBias);
      // The thinking budget caps a reasoning block the prompt opens or the model writes.
      const promptText = typeof prompt === 'string' ? prompt : engine.tokenizer.decode(promptTokens, false);
      return Array.from({ length: n }, (_, j) => {
        const constraint = budget === undefined ? undefined : reasoningBudgetConstraint(model, promptText, budget, body.reasoning_budget_message ?? '');
        return { ...base, sampling: choiceSampling(base.sampling, j), ...(nProbs > 0 ? { logprobs: nProbs } : {}), ...(constraint ? { constraint } : {}) };
      });
    });
    try {
      // The REST reference leaves streaming /completion out of /metrics' request counts.
      const streams = metrics.trackChoices(groups.flatMap((choices) => generateTexts(engine, choices)), !body.stream, n);
      if (body.stream) {
        // Each chunk carries its result's index; the stream ends after the last result's final chunk.
        await runSse(res, async () => {
          let finished = 0;
          for await (const { index, event } of mergeChoices(streams)) {
            if (event.type === 'text') {
              const probs = nProbs > 0 && event.token ? { completion_probabilities: completionProbabilities(engine.tokenizer, [event.token]) } : {};
              sendSse(res, { index, content: event.text, stop: false, ...probs });
              continue;
            }
            sendSse(res, { ...finalResponse(engine, event.result, ''), index });
            if (++finished === streams.length) endSse(res, false);
          }
        });
        return;
      }
      const results = await collectChoices(streams, (event) => (event.type === 'done' ? event.result : undefined));
      if (!results) return;
      const bodies = results.map((result, index) => {
        const probs = nProbs > 0 && result.tokens ? { completion_probabilities: completionProbabilities(engine.tokenizer, result.tokens) } : {};
        return { ...finalResponse(engine, result, result.text), index, ...probs };
      });
      // One result is an object, several an array, as llama-server answers.
      res.json(bodies.length === 1 ? bodies[0] : bodies);
    } finally {
      scope.close();
    }
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
