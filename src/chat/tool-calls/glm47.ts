// GLM tool calls ("glm47"): GLM-4.5 and later (glm4_moe, glm4_moe_lite, glm_moe_dsa,
// glm4v_moe; 4.7 drops the newlines) write key/value tag pairs after the function name:
//   <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
// Values are raw text, coerced against the tool schema.
import { pairFormat } from './tag-pairs.js';

export const glm47 = pairFormat('glm47', '<tool_call>', '</tool_call>', 'arg_key', 'arg_value');
