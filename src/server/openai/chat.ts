// POST /v1/chat/completions (and /chat/completions): OpenAI chat, JSON or SSE. The body
// is the chat turn's request as it is (../chat-turn.ts); ./chat-response.ts renders the
// turn, or its n choices.
import { Router } from 'express';
import { chatCompletionBody, streamChatCompletion } from './chat-response.js';
import { prepareTurn, startTurns } from '../chat-turn.js';
import { choicesScope, collectChoices } from '../choices.js';
import { logitBiasFrom } from '../logit-bias.js';
import { chatLogprobCount } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { promptProgress, verboseBody } from '../native/response.js';
import { requestContext } from '../request-context.js';
import { openAIStream, responseHead } from './shared.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { validateBody, validateChatCompletion } from '../schemas.js';

export interface ChatRouteOptions {
  /** --chat-template-kwargs: the template kwargs every request starts from. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** -v: a non-streaming body carries llama-server's __verbose (../native/response.ts). */
  verbose?: boolean;
}

export function openAIChatRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: ChatRouteOptions = {}): Router {
  const router = Router();
  router.post(['/v1/chat/completions', '/chat/completions'], async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const { tokenizer } = model.engine;
    const head = responseHead(model.engine, 'chatcmpl');
    const warn = (message: string) => console.warn(`mlxcel-server: ${head.id}: ${message}`);
    const context = requestContext(req, res);
    const turn = await prepareTurn(model, body, { serverKwargs: options.chatTemplateKwargs, warn, signal: context.signal });
    const logprobs = chatLogprobCount(body);
    const logitBias = logitBiasFrom(model.engine, body.logit_bias);
    // llama-server's post_sampling_probs: the logprobs as prob/top_probs of the drawn-from distribution.
    const postSampling = logprobs !== undefined && body.post_sampling_probs === true;
    const scope = choicesScope(context);
    // return_progress (streams only): llama-server's progress chunk, the role delta with prompt_progress.
    const progress = body.stream && body.return_progress === true ? openAIStream(res, head, 'chat.completion.chunk', false) : undefined;
    // Queued before any header, so a full queue or an over-long prompt is a plain error.
    const choices = startTurns(model, turn, {
      maxTokens: body.max_completion_tokens ?? body.max_tokens,
      sampling: body,
      context: scope.context,
      defaults,
      metrics,
      warn,
      ...(logprobs === undefined ? {} : { logprobs }),
      ...(logitBias ? { logitBias } : {}),
      ...(postSampling ? { postSamplingProbs: true } : {}),
      ...(progress
        ? { onProgress: (index, p) => progress.send({ index, delta: { role: 'assistant', content: null }, finish_reason: null, logprobs: null }, { prompt_progress: promptProgress(p) }) }
        : {}),
    }, body.n ?? 1);

    try {
      if (body.stream) {
        await streamChatCompletion(res, choices, head, body.stream_options?.include_usage === true, tokenizer, postSampling);
        return;
      }
      const turns = await collectChoices(choices, (event) => (event.type === 'done' ? event.turn : undefined));
      if (!turns) return;
      // The native body of the first choice's generation.
      const verbose = options.verbose
        ? {
            __verbose: verboseBody(model.engine, turns[0]!.generation, {
              promptTokens: turn.promptTokens,
              body,
              maxTokens: body.max_completion_tokens ?? body.max_tokens,
              logitBias,
              defaults,
              nProbs: logprobs ?? 0,
            }),
          }
        : {};
      res.json({ ...chatCompletionBody(head, turns, tokenizer, postSampling), ...verbose });
    } finally {
      scope.close();
    }
  });
  return router;
}
