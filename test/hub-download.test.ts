// The Hub downloader (src/hub/) against a local stand-in Hub: the Python cache layout, only
// the loader's files, resume after a dropped connection, hash verification, offline use,
// and one clear error per failure.
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { HubError } from '../src/hub/errors.js';
import { DownloadProgress } from '../src/hub/progress.js';
import { parseRepoRef } from '../src/hub/repo-ref.js';
import { resolveModel } from '../src/hub/resolve-model.js';
import { hubSettings, type HubSettings } from '../src/hub/settings.js';
import { snapshotFromHub, type SnapshotOptions } from '../src/hub/snapshot.js';
import { etagOf, ggufRepo, HubStandIn, STAND_IN_TOKEN, storiesRepo, type StandInRepo } from './helpers/hub-stand-in.js';
import { STORIES_DIR } from './helpers/stories-expected.js';

const STORIES = storiesRepo('test-org/stories260k');
const SHARDED = storiesRepo('test-org/stories260k-sharded', { sharded: true });
const GATED = { ...storiesRepo('test-org/gated'), gated: true };
const PRIVATE = { ...storiesRepo('test-org/private'), private: true };
const GGUF = ggufRepo('test-org/gguf-only');
const HUGE: StandInRepo = { ...storiesRepo('test-org/huge'), claimedSizes: { 'model.safetensors': 2 ** 60 } };
const LOADER_FILES = ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'];

let hub: HubStandIn;
let home: string;
let lines: string[];

beforeAll(async () => {
  hub = await HubStandIn.start([STORIES, SHARDED, GATED, PRIVATE, GGUF, HUGE]);
});
afterAll(async () => {
  await hub.stop();
});
beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), 'mlxcel-hf-home-'));
  lines = [];
  hub.requests.length = 0;
  hub.faults.length = 0;
});
afterEach(() => {
  rmSync(home, { recursive: true, force: true });
});

const settings = (env: Record<string, string> = {}, token?: string): HubSettings =>
  hubSettings({ HF_HOME: home, HF_ENDPOINT: hub.url, ...env }, token);

const options = (extra: Partial<SnapshotOptions> = {}): SnapshotOptions => ({
  out: { write: (text: string) => lines.push(text) },
  prefix: 'test: ',
  log: (line) => lines.push(line),
  warn: (line) => lines.push(`warning: ${line}`),
  transfer: { retries: 0, retryDelayMs: 10 },
  ...extra,
});

const download = (repo: string, s = settings(), o = options()) => snapshotFromHub(parseRepoRef(repo)!, s, o);

/** The HubError message a download fails with. */
async function failure(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(HubError);
  return (err as Error).message;
}

const repoDir = (repo: string) => join(home, 'hub', `models--${repo.replace('/', '--')}`);
const file = (repo: StandInRepo, path: string) => repo.files.find((f) => f.path === path)!;

describe('Hub downloads', () => {
  it('fetches only the loader files into the Python cache layout', async () => {
    const snapshot = await download(STORIES.id);
    const dir = repoDir(STORIES.id);
    expect(snapshot).toEqual({ dir: join(dir, 'snapshots', STORIES.commit), commit: STORIES.commit });
    expect(readFileSync(join(dir, 'refs', 'main'), 'utf8')).toBe(STORIES.commit);
    expect(readdirSync(snapshot.dir).sort()).toEqual(LOADER_FILES);
    for (const name of LOADER_FILES) {
      const link = join(snapshot.dir, name);
      const etag = etagOf(file(STORIES, name));
      // A relative symlink into blobs/, named by the Hub's etag: sha256 for LFS, git oid otherwise.
      expect(lstatSync(link).isSymbolicLink()).toBe(true);
      expect(readlinkSync(link)).toBe(`../../blobs/${etag}`);
      expect(etag).toHaveLength(name.endsWith('.safetensors') ? 64 : 40);
      expect(readFileSync(link).equals(readFileSync(join(STORIES_DIR, name)))).toBe(true);
    }
    expect(readdirSync(join(dir, 'blobs')).filter((b) => b.includes('.'))).toEqual([]);
    // README, expected.json and the .bin/.gguf/.onnx copies were never requested.
    const fetched = hub.requests.filter((r) => r.path.includes('/resolve/')).map((r) => r.path.split('/').pop()).sort();
    expect(fetched).toEqual(LOADER_FILES);
    expect(lines.some((l) => /^downloading test-org\/stories260k \(commit [0-9a-f]{7}\) from http:\/\/127\.0\.0\.1:\d+: 5 files, 1\.0\d MB, into /.test(l))).toBe(true);
  });

  it('starts from the cache the second time, transferring nothing', async () => {
    await download(STORIES.id);
    hub.requests.length = 0;
    lines = [];
    await download(STORIES.id);
    expect(hub.requests.filter((r) => r.path.includes('/resolve/'))).toEqual([]);
    expect(lines).toEqual([expect.stringMatching(/^test-org\/stories260k: commit [0-9a-f]{7} from the cache, /)]);
  });

  it('uses a blob another tool already fetched, only adding the link', async () => {
    const blobs = join(repoDir(STORIES.id), 'blobs');
    mkdirSync(blobs, { recursive: true });
    const weights = file(STORIES, 'model.safetensors');
    writeFileSync(join(blobs, etagOf(weights)), weights.data);
    await download(STORIES.id);
    expect(hub.transfersOf('model.safetensors')).toEqual([]);
    expect(readlinkSync(join(repoDir(STORIES.id), 'snapshots', STORIES.commit, 'model.safetensors'))).toBe(`../../blobs/${etagOf(weights)}`);
  });

  it('fetches the shards the index names', async () => {
    const { dir } = await download(SHARDED.id);
    expect(readdirSync(dir).sort()).toEqual(
      ['config.json', 'generation_config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json', 'tokenizer.json', 'tokenizer_config.json'],
    );
  });

  it('resumes a transfer the connection dropped half way through, and verifies it', async () => {
    const weights = file(STORIES, 'model.safetensors');
    hub.faults.push({ path: 'model.safetensors', kind: 'drop', times: 1 });
    expect(await failure(download(STORIES.id))).toMatch(/^download of test-org\/stories260k\/model\.safetensors interrupted \(.+\) at .+ of 1\.04 MB; start again to resume it$/);
    const blob = join(repoDir(STORIES.id), 'blobs', etagOf(weights));
    expect(existsSync(blob)).toBe(false);
    const kept = readFileSync(`${blob}.incomplete`).length;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(weights.data.length);

    const { dir } = await download(STORIES.id);
    const transfers = hub.transfersOf('model.safetensors');
    expect(transfers.at(-1)?.range).toBe(`bytes=${kept}-`);
    expect(readFileSync(join(dir, 'model.safetensors')).equals(weights.data)).toBe(true);
    expect(existsSync(`${blob}.incomplete`)).toBe(false);
  });

  it('retries a dropped transfer within one start', async () => {
    hub.faults.push({ path: 'model.safetensors', kind: 'drop', times: 2 });
    const { dir } = await download(STORIES.id, settings(), options({ transfer: { retries: 2, retryDelayMs: 10 } }));
    expect(hub.transfersOf('model.safetensors').map((r) => r.range !== undefined)).toEqual([false, true, true]);
    expect(readFileSync(join(dir, 'model.safetensors')).equals(file(STORIES, 'model.safetensors').data)).toBe(true);
  });

  it('retries a transfer the server answered 503, and reports one that keeps failing', async () => {
    hub.faults.push({ path: 'tokenizer.json', kind: 'busy', times: 1 });
    await download(STORIES.id, settings(), options({ transfer: { retries: 1, retryDelayMs: 10 } }));
    expect(hub.transfersOf('tokenizer.json')).toHaveLength(2);
    rmSync(join(home, 'hub'), { recursive: true });
    hub.faults.push({ path: 'tokenizer.json', kind: 'busy', times: 2 });
    expect(await failure(download(STORIES.id, settings(), options({ transfer: { retries: 1, retryDelayMs: 10 } })))).toBe(
      'download of test-org/stories260k/tokenizer.json interrupted (HTTP 503) at 0 B of 14.8 kB; start again to resume it',
    );
  });

  it('refuses a file with the wrong hash and fetches it again', async () => {
    hub.faults.push({ path: 'model.safetensors', kind: 'corrupt', times: 1 }, { path: 'tokenizer.json', kind: 'corrupt', times: 1 });
    const { dir } = await download(STORIES.id);
    expect(hub.transfersOf('model.safetensors')).toHaveLength(2);
    expect(hub.transfersOf('tokenizer.json')).toHaveLength(2);
    expect(readFileSync(join(dir, 'model.safetensors')).equals(file(STORIES, 'model.safetensors').data)).toBe(true);
    expect(readFileSync(join(dir, 'tokenizer.json')).equals(file(STORIES, 'tokenizer.json').data)).toBe(true);
  });

  it('gives up on a file that keeps failing verification, leaving nothing that looks complete', async () => {
    hub.faults.push({ path: 'model.safetensors', kind: 'corrupt', times: 2 });
    expect(await failure(download(STORIES.id))).toMatch(/^test-org\/stories260k\/model\.safetensors failed verification twice \(1\.04 MB with sha256 [0-9a-f]{64}, expected 1\.04 MB with [0-9a-f]{64}\)$/);
    const blobs = readdirSync(join(repoDir(STORIES.id), 'blobs'));
    expect(blobs).not.toContain(etagOf(file(STORIES, 'model.safetensors')));
    expect(blobs.filter((b) => b.endsWith('.incomplete'))).toEqual([]);
  });

  it('serves a cached repo offline without any request, and names a repo it does not have', async () => {
    const online = await download(STORIES.id);
    hub.requests.length = 0;
    expect(await download(STORIES.id, settings({ HF_HUB_OFFLINE: '1' }))).toEqual(online);
    expect(hub.requests).toEqual([]);
    expect(await failure(download(SHARDED.id, settings({ HF_HUB_OFFLINE: '1' })))).toBe(
      `test-org/stories260k-sharded is not in the cache at ${repoDir(SHARDED.id)}, and HF_HUB_OFFLINE is set: unset it to download`,
    );
  });

  it('falls back to the cache, in one line, when the Hub cannot be reached', async () => {
    await download(STORIES.id);
    const closed = await HubStandIn.start([]);
    const unreachable = closed.url;
    await closed.stop();
    lines = [];
    const snapshot = await download(STORIES.id, settings({ HF_ENDPOINT: unreachable }));
    expect(snapshot.commit).toBe(STORIES.commit);
    expect(lines).toEqual([`warning: cannot reach ${unreachable} (ECONNREFUSED); using the cached commit ${STORIES.commit.slice(0, 7)} of test-org/stories260k`]);
    expect(await failure(download(SHARDED.id, settings({ HF_ENDPOINT: unreachable })))).toBe(
      `cannot reach ${unreachable} (ECONNREFUSED) to download test-org/stories260k-sharded, and it is not in the cache at ${repoDir(SHARDED.id)}`,
    );
  });

  it('says what is wrong with a repo it cannot serve', async () => {
    expect(await failure(download('test-org/no-such-model'))).toBe(
      `model test-org/no-such-model not found on ${hub.url} (HTTP 401); if it is private, set HF_TOKEN (or --hf-token) to a token that can read it`,
    );
    expect(await failure(download(PRIVATE.id))).toMatch(/^model test-org\/private not found .*set HF_TOKEN/);
    expect(await failure(download(GATED.id))).toBe(
      `model test-org/gated is gated: accept its conditions at ${hub.url}/test-org/gated, then set HF_TOKEN (or --hf-token) to a token of that account`,
    );
    expect(await failure(download(`${STORIES.id}:no-such-branch`))).toBe(`revision "no-such-branch" not found in test-org/stories260k on ${hub.url}`);
    expect(await failure(download(GGUF.id))).toBe(
      'test-org/gguf-only has no weights mlxcel-server can load: only GGUF files (model-Q4_K_M.gguf, model-Q8_0.gguf); mlxcel-server loads safetensors (model.safetensors, or model.safetensors.index.json and its shards)',
    );
    expect(await failure(download(HUGE.id))).toMatch(/^not enough disk space for test-org\/huge: 1\d+ TB to download, .+ free in /);
    expect(await failure(download(GATED.id, settings({}, 'not-a-token')))).toBe('the token in --hf-token / HF_TOKEN must start with "hf_"');
  });

  it('reads gated and private repos with a token, from --hf-token or HF_TOKEN', async () => {
    await download(GATED.id, settings({}, STAND_IN_TOKEN));
    await download(PRIVATE.id, settings({ HF_TOKEN: STAND_IN_TOKEN }));
    const auth = hub.requests.filter((r) => r.path.includes('/resolve/')).map((r) => r.authorization);
    expect(auth.length).toBeGreaterThan(0);
    expect(new Set(auth)).toEqual(new Set([`Bearer ${STAND_IN_TOKEN}`]));
  });

  it('records a tag in refs/ and resolves it offline', async () => {
    const tagged: StandInRepo = { ...storiesRepo('test-org/tagged'), tags: ['v1.0'] };
    const standIn = await HubStandIn.start([tagged]);
    try {
      const s = settings({ HF_ENDPOINT: standIn.url });
      const { dir } = await download('test-org/tagged:v1.0', s);
      expect(readFileSync(join(repoDir(tagged.id), 'refs', 'v1.0'), 'utf8')).toBe(tagged.commit);
      expect(existsSync(join(repoDir(tagged.id), 'refs', 'main'))).toBe(false);
      expect((await download('test-org/tagged:v1.0', settings({ HF_HUB_OFFLINE: '1' }))).dir).toBe(dir);
      expect((await download(`test-org/tagged:${tagged.commit}`, settings({ HF_HUB_OFFLINE: '1' }))).dir).toBe(dir);
    } finally {
      await standIn.stop();
    }
  });
});

describe('resolveModel', () => {
  it('takes a directory as it is and a repo id from the Hub', async () => {
    expect(await resolveModel({ kind: 'path-or-repo', text: STORIES_DIR }, settings(), options())).toEqual({ dir: STORIES_DIR });
    expect(hub.requests).toEqual([]);
    const model = await resolveModel({ kind: 'path-or-repo', text: STORIES.id }, settings(), options());
    expect(model).toEqual({ dir: join(repoDir(STORIES.id), 'snapshots', STORIES.commit), id: STORIES.id });
    expect(await failure(resolveModel({ kind: 'path-or-repo', text: './no/such/dir' }, settings(), options()))).toBe(
      '--model ./no/such/dir: no such directory, and not a Hub repo id (org/name[:revision])',
    );
  });
});

describe('download progress', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('on a terminal, redraws one bar with bytes, rate and ETA, within the terminal width', () => {
    vi.useFakeTimers();
    for (const columns of [100, 80, 30]) {
      const written: string[] = [];
      const progress = new DownloadProgress({ write: (t: string) => written.push(t), isTTY: true, columns }, 'x: ', 'mlx-community/Qwen3-0.6B-4bit', 2_000_000_000, 3);
      progress.add(500_000_000);
      vi.advanceTimersByTime(1000);
      progress.finish();
      const last = written.at(-2)!;
      expect(last.startsWith('\r') && last.endsWith('\x1b[K')).toBe(true);
      const line = last.slice(1, -3);
      expect(line.length).toBeLessThan(columns);
      if (columns === 100) expect(line).toMatch(/^mlx-community\/Qwen3-0\.6B-4bit \[#{5,}\.+\]  25% 500 MB \/ 2\.00 GB \d+ MB\/s ETA \d+s *$/);
      if (columns === 80) expect(line).toMatch(/^mlx-community\/Qwen3-0\.~ \[###\.{7}\]  25% 500 MB \/ 2\.00 GB/);
      if (columns === 30) expect(line).toBe('mlx-community/Qwen3-0.6B-4bit');
      expect(written.at(-1)).toBe('\n');
    }
  });

  it('in a log, writes a plain line every few seconds', () => {
    vi.useFakeTimers();
    const written: string[] = [];
    const progress = new DownloadProgress({ write: (t: string) => written.push(t) }, 'x: ', 'org/model', 2_000_000_000, 3, 1_000_000_000);
    progress.add(100_000_000);
    vi.advanceTimersByTime(4999);
    expect(written).toEqual([]);
    vi.advanceTimersByTime(1);
    progress.fileDone();
    progress.finish();
    expect(written).toEqual(['x: downloading org/model: 55% (1.10 GB / 2.00 GB, file 0 of 3 done), 20.0 MB/s, ETA 45s\n']);
    expect(progress.snapshot()).toEqual({ stage: 'download', repo: 'org/model', files_done: 1, files_total: 3, bytes_done: 1_100_000_000, bytes_total: 2_000_000_000 });
  });
});
