// POST /v1/completions (and /completions): OpenAI legacy text completions, JSON or SSE.
import { Router } from 'express';
import { collectText, generateText } from '../chat/text-generation.js';
import { badRequest } from './errors.js';
import { generationParams, tokenizePrompt } from './generation-params.js';
import { CompletionLogprobsBuilder } from './logprobs.js';
import type { ServerMetrics } from './metrics.js';
import type { ModelState } from './model-state.js';
import { requestContext } from './request-context.js';
import { responseFormatConstraint } from './response-format.js';
import { responseHead, streamOpenAI, type StreamShape } from './openai-shared.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import { type CompletionBody, validateBody, validateCompletion } from './schemas.js';

const completionStream: StreamShape = {
  object: 'text_completion',
  choice: (text, finishReason, logprobs = null) => ({ index: 0, text, finish_reason: finishReason, logprobs }),
};

export function openAICompletionRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics): Router {
  const router = Router();
  router.post(['/v1/completions', '/completions'], async (req, res) => {
    const body = validateBody(validateCompletion, req.body);
    const { engine } = models.require();
    const promptTokens = tokenizePrompt(engine, singlePrompt(body.prompt));
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const constraint = responseFormatConstraint(engine, body.response_format);
    const params = {
      ...generationParams(engine, promptTokens, body, maxTokens, requestContext(req, res), defaults),
      ...(constraint ? { constraint } : {}),
      ...(body.logprobs == null ? {} : { logprobs: body.logprobs }),
    };
    const logprobs = body.logprobs == null ? undefined : new CompletionLogprobsBuilder(engine.tokenizer);
    const head = responseHead(engine, 'cmpl');
    // The reference leaves streaming completions out of /metrics' request counts.
    const events = metrics.track(generateText(engine, params), !body.stream);

    if (body.stream) {
      await streamOpenAI(res, events, head, completionStream, body.stream_options?.include_usage === true, logprobs && ((token) => logprobs.add([token])));
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    res.json({
      ...head,
      object: 'text_completion',
      choices: [{ index: 0, text: result.text, finish_reason: result.finishReason, logprobs: logprobs && result.tokens ? logprobs.add(result.tokens) : null }],
      usage: result.usage,
    });
  });
  return router;
}

/** The one prompt of the request: batches (several prompts) are not served. */
function singlePrompt(prompt: CompletionBody['prompt']): string | number[] {
  if (typeof prompt === 'string') return prompt;
  if (prompt.every((p): p is number => typeof p === 'number')) return prompt;
  if (prompt.length === 1 && typeof prompt[0] === 'string') return prompt[0];
  throw badRequest('prompt must be a string, an array of one string, or an array of token ids; batched prompts are not supported');
}
