// POST /v1/completions: OpenAI legacy text completions, JSON or SSE (/completions without
// /v1 is llama-server's native route, ./native.ts).
// A stream whose generation fails ends with the error event, a finish_reason "error"
// choice and [DONE].
import { Router, type Response } from 'express';
import { collectText, generateText, type TextGenerationEvent } from '../../chat/text-generation.js';
import type { FinishReason } from '../../engine/types.js';
import { badRequest } from '../errors.js';
import { generationParams, tokenizePrompt } from '../generation-params.js';
import { logitBiasFrom } from '../logit-bias.js';
import { CompletionLogprobsBuilder } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { verboseBody } from '../native-response.js';
import { requestContext } from '../request-context.js';
import { structuredOutputConstraint } from '../response-format.js';
import { openAIStream, responseHead, type ResponseHead } from '../openai-shared.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { type CompletionBody, validateBody, validateCompletion } from '../schemas.js';
import { runSse } from '../sse.js';

/** One choice: a text delta (finishReason null) or the closing one; `logprobs` null when none. */
const choice = (text: string, finishReason: FinishReason | null, logprobs: unknown = null) => ({ index: 0, text, finish_reason: finishReason, logprobs });

export interface CompletionRouteOptions {
  /** -v: a non-streaming body carries llama-server's __verbose (../native-response.ts). */
  verbose?: boolean;
}

export function openAICompletionRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: CompletionRouteOptions = {}): Router {
  const router = Router();
  router.post('/v1/completions', async (req, res) => {
    const body = validateBody(validateCompletion, req.body);
    const { engine } = models.require();
    const promptTokens = await tokenizePrompt(engine, singlePrompt(body.prompt));
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const constraint = structuredOutputConstraint(engine, body);
    const logitBias = logitBiasFrom(engine, body.logit_bias);
    const params = {
      ...generationParams(engine, promptTokens, body, maxTokens, requestContext(req, res), defaults, logitBias),
      ...(constraint ? { constraint } : {}),
      ...(body.logprobs == null ? {} : { logprobs: body.logprobs }),
    };
    const logprobs = body.logprobs == null ? undefined : new CompletionLogprobsBuilder(engine.tokenizer);
    const head = responseHead(engine, 'cmpl');
    // The REST reference leaves streaming completions out of /metrics' request counts.
    const events = metrics.track(generateText(engine, params), !body.stream);

    if (body.stream) {
      await streamCompletion(res, events, head, body.stream_options?.include_usage === true, logprobs);
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    res.json({
      ...head,
      object: 'text_completion',
      choices: [choice(result.text, result.finishReason, logprobs && result.tokens ? logprobs.add(result.tokens) : null)],
      usage: result.usage,
      ...(options.verbose
        ? {
            __verbose: verboseBody(engine, result, {
              prompt: engine.tokenizer.decode(promptTokens, false),
              body,
              maxTokens,
              logitBias,
              defaults,
              nProbs: body.logprobs ?? 0,
            }),
          }
        : {}),
    });
  });
  return router;
}

/** A text delta per generated piece (with its token's logprobs when asked for), then the closing choice. */
async function streamCompletion(
  res: Response,
  events: AsyncIterable<TextGenerationEvent>,
  head: ResponseHead,
  includeUsage: boolean,
  logprobs: CompletionLogprobsBuilder | undefined,
): Promise<void> {
  const stream = openAIStream(res, head, 'text_completion', includeUsage);
  await runSse(res, async () => {
    for await (const event of events) {
      if (event.type === 'text') {
        stream.send(choice(event.text, null, logprobs && event.token ? logprobs.add([event.token]) : null));
        continue;
      }
      stream.send(choice('', event.result.finishReason));
      stream.end(event.result.usage);
    }
  }, () => stream.fail(choice('', null, null)));
}

/** The one prompt of the request: batches (several prompts) are not served. */
function singlePrompt(prompt: CompletionBody['prompt']): string | number[] {
  if (typeof prompt === 'string') return prompt;
  if (prompt.every((p): p is number => typeof p === 'number')) return prompt;
  if (prompt.length === 1 && typeof prompt[0] === 'string') return prompt[0];
  throw badRequest('prompt must be a string, an array of one string, or an array of token ids; batched prompts are not supported');
}
