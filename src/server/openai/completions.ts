// POST /v1/completions: OpenAI legacy text completions, JSON or SSE (/completions without
// /v1 is llama-server's native route, ../native/routes.ts), rendered from the completion pipeline
// (../completion.ts). `prompt` may be a batch (several prompts) and `n` asks for several
// choices of each; choice p * n + j is prompt p's j-th. A stream whose generation fails
// ends with the error event, a finish_reason "error" choice for each unfinished one and
// [DONE].
import { Router, type Response } from 'express';
import type { TextGenerationEvent, TextGenerationResult } from '../../chat/text-generation.js';
import type { FinishReason, PromptProgress } from '../../engine/types.js';
import { choicesScope, combinedUsage, mergeChoices } from '../choices.js';
import { collectCompletions, prepareCompletion, startCompletions } from '../completion.js';
import { CompletionLogprobsBuilder } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { promptProgress, verboseBody } from '../native/response.js';
import { promptList } from '../prompt-forms.js';
import { requestContext } from '../request-context.js';
import { structuredOutputConstraint } from '../response-format.js';
import { draftTimings, openAIStream, responseHead, type ResponseHead } from './shared.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { validateBody, validateCompletion } from '../schemas.js';
import { runSse } from '../sse.js';

/** One choice: a text delta (finishReason null) or the closing one; `logprobs` null when none. */
const choice = (index: number, text: string, finishReason: FinishReason | null, logprobs: unknown = null) => ({ index, text, finish_reason: finishReason, logprobs });

export interface CompletionRouteOptions {
  /** -v: a non-streaming body carries llama-server's __verbose (../native/response.ts). */
  verbose?: boolean;
}

export function openAICompletionRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: CompletionRouteOptions = {}): Router {
  const router = Router();
  router.post('/v1/completions', async (req, res) => {
    const body = validateBody(validateCompletion, req.body);
    const { engine } = models.require();
    const { prompts } = promptList(body.prompt);
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const prepared = await prepareCompletion(engine, { prompts, n: body.n ?? 1, nField: 'n', logitBias: body.logit_bias });
    const { n } = prepared;
    const scope = choicesScope(requestContext(req, res));
    const head = responseHead(engine, 'cmpl');
    // return_progress (streams only): llama-server's progress chunk, an empty choice with prompt_progress.
    const progress = body.stream && body.return_progress === true ? openAIStream(res, head, 'text_completion', false) : undefined;
    try {
      const { streams } = startCompletions(engine, prepared, {
        sampling: body,
        maxTokens,
        context: scope.context,
        defaults,
        metrics,
        countRequests: !body.stream,
        constraint: () => structuredOutputConstraint(engine, body),
        reporting: body.logprobs == null ? {} : { logprobs: body.logprobs },
        ...(progress ? { onProgress: (index: number, pp: PromptProgress) => progress.send(choice(index, '', null), { prompt_progress: promptProgress(pp) }) } : {}),
      });
      const logprobs = body.logprobs == null ? undefined : streams.map(() => new CompletionLogprobsBuilder(engine.tokenizer));
      if (body.stream) {
        await streamCompletion(res, streams, n, head, body.stream_options?.include_usage === true, logprobs);
        return;
      }
      const results = await collectCompletions(streams);
      if (!results) return;
      res.json({
        ...head,
        object: 'text_completion',
        choices: results.map((r, i) => choice(i, r.text, r.finishReason, logprobs && r.tokens ? logprobs[i]!.add(r.tokens) : null)),
        usage: combinedUsage(results.map((r) => r.usage), n),
        ...draftTimings(results[0]!.timings),
        // The native body of the first prompt's first choice.
        ...(options.verbose
          ? {
              __verbose: verboseBody(engine, results[0]!, {
                promptTokens: prepared.prompts[0]!.tokens,
                body,
                maxTokens,
                logitBias: prepared.logitBias,
                defaults,
                nProbs: body.logprobs ?? 0,
              }),
            }
          : {}),
      });
    } finally {
      scope.close();
    }
  });
  return router;
}

/** Text deltas per generated piece (with its token's logprobs when asked for), tagged with their choice, then each choice's closing one. */
async function streamCompletion(
  res: Response,
  streams: AsyncIterable<TextGenerationEvent>[],
  n: number,
  head: ResponseHead,
  includeUsage: boolean,
  logprobs: CompletionLogprobsBuilder[] | undefined,
): Promise<void> {
  const stream = openAIStream(res, head, 'text_completion', includeUsage);
  const results: Array<TextGenerationResult | undefined> = streams.map(() => undefined);
  await runSse(res, async () => {
    for await (const { index, event } of mergeChoices(streams)) {
      if (event.type === 'text') {
        stream.send(choice(index, event.text, null, logprobs && event.token ? logprobs[index]!.add([event.token]) : null));
        continue;
      }
      stream.send(choice(index, '', event.result.finishReason), draftTimings(event.result.timings));
      results[index] = event.result;
    }
    if (results.every((r) => r !== undefined)) stream.end(combinedUsage(results.map((r) => r!.usage), n));
  }, () => stream.fail(results.flatMap((r, index) => (r ? [] : [choice(index, '', null, null)]))));
}
