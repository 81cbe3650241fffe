// mlxcel-quantize: turn a Hugging Face checkpoint into an mlx-lm style affine-quantized one.
//   mlxcel-quantize --model IN --out OUT [--bits 2|3|4|5|6|8] [--group-size 32|64|128]
//                   [--recipe mixed_2_6|mixed_3_4|mixed_3_6|mixed_4_6] [--module PATH=BITS[/GROUP]|PATH=float ...]
import { parseArgs } from 'node:util';
import { isQuantBits, MIXED_RECIPES, QUANT_BITS, QUANT_GROUP_SIZES, quantizeCheckpoint, type MixedRecipe, type ModuleQuant } from './models/quantize.js';

const USAGE = [
  `usage: mlxcel-quantize --model IN --out OUT [--bits ${QUANT_BITS.join('|')}] [--group-size ${QUANT_GROUP_SIZES.join('|')}]`,
  `         [--recipe ${Object.keys(MIXED_RECIPES).join('|')}] [--module PATH=BITS[/GROUP] | --module PATH=float ...]`,
  '  --module: one module (weight prefix, e.g. lm_head or model.embed_tokens) at its own bits and group size, or kept in float; repeatable',
].join('\n');

const isGroupSize = (n: number) => (QUANT_GROUP_SIZES as readonly number[]).includes(n);

/** `PATH=BITS[/GROUP]` or `PATH=float`; undefined when malformed. */
function parseModule(spec: string, groupSize: number): [string, ModuleQuant | false] | undefined {
  const m = /^([^=]+)=(?:(float)|(\d+)(?:\/(\d+))?)$/.exec(spec);
  if (!m) return undefined;
  if (m[2]) return [m[1]!, false];
  const bits = Number(m[3]);
  const group = m[4] ? Number(m[4]) : groupSize;
  return isQuantBits(bits) && isGroupSize(group) ? [m[1]!, { bits, groupSize: group }] : undefined;
}

function main(argv: string[]): number {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        model: { type: 'string' },
        out: { type: 'string' },
        bits: { type: 'string', default: '4' },
        'group-size': { type: 'string', default: '64' },
        recipe: { type: 'string' },
        module: { type: 'string', multiple: true, default: [] },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    console.error(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const bits = Number(values.bits);
  const groupSize = Number(values['group-size']);
  const recipe = values.recipe;
  if (!values.model || !values.out || !isQuantBits(bits) || !isGroupSize(groupSize) || (recipe !== undefined && !(recipe in MIXED_RECIPES))) {
    console.error(USAGE);
    return 2;
  }
  const modules: Record<string, ModuleQuant | false> = {};
  for (const spec of values.module) {
    const parsed = parseModule(spec, groupSize);
    if (!parsed) {
      console.error(`--module ${spec}: expected PATH=BITS[/GROUP] (bits ${QUANT_BITS.join(', ')}; group ${QUANT_GROUP_SIZES.join(', ')}) or PATH=float\n${USAGE}`);
      return 2;
    }
    modules[parsed[0]] = parsed[1];
  }
  const { quantized, kept } = quantizeCheckpoint(values.model, values.out, { bits, groupSize, recipe: recipe as MixedRecipe | undefined, modules });
  const what = recipe ? `with recipe ${recipe}` : `to ${bits}-bit`;
  console.log(`quantized ${quantized.length} tensors ${what} (group size ${groupSize}), kept ${kept.length} as they were; wrote ${values.out}`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
