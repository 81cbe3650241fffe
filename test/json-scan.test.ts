// scanJsonValue over a growing text resumes where the scan of its prefix stopped: it must
// answer exactly as a scan from scratch would, at every length and every split point. And
// completePartialJson, which reads a value cut off anywhere.
import { describe, expect, it } from 'vitest';
import { completePartialJson, scanJsonValue, type ScanResult } from '../src/chat/tool-calls/json-scan.js';

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

describe('completePartialJson', () => {
  it('completes every prefix of a value to what was written of it', () => {
    const full = '{"city": "Pa\\"ris", "days": [1, 22, {"a": true}], "n": null, "x": -1.5e3}';
    const at = (n: number) => completePartialJson(full.slice(0, n));
    expect(at(full.length)).toEqual(JSON.parse(full));
    expect(at(0)).toBeUndefined();
    expect(at(1)).toEqual({});
    expect(at(full.indexOf('Pa') + 2)).toEqual({ city: 'Pa' });
    // A partial escape, a key without its value, a number or literal that may be cut: left out.
    expect(at(full.indexOf('\\'))).toEqual({ city: 'Pa' });
    expect(at(full.indexOf('"days"') + 7)).toEqual({ city: 'Pa"ris' });
    expect(at(full.indexOf('22') + 1)).toEqual({ city: 'Pa"ris', days: [1] });
    expect(at(full.indexOf('true') + 3)).toEqual({ city: 'Pa"ris', days: [1, 22, {}] });
    expect(at(full.indexOf('e3'))).toEqual({ city: 'Pa"ris', days: [1, 22, { a: true }], n: null });
    for (let n = 1; n <= full.length; n++) expect(typeof at(n), full.slice(0, n)).toBe('object');
  });

  it('refuses text that is not the start of a JSON value', () => {
    expect(completePartialJson('{"a": 1]')).toBeUndefined();
    expect(completePartialJson('hello')).toBeUndefined();
  });
});
