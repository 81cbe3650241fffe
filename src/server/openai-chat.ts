// POST /v1/chat/completions (and /chat/completions): OpenAI chat, JSON or SSE.
import { Router } from 'express';
import { ChatTemplateError } from '../chat/template.js';
import { collectText, generateText } from '../chat/text-generation.js';
import { badRequest } from './errors.js';
import { generationParams } from './generation-params.js';
import type { ModelState, ServedModel } from './model-state.js';
import { requestContext } from './request-context.js';
import { responseHead, streamOpenAI, type StreamShape } from './openai-shared.js';
import { type ChatCompletionBody, validateBody, validateChatCompletion } from './schemas.js';

const chatStream: StreamShape = {
  object: 'chat.completion.chunk',
  opening: { index: 0, delta: { role: 'assistant' }, finish_reason: null, logprobs: null },
  choice: (text, finishReason) => ({
    index: 0,
    delta: finishReason ? {} : { content: text },
    finish_reason: finishReason,
    logprobs: null,
  }),
};

export function openAIChatRoutes(models: ModelState): Router {
  const router = Router();
  router.post(['/v1/chat/completions', '/chat/completions'], async (req, res) => {
    const body = validateBody(validateChatCompletion, req.body);
    const model = models.require();
    const { engine } = model;
    const promptTokens = engine.tokenizer.encode(renderPrompt(model, body), false);
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const params = generationParams(engine, promptTokens, body, maxTokens, requestContext(req, res));
    const head = responseHead(engine, 'chatcmpl');
    const events = generateText(engine, params);

    if (body.stream) {
      await streamOpenAI(res, events, head, chatStream, body.stream_options?.include_usage === true);
      return;
    }
    const result = await collectText(events);
    if (!result) return;
    res.json({
      ...head,
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: result.text },
          finish_reason: result.finishReason,
          logprobs: null,
        },
      ],
      usage: result.usage,
    });
  });
  return router;
}

/** The template owns BOS and the turn markers, so its text is tokenized without specials. */
function renderPrompt({ chatTemplate }: ServedModel, body: ChatCompletionBody): string {
  try {
    return chatTemplate.render(body.messages, { kwargs: body.chat_template_kwargs ?? undefined });
  } catch (err) {
    if (err instanceof ChatTemplateError) throw badRequest(err.message);
    throw err;
  }
}
