// GET /metrics: Prometheus text from prom-client, with the REST reference's names, types and
// HELP texts. Each app owns its Registry (never the global one), so several servers can
// live in one process, as the tests run them.
//
// Two sources: the request counters (mlxcel_requests_total and its token/time siblings)
// are counted here as generations finish, under the REST reference's rules; everything else
// mirrors engine.stats() at scrape time.
//
// Beside the mlxcel_* names, the gauges the Gateway API Inference Extension's endpoint picker
// reads by default (its model server protocol, under vLLM's names): running and waiting
// requests, the KV pool's usage as a fraction of its blocks, the pool's shape as the labels
// of an info gauge, and the (empty) LoRA adapter info. The mlxcel_* twins carry the same values, for a picker configured
// with this server's own names.
import { Router } from 'express';
import { Counter, Gauge, Registry } from 'prom-client';
import type { TextGenerationEvent, Usage } from '../chat/text-generation.js';
import type { EngineStats } from '../engine/types.js';
import { combinedUsage } from './choices.js';

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter;
  private readonly promptTokens: Counter;
  private readonly completionTokens: Counter;
  private readonly generationSeconds: Counter;

  /** `stats` answers undefined while the model loads: the engine metrics read 0 then. */
  constructor(stats: () => EngineStats | undefined) {
    const registers = [this.registry];
    const counter = (name: string, help: string) => new Counter({ name, help, registers });
    this.requests = counter(
      'mlxcel_requests_total',
      'Total number of completed generation requests; chat completion streams cancelled by the client are excluded',
    );
    this.promptTokens = counter('mlxcel_prompt_tokens_total', 'Total prompt tokens processed');
    this.completionTokens = counter(
      'mlxcel_completion_tokens_total',
      'Total completion tokens of the requests counted in mlxcel_requests_total',
    );
    this.generationSeconds = counter('mlxcel_generation_time_seconds_total', 'Total generation time in seconds');

    const gauge = (name: string, help: string, read: (s: EngineStats) => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const s = stats();
          this.set(s ? read(s) : 0);
        },
      });
    // The engine keeps these cumulative counts itself; a scrape copies them over.
    const engineCounter = (name: string, help: string, read: (s: EngineStats) => number) =>
      new Counter({
        name,
        help,
        registers,
        collect() {
          const s = stats();
          this.reset();
          this.inc(s ? read(s) : 0);
        },
      });
    gauge('mlxcel_slots_total', 'Total number of parallel slots', (s) => s.slots);
    gauge('mlxcel_slots_available', 'Available parallel slots', (s) => Math.max(0, s.slots - s.activeSequences));
    gauge('mlxcel_queue_depth', 'Current prefill queue depth', (s) => s.queueDepth);
    engineCounter('mlxcel_batch_sequences_started', 'Total sequences that entered prefill', (s) => s.counters.sequences_started);
    engineCounter('mlxcel_batch_sequences_completed', 'Total sequences that completed generation', (s) => s.counters.sequences_completed);
    engineCounter('mlxcel_batch_prefill_tokens_total', 'Cumulative prefill tokens processed', (s) => s.counters.total_prefill_tokens);
    engineCounter('mlxcel_batch_decode_tokens_total', 'Cumulative decode tokens generated', (s) => s.counters.total_decode_tokens);
    engineCounter('mlxcel_speculative_draft_tokens_total', 'Tokens drafted for speculative decoding', (s) => s.counters.draft_tokens);
    engineCounter('mlxcel_speculative_accepted_tokens_total', 'Drafted tokens the target model accepted', (s) => s.counters.draft_accepted_tokens);
    gauge('mlxcel_batch_current_size', 'Current active batch size', (s) => s.activeSequences);
    gauge('mlxcel_request_memory_budget_bytes', 'Request memory budget in bytes', (s) => s.requestMemory?.budgetBytes ?? 0);
    gauge('mlxcel_request_memory_in_use_bytes', 'Request memory in use in bytes: the weights and the reservations of the requests in flight', (s) => s.requestMemory?.inUseBytes ?? 0);
    // Each active sequence holds one KV-cache allocation, as /health's cache_pool_active says.
    gauge('mlxcel_cache_pool_active', 'Active cache entries', (s) => s.activeSequences);
    gauge('mlxcel_memory_weights_bytes', 'GPU bytes of the model weights', (s) => s.memory.weights);
    gauge('mlxcel_memory_kv_cache_bytes', 'GPU bytes of the KV cache allocated now', (s) => s.memory.kv);
    gauge('mlxcel_memory_kv_cache_max_bytes', 'GPU bytes the KV cache may grow to', (s) => s.memory.kvMax);
    gauge('mlxcel_memory_other_bytes', 'GPU bytes of the other buffers: activations, batch metadata, kernel parameters', (s) => s.memory.other);

    // Usage is of the pool's capacity (the blocks it may grow to), which a router sees.
    const kvUsage = (s: EngineStats) => (s.kv && s.kv.blocks > 0 ? s.kv.usedBlocks / s.kv.blocks : 0);
    gauge('mlxcel_kv_cache_usage_ratio', 'Fraction of the KV cache blocks held by running requests (1 = full)', kvUsage);
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches', (s) => s.activeSequences);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed', (s) => s.queueDepth);
    gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage', kvUsage);
    const cacheInfo = (name: string, help: string) =>
      new Gauge({
        name,
        help,
        labelNames: ['block_size', 'num_gpu_blocks'],
        registers,
        collect() {
          this.reset();
          const kv = stats()?.kv;
          if (kv) this.set({ block_size: kv.blockSize, num_gpu_blocks: kv.blocks }, 1);
        },
      });
    cacheInfo('mlxcel_kv_cache_config_info', 'The KV cache layout: tokens per block and the blocks the pool may grow to');
    cacheInfo('vllm:cache_config_info', 'Information of the LLMEngine CacheConfig');
    // The protocol's LoRA gauge, which the picker's default (vLLM) mapping reads too: no
    // adapters are served, and the value is the time of the scrape, as vLLM's.
    new Gauge({
      name: 'vllm:lora_requests_info',
      help: 'Running stats on lora requests.',
      labelNames: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
      registers,
      collect() {
        this.reset();
        this.set({ max_lora: 0, running_lora_adapters: '', waiting_lora_adapters: '' }, Date.now() / 1000);
      },
    });
  }

  /**
   * Passes the events of a request's choices (./choices.ts: `n` per prompt, prompt-major)
   * through, counting the request when its last choice finishes (its 'done' event) if
   * `record`, with combinedUsage's tokens. A generation the client abandoned never reaches
   * 'done', so a cancelled request is not counted. Routes pass record=false for streaming
   * /v1/completions and /completion, which the REST reference leaves unrecorded.
   */
  trackChoices(streams: AsyncIterable<TextGenerationEvent>[], record: boolean, n: number): AsyncIterable<TextGenerationEvent>[] {
    if (!record) return streams;
    // Timed from the queueing of the request, which generateTexts has just done.
    const start = performance.now();
    const usages: Usage[] = [];
    let finished = 0;
    const finish = () => {
      const usage = combinedUsage(usages, n);
      this.requests.inc();
      this.promptTokens.inc(usage.prompt_tokens);
      this.completionTokens.inc(usage.completion_tokens);
      this.generationSeconds.inc((performance.now() - start) / 1000);
    };
    return streams.map(async function* (events, i) {
      for await (const event of events) {
        if (event.type === 'done') {
          usages[i] = event.result.usage;
          if (++finished === streams.length) finish();
        }
        yield event;
      }
    });
  }
}

export function metricsRoutes(metrics: ServerMetrics): Router {
  const router = Router();
  router.get('/metrics', async (_req, res) => {
    const text = await metrics.registry.metrics();
    res.type(metrics.registry.contentType).send(text);
  });
  return router;
}
