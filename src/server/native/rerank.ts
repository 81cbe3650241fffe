// POST /v1/rerank, /v1/reranking, /rerank, /reranking: a query scored against documents in
// one batched pass, score = sigmoid(logit). A sequence-classifier reranker (bge-reranker)
// reads each pair joined by the tokenizer's pair template; a generative one (Qwen3-Reranker)
// reads its prompt (QWEN3_RERANK_PROMPT, with `instruction`) and its logit is
// logit(yes) - logit(no) at the end, so the score is P(yes) over the two answers.
// `documents` answers {model, object: "list", results: [{index, relevance_score,
// document?}], usage}; `texts` without `documents` TEI's bare [{index, score, text?}].
// Results by score descending, ties by index, then cut to top_n.
import { Router } from 'express';
import { EmbedTimeoutError } from '../../engine/embedder.js';
import type { EmbedderState } from '../embedder-state.js';
import { ApiError, badRequest, serverError } from '../errors.js';
import { validateBody, validateRerank } from '../schemas.js';
import { checkModel } from '../openai/embeddings.js';

const PATHS = ['/v1/rerank', '/v1/reranking', '/rerank', '/reranking'];

/** Qwen3-Reranker's prompt, as its model card builds it (the empty think block included). */
export function qwen3RerankPrompt(instruction: string, query: string, document: string): string {
  return '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    + `<|im_start|>user\n<Instruct>: ${instruction}\n<Query>: ${query}\n<Document>: ${document}<|im_end|>\n`
    + '<|im_start|>assistant\n<think>\n\n</think>\n\n';
}

/** Qwen3-Reranker's default task. */
const DEFAULT_INSTRUCTION = 'Given a web search query, retrieve relevant passages that answer the query';

/** The routes' 501 when the server has no reranker, ahead of the body parser. */
export function rerankUnavailableRoutes(rerankers: EmbedderState): Router {
  const router = Router();
  router.post(PATHS, (_req, _res, next) => {
    if (!rerankers.configured) rerankers.require();
    next();
  });
  return router;
}

export function rerankRoutes(rerankers: EmbedderState): Router {
  const router = Router();
  router.post(PATHS, async (req, res) => {
    const reranker = rerankers.require();
    const body = validateBody(validateRerank, req.body);
    checkModel(reranker, body.model);
    if (body.query == null) throw badRequest('"query" must be provided');
    const tei = body.documents == null && body.texts != null;
    const documents = body.documents ?? body.texts;
    if (documents == null || documents.length === 0) throw badRequest('"documents" must be a non-empty string array');
    if (body.top_n != null && body.top_n < 1) throw badRequest('`top_n` must be at least 1');
    const generative = reranker.info.reranker === 'generative';
    if (body.instruction != null && !generative) {
      throw badRequest('`instruction` applies to generative rerankers (Qwen3-Reranker); this reranker is a sequence classifier, which takes none');
    }
    const { tokenizer, info } = reranker;
    const query = body.query;
    const instruction = body.instruction ?? DEFAULT_INSTRUCTION;
    const pairs: number[][] = [];
    for (const [i, doc] of documents.entries()) {
      // No token spans more than maxTokenBytes: a pair too long for the pass is refused before tokenizing it.
      const text = generative ? qwen3RerankPrompt(instruction, query, doc) : undefined;
      const bytes = text !== undefined ? Buffer.byteLength(text, 'utf8') : Buffer.byteLength(query, 'utf8') + Buffer.byteLength(doc, 'utf8');
      const atLeast = tokenizer.maxTokenBytes === undefined ? 0 : Math.ceil(bytes / tokenizer.maxTokenBytes);
      let tokens: number[] | undefined;
      if (atLeast <= info.contextSize) tokens = text !== undefined ? await tokenizer.encodeAsync(text, false) : tokenizer.encodePair(query, doc);
      const n = tokens?.length ?? atLeast;
      if (!tokens || n > info.contextSize) {
        throw badRequest(`documents[${i}] with the query has ${tokens ? '' : 'at least '}${n} tokens, more than the ${info.contextSize} the reranker takes in one pass (it is not truncated)`, 'context_length_exceeded', { n_prompt_tokens: n, n_ctx: info.contextSize });
      }
      pairs.push(tokens);
    }
    let logits: number[];
    try {
      logits = await reranker.rank(pairs);
    } catch (e) {
      if (e instanceof EmbedTimeoutError) throw new ApiError(504, 'timeout_error', e.message);
      throw e;
    }
    const scores = logits.map((x, i) => {
      if (!Number.isFinite(x)) throw serverError(`the score of documents[${i}] is not finite (the model produced NaN or infinity)`);
      return 1 / (1 + Math.exp(-x));
    });
    const ranked = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index).slice(0, body.top_n ?? undefined);
    if (tei) {
      const withText = body.return_text === true;
      res.json(ranked.map(({ index, score }) => ({ index, score, ...(withText ? { text: documents[index] } : {}) })));
      return;
    }
    const withDocuments = body.return_documents === true || body.return_text === true;
    const tokens = pairs.reduce((n, p) => n + p.length, 0);
    res.json({
      model: info.id,
      object: 'list',
      results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(withDocuments ? { document: { text: documents[index] } } : {}) })),
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  });
  return router;
}
