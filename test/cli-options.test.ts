import { describe, expect, it } from 'vitest';
import { CliError, DEFAULT_LOG_VERBOSITY, HELP_TEXT, LOG_LEVELS, parseCli, type ServeOptions } from '../src/cli-options.js';

const DEFAULT_MODEL = '/pkg/models/stories260k';
const parse = (argv: string[], env: Record<string, string> = {}) => parseCli(argv, env, DEFAULT_MODEL);
/** The options of a command that must be 'serve'. */
function serveOptions(argv: string[]): ServeOptions {
  const command = parse(argv);
  if (command.kind !== 'serve') throw new Error(`expected a serve command, got ${command.kind}`);
  return command.options;
}

describe('parseCli', () => {
  it('has llama-server defaults and the bundled model', () => {
    expect(parse([])).toEqual({
      kind: 'serve',
      options: { model: { kind: 'path-or-repo', text: DEFAULT_MODEL }, host: '127.0.0.1', port: 8080, backend: 'auto' },
    });
  });

  it('reads MLXCEL_REQUEST_MEMORY_BUDGET as a byte size; zero, none and other invalid values stop startup', () => {
    const budget = (text: string) => {
      const command = parse([], { MLXCEL_REQUEST_MEMORY_BUDGET: text });
      return command.kind === 'serve' ? command.options.requestMemoryBudget : undefined;
    };
    expect(budget('12G')).toBe(12 * 2 ** 30);
    expect(budget('512MiB')).toBe(512 * 2 ** 20);
    expect(budget('1.5k')).toBe(1536);
    expect(budget('1073741824')).toBe(2 ** 30);
    for (const bad of ['0', 'none', '', '-1G', '12X', 'G']) {
      expect(() => parse([], { MLXCEL_REQUEST_MEMORY_BUDGET: bad }), bad).toThrow(CliError);
    }
    expect(() => parse([], { MLXCEL_REQUEST_MEMORY_BUDGET: 'none' })).toThrow(/MLXCEL_REQUEST_MEMORY_BUDGET must be a positive byte size/);
  });

  it('reads the speculative decoding flags in llama-server spellings', () => {
    expect(serveOptions(['--spec-type', 'ngram-simple', '--draft', '8', '--draft-min=2', '--spec-ngram-size-n', '4']).speculative).toEqual({
      kind: 'prompt-lookup', nMax: 8, nMin: 2, ngram: 4, adaptive: true,
    });
    expect(serveOptions(['--spec-type', 'prompt-lookup', '--draft-max', '5']).speculative).toEqual({ kind: 'prompt-lookup', nMax: 5, nMin: 0, ngram: 3, adaptive: true });
    expect(serveOptions(['--spec-type', 'prompt-lookup', '--no-spec-adaptive']).speculative).toMatchObject({ adaptive: false });
    expect(parse([], { LLAMA_ARG_SPEC_TYPE: 'prompt-lookup', LLAMA_ARG_SPEC_ADAPTIVE: 'false' })).toMatchObject({ options: { speculative: { adaptive: false } } });
    expect(parse([], { LLAMA_ARG_SPEC_TYPE: 'prompt-lookup', LLAMA_ARG_DRAFT_MAX: '6' })).toMatchObject({ options: { speculative: { nMax: 6 } } });
    expect(serveOptions(['--spec-type', 'none', '--spec-draft-n-max', '4']).speculative).toBeUndefined();
    expect(serveOptions(['--draft-n', '4']).speculative).toBeUndefined();
    expect(() => parse(['--spec-type', 'eagle'])).toThrow(/--spec-type must be one of none, prompt-lookup, ngram-simple/);
    expect(() => parse(['--spec-type', 'ngram-simple', '--draft', '2', '--draft-min', '3'])).toThrow(/--draft-min 3 exceeds/);
  });

  it('reads the draft model flag: a directory or a repo id, resolved later as --model is', () => {
    const draft = { speculative: { kind: 'draft-model', nMax: 16, nMin: 0, ngram: 3 }, draftModel: { kind: 'path-or-repo', text: '/d' } };
    for (const argv of [['--spec-draft-model', '/d'], ['-md', '/d'], ['--model-draft=/d'], ['--spec-type', 'draft-model', '-md', '/d']]) {
      expect(serveOptions(argv)).toMatchObject(draft);
    }
    expect(parse([], { LLAMA_ARG_SPEC_DRAFT_MODEL: '/d' })).toMatchObject({ options: draft });
    expect(parse([], { LLAMA_ARG_MODEL_DRAFT: 'org/small' })).toMatchObject({ options: { draftModel: { kind: 'path-or-repo', text: 'org/small' } } });
    expect(serveOptions(['-md', '/d', '--draft-max', '4']).speculative).toEqual({ kind: 'draft-model', nMax: 4, nMin: 0, ngram: 3, adaptive: true });
    expect(() => parse(['-md', '/d', '--spec-type', 'prompt-lookup'])).toThrow(/--spec-type prompt-lookup names another drafter/);
    expect(() => parse(['--spec-type', 'draft-model'])).toThrow(/needs --spec-draft-model/);
  });

  it('reads every flag, long and short', () => {
    const argv = ['-m', '/m', '--host', '0.0.0.0', '--port', '0', '-c', '2048', '--api-key', 'k', '--alias', 'a', '--backend', 'vulkan'];
    expect(parse([...argv, '-np', '2', '-b', '64', '--max-queue', '0'])).toEqual({
      kind: 'serve',
      options: {
        model: { kind: 'path-or-repo', text: '/m' },
        host: '0.0.0.0',
        port: 0,
        ctxSize: 2048,
        apiKey: 'k',
        alias: ['a'],
        backend: 'vulkan',
        parallel: 2,
        batchSize: 64,
        maxQueue: 0,
      },
    });
    expect(parse(['--parallel', '3', '--batch-size', '128'])).toMatchObject({ options: { parallel: 3, batchSize: 128 } });
    expect(parse(['--model=/x', '--ctx-size=64'])).toMatchObject({ options: { model: { kind: 'path-or-repo', text: '/x' }, ctxSize: 64 } });
  });

  it('reads LLAMA_ARG_* variables, and a flag wins over its variable', () => {
    const env = {
      LLAMA_ARG_MODEL: '/env-model',
      LLAMA_ARG_HOST: '::1',
      LLAMA_ARG_PORT: '9000',
      LLAMA_ARG_CTX_SIZE: '128',
      LLAMA_ARG_API_KEY: 'secret',
      LLAMA_ARG_ALIAS: 'tiny',
      LLAMA_ARG_BACKEND: 'opengles',
      LLAMA_ARG_N_PARALLEL: '1',
      LLAMA_ARG_BATCH: '32',
      LLAMA_ARG_MAX_QUEUE: '8',
    };
    expect(parse([], env)).toEqual({
      kind: 'serve',
      options: {
        model: { kind: 'path-or-repo', text: '/env-model' },
        host: '::1',
        port: 9000,
        ctxSize: 128,
        apiKey: 'secret',
        alias: ['tiny'],
        backend: 'opengles',
        parallel: 1,
        batchSize: 32,
        maxQueue: 8,
      },
    });
    expect(parse(['--port', '1234'], env)).toMatchObject({ options: { port: 1234 } });
    expect(parse([], { LLAMA_API_KEY: 'llama-name' })).toMatchObject({ options: { apiKey: 'llama-name' } });
  });

  it('takes a Hub repo from -hf/--hf-repo or LLAMA_ARG_HF_REPO, and a token from --hf-token or HF_TOKEN', () => {
    expect(parse(['-hf', 'org/model'])).toMatchObject({ options: { model: { kind: 'repo', ref: { repo: 'org/model', revision: 'main' } } } });
    expect(parse(['--hf-repo', 'org/model:v2', '--hf-token', 'hf_x'])).toMatchObject({
      options: { model: { kind: 'repo', ref: { repo: 'org/model', revision: 'v2' } }, hfToken: 'hf_x' },
    });
    expect(parse([], { LLAMA_ARG_HF_REPO: 'gpt2', HF_TOKEN: 'hf_env' })).toMatchObject({
      options: { model: { kind: 'repo', ref: { repo: 'gpt2', revision: 'main' } }, hfToken: 'hf_env' },
    });
    // --model names a directory or a repo; which one is decided when it is resolved.
    expect(parse(['-m', 'org/model'])).toMatchObject({ options: { model: { kind: 'path-or-repo', text: 'org/model' } } });
    expect(() => parse(['-hf', 'org/model', '-m', '/dir'])).toThrow('give --model or --hf-repo, not both (got "/dir" and "org/model")');
    expect(() => parse(['-hf', 'org/a/b'])).toThrow('--hf-repo must be a Hub repo id org/name[:revision], got "org/a/b"');
    expect(() => parse(['-hf', 'org/model:'])).toThrow(CliError);
  });

  it('reads the KV cache types from -ctk / -ctv, their long names or llama-server\'s variables, f32 or f16', () => {
    expect(parse([])).toMatchObject({ options: { cacheTypeK: undefined, cacheTypeV: undefined } });
    expect(parse(['-ctk', 'f32', '--cache-type-v', 'f16'])).toMatchObject({ options: { cacheTypeK: 'f32', cacheTypeV: 'f16' } });
    expect(parse([], { LLAMA_ARG_CACHE_TYPE_K: 'f16', LLAMA_ARG_CACHE_TYPE_V: 'f32' })).toMatchObject({ options: { cacheTypeK: 'f16', cacheTypeV: 'f32' } });
    expect(parse(['-ctv', 'f16'], { LLAMA_ARG_CACHE_TYPE_V: 'f32' })).toMatchObject({ options: { cacheTypeV: 'f16' } });
    expect(() => parse(['-ctk', 'q8_0'])).toThrow('--cache-type-k must be one of f32, f16, got "q8_0"');
  });

  it('treats ctx-size 0 as the model default', () => {
    expect(parse(['-c', '0'])).toMatchObject({ options: { ctxSize: undefined } });
  });

  it('rejects bad values and unknown flags with a CliError', () => {
    expect(() => parse(['--port', '70000'])).toThrow(CliError);
    expect(() => parse(['--port', 'x'])).toThrow(/--port must be an integer/);
    expect(() => parse(['-c', '-5'])).toThrow(CliError);
    expect(() => parse(['--backend', 'cuda'])).toThrow(/--backend must be one of/);
    expect(() => parse(['--nope'])).toThrow(CliError);
    expect(() => parse(['--port'])).toThrow(CliError);
    expect(() => parse(['-np', '0'])).toThrow(/--parallel must be an integer from 1/);
  });

  it('answers --help and lists every option with its variable', () => {
    expect(parse(['--help'])).toEqual({ kind: 'help' });
    expect(parse(['-h'])).toEqual({ kind: 'help' });
    const names = ['--model', '-m,', '--host', '--port', '--ctx-size', '-c,', '--api-key', '--alias', '--backend', '-np,', '--parallel', '-b,', '--batch-size', '--max-queue'];
    for (const text of [...names, 'LLAMA_ARG_CTX_SIZE', 'LLAMA_ARG_N_PARALLEL', 'swiftshader']) {
      expect(HELP_TEXT).toContain(text);
    }
  });
});

describe('parseCli: observability and sampling-default flags', () => {
  it('reads --no-slots, --metrics, --metrics-port and the sampling defaults', () => {
    const argv = ['--no-slots', '--metrics', '--metrics-port', '9100', '--temp', '0.5', '--top-k', '10', '--top-p', '0.9', '-n', '32', '-s', '42'];
    expect(parse(argv)).toMatchObject({
      options: {
        slots: false,
        metrics: true,
        metricsPort: 9100,
        sampling: { temperature: 0.5, top_k: 10, top_p: 0.9, n_predict: 32, seed: 42 },
      },
    });
    expect(parse(['--n-predict', '7', '--seed', '0'])).toMatchObject({ options: { sampling: { n_predict: 7, seed: 0 } } });
  });

  it('leaves everything unset without the flags', () => {
    const options = serveOptions([]);
    for (const key of ['slots', 'metrics', 'metricsPort', 'sampling'] as const) expect(options[key]).toBeUndefined();
  });

  it('takes negative values the way llama-server users write them', () => {
    expect(parse(['--seed', '-1', '-n', '-1'])).toMatchObject({ options: { sampling: { seed: -1, n_predict: -1 } } });
    expect(parse(['--seed=-1'])).toMatchObject({ options: { sampling: { seed: -1 } } });
  });

  it('reads --context-shift (or LLAMA_ARG_CONTEXT_SHIFT) and --keep', () => {
    expect(parse(['--context-shift', '--keep', '-1'])).toMatchObject({ options: { sampling: { context_shift: true, n_keep: -1 } } });
    expect(parse(['--context-shift', '--no-context-shift'])).toMatchObject({ options: { sampling: { context_shift: false } } });
    expect(parse([], { LLAMA_ARG_CONTEXT_SHIFT: 'true' })).toMatchObject({ options: { sampling: { context_shift: true } } });
    expect(() => parse(['--keep', '-2'])).toThrow(CliError);
  });

  it('lets the last of --slots/--no-slots win', () => {
    expect(parse(['--no-slots', '--slots'])).toMatchObject({ options: { slots: true } });
    expect(parse(['--slots', '--no-slots'])).toMatchObject({ options: { slots: false } });
  });

  it('reads llama-server variables for the switches and LLAMA_ARG_* for the rest; flags win', () => {
    const env = {
      LLAMA_ARG_ENDPOINT_SLOTS: '0',
      LLAMA_ARG_ENDPOINT_METRICS: 'true',
      LLAMA_ARG_METRICS_PORT: '9200',
      LLAMA_ARG_TEMP: '0',
      LLAMA_ARG_TOP_K: '5',
      LLAMA_ARG_TOP_P: '0.5',
      LLAMA_ARG_N_PREDICT: '16',
      LLAMA_ARG_SEED: '7',
    };
    expect(parse([], env)).toMatchObject({
      options: { slots: false, metrics: true, metricsPort: 9200, sampling: { temperature: 0, top_k: 5, top_p: 0.5, n_predict: 16, seed: 7 } },
    });
    expect(parse(['--slots', '--temp', '1.5'], env)).toMatchObject({ options: { slots: true, sampling: { temperature: 1.5, top_k: 5 } } });
    expect(parse([], { LLAMA_ARG_ENDPOINT_SLOTS: 'enabled', LLAMA_ARG_ENDPOINT_METRICS: '0' })).toMatchObject({
      options: { slots: true, metrics: false },
    });
  });

  it('rejects out-of-range and malformed values', () => {
    expect(() => parse(['--temp', '-0.5'])).toThrow(/--temp must be a number from 0/);
    expect(() => parse(['--temp', 'hot'])).toThrow(/--temp must be a number/);
    expect(() => parse(['--top-p', '1.5'])).toThrow(/--top-p must be a number from 0 to 1/);
    expect(() => parse(['--top-k', '2.5'])).toThrow(/--top-k must be an integer/);
    expect(() => parse(['-n', '-2'])).toThrow(/--n-predict must be an integer from -1/);
    expect(() => parse(['--seed', '-5'])).toThrow(/--seed must be an integer from -1/);
    expect(() => parse(['--metrics-port', '70000'])).toThrow(/--metrics-port must be an integer/);
    expect(() => parse(['--metrics', 'yes'])).toThrow(CliError);
    expect(() => parse([], { LLAMA_ARG_ENDPOINT_METRICS: 'maybe' })).toThrow(/LLAMA_ARG_ENDPOINT_METRICS must be one of/);
  });

  it('lists the new options and their variables in --help', () => {
    const names = ['--slots, --no-slots', '--metrics ', '--metrics-port PORT', '--temp', '--top-k', '--top-p', '-n, --n-predict', '-s, --seed'];
    const vars = ['LLAMA_ARG_ENDPOINT_SLOTS', 'LLAMA_ARG_ENDPOINT_METRICS', 'LLAMA_ARG_METRICS_PORT', 'LLAMA_ARG_TEMP', 'LLAMA_ARG_TOP_K', 'LLAMA_ARG_TOP_P', 'LLAMA_ARG_N_PREDICT', 'LLAMA_ARG_SEED'];
    for (const text of [...names, ...vars]) expect(HELP_TEXT).toContain(text);
  });
});

describe('parseCli: --no-warmup', () => {
  it('turns the load-time warm-up off, --warmup back on (the last wins); unset by default', () => {
    expect(parse(['--no-warmup'])).toMatchObject({ options: { warmup: false } });
    expect(parse(['--no-warmup', '--warmup'])).toMatchObject({ options: { warmup: true } });
    expect(serveOptions([]).warmup).toBeUndefined();
  });

  it('rejects a value on the switch', () => {
    expect(() => parse(['--no-warmup=1'])).toThrow(CliError);
    expect(() => parse(['--warmup=false'])).toThrow(CliError);
  });

  it('lists it in --help without a variable line (llama-server has none)', () => {
    const line = HELP_TEXT.split('\n').findIndex((l) => l.includes('--warmup, --no-warmup'));
    expect(line).toBeGreaterThan(-1);
    expect(HELP_TEXT.split('\n')[line + 1]).not.toContain('(env:');
  });
});

describe('parseCli: --alias, --tags and the chat template', () => {
  it('reads comma-separated aliases and tags, long, short and from their variables', () => {
    expect(parse(['--alias', 'gpt-4o-mini, tiny,', '--tags', 'small,test'])).toMatchObject({ options: { alias: ['gpt-4o-mini', 'tiny'], tags: ['small', 'test'] } });
    expect(parse(['-a', 'x'])).toMatchObject({ options: { alias: ['x'] } });
    expect(parse([], { LLAMA_ARG_ALIAS: 'a,b', LLAMA_ARG_TAGS: 't' })).toMatchObject({ options: { alias: ['a', 'b'], tags: ['t'] } });
    expect(() => parse(['--alias', ','])).toThrow(/--alias must list at least one name/);
  });

  it('takes a Jinja template or a file holding one, not both', () => {
    const jinja = '{% for m in messages %}{{ m.content }}{% endfor %}';
    expect(parse(['--chat-template', jinja])).toMatchObject({ options: { chatTemplate: jinja } });
    expect(parse(['--chat-template-file', '/t.jinja'])).toMatchObject({ options: { chatTemplateFile: '/t.jinja' } });
    expect(parse([], { LLAMA_ARG_CHAT_TEMPLATE_FILE: '/e.jinja' })).toMatchObject({ options: { chatTemplateFile: '/e.jinja' } });
    expect(() => parse(['--chat-template', jinja, '--chat-template-file', '/t.jinja'])).toThrow(/not both/);
    expect(() => parse(['--chat-template', ' '])).toThrow(/must not be empty/);
  });
});

describe('parseCli: --verbose and --log-verbosity', () => {
  it('reads the threshold, long and short, and --verbose as no limit; unset by default', () => {
    expect(parse(['--log-verbosity', '4'])).toMatchObject({ options: { logVerbosity: 4 } });
    expect(parse(['-lv', '2'])).toMatchObject({ options: { logVerbosity: 2 } });
    expect(parse(['--log-verbosity=0'])).toMatchObject({ options: { logVerbosity: 0 } });
    expect(parse(['--verbose'])).toMatchObject({ options: { logVerbosity: Infinity } });
    expect(parse(['-v'])).toMatchObject({ options: { logVerbosity: Infinity } });
    expect(serveOptions([]).logVerbosity).toBeUndefined();
    expect(DEFAULT_LOG_VERBOSITY).toBe(LOG_LEVELS.info);
  });

  it('lets --verbose win over a threshold', () => {
    expect(parse(['-lv', '1', '-v'])).toMatchObject({ options: { logVerbosity: Infinity } });
    expect(parse(['-v', '--log-verbosity', '1'])).toMatchObject({ options: { logVerbosity: Infinity } });
  });

  it('reads LLAMA_ARG_VERBOSE, LLAMA_ARG_LOG_VERBOSITY and the older LLAMA_LOG_VERBOSITY; flags win', () => {
    expect(parse([], { LLAMA_ARG_VERBOSE: '1' })).toMatchObject({ options: { logVerbosity: Infinity } });
    expect(parse([], { LLAMA_ARG_VERBOSE: 'false', LLAMA_ARG_LOG_VERBOSITY: '4' })).toMatchObject({ options: { logVerbosity: 4 } });
    expect(parse([], { LLAMA_LOG_VERBOSITY: '1' })).toMatchObject({ options: { logVerbosity: 1 } });
    expect(parse([], { LLAMA_ARG_LOG_VERBOSITY: '2', LLAMA_LOG_VERBOSITY: '1' })).toMatchObject({ options: { logVerbosity: 2 } });
    expect(parse(['-lv', '3'], { LLAMA_ARG_LOG_VERBOSITY: '5' })).toMatchObject({ options: { logVerbosity: 3 } });
  });

  it('rejects a bad threshold and a value on the switch', () => {
    expect(() => parse(['--log-verbosity', 'loud'])).toThrow(/--log-verbosity must be an integer from 0/);
    expect(() => parse(['-lv', '-1'])).toThrow(/--log-verbosity must be an integer from 0/);
    expect(() => parse(['--log-verbosity'])).toThrow(CliError);
    expect(() => parse(['--verbose=1'])).toThrow(CliError);
    expect(() => parse(['-v', '-lv', 'loud'])).toThrow(/--log-verbosity must be an integer/);
    expect(() => parse([], { LLAMA_ARG_VERBOSE: 'loud' })).toThrow(/LLAMA_ARG_VERBOSE must be one of/);
  });

  it('lists both in --help with their variables', () => {
    for (const text of ['-v, --verbose', '-lv, --log-verbosity N', 'LLAMA_ARG_VERBOSE', 'LLAMA_ARG_LOG_VERBOSITY, LLAMA_LOG_VERBOSITY']) {
      expect(HELP_TEXT).toContain(text);
    }
  });
});

describe('parseCli: --cors-origins', () => {
  it('reads a comma-separated list from the flag or LLAMA_ARG_CORS_ORIGINS; unset means any origin', () => {
    expect(serveOptions([]).corsOrigins).toBeUndefined();
    expect(serveOptions(['--cors-origins', 'http://a.example, http://b.example,']).corsOrigins).toEqual(['http://a.example', 'http://b.example']);
    expect(parse([], { LLAMA_ARG_CORS_ORIGINS: 'http://env.example' })).toMatchObject({ options: { corsOrigins: ['http://env.example'] } });
    expect(parse(['--cors-origins', 'http://flag.example'], { LLAMA_ARG_CORS_ORIGINS: 'http://env.example' })).toMatchObject({
      options: { corsOrigins: ['http://flag.example'] },
    });
  });

  it('reads "*" as any origin and refuses an empty list', () => {
    expect(serveOptions(['--cors-origins', '*']).corsOrigins).toBeUndefined();
    expect(serveOptions(['--cors-origins', 'http://a.example,*']).corsOrigins).toBeUndefined();
    expect(() => parse(['--cors-origins', ' , '])).toThrow(/--cors-origins must list at least one origin/);
  });

  it('lists it in --help with its variable', () => {
    expect(HELP_TEXT).toContain('--cors-origins LIST');
    expect(HELP_TEXT).toContain('LLAMA_ARG_CORS_ORIGINS');
  });
});

describe('parseCli: media flags', () => {
  it('reads --media-path, --max-images, --max-image-payload-size and MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1, only those set', () => {
    expect(serveOptions([]).media).toBeUndefined();
    expect(serveOptions(['--media-path', '/srv/media', '--max-images', '2', '--max-image-payload-size=4096']).media).toEqual({
      mediaPath: '/srv/media',
      maxImages: 2,
      maxImagePayloadBytes: 4096,
    });
    expect(parse([], { MLXCEL_ALLOW_PRIVATE_MEDIA_URLS: '1', LLAMA_ARG_MEDIA_PATH: '/m' })).toMatchObject({ options: { media: { allowPrivateUrls: true, mediaPath: '/m' } } });
    expect(parse([], { MLXCEL_ALLOW_PRIVATE_MEDIA_URLS: 'yes' })).toMatchObject({ options: { media: undefined } });
    expect(() => parse(['--max-image-payload-size', '0'])).toThrow(CliError);
    expect(HELP_TEXT).toContain('MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1');
  });

  it('reads --video-max-frames and MLXCEL_VIDEO_DIR_ALLOWLIST, a comma-separated list', () => {
    expect(serveOptions(['--video-max-frames', '4']).media).toEqual({ videoMaxFrames: 4 });
    expect(parse([], { MLXCEL_VIDEO_MAX_FRAMES: '6', MLXCEL_VIDEO_DIR_ALLOWLIST: '/srv/a, /srv/b,,' })).toMatchObject({ options: { media: { videoMaxFrames: 6, videoDirs: ['/srv/a', '/srv/b'] } } });
    expect(parse([], { MLXCEL_VIDEO_DIR_ALLOWLIST: ' , ' })).toMatchObject({ options: { media: undefined } });
    expect(() => parse(['--video-max-frames', '0'])).toThrow(CliError);
    expect(HELP_TEXT).toContain('MLXCEL_VIDEO_DIR_ALLOWLIST=DIR,...');
  });
});

describe('parseCli: model kinds the server cannot load yet', () => {
  const message = 'image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet; this server serves text generation, embeddings, reranking, speech to text and text to speech';

  it('accepts the REST reference\'s --image-model and MLXCEL_IMAGE_MODEL, and answers that image models are not supported yet', () => {
    expect(parse(['--image-model', '/m/flux'])).toEqual({ kind: 'unsupported', message });
    expect(parse(['--image-model=org/sdxl', '-m', '/m/chat'])).toEqual({ kind: 'unsupported', message });
    expect(parse([], { MLXCEL_IMAGE_MODEL: '/m/flux' })).toEqual({ kind: 'unsupported', message });
    expect(parse([], { MLXCEL_IMAGE_MODEL: '' })).toMatchObject({ kind: 'serve' });
    expect(() => parse(['--image-model'])).toThrow(CliError);
    expect(HELP_TEXT).toContain('--image-model DIR|REPO');
    expect(HELP_TEXT).toContain('(env: MLXCEL_IMAGE_MODEL)');
  });
});

describe('parseCli: audio models', () => {
  it('reads --stt-model and --tts-model (and their variables) as second models, and the shared audio queue flags', () => {
    const local = { kind: 'path-or-repo', text: '/m/kokoro' };
    expect(serveOptions(['--tts-model', '/m/kokoro']).ttsModel).toEqual(local);
    expect(parse([], { MLXCEL_TTS_MODEL: '/m/kokoro' })).toMatchObject({ kind: 'serve', options: { ttsModel: local } });
    expect(serveOptions(['--stt-model', '/m/whisper']).sttModel).toEqual({ kind: 'path-or-repo', text: '/m/whisper' });
    expect(() => parse(['--tts-model', ' '])).toThrow('--tts-model must name a directory or a Hub repo');
    expect(serveOptions(['--audio-queue-depth', '0', '--audio-request-timeout-secs', '5'])).toMatchObject({ audioQueueDepth: 0, audioRequestTimeoutSecs: 5 });
    expect(HELP_TEXT).toContain('--tts-model DIR|REPO');
  });
});

describe('parseCli: embedding flags', () => {
  it('reads --embedding/--embeddings, --embedding-model, --pooling and --embd-normalize, and their variables', () => {
    for (const flag of ['--embedding', '--embeddings']) expect(serveOptions([flag]).embeddings).toBe(true);
    const o = serveOptions(['--embedding-model', 'BAAI/bge-small-en-v1.5', '--pooling', 'cls', '--embd-normalize', '-1']);
    expect(o).toMatchObject({ embeddingModel: { kind: 'path-or-repo', text: 'BAAI/bge-small-en-v1.5' }, pooling: 'cls', embdNormalize: -1 });
    const env = parse([], { LLAMA_ARG_EMBEDDINGS: '1', LLAMA_ARG_POOLING: 'mean' });
    expect(env.kind === 'serve' && env.options).toMatchObject({ embeddings: true, pooling: 'mean' });
    expect(() => parse(['--pooling', 'max'])).toThrow(/--pooling must be one of mean, cls, last/);
    expect(() => parse(['--pooling', 'rank'])).toThrow(/--reranking/);
    expect(() => parse(['--embd-normalize', '-2'])).toThrow(CliError);
  });
});

describe('parseCli: reranking flags', () => {
  it('reads --reranking/--rerank and --reranker-model, and refuses --embeddings with --reranking', () => {
    for (const flag of ['--rerank', '--reranking']) expect(serveOptions([flag]).reranking).toBe(true);
    expect(serveOptions(['--reranker-model', '/m/bge-reranker']).rerankerModel).toEqual({ kind: 'path-or-repo', text: '/m/bge-reranker' });
    const env = parse([], { LLAMA_ARG_RERANKING: 'true' });
    expect(env.kind === 'serve' && env.options.reranking).toBe(true);
    expect(() => parse(['--embeddings', '--reranking'])).toThrow(/--embeddings or --reranking, not both/);
  });

  // llama-server's -rea/--reasoning: on and off are the server-wide enable_thinking; auto
  // (the default) leaves it to the template's thinking switch.
  it('reads --reasoning on|off|auto (LLAMA_ARG_REASONING) into the template kwargs', () => {
    expect(serveOptions(['--reasoning', 'on']).chatTemplateKwargs).toEqual({ enable_thinking: true });
    expect(serveOptions(['-rea', 'off']).chatTemplateKwargs).toEqual({ enable_thinking: false });
    expect(serveOptions(['--reasoning', '0', '--chat-template-kwargs', '{"preserve_thinking": true}']).chatTemplateKwargs).toEqual({ preserve_thinking: true, enable_thinking: false });
    expect(serveOptions(['--reasoning', 'auto']).chatTemplateKwargs).toBeUndefined();
    expect(serveOptions(['--reasoning', '-1']).chatTemplateKwargs).toBeUndefined();
    expect(parse([], { LLAMA_ARG_REASONING: 'enabled' })).toMatchObject({ options: { chatTemplateKwargs: { enable_thinking: true } } });
    expect(serveOptions(['--reasoning', 'on', '--chat-template-kwargs', '{"enable_thinking": true}']).chatTemplateKwargs).toEqual({ enable_thinking: true });
    expect(() => parse(['--reasoning', 'maybe'])).toThrow(new CliError('--reasoning must be on, off or auto, got "maybe"'));
    expect(() => parse(['--reasoning', 'off', '--chat-template-kwargs', '{"enable_thinking": true}'])).toThrow(/--reasoning off contradicts --chat-template-kwargs' "enable_thinking": true/);
    expect(HELP_TEXT).toMatch(/-rea, --reasoning on\|off\|auto/);
  });
});

