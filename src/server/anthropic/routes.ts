// The Anthropic Messages API: POST /v1/messages (JSON or SSE) and
// POST /v1/messages/count_tokens, plus the paths without /v1. The anthropic-version
// header is accepted and not needed: there is one wire format. Errors on these paths use
// Anthropic's envelope, including those raised before the route (auth, malformed JSON),
// which is why anthropicErrorScope is mounted ahead of the authentication middleware.
import { Router, type RequestHandler } from 'express';
import { anthropicError, MessageBuilder, newMessageId } from './output.js';
import { chatTurn, parseCountTokensBody, parseMessagesBody, samplingFields } from './request.js';
import { prepareTurn, startTurn } from '../chat-turn.js';
import { logFault, toApiError, type ApiError } from '../errors.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState } from '../model-state.js';
import { requestContext } from '../request-context.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { sendSseEvent, startSse } from '../sse.js';

export const ANTHROPIC_PATHS = ['/v1/messages', '/messages'];

/** Makes errors.ts's sendError answer in Anthropic's envelope for the request. */
export const anthropicErrorScope: RequestHandler = (_req, res, next) => {
  res.locals.errorBody = (error: ApiError) => anthropicError(error);
  next();
};

export interface AnthropicOptions {
  /** --chat-template-kwargs. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export function anthropicRoutes(models: ModelState, defaults: SamplingDefaults, metrics: ServerMetrics, options: AnthropicOptions = {}): Router {
  const router = Router();

  router.post(['/v1/messages', '/messages'], async (req, res) => {
    const body = parseMessagesBody(req.body);
    const model = models.require();
    const context = requestContext(req, res);
    const id = newMessageId();
    const warn = (message: string) => console.warn(`mlxcel-server: ${id}: ${message}`);
    const turn = await prepareTurn(model, chatTurn(body), { serverKwargs: options.chatTemplateKwargs, warn });
    // Queued before any header, so a full queue or an over-long prompt is a plain error.
    const events = startTurn(model, turn, { maxTokens: body.max_tokens, sampling: samplingFields(body), context, defaults, metrics, warn });
    const inputTokens = turn.promptTokens.length;

    if (!body.stream) {
      const builder = new MessageBuilder(id, model.engine.info.id, inputTokens);
      for await (const event of events) builder.push(event);
      if (builder.message.stop_reason !== null) res.json(builder.message);
      return;
    }

    startSse(res);
    const builder = new MessageBuilder(id, model.engine.info.id, inputTokens, (event) => sendSseEvent(res, event.type, event));
    try {
      builder.start();
      for await (const event of events) builder.push(event);
    } catch (err) {
      logFault(res, err);
      builder.fail(toApiError(err));
    } finally {
      res.end();
    }
  });

  router.post(['/v1/messages/count_tokens', '/messages/count_tokens'], async (req, res) => {
    const body = parseCountTokensBody(req.body);
    const model = models.require();
    const warn = (message: string) => console.warn(`mlxcel-server: count_tokens: ${message}`);
    const turn = await prepareTurn(model, chatTurn(body), { serverKwargs: options.chatTemplateKwargs, warn });
    res.json({ input_tokens: turn.promptTokens.length });
  });

  return router;
}
