// The OpenAI Responses API: POST /v1/responses (JSON or typed SSE events), GET and
// DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, POST /v1/responses/compact,
// POST /v1/responses/input_tokens, and the same paths without /v1.
//
// A request's conversation is the stored history it continues (previous_response_id, or
// a string-form conversation) followed by its input items, compaction items expanded
// (./compaction.ts), rendered through the chat pipeline (../chat-turn.ts) after the
// `instructions`, which OpenAI does not carry over from a previous response.
//
// Stored responses and conversations live in the --store backend (../stores/store.ts), so
// with a shared one any replica continues, reads, deletes or cancels them. A response is
// written whole when its generation is admitted (in_progress) and again when it ends. A
// replica cancels its own generations directly; one running elsewhere is cancelled
// through a marker in the store, which the replica running it polls (CANCEL_POLL_MS).
import { Router, type Request, type Response } from 'express';
import type { ChatMessage } from '../../chat/template.js';
import { collectTurn, prepareTurn, startTurn, type ChatEvent, type PreparedTurn, type TurnPrepareOptions } from '../chat-turn.js';
import {
  automaticSummaryTokens,
  compactItems,
  DEFAULT_SUMMARY_TOKENS,
  defaultKeepTokens,
  resolveItems,
  type CompactionDeps,
} from './compaction.js';
import { ApiError, badRequest, logFault, toApiError } from '../errors.js';
import { chatLogprobEntry } from '../logprobs.js';
import type { ServerMetrics } from '../metrics.js';
import type { ModelState, ServedModel } from '../model-state.js';
import { requestContext, type RequestContext } from '../request-context.js';
import { itemsToMessages, normalizeInput, type Item } from './items.js';
import { newId, ResponseBuilder, type ResponseObject } from './output.js';
import {
  chatToolChoice,
  chatTools,
  parseCompactBody,
  parseResponsesBody,
  responseFormat,
  responsesLogprobCount,
  templateKwargs,
  thinkingBudget,
  type ResponsesBody,
} from './request.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import { sendSseEvent, startSse } from '../sse.js';
import { MemoryBackend, type StoreBackend, type StoreLimits } from '../stores/store.js';

export interface ResponsesOptions {
  /** --responses-store-max-entries / --responses-store-ttl-secs. */
  responses: StoreLimits;
  /** --conversation-store-max-entries / --conversation-store-ttl-secs. */
  conversations: StoreLimits;
  /** --chat-template-kwargs. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export const DEFAULT_RESPONSES_OPTIONS: ResponsesOptions = {
  responses: { maxEntries: 1024, ttlSecs: 3600 },
  conversations: { maxEntries: 256, ttlSecs: 3600 },
};

/** Cancel requests for generations on other replicas: kept long enough to be seen. */
const CANCEL_LIMITS: StoreLimits = { maxEntries: 4096, ttlSecs: 600 };
const CANCEL_POLL_MS = 250;

interface StoredResponse {
  /** In memory, the object the builder updates in place while generating; in a database,
   *  the response as last written. */
  response: ResponseObject;
  /** The items a follow-up continues from: the request's items, then the output. */
  history: Item[];
}

/** A generation that POST /v1/responses/{id}/cancel can stop. */
interface InFlight {
  controller: AbortController;
  builder: ResponseBuilder;
}

export function responsesRoutes(
  models: ModelState,
  defaults: SamplingDefaults,
  metrics: ServerMetrics,
  options: ResponsesOptions = DEFAULT_RESPONSES_OPTIONS,
  backend: StoreBackend = new MemoryBackend(),
): Router {
  const responses = backend.namespace<StoredResponse>('responses', options.responses);
  const conversations = backend.namespace<Item[]>('conversations', options.conversations);
  const cancels = backend.namespace<true>('cancels', CANCEL_LIMITS);
  const storing = options.responses.maxEntries > 0;
  const conversing = options.conversations.maxEntries > 0;
  const inFlight = new Map<string, InFlight>();
  const router = Router();

  const stored = async (id: string): Promise<StoredResponse> => {
    if (!storing) throw badRequest('response storage is disabled on this server (--responses-store-max-entries 0)');
    const entry = await responses.get(id);
    if (!entry) throw new ApiError(404, 'invalid_request_error', `No response found with id '${id}'.`);
    return entry;
  };

  /** The conversation a request continues and where its own items go. */
  const requestItems = async (body: ResponsesBody) => {
    let history: Item[] = [];
    if (body.previous_response_id != null) {
      if (!storing) throw badRequest('previous_response_id needs response storage, which is disabled on this server (--responses-store-max-entries 0)');
      const previous = await responses.get(body.previous_response_id);
      if (!previous) throw badRequest(`previous response '${body.previous_response_id}' was not found (never stored, deleted or expired)`);
      if (previous.response.status === 'in_progress') throw badRequest(`previous response '${body.previous_response_id}' is still in progress`);
      history = previous.history;
    }
    const conversationId = typeof body.conversation === 'string' ? body.conversation : body.conversation?.id;
    if (conversationId !== undefined) {
      if (!conversing) throw badRequest('conversation needs conversation storage, which is disabled on this server (--conversation-store-max-entries 0)');
      history = (await conversations.get(conversationId)) ?? [];
    }
    const input = body.input == null ? [] : normalizeInput(body.input);
    if (history.length === 0 && input.length === 0) throw badRequest('input is required');
    return { items: [...history, ...input], conversationId };
  };

  router.post(['/v1/responses', '/responses'], async (req, res) => {
    const body = parseResponsesBody(req.body);
    const model = models.require();
    const context = requestContext(req, res);
    const { items, conversationId } = await requestItems(body);
    const id = newId('resp');
    const prepare = prepareOptions(id, options);
    const turnFor = turnBuilder(model, body, prepare);
    let turn = await turnFor(items);

    const controller = new AbortController();
    const signal = AbortSignal.any([context.signal, controller.signal]);
    const generationContext: RequestContext = { ...context, signal };
    const store = storing && body.store !== false;
    const stream = body.stream === true;
    const logprobs = responsesLogprobCount(body);
    const { tokenizer } = model.engine;
    const builder = new ResponseBuilder(
      id,
      responseHead(model, body, defaults, store, conversationId),
      (event) => {
        if (stream) sendSseEvent(res, event.type, event);
      },
      logprobs === undefined ? undefined : (token) => chatLogprobEntry(tokenizer, token),
    );
    const generate = (prepared: PreparedTurn) =>
      startTurn(model, prepared, {
        maxTokens: body.max_output_tokens,
        sampling: body,
        context: generationContext,
        defaults,
        metrics,
        warn: prepare.warn,
        ...(logprobs === undefined ? {} : { logprobs }),
      });

    // context_management: compact first when the input reaches the threshold or leaves
    // no room for output.
    const threshold = body.context_management?.find((c) => c.type === 'compaction')?.compact_threshold;
    const inputTokens = turn.promptTokens.length;
    const compact = threshold !== undefined && (inputTokens >= threshold || inputTokens >= model.engine.info.contextSize);
    let turnItems = items;
    const runCompaction = async () => {
      const deps = compactionDeps(model, body, turnFor, prepare, { context: generationContext, defaults, metrics }, (before) =>
        builder.compactionStarted(before),
      );
      const result = await compactItems(items, deps, {
        keepTokens: defaultKeepTokens(model.engine.info.contextSize),
        maxOutputTokens: automaticSummaryTokens(model.engine.info.contextSize),
      });
      builder.compactionCompleted(result.inputTokensBefore, result.inputTokensAfter, result.item);
      turnItems = result.output;
      turn = await turnFor(turnItems);
    };

    // Written before the first event: a store that cannot be reached refuses the request
    // (503) and stops the generation it was admitted with.
    let watch: NodeJS.Timeout | undefined;
    const register = async () => {
      try {
        if (store) await responses.set(id, { response: builder.response, history: [] });
      } catch (err) {
        controller.abort();
        throw err;
      }
      inFlight.set(id, { controller, builder });
      if (store && backend.shared) {
        watch = setInterval(() => {
          cancels.get(id).then((cancel) => cancel && cancelRunning(id), () => {});
        }, CANCEL_POLL_MS);
      }
    };
    const finish = async () => {
      clearInterval(watch);
      inFlight.delete(id);
      // Generation stopped without finishing: cancelled, or the client left.
      if (!builder.finished) builder.cancel();
      const history = [...turnItems, ...builder.response.output.filter((item) => item.type !== 'compaction')];
      // A response deleted meanwhile stays deleted.
      if (store && (await responses.get(id)) !== undefined) await responses.set(id, { response: builder.response, history });
      if (conversationId !== undefined && builder.response.status !== 'failed') await conversations.set(conversationId, history);
    };

    if (!stream) {
      if (compact) await runCompaction();
      const events = generate(turn);
      await register();
      try {
        for await (const event of events) builder.push(event);
      } catch (err) {
        // Stored as failed; the client gets the error itself.
        builder.fail(toApiError(err));
        throw err;
      } finally {
        await finish();
      }
      if (!context.signal.aborted) res.json(builder.response);
      return;
    }

    // What can be refused (a full queue, an over-long prompt, a store out of reach) is
    // refused before the headers; a compacting request only knows its prompt once the
    // stream is open.
    let events: AsyncIterable<ChatEvent> | undefined = compact ? undefined : generate(turn);
    await register();
    startSse(res);
    builder.start();
    try {
      if (!events) {
        await runCompaction();
        events = generate(turn);
      }
      for await (const event of events) builder.push(event);
    } catch (err) {
      logFault(res, err);
      builder.fail(toApiError(err));
    }
    try {
      await finish();
    } catch (err) {
      // The stream's events all went out, but the response could not be stored.
      logFault(res, err);
      builder.streamError(toApiError(err));
    }
    res.end();
  });

  /** Stops a generation of this replica's. */
  const cancelRunning = (id: string): boolean => {
    const running = inFlight.get(id);
    if (!running) return false;
    running.controller.abort();
    running.builder.cancel();
    return true;
  };

  router.post(['/v1/responses/input_tokens', '/responses/input_tokens'], async (req, res) => {
    const body = parseResponsesBody(req.body);
    const model = models.require();
    const { items } = await requestItems(body);
    const turnFor = turnBuilder(model, body, prepareOptions('input_tokens', options));
    res.json({ object: 'response.input_tokens', input_tokens: (await turnFor(items)).promptTokens.length });
  });

  router.post(['/v1/responses/compact', '/responses/compact'], async (req, res) => {
    const body = parseCompactBody(req.body);
    const model = models.require();
    const context = requestContext(req, res);
    const request: ResponsesBody = { instructions: body.instructions, tools: body.tools };
    const items = normalizeInput(body.input);
    const contextSize = model.engine.info.contextSize;
    const id = newId('resp');
    const prepare = prepareOptions(id, options);
    const deps = compactionDeps(model, request, turnBuilder(model, request, prepare), prepare, { context, defaults, metrics });
    const result = await compactItems(items, deps, {
      keepTokens: body.keep_tokens ?? defaultKeepTokens(contextSize),
      maxOutputTokens: body.max_output_tokens ?? DEFAULT_SUMMARY_TOKENS,
    });
    const { promptTokens, completionTokens } = result.summary;
    res.json({
      id,
      object: 'response.compaction',
      created_at: Math.floor(Date.now() / 1000),
      model: model.engine.info.id,
      output: result.output,
      usage: {
        input_tokens: promptTokens,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: completionTokens,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: promptTokens + completionTokens,
      },
    });
  });

  // A generation of this replica's is read as it stands; one elsewhere as last stored.
  router.get(['/v1/responses/:id', '/responses/:id'], async (req: Request<{ id: string }>, res: Response) => {
    const { id } = req.params;
    const entry = await stored(id);
    res.json(inFlight.get(id)?.builder.response ?? entry.response);
  });

  router.delete(['/v1/responses/:id', '/responses/:id'], async (req: Request<{ id: string }>, res: Response) => {
    const { id } = req.params;
    await stored(id);
    await responses.delete(id);
    res.json({ id, object: 'response', deleted: true });
  });

  // Stops a generation in progress; a finished response is returned as it is. One running
  // on another replica is left a cancel marker and answered as it will be stored: cancelled.
  router.post(['/v1/responses/:id/cancel', '/responses/:id/cancel'], async (req: Request<{ id: string }>, res: Response) => {
    const { id } = req.params;
    const entry = await stored(id);
    if (cancelRunning(id) || entry.response.status !== 'in_progress') {
      res.json(inFlight.get(id)?.builder.response ?? entry.response);
      return;
    }
    await cancels.set(id, true);
    res.json({ ...entry.response, status: 'cancelled' });
  });

  return router;
}

function prepareOptions(id: string, options: ResponsesOptions): TurnPrepareOptions {
  return { serverKwargs: options.chatTemplateKwargs, warn: (message) => console.warn(`mlxcel-server: ${id}: ${message}`) };
}

/** Items -> the rendered, tokenized turn, with this request's tools and options. */
function turnBuilder(model: ServedModel, body: ResponsesBody, prepare: TurnPrepareOptions): (items: Item[]) => Promise<PreparedTurn> {
  const tools = chatTools(body.tools);
  const toolChoice = chatToolChoice(body.tool_choice);
  const format = responseFormat(body.text);
  const budget = thinkingBudget(body);
  const kwargs = templateKwargs(body);
  return (items) =>
    prepareTurn(
      model,
      {
        messages: withInstructions(body.instructions, itemsToMessages(resolveItems(items))),
        tools,
        tool_choice: toolChoice,
        chat_template_kwargs: kwargs,
        thinking_budget_tokens: budget,
        parallel_tool_calls: body.parallel_tool_calls,
        response_format: format,
      },
      prepare,
    );
}

/** `instructions` lead as a system message (merged into one that already leads). */
function withInstructions(instructions: string | null | undefined, messages: ChatMessage[]): ChatMessage[] {
  if (!instructions) return messages;
  const [first, ...rest] = messages;
  if (first?.role === 'system' && typeof first.content === 'string') {
    return [{ ...first, content: `${instructions}\n\n${first.content}` }, ...rest];
  }
  return [{ role: 'system', content: instructions }, ...messages];
}

/** The chat pipeline as compaction needs it: counting, and one greedy summary generation. */
function compactionDeps(
  model: ServedModel,
  body: ResponsesBody,
  turnFor: (items: Item[]) => Promise<PreparedTurn>,
  prepare: TurnPrepareOptions,
  run: { context: RequestContext; defaults: SamplingDefaults; metrics: ServerMetrics },
  onStart?: (inputTokens: number) => void,
): CompactionDeps {
  // The summary is plain text: no tools to call, no reasoning to spend tokens on.
  const summaryTurn = (items: Item[]) =>
    prepareTurn(
      model,
      {
        messages: withInstructions(body.instructions, itemsToMessages(items)),
        thinking_budget_tokens: 0,
        chat_template_kwargs: { ...body.chat_template_kwargs, enable_thinking: false },
      },
      prepare,
    );
  return {
    contextSize: model.engine.info.contextSize,
    count: async (items) => (await turnFor(items)).promptTokens.length,
    summaryPromptTokens: async (items) => (await summaryTurn(items)).promptTokens.length,
    async summarize(items, maxTokens) {
      const events = startTurn(model, await summaryTurn(items), { maxTokens, sampling: { temperature: 0 }, ...run, warn: prepare.warn });
      const result = await collectTurn(events);
      if (!result) throw new ApiError(499, 'request_cancelled', 'the request ended before the summary was generated');
      const { usage } = result.generation;
      return { text: result.content, promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens };
    },
    onStart,
  };
}

function responseHead(model: ServedModel, body: ResponsesBody, defaults: SamplingDefaults, store: boolean, conversationId: string | undefined) {
  return {
    created_at: Math.floor(Date.now() / 1000),
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: model.engine.info.id,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    conversation: conversationId === undefined ? null : { id: conversationId },
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store,
    // The values generation actually used, the server's defaults included.
    temperature: body.temperature ?? defaults.temperature,
    top_p: body.top_p ?? defaults.top_p,
    text: { format: body.text?.format ?? { type: 'text' }, verbosity: body.text?.verbosity ?? 'medium' },
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    top_logprobs: body.top_logprobs ?? 0,
    metadata: body.metadata ?? {},
  };
}
