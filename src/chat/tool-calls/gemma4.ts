// Google Gemma 4 tool calls ("gemma4"), in the Gemma call notation:
//   <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
// Strings sit between <|"|> tokens; other values are bare literals.
import { notationFormat } from './call-notation.js';

export const gemma4 = notationFormat('gemma4', '<|tool_call>', '<tool_call|>', '<|"|>');
