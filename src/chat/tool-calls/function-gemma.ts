// Function-calling Gemma tool calls ("function_gemma"), in the Gemma call notation:
//   <start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>
// Strings sit between <escape> tokens; other values are bare literals.
import { notationFormat } from './call-notation.js';

export const functionGemma = notationFormat('function_gemma', '<start_function_call>', '<end_function_call>', '<escape>');
