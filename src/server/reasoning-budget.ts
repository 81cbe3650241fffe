// The thinking budget as a constraint (../chat/thinking-budget.ts), for a chat turn's
// rendered prompt and for a raw /completion prompt alike. A block the prompt leaves open
// is counted from the first generated token; otherwise a block the model opens itself. A
// model whose chat format has no reasoning block gets no constraint: the budget is
// accepted and has nothing to cap.
import { ChatRequestError, thinkingBudget } from '../chat/chat-request.js';
import { promptOpensReasoning } from '../chat/reasoning.js';
import { ThinkingBudget } from '../chat/thinking-budget.js';
import { badRequest } from './errors.js';
import type { ServedModel } from './model-state.js';
import type { ThinkingBudgetFields } from './schemas.js';

const HARMONY_ANALYSIS = '<|channel|>analysis<|message|>';
const HARMONY_TO_FINAL = '<|end|><|start|>assistant<|channel|>final<|message|>';

/** The requested budget (undefined: none); a value below -1 is a 400, worded as chat
 *  completions words it. */
export function requestedBudget(body: ThinkingBudgetFields): number | undefined {
  try {
    return thinkingBudget(body);
  } catch (err) {
    if (err instanceof ChatRequestError) throw badRequest(err.message);
    throw err;
  }
}

/** `budget` as a constraint over `prompt`'s continuation; undefined without a reasoning block. */
export function reasoningBudgetConstraint(model: ServedModel, prompt: string, budget: number, message: string): ThinkingBudget | undefined {
  const { chatFormat: format, engine } = model;
  let tags: { open: string; close: string; forced: string; startsInside: boolean };
  if (format.harmony) tags = { open: HARMONY_ANALYSIS, close: '<|end|>', forced: message + HARMONY_TO_FINAL, startsInside: false };
  else if (format.reasoning) {
    const { open, close } = format.reasoning;
    tags = { open, close, forced: message + close, startsInside: promptOpensReasoning(prompt, format.reasoning) };
  } else return undefined;
  const { tokenizer } = engine;
  return new ThinkingBudget({
    budget,
    open: tags.open,
    close: tags.close,
    forced: tokenizer.encode(tags.forced, false),
    startsInside: tags.startsInside,
    vocabSize: engine.info.vocabSize,
    piece: (id) => tokenizer.decode([id], false),
  });
}
