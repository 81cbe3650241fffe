// Where the Hub is and who we are to it, read from the same variables Python's
// huggingface_hub reads, so both tools share one cache and one login.
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

type Env = Readonly<Record<string, string | undefined>>;

export interface HubSettings {
  /** HF_ENDPOINT: the Hub, a mirror, or a stand-in in tests. No trailing slash. */
  endpoint: string;
  /** --hf-token, else HF_TOKEN, else the file `huggingface-cli login` writes. */
  token?: string;
  /** The hub cache: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. */
  cacheDir: string;
  /** HF_HUB_OFFLINE: use the cache, never the network. */
  offline: boolean;
}

const DEFAULT_ENDPOINT = 'https://huggingface.co';

export function hubSettings(env: Env, token?: string): HubSettings {
  const set = (name: string) => (env[name] !== undefined && env[name] !== '' ? env[name] : undefined);
  const hfHome = set('HF_HOME') ?? join(set('XDG_CACHE_HOME') ?? join(homedir(), '.cache'), 'huggingface');
  return {
    endpoint: (set('HF_ENDPOINT') ?? DEFAULT_ENDPOINT).replace(/\/+$/, ''),
    token: token ?? set('HF_TOKEN') ?? storedToken(set('HF_TOKEN_PATH') ?? join(hfHome, 'token')),
    cacheDir: set('HF_HUB_CACHE') ?? set('HUGGINGFACE_HUB_CACHE') ?? join(hfHome, 'hub'),
    offline: ['1', 'on', 'yes', 'true'].includes((set('HF_HUB_OFFLINE') ?? '').toLowerCase()),
  };
}

function storedToken(path: string): string | undefined {
  if (!existsSync(path)) return undefined;
  const token = readFileSync(path, 'utf8').trim();
  return token === '' ? undefined : token;
}
