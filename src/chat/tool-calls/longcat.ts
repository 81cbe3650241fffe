// Meituan LongCat-Flash tool calls ("longcat"): key/value tag pairs after the function name,
//   <longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>\n</longcat_tool_call>
// or a JSON object ({"name", "arguments"}) in the same tags. Pair values are raw text,
// coerced against the tool schema.
import { pairFormat } from './tag-pairs.js';

export const longcat = pairFormat('longcat', '<longcat_tool_call>', '</longcat_tool_call>', 'longcat_arg_key', 'longcat_arg_value');
