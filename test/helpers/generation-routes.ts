// Every generation route and alias the REST reference documents, written out here (not
// read from the server's routers) so that a route the server forgets to refuse shows.
import { expect } from 'vitest';

const user = { role: 'user', content: 'hi' };
const chat = { messages: [user], max_tokens: 2 };
const responses = { input: 'hi', max_output_tokens: 2 };
const anthropic = { model: 'm', max_tokens: 2, messages: [user] };

const GENERATION_ROUTES: Array<{ method: 'GET' | 'POST' | 'DELETE'; path: string; body?: unknown }> = [
  ...['/v1/chat/completions', '/chat/completions'].map((path) => ({ method: 'POST' as const, path, body: chat })),
  ...['/v1/completions', '/completion', '/completions'].map((path) => ({ method: 'POST' as const, path, body: { prompt: 'hi', max_tokens: 2 } })),
  { method: 'POST', path: '/infill', body: { input_prefix: 'a', input_suffix: 'b' } },
  { method: 'POST', path: '/apply-template', body: chat },
  ...['/v1', ''].flatMap((v) => [
    { method: 'POST' as const, path: `${v}/responses`, body: responses },
    { method: 'POST' as const, path: `${v}/responses/input_tokens`, body: responses },
    { method: 'POST' as const, path: `${v}/responses/compact`, body: responses },
    { method: 'GET' as const, path: `${v}/responses/resp_1` },
    { method: 'DELETE' as const, path: `${v}/responses/resp_1` },
    { method: 'POST' as const, path: `${v}/responses/resp_1/cancel`, body: {} },
    { method: 'POST' as const, path: `${v}/messages`, body: anthropic },
    { method: 'POST' as const, path: `${v}/messages/count_tokens`, body: anthropic },
  ]),
];

/** Every generation route of the server at `url` answers 501 naming `flag`, in its API's envelope. */
export async function expectGenerationRefused(url: string, flag: string): Promise<void> {
  for (const { method, path, body } of GENERATION_ROUTES) {
    const res = await fetch(`${url}${path}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = (await res.json()) as { type?: string; error: { type: string; message: string } };
    expect(res.status, `${method} ${path}`).toBe(501);
    expect(json.error.message, `${method} ${path}`).toContain(`\`${flag}\``);
    // Anthropic's envelope and error type there, OpenAI's elsewhere.
    if (/messages/.test(path)) expect([json.type, json.error.type], `${method} ${path}`).toEqual(['error', 'api_error']);
    else expect(json.error.type, `${method} ${path}`).toBe('not_supported_error');
  }
}
