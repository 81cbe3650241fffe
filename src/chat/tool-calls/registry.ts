// Which tool-call format and reasoning tags a checkpoint uses, read off its chat template:
// the template is what teaches the model the wire shape, so the markers it writes are
// the markers the model will write. Checked most specific first: several formats share
// a tag (<tool_call> is Hermes, GLM and Qwen3-Coder alike).
import { commandR } from './command-r.js';
import { deepseek } from './deepseek.js';
import { functionGemma } from './function-gemma.js';
import { functionaryV31 } from './functionary-v3-1.js';
import { functionaryV32 } from './functionary-v3-2.js';
import { gemma4 } from './gemma4.js';
import { genericJson } from './generic-json.js';
import { glm47 } from './glm47.js';
import { granite } from './granite.js';
import { hermes } from './hermes.js';
import { kimiK2 } from './kimi-k2.js';
import { llama3 } from './llama3-json.js';
import { longcat } from './longcat.js';
import { minimaxM2 } from './minimax-m2.js';
import { minimaxM3, NS } from './minimax-m3.js';
import { mistral } from './mistral.js';
import { mistralNemo } from './mistral-nemo.js';
import { pythonic } from './pythonic.js';
import { qwen3Coder } from './qwen3-coder.js';
import type { ToolCallFormat } from './types.js';

export interface ThinkTags {
  open: string;
  close: string;
}

export interface ChatFormat {
  /** How tool calls are written; undefined when the template takes no tools. */
  toolFormat?: ToolCallFormat;
  /** GPT-OSS: reasoning, content and calls are Harmony channels. */
  harmony: boolean;
  /** The reasoning block's tags, when the template has one. */
  reasoning?: ThinkTags;
  /**
   * The template serialises a history call's arguments itself (`arguments | tojson`, or
   * Qwen3-Coder's `arguments | items`), so it wants them as an object, not the JSON string
   * OpenAI clients send.
   */
  objectArguments?: boolean;
}


const RULES: Array<[(t: string) => boolean, ToolCallFormat]> = [
  [(t) => t.includes(NS), minimaxM3],
  [(t) => t.includes('<minimax:tool_call>'), minimaxM2],
  [(t) => t.includes('<|tool_calls_section_begin|>'), kimiK2],
  [(t) => t.includes('tool▁calls▁begin'), deepseek],
  [(t) => t.includes('<longcat_tool_call>'), longcat],
  [(t) => t.includes('<arg_key>'), glm47],
  [(t) => t.includes('<function=') && t.includes('<parameter='), qwen3Coder],
  [(t) => t.includes('>>>'), functionaryV32],
  [(t) => t.includes('<function='), functionaryV31],
  [(t) => t.includes('<|START_ACTION|>') || (t.includes('Action:') && t.includes('tool_name')), commandR],
  [(t) => t.includes('<|tool_call|>'), granite],
  [(t) => t.includes('<|tool_call>'), gemma4],
  [(t) => t.includes('<start_function_call>'), functionGemma],
  [(t) => t.includes('[TOOL_CALLS]') && t.includes('[ARGS]'), mistral],
  [(t) => t.includes('[TOOL_CALLS]'), mistralNemo],
  [(t) => t.includes('<|tool_call_start|>') || t.includes('[func_name1('), pythonic],
  [(t) => t.includes('<tool_call>'), hermes],
  [(t) => t.includes('<|python_tag|>') || /"parameters": dictionary of argument name/.test(t), llama3],
];

/** Every format, for tests and for --help-style listings. */
export const TOOL_CALL_FORMATS: readonly ToolCallFormat[] = [...RULES.map(([, f]) => f), genericJson];

const REASONING_TAGS: Array<[string, ThinkTags]> = [
  ['<|START_THINKING|>', { open: '<|START_THINKING|>', close: '<|END_THINKING|>' }],
  ['<|channel>', { open: '<|channel>thought', close: '<channel|>' }],
  ['<think>', { open: '<think>', close: '</think>' }],
];

export function detectChatFormat(template: string | undefined): ChatFormat {
  if (!template) return { harmony: false };
  const objectArguments = /arguments\s*(\|\s*(tojson|items)\b|\.items\(\))/.test(template) && !/arguments is string/.test(template);
  if (template.includes('<|channel|>') && template.includes('<|message|>')) return { harmony: true, objectArguments };
  const reasoning = REASONING_TAGS.find(([marker]) => template.includes(marker))?.[1];
  const rule = RULES.find(([test]) => test(template));
  // A template that renders tools in a way not listed here still takes tools: the
  // model is then most likely to answer with plain {"name", "arguments"} JSON.
  const toolFormat = rule?.[1] ?? (/\btools\b/.test(template) ? genericJson : undefined);
  return { toolFormat, harmony: false, objectArguments, ...(reasoning ? { reasoning } : {}) };
}

/** Whether the template knows how to take tools, as /health's tool_call_parser reports. */
export function supportsTools(format: ChatFormat): boolean {
  return format.harmony || format.toolFormat !== undefined;
}
