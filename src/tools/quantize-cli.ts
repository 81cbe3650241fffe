// mlxcel-quantize: turn a Hugging Face checkpoint into an mlx-lm style affine-quantized one.
//   mlxcel-quantize --model IN --out OUT [--bits 4|8] [--group-size 32|64|128]
import { parseArgs } from 'node:util';
import { quantizeCheckpoint, type QuantBits } from '../models/quantize.js';

const USAGE = 'usage: mlxcel-quantize --model IN --out OUT [--bits 4|8] [--group-size 32|64|128]';

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
  if (!values.model || !values.out || (bits !== 4 && bits !== 8) || ![32, 64, 128].includes(groupSize)) {
    console.error(USAGE);
    return 2;
  }
  const { quantized, kept } = quantizeCheckpoint(values.model, values.out, { bits: bits as QuantBits, groupSize });
  console.log(`quantized ${quantized.length} tensors to ${bits}-bit (group size ${groupSize}), kept ${kept.length} as they were; wrote ${values.out}`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
