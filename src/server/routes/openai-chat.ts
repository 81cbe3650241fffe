// POST /v1/chat/completions (and /chat/completions): OpenAI chat, JSON or SSE. The body
// is the chat turn's request as it is (../chat-turn.ts); ../chat-response.ts renders the
// turn, or its n choices.
import { Router } from 'express';
import { chatCompletionBody, streamChatCompletion } from '../chat-response.js';
import { prepareTurn, startTurns } from '../chat-turn.js';
import { choicesScope, collectChoices } from '../choices.js';
import { logitBiasFrom } from '../logit-bias.js';
import { chatLogprobCount } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { requestContext } from '../request-context.js';
import { responseHead } from '../openai-shared.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { validateBody, validateChatCompletion } from '../schemas.js';

export interface ChatRouteOptions {
  /** --chat-template-kwargs: the template kwargs every request starts from. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export function openAIChatRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: ChatRouteOptions = {}): Router {
  const router = Router();
  router.post(['/v1/chat/completions', '/chat/completions'], async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const { tokenizer } = model.engine;
    const head = responseHead(model.engine, 'chatcmpl');
    const warn = (message: string) => console.warn(`mlxcel-server: ${head.id}: ${message}`);
    const turn = prepareTurn(model, body, { serverKwargs: options.chatTemplateKwargs, warn });
    const logprobs = chatLogprobCount(body);
    const logitBias = logitBiasFrom(model.engine, body.logit_bias);
    const scope = choicesScope(requestContext(req, res));
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
    }, body.n ?? 1);

    try {
      if (body.stream) {
        await streamChatCompletion(res, choices, head, body.stream_options?.include_usage === true, tokenizer);
        return;
      }
      const turns = await collectChoices(choices, (event) => (event.type === 'done' ? event.turn : undefined));
      if (turns) res.json(chatCompletionBody(head, turns, tokenizer));
    } finally {
      scope.close();
    }
  });
  return router;
}
