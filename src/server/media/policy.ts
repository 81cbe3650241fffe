// What bounds the media a request may bring: the server's media flags, with their defaults.

export interface MediaPolicy {
  /** --media-path: the root local files are read under; undefined refuses local paths. */
  mediaPath?: string;
  /** MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1: remote URLs may reach non-public addresses. */
  allowPrivateUrls: boolean;
  /** --max-images: image and video parts per request. */
  maxImages: number;
  /** --max-image-payload-size: bytes of one encoded image or video, however it arrives. */
  maxImagePayloadBytes: number;
  /** MLXCEL_VIDEO_DIR_ALLOWLIST, read at startup: the directories local video paths may name; none refuses them. */
  videoDirs: readonly string[];
  /** --video-max-frames: the most frames one video part is sampled into. */
  videoMaxFrames: number;
}

export const DEFAULT_MEDIA_POLICY: MediaPolicy = { allowPrivateUrls: false, maxImages: 8, maxImagePayloadBytes: 10 * 1024 * 1024, videoDirs: [], videoMaxFrames: 16 };

/** The policy from the media flags that were set; the rest keep DEFAULT_MEDIA_POLICY's values. */
export function mediaPolicy(overrides: Partial<MediaPolicy> = {}): MediaPolicy {
  const defined = Object.entries(overrides).filter(([, v]) => v !== undefined);
  return { ...DEFAULT_MEDIA_POLICY, ...Object.fromEntries(defined) };
}

/** The JSON body limit without media: prompts, conversations and tool definitions. */
const TEXT_BODY_BYTES = 32 * 1024 * 1024;

/** Room for the text and for --max-images data URIs (images or videos) of --max-image-payload-size each (base64: 4 bytes per 3). */
export function jsonBodyLimit(policy: MediaPolicy): number {
  return TEXT_BODY_BYTES + policy.maxImages * Math.ceil(policy.maxImagePayloadBytes / 3) * 4;
}
