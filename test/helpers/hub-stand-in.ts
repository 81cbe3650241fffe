// A stand-in for the Hugging Face Hub on 127.0.0.1, answering what @huggingface/hub and our
// downloader ask of it, the way the Hub does: model info at a revision, the tree listing
// (git oid, LFS oid and size), and resolve (ETag, X-Repo-Commit, X-Linked-Size/-Etag; LFS
// files through a redirect to a "CDN" path; HTTP Range). Errors carry the Hub's X-Error-Code.
// Faults can be armed per file: drop the connection half way, corrupt the bytes, hold the
// transfer half way until released, or answer 503 as a busy CDN does.
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSafetensorsBytes, readSafetensorsHeader, writeSafetensors, type SafetensorsWriteTensor } from '../../src/models/safetensors.js';
import { STORIES_DIR } from './stories-expected.js';

export interface StandInFile {
  path: string;
  data: Buffer;
  /** Stored with Git LFS (weights): listed with an lfs sha256, served through the CDN path. */
  lfs: boolean;
}

export interface StandInRepo {
  id: string;
  commit: string;
  files: StandInFile[];
  /** Resolve needs the stand-in's token (the listing and info stay public, as on the Hub). */
  gated?: boolean;
  /** Everything needs the token; without it the repo looks absent. */
  private?: boolean;
  /** Branches and tags besides main, each at the commit. */
  tags?: string[];
  /** Sizes the listing claims instead of the real ones (a disk-space check). */
  claimedSizes?: Record<string, number>;
}

export interface Fault {
  path: string;
  kind: 'drop' | 'corrupt' | 'hold' | 'busy';
  /** How many transfers of the file it spoils. */
  times: number;
}

export interface LoggedRequest {
  method: string;
  path: string;
  range?: string;
  authorization?: string;
}

export const STAND_IN_TOKEN = 'hf_standin_token';

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');
const gitOid = (data: Buffer) => createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
const lfsPointer = (data: Buffer) => Buffer.from(`version https://git-lfs.github.com/spec/v1\noid sha256:${sha256(data)}\nsize ${data.length}\n`);
/** The etag the Hub gives a file, which names its blob in the cache. */
export const etagOf = (file: StandInFile) => (file.lfs ? sha256(file.data) : gitOid(file.data));

export class HubStandIn {
  readonly requests: LoggedRequest[] = [];
  readonly faults: Fault[] = [];
  private held: (() => void)[] = [];

  private constructor(
    private readonly server: Server,
    readonly url: string,
    private readonly repos: StandInRepo[],
  ) {}

  static async start(repos: StandInRepo[]): Promise<HubStandIn> {
    let standIn!: HubStandIn;
    const server = createServer((req, res) => standIn.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    standIn = new HubStandIn(server, `http://127.0.0.1:${port}`, repos);
    return standIn;
  }

  /** Lets held transfers finish. */
  release(): void {
    for (const go of this.held.splice(0)) go();
  }

  /** Transfers the stand-in has held half way so far. */
  get holding(): number {
    return this.held.length;
  }

  async stop(): Promise<void> {
    this.release();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  /** Requests for a file's contents (resolve or CDN), by repo path. */
  transfersOf(path: string): LoggedRequest[] {
    return this.requests.filter((r) => r.path.includes('/resolve/') && r.path.endsWith(`/${path}`));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.url);
    const path = decodeURIComponent(url.pathname);
    this.requests.push({ method: req.method ?? 'GET', path, range: req.headers.range, authorization: req.headers.authorization });
    const authorized = req.headers.authorization === `Bearer ${STAND_IN_TOKEN}`;
    let m: RegExpExecArray | null;
    if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(path))) {
      const repo = this.visible(m[1]!, authorized, res);
      const commit = repo && this.commitOf(repo, m[2]!, res);
      if (!repo || !commit) return;
      json(res, 200, {
        _id: sha256(repo.id).slice(0, 24),
        id: repo.id,
        sha: commit,
        private: !!repo.private,
        gated: repo.gated ? 'auto' : false,
        downloads: 0,
        likes: 0,
        lastModified: '2024-01-01T00:00:00.000Z',
        pipeline_tag: 'text-generation',
        siblings: repo.files.map((f) => ({ rfilename: f.path })),
      });
    } else if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/.exec(path))) {
      const repo = this.visible(m[1]!, authorized, res);
      if (!repo || !this.commitOf(repo, m[2]!, res)) return;
      json(
        res,
        200,
        repo.files.map((f) => {
          const size = repo.claimedSizes?.[f.path] ?? f.data.length;
          return f.lfs
            ? { type: 'file', oid: gitOid(lfsPointer(f.data)), size, path: f.path, lfs: { oid: sha256(f.data), size, pointerSize: lfsPointer(f.data).length } }
            : { type: 'file', oid: gitOid(f.data), size, path: f.path };
        }),
      );
    } else if ((m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path))) {
      const repo = this.visible(m[1]!, authorized, res);
      const commit = repo && this.commitOf(repo, m[2]!, res);
      if (!repo || !commit) return;
      if (repo.gated && !authorized) {
        error(res, 401, 'GatedRepo', `Access to model ${repo.id} is restricted. You must have access to it and be authenticated to access it. Please log in.`);
        return;
      }
      const file = repo.files.find((f) => f.path === m![3]);
      if (!file) {
        error(res, 404, 'EntryNotFound', `${m[3]} does not exist on "${m[2]}"`);
        return;
      }
      const headers = { 'X-Repo-Commit': commit, ETag: `"${file.lfs ? gitOid(lfsPointer(file.data)) : etagOf(file)}"` };
      if (file.lfs) {
        res.writeHead(302, { ...headers, 'X-Linked-Size': file.data.length, 'X-Linked-Etag': `"${etagOf(file)}"`, Location: `/cdn/${etagOf(file)}?path=${encodeURIComponent(file.path)}` });
        res.end();
        return;
      }
      this.send(req, res, file, headers);
    } else if ((m = /^\/cdn\/([0-9a-f]{64})$/.exec(path))) {
      const file = this.repos.flatMap((r) => r.files).find((f) => f.lfs && etagOf(f) === m![1]);
      if (!file) error(res, 404, 'EntryNotFound', 'no such object');
      else this.send(req, res, file, { ETag: `"${etagOf(file)}"` });
    } else {
      error(res, 404, undefined, `no route ${path}`);
    }
  }

  /** The repo, or undefined after answering as the Hub does for one the caller cannot see. */
  private visible(id: string, authorized: boolean, res: ServerResponse): StandInRepo | undefined {
    const repo = this.repos.find((r) => r.id === id);
    if (repo && (!repo.private || authorized)) return repo;
    // The Hub answers 401 to an anonymous caller (the repo might be private), 404 to a signed-in one.
    error(res, authorized ? 404 : 401, 'RepoNotFound', 'Repository not found');
    return undefined;
  }

  private commitOf(repo: StandInRepo, revision: string, res: ServerResponse): string | undefined {
    if (revision === repo.commit || revision === 'main' || revision === 'HEAD' || repo.tags?.includes(revision)) return repo.commit;
    error(res, 404, 'RevisionNotFound', `Invalid rev id: ${revision}`);
    return undefined;
  }

  /** The file's bytes (from a Range start), with the armed fault if there is one. */
  private send(req: IncomingMessage, res: ServerResponse, file: StandInFile, headers: Record<string, string>): void {
    const size = file.data.length;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const start = range ? Number(range[1]) : 0;
    if (start >= size && size > 0) {
      res.writeHead(416, { 'Content-Range': `bytes */${size}` });
      res.end();
      return;
    }
    const fault = this.faults.find((f) => f.path === file.path && f.times > 0);
    if (fault) fault.times--;
    if (fault?.kind === 'busy') {
      error(res, 503, undefined, 'Service Unavailable');
      return;
    }
    let body = file.data.subarray(start);
    res.writeHead(range ? 206 : 200, {
      ...headers,
      'Accept-Ranges': 'bytes',
      'Content-Type': 'application/octet-stream',
      'Content-Length': body.length,
      ...(range ? { 'Content-Range': `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const half = Math.floor(body.length / 2);
    switch (fault?.kind) {
      case 'corrupt':
        body = Buffer.from(body);
        body[half] ^= 0xff;
        res.end(body);
        return;
      case 'drop':
        res.write(body.subarray(0, half), () => setTimeout(() => res.socket?.destroy(), 20));
        return;
      case 'hold':
        res.write(body.subarray(0, half));
        this.held.push(() => res.end(body.subarray(half)));
        return;
      default:
        res.end(body);
    }
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

function error(res: ServerResponse, status: number, code: string | undefined, message: string): void {
  res.writeHead(status, { 'Content-Type': 'application/json', ...(code ? { 'X-Error-Code': code, 'X-Error-Message': message } : {}) });
  res.end(JSON.stringify({ error: message }));
}

const isLfs = (path: string) => /\.(safetensors|bin|gguf|onnx|pt)$/.test(path);
const commitFor = (id: string) => createHash('sha1').update(`commit ${id}`).digest('hex');

/**
 * A repo of models/stories260k's files (README and expected.json included: a real repo has
 * more than the loader reads), plus a PyTorch, a GGUF and an ONNX copy of the weights the
 * downloader must leave alone. `sharded`: the weights as two safetensors shards and an index.
 */
export function storiesRepo(id: string, options: { sharded?: boolean } = {}): StandInRepo {
  const files: StandInFile[] = readdirSync(STORIES_DIR)
    .filter((name) => !(options.sharded && name === 'model.safetensors'))
    .map((name) => ({ path: name, data: readFileSync(join(STORIES_DIR, name)), lfs: isLfs(name) }));
  if (options.sharded) files.push(...shardedWeights());
  const weights = readFileSync(join(STORIES_DIR, 'model.safetensors'));
  files.push(
    { path: 'pytorch_model.bin', data: Buffer.concat([Buffer.from('PK'), weights.subarray(0, 4096)]), lfs: true },
    { path: 'stories260k-f32.gguf', data: Buffer.concat([Buffer.from('GGUF'), weights.subarray(0, 4096)]), lfs: true },
    { path: 'onnx/model.onnx', data: weights.subarray(0, 2048), lfs: true },
  );
  return { id, commit: commitFor(id), files };
}

/** A repo with only GGUF weights. */
export function ggufRepo(id: string): StandInRepo {
  const config = readFileSync(join(STORIES_DIR, 'config.json'));
  return {
    id,
    commit: commitFor(id),
    files: [
      { path: 'README.md', data: Buffer.from('# GGUF only\n'), lfs: false },
      { path: 'config.json', data: config, lfs: false },
      { path: 'model-Q4_K_M.gguf', data: Buffer.from('GGUF q4'), lfs: true },
      { path: 'model-Q8_0.gguf', data: Buffer.from('GGUF q8'), lfs: true },
    ],
  };
}

/** stories260k's tensors split in two shards with a model.safetensors.index.json naming them. */
function shardedWeights(): StandInFile[] {
  const source = join(STORIES_DIR, 'model.safetensors');
  const header = readSafetensorsHeader(source);
  const names = Object.keys(header.tensors);
  const dir = mkdtempSync(join(tmpdir(), 'stand-in-shards-'));
  try {
    const halves = [names.slice(0, names.length >> 1), names.slice(names.length >> 1)];
    const shardNames = halves.map((_, i) => `model-0000${i + 1}-of-00002.safetensors`);
    const weightMap: Record<string, string> = {};
    const shards = halves.map((group, i) => {
      const tensors: SafetensorsWriteTensor[] = group.map((name) => {
        const info = header.tensors[name]!;
        if (info.dtype !== 'F32') throw new Error(`stories260k tensor ${name} is ${info.dtype}, expected F32`);
        weightMap[name] = shardNames[i]!;
        return { name, dtype: 'F32', shape: info.shape, data: readSafetensorsBytes(source, header, name) };
      });
      writeSafetensors(join(dir, shardNames[i]!), tensors, { format: 'pt' });
      return { path: shardNames[i]!, data: readFileSync(join(dir, shardNames[i]!)), lfs: true };
    });
    const index = { metadata: { total_size: shards.reduce((n, s) => n + s.data.length, 0) }, weight_map: weightMap };
    return [{ path: 'model.safetensors.index.json', data: Buffer.from(JSON.stringify(index, null, 2)), lfs: false }, ...shards];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
