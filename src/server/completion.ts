// One text-completion request through the completion pipeline, for every completion API
// (/v1/completions, /completion and /completions, /infill): prepareCompletion (the prompts
// in any form of ./prompt-forms.ts, or /infill's fill-in-the-middle layout, tokenized and
// checked; n results of each; logit_bias), startCompletions (each result's generation,
// queued per prompt so its n results share one prefill, counted in /metrics) and the typed
// events of ../chat/text-generation.ts (text pieces, then the result). Result p * n + j is
// prompt p's j-th (./choices.ts). Each route renders the events in its wire format.
import { FIM_SPELLINGS, fimTokens, infillPrompt, type InfillParts } from '../chat/fim.js';
import { generateTexts, type TextGenerationEvent, type TextGenerationParams, type TextGenerationResult } from '../chat/text-generation.js';
import type { Engine } from '../engine/engine.js';
import type { PromptProgress, TokenConstraint } from '../engine/types.js';
import { choiceSampling, collectChoices, MAX_RESULTS } from './choices.js';
import { ApiError, badRequest } from './errors.js';
import { generationParams, tokenizeText } from './generation-params.js';
import { logitBiasFrom, type LogitBias } from './logit-bias.js';
import type { ServerMetrics } from './metrics.js';
import { tokenizePrompt, type PromptPieces } from './prompt-forms.js';
import type { RequestContext } from './request-context.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import type { InfillBody, SamplingFields } from './schemas.js';

/** /tokenize, /detokenize and each /infill text take up to this many context windows (a document to be split). */
export const TOKENIZE_CONTEXTS = 4;

export interface CompletionRequest {
  prompts: PromptPieces[];
  /** Results of each prompt. */
  n: number;
  /** The field `n` came in ("n", "n_cmpl"), for the refusal. */
  nField: string;
  logitBias: LogitBias | null | undefined;
}

export interface CompletionPrompt {
  /** As the request gave it. */
  pieces: PromptPieces;
  tokens: number[];
}

export interface PreparedCompletion {
  prompts: CompletionPrompt[];
  n: number;
  logitBias?: Map<number, number>;
}

/** Checks the request and tokenizes every prompt before anything is queued. */
export async function prepareCompletion(engine: Engine, req: CompletionRequest): Promise<PreparedCompletion> {
  const { n } = req;
  if (req.prompts.length * n > MAX_RESULTS) throw badRequest(`${req.prompts.length} prompts times ${req.nField} = ${n} asks for more than ${MAX_RESULTS} completions`);
  const logitBias = logitBiasFrom(engine, req.logitBias);
  const prompts: CompletionPrompt[] = [];
  for (const pieces of req.prompts) prompts.push({ pieces, tokens: await tokenizePrompt(engine, pieces) });
  return { prompts, n, ...(logitBias ? { logitBias } : {}) };
}

/**
 * /infill's prompt: the text before and after the cursor, other files for context and
 * what is typed at the cursor, laid out for the model's fill-in-the-middle tokens
 * (../chat/fim.ts) in at most three quarters of the context, leaving the rest to the
 * completion. 501 for a model without them; 400 for a marker typed into the text.
 */
export async function infillPieces(engine: Engine, body: InfillBody, spm: boolean): Promise<PromptPieces> {
  const fim = fimTokens(engine.tokenizer);
  if (!fim) {
    const sets = FIM_SPELLINGS.map((s) => s.join(' ')).join(', ');
    throw new ApiError(501, 'not_supported_error', `Infill is not supported by this model: its vocabulary has none of the fill-in-the-middle token sets (${sets})`);
  }
  rejectMarkers(body, fim.markers);
  const contextSize = engine.info.contextSize;
  const text = (t: string | null | undefined) => tokenizeText(engine, t ?? '', false, contextSize * TOKENIZE_CONTEXTS);
  const parts: InfillParts = {
    prefix: await text(body.input_prefix),
    suffix: await text(body.input_suffix),
    prompt: await text(body.prompt),
    extra: [],
    repoName: await text('repo\n'),
  };
  for (const file of body.input_extra ?? []) parts.extra.push({ name: await text(`${file.filename}\n`), text: await text(file.text) });
  return infillPrompt(fim, parts, Math.floor((3 * contextSize) / 4), spm);
}

/** 400 for a FIM marker typed into the request's text: it would change the prompt's layout. */
function rejectMarkers(body: InfillBody, markers: readonly string[]): void {
  const fields: Array<[string, string | null | undefined]> = [
    ['input_prefix', body.input_prefix],
    ['input_suffix', body.input_suffix],
    ['prompt', body.prompt],
    ...(body.input_extra ?? []).flatMap((file, i): Array<[string, string]> => [
      [`input_extra[${i}].filename`, file.filename],
      [`input_extra[${i}].text`, file.text],
    ]),
  ];
  for (const [name, text] of fields) {
    const marker = text ? markers.find((m) => text.includes(m)) : undefined;
    if (marker) throw badRequest(`Invalid infill request: ${name} contains the fill-in-the-middle marker ${marker}`);
  }
}

/** What each result reports beside its text. */
export type CompletionReporting = Pick<TextGenerationParams, 'logprobs' | 'postSamplingProbs' | 'everyToken' | 'timingsPerToken' | 'collectTokens'>;

export interface CompletionOptions {
  sampling: SamplingFields;
  maxTokens: number | null | undefined;
  context: RequestContext;
  defaults: SamplingDefaults;
  metrics: ServerMetrics;
  /** The results count in /metrics' requests (the REST reference leaves streaming completions out). */
  countRequests: boolean;
  /** A result's constraint, made afresh for each (it is stateful), from its prompt's index. */
  constraint: (prompt: number) => TokenConstraint | undefined;
  reporting: CompletionReporting;
  /** Called after each prefill chunk of result `index`, before its first token (llama-server's return_progress). */
  onProgress?: (index: number, progress: PromptProgress) => void;
}

export interface StartedCompletion {
  /** Result i's generation parameters. */
  params: TextGenerationParams[];
  /** Result i's events; an iteration ends without a 'done' when the context's signal aborts. */
  streams: AsyncIterable<TextGenerationEvent>[];
}

/**
 * Every result's parameters first (so an over-long prompt or a bad field is refused before
 * anything is queued), then every generation queued, each result sampling with its own
 * seed (./choices.ts).
 */
export function startCompletions(engine: Engine, prepared: PreparedCompletion, options: CompletionOptions): StartedCompletion {
  const { n } = prepared;
  const { onProgress } = options;
  const groups = prepared.prompts.map((prompt, p) => {
    const base = generationParams(engine, prompt.tokens, options.sampling, options.maxTokens, options.context, options.defaults, prepared.logitBias);
    return Array.from({ length: n }, (_, j): TextGenerationParams => {
      const constraint = options.constraint(p);
      return {
        ...base,
        sampling: choiceSampling(base.sampling, j),
        ...(constraint ? { constraint } : {}),
        ...options.reporting,
        ...(onProgress ? { onProgress: (progress: PromptProgress) => onProgress(p * n + j, progress) } : {}),
      };
    });
  });
  const streams = options.metrics.trackChoices(groups.flatMap((choices) => generateTexts(engine, choices)), options.countRequests, n);
  return { params: groups.flat(), streams };
}

/** Drives every result to its end; undefined when the client left first. */
export function collectCompletions(streams: readonly AsyncIterable<TextGenerationEvent>[]): Promise<TextGenerationResult[] | undefined> {
  return collectChoices(streams, (event) => (event.type === 'done' ? event.result : undefined));
}
