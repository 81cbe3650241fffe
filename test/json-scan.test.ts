// scanJsonValue over a growing text resumes where the scan of its prefix stopped: it must
// answer exactly as a scan from scratch would, at every length and every split point.
import { describe, expect, it } from 'vitest';
import { scanJsonValue, type ScanResult } from '../src/chat/tools/json-scan.js';

/** The same scan with nothing to resume from: `text` copied into a string of its own
 *  past a unique prefix, so no earlier scan's state can match it. */
function fresh(text: string, pos: number, final: boolean, salt: number): ScanResult {
  const prefix = `${'#'.repeat(salt % 7)}@${salt}@`;
  const scan = scanJsonValue(prefix + text, pos + prefix.length, final);
  if (scan.status === 'complete') return { status: 'complete', end: scan.end - prefix.length };
  if (scan.status === 'error') return { status: 'error', at: scan.at - prefix.length };
  return scan;
}

const DOCUMENTS = [
  '{"name": "write_file", "arguments": {"path": "a\\"b", "content": "line\\\\\\nnext \\u00e9 } ] {"}}',
  '[{"a": [1, 2, {"b": "]"}]}, "x\\\\", null]',
  '"a string with \\"quotes\\" and \\\\ slashes"',
  '{"a": {"b": ]}',
  '{"a": "unterminated',
];

describe('scanJsonValue on a growing text', () => {
  it('agrees with a scan from scratch at every length, piece by piece', () => {
    let salt = 0;
    for (const doc of DOCUMENTS) {
      for (const step of [1, 3, 7]) {
        for (let n = 0; n <= doc.length; n += step) {
          const text = 'lead: ' + doc.slice(0, n);
          for (const final of [false, true]) {
            expect(scanJsonValue(text, 6, final), `${JSON.stringify(text)} final=${final}`).toEqual(fresh(text, 6, final, salt++));
          }
        }
      }
    }
  });

  it('does not resume from a text that only shares the start', () => {
    expect(scanJsonValue('{"a": "x', 0)).toEqual({ status: 'incomplete' });
    // Same start and length class, different content: a closed string this time.
    expect(scanJsonValue('{"a": "y"}', 0)).toEqual({ status: 'complete', end: 10 });
    expect(scanJsonValue('{"a": "x', 0)).toEqual({ status: 'incomplete' });
    expect(scanJsonValue('{"a": "x"]', 0)).toEqual({ status: 'error', at: 9 });
  });
});
