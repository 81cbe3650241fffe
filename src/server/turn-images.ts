// The media parts of a chat turn. A model with an image encoder (Engine.vision) takes image
// parts, and video parts as their frames sampled with ffmpeg (./media/video.ts), each frame
// an image in order: each image becomes the model's image marker in the text the template
// renders (joined with the message's text parts as text parts join), the marker expands to
// the image's placeholder tokens, and the images are fetched under the media policy
// (./media/), decoded, and encoded into the soft tokens that replace those placeholders (a
// picture seen lately, by its pixels' hash, is not encoded again; the prompt cache knows it
// by that hash too). Everything else, and images or video for a model without an encoder,
// is refused from the parts alone, before anything is fetched: 501 for the media kinds the
// REST reference documents, 400 for other part types.
import type { ChatMessage, ContentPart, OtherContentPart } from '../chat/template.js';
import type { PromptImage } from '../engine/types.js';
import type { EncodedImage, VisionEncoder } from '../models/vision-layers.js';
import { ApiError, badRequest } from './errors.js';
import { loadImage, videoBytes } from './media/acquire.js';
import type { DecodedImage } from './media/image.js';
import { sampleVideo, videoTools } from './media/video.js';
import type { ServedModel } from './model-state.js';

/** The media a content part carries, as a refusal names it; video_frames is a video part once sampled (sampleVideos). */
const MEDIA_KINDS: Readonly<Record<string, string>> = { image_url: 'image', video_url: 'video', video_frames: 'video', input_audio: 'audio' };

const MEDIA_HINTS: Readonly<Record<string, string>> = {
  image: 'the loaded model takes text only; serve a vision-language checkpoint (Gemma 3 with a vision_config, or Qwen2.5-VL) for images',
  video: 'the loaded model takes text only; serve a vision-language checkpoint (Gemma 3 with a vision_config, or Qwen2.5-VL) for video',
  audio: 'the loaded model takes text only; no audio-capable chat model is supported yet',
};

/** A video part's frames, in order, standing for the video_url part it was sampled from. */
interface VideoFramesPart extends OtherContentPart {
  type: 'video_frames';
  frames: DecodedImage[];
}

const parts = (messages: ChatMessage[]): ContentPart[] => messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));

/**
 * The number of the turn's image and video parts; refuses what the loaded model cannot
 * take (a video also when ffmpeg is not on PATH), and more parts than --max-images (a
 * video counts as one). Video with audio is refused for every model, as the REST
 * reference says.
 */
export function countMedia(model: ServedModel, messages: ChatMessage[]): number {
  const all = parts(messages);
  const types = new Set(all.map((p) => p.type));
  if (types.has('video_url') && types.has('input_audio')) throw badRequest('Combined video and audio inputs are not supported');
  let count = 0;
  for (const part of all) {
    if (part.type === 'text') continue;
    const kind = MEDIA_KINDS[part.type];
    if (kind === undefined) throw badRequest(`the loaded model takes text only; "${part.type}" input is not supported`);
    if (kind === 'audio' || !model.engine.vision) throw new ApiError(501, 'not_supported_error', `${kind} input is not supported - hint: ${MEDIA_HINTS[kind]}`);
    if (part.type === 'video_url' && !videoTools()) throw new ApiError(501, 'not_supported_error', 'video input is not supported - hint: install ffmpeg: video frames are sampled with ffmpeg and ffprobe, which are not on PATH');
    count++;
  }
  const { maxImages } = model.media;
  const what = types.has('video_url') || types.has('video_frames') ? 'images and videos' : 'images';
  if (count > maxImages) throw badRequest(`the conversation has ${count} ${what}; at most ${maxImages} are allowed per request (--max-images)`);
  return count;
}

/**
 * The messages with each video part sampled into its frames (at the part's fps, at most
 * --video-max-frames); the same array when there is no video. Refuses first what
 * countMedia refuses.
 */
export async function sampleVideos(model: ServedModel, messages: ChatMessage[], signal?: AbortSignal): Promise<ChatMessage[]> {
  if (!parts(messages).some((p) => p.type === 'video_url')) return messages;
  countMedia(model, messages);
  const tools = videoTools()!;
  const sample = async (part: OtherContentPart): Promise<VideoFramesPart> => {
    const { url, fps } = part.video_url as { url: string; fps?: number };
    const frames = await sampleVideo(tools, await videoBytes(url, model.media), { fps, maxFrames: model.media.videoMaxFrames, signal });
    return { type: 'video_frames', frames };
  };
  return Promise.all(
    messages.map(async (m) =>
      Array.isArray(m.content) && m.content.some((p) => p.type === 'video_url')
        ? { ...m, content: await Promise.all(m.content.map((p) => (p.type === 'video_url' ? sample(p) : p))) }
        : m,
    ),
  );
}

/**
/**
 * The messages with each image part as the encoder's marker, a text part, and each video
 * part as one marker per frame; a video not yet sampled as one, the fewest it yields.
 */
export function withImageMarkers(messages: ChatMessage[], vision: VisionEncoder): ChatMessage[] {
  const marker = { type: 'text' as const, text: vision.marker };
  const markers = (p: ContentPart): ContentPart[] => {
    if (p.type === 'video_frames') return (p as VideoFramesPart).frames.map(() => marker);
    return p.type === 'image_url' || p.type === 'video_url' ? [marker] : [p];
  };
  return messages.map((m) => (Array.isArray(m.content) && m.content.some((p) => p.type !== 'text') ? { ...m, content: m.content.flatMap(markers) } : m));
}

/**
 * The rendered prompt with each image marker expanded into its image's placeholder tokens:
 * given the images' sizes, the i-th marker by the i-th image's; without them, only where
 * every image is the same number of tokens (the markers stay otherwise).
 */
export function expandImageMarkers(prompt: string, vision: VisionEncoder, images?: DecodedImage[]): string {
  const pieces = prompt.split(vision.marker);
  if (!images) return vision.tokensPerImage === undefined ? prompt : pieces.join(vision.expansion({ width: 0, height: 0 }));
  if (pieces.length - 1 !== images.length) throw badRequest(`the prompt holds ${pieces.length - 1} image markers for ${images.length} images (does a message spell ${JSON.stringify(vision.marker)}?)`);
  return pieces.reduce((text, piece, i) => text + vision.expansion(images[i - 1]!) + piece);
}

/**
 * The turn's images in order (image parts fetched and decoded under the media policy,
 * sampled video frames: sampleVideos first); 400 for one whose tokens do not fit one
 * prefill batch (or that the encoder cannot size).
 */
export async function loadTurnImages(model: ServedModel, messages: ChatMessage[]): Promise<DecodedImage[]> {
  const vision = model.engine.vision!;
  const pictures = parts(messages).flatMap((p): Array<string | DecodedImage> => {
    if (p.type === 'image_url') return [((p as OtherContentPart).image_url as { url: string }).url];
    return p.type === 'video_frames' ? (p as VideoFramesPart).frames : [];
  });
  const images = await Promise.all(pictures.map((p) => (typeof p === 'string' ? loadImage(p, model.media) : p)));
  for (const image of images) {
    let tokens: number;
    try {
      tokens = vision.tokens(image);
    } catch (err) {
      throw badRequest((err as Error).message);
    }
    if (tokens > vision.maxImageTokens) {
      throw badRequest(`an image of ${image.width}x${image.height} pixels is ${tokens} tokens; one prefill batch holds ${vision.maxImageTokens} (raise --batch-size, or lower --image-max-tokens)`);
    }
  }
  return images;
}

/**
 * The images encoded, each placed at its run of placeholder tokens in the tokenized
 * prompt; 400 when the prompt's runs do not match the images (a message's text that
 * spells the marker itself).
 */
export async function promptImages(model: ServedModel, decoded: DecodedImage[], tokens: number[]): Promise<PromptImage[]> {
  const vision = model.engine.vision!;
  const runs: Array<{ start: number; length: number }> = [];
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i] !== vision.imageToken || (i > 0 && tokens[i - 1] === vision.imageToken)) continue;
    let end = i;
    while (tokens[end] === vision.imageToken) end++;
    runs.push({ start: i, length: end - i });
  }
  if (runs.length !== decoded.length) throw badRequest(`the prompt holds ${runs.length} images' tokens for ${decoded.length} images (does a message spell ${JSON.stringify(vision.marker)}?)`);
  const images: PromptImage[] = [];
  for (const [i, image] of decoded.entries()) {
    const want = vision.tokens(image);
    if (runs[i]!.length !== want) throw badRequest(`the prompt holds a run of ${runs[i]!.length} image tokens where image ${i + 1} is ${want}`);
    const { rows, grid } = await encoded(vision, image);
    images.push({ start: runs[i]!.start, rows, key: parseInt(image.hash.slice(0, 8), 16) % 2 ** 30, ...(grid ? { grid } : {}) });
  }
  return images;
}

/** Images encoded lately, by pixel hash, per encoder: a conversation's next turn sends its pictures again. */
const ENCODED_KEPT = 16;
const encodedImages = new WeakMap<VisionEncoder, Map<string, Promise<EncodedImage>>>();

/** The image's soft tokens, encoded once while it stays among the ENCODED_KEPT latest. */
function encoded(vision: VisionEncoder, image: DecodedImage): Promise<EncodedImage> {
  let kept = encodedImages.get(vision);
  if (!kept) encodedImages.set(vision, (kept = new Map()));
  let rows = kept.get(image.hash);
  if (rows) kept.delete(image.hash);
  else rows = vision.encode(image);
  // Latest last; a failed encode is not kept.
  kept.set(image.hash, rows);
  rows.catch(() => kept.delete(image.hash));
  while (kept.size > ENCODED_KEPT) kept.delete(kept.keys().next().value!);
  return rows;
}
