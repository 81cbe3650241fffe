// POST /v1/chat/completions (and /chat/completions): OpenAI chat, JSON or SSE.
import { Router } from 'express';
import { collectText, generateText } from '../chat/text-generation.js';
import { prepareChat } from './chat-prepare.js';
import { chatCompletionBody, streamChatCompletion } from './chat-response.js';
import { generationParams } from './generation-params.js';
import { chatLogprobCount } from './logprobs.js';
import type { ServerMetrics } from './metrics.js';
import type { ModelState } from './model-state.js';
import { requestContext } from './request-context.js';
import { responseHead } from './openai-shared.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import { validateBody, validateChatCompletion } from './schemas.js';

export interface ChatRouteOptions {
  /** --chat-template-kwargs: the template kwargs every request starts from. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export function openAIChatRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: ChatRouteOptions = {}): Router {
  const router = Router();
  router.post(['/v1/chat/completions', '/chat/completions'], async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const { engine } = model;
    const head = responseHead(engine, 'chatcmpl');
    const warn = (message: string) => console.warn(`mlxcel-server: ${head.id}: ${message}`);
    const chat = prepareChat(model, body, { serverKwargs: options.chatTemplateKwargs, warn });
    // The template owns BOS and the turn markers, so its text is tokenized without specials.
    const promptTokens = engine.tokenizer.encode(chat.prompt, false);
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const logprobs = chatLogprobCount(body);
    const params = {
      ...generationParams(engine, promptTokens, body, maxTokens, requestContext(req, res), defaults),
      keepSpecialIds: chat.keepSpecialIds,
      ...(chat.constraint ? { constraint: chat.constraint } : {}),
      ...(logprobs === undefined ? {} : { logprobs }),
    };
    const logprobsTokenizer = logprobs === undefined ? undefined : engine.tokenizer;
    // A chat completion counts in /metrics once, streamed or not.
    const events = metrics.track(generateText(engine, params), true);

    if (body.stream) {
      await streamChatCompletion(res, events, head, chat, body.stream_options?.include_usage === true, warn, logprobsTokenizer);
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    res.json(chatCompletionBody(head, result, chat, warn, logprobsTokenizer));
  });
  return router;
}
