// Schemas for the structured-output tests and bench: a seeded generator over the supported
// keyword set, 30 hand-written real-world schemas, and an ajv (draft 2020-12) with format
// checks written from ajv-formats' definitions, independent of src/grammar. Every string
// has a maxLength and every array a maxItems, so even a random-weight model must finish.
import { Ajv2020 } from 'ajv/dist/2020.js';
import { makeRng } from './random-checkpoint.js';

export type JsonSchema = Record<string, unknown>;

// ---------------------------------------------------------------- ajv with formats

const DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const leap = (y: number) => y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);

function isDate(s: string): boolean {
  const m = /^(\d\d\d\d)-(\d\d)-(\d\d)$/.exec(s);
  if (!m) return false;
  const y = +m[1]!;
  const mo = +m[2]!;
  const d = +m[3]!;
  return mo >= 1 && mo <= 12 && d >= 1 && d <= (mo === 2 && leap(y) ? 29 : DAYS[mo]!);
}

function isTime(s: string): boolean {
  const m = /^(\d\d):(\d\d):(\d\d(?:\.\d+)?)(z|([+-])(\d\d)(?::?(\d\d))?)$/i.exec(s);
  if (!m) return false;
  const h = +m[1]!;
  const mi = +m[2]!;
  const sec = +m[3]!;
  const tzH = +(m[6] ?? 0);
  const tzM = +(m[7] ?? 0);
  return h <= 23 && mi <= 59 && sec < 60 && tzH <= 23 && tzM <= 59;
}

function isDateTime(s: string): boolean {
  const parts = s.split(/t|\s/i);
  return parts.length === 2 && isDate(parts[0]!) && isTime(parts[1]!);
}

const UUID = /^(?:urn:uuid:)?[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$/i;
// ajv-formats' "full" email.
const EMAIL =
  /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/i;

export function makeAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: false, allowUnionTypes: true });
  ajv.addFormat('date', isDate);
  ajv.addFormat('time', isTime);
  ajv.addFormat('date-time', isDateTime);
  ajv.addFormat('uuid', (s: string) => UUID.test(s));
  ajv.addFormat('email', (s: string) => EMAIL.test(s));
  return ajv;
}

// ---------------------------------------------------------------- random schemas

type Rng = { uniform(): number };

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng.uniform() * (hi - lo + 1));
const chance = (rng: Rng, p: number): boolean => rng.uniform() < p;

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'red', 'green', 'blue', 'north', 'south', 'x', 'é', '日本', 'a b', 'q"uote', 'tab\t', 'ok'];
const PATTERNS = ['^[a-z]{1,6}$', '^[A-Z][a-z]{0,4}$', '^\\d{3}-\\d{2}$', '^(yes|no|maybe)$', '^[0-9a-f]{2,6}$', '^#[0-9a-fA-F]{6}$', 'ab', '^v\\d\\.\\d$', '^[^"\\\\]{0,5}$', '^\\w+@\\w+$'];

/** A property name: ordinary words, some with characters JSON must escape. */
function propName(rng: Rng, i: number): string {
  return chance(rng, 0.1) ? `${pick(rng, WORDS)}_${i}` : `${pick(rng, ['id', 'name', 'value', 'kind', 'count', 'tags', 'meta', 'items', 'note', 'score'])}${i}`;
}

function stringSchema(rng: Rng): JsonSchema {
  const maxLength = int(rng, 0, 8);
  const r = rng.uniform();
  if (r < 0.45) return { type: 'string', maxLength, ...(chance(rng, 0.3) ? { minLength: int(rng, 0, Math.min(3, maxLength)) } : {}) };
  if (r < 0.6) return { type: 'string', enum: [...new Set(Array.from({ length: int(rng, 1, 4) }, () => pick(rng, WORDS)))] };
  if (r < 0.65) return { type: 'string', const: pick(rng, WORDS) };
  if (r < 0.82) return { type: 'string', pattern: pick(rng, PATTERNS), maxLength: int(rng, 6, 12) };
  const format = pick(rng, ['date', 'time', 'date-time', 'uuid', 'email'] as const);
  const min = { date: 10, time: 9, 'date-time': 20, uuid: 36, email: 5 }[format];
  return { type: 'string', format, maxLength: min + int(rng, 0, 8) };
}

function numberSchema(rng: Rng): JsonSchema {
  const type = chance(rng, 0.7) ? 'integer' : 'number';
  const s: JsonSchema = { type };
  const lo = int(rng, -1000, 1000) / (type === 'number' && chance(rng, 0.5) ? 8 : 1);
  const span = int(rng, 0, 5000) / (type === 'number' && chance(rng, 0.5) ? 4 : 1);
  // Bounds keep the digits few (an unbounded side allows 16 of them); an exclusive one now and then.
  if (chance(rng, 0.95)) s[chance(rng, 0.2) ? 'exclusiveMinimum' : 'minimum'] = lo;
  if (chance(rng, 0.95)) s[chance(rng, 0.2) ? 'exclusiveMaximum' : 'maximum'] = lo + span + 1;
  return s;
}

function leaf(rng: Rng): JsonSchema {
  const r = rng.uniform();
  if (r < 0.4) return stringSchema(rng);
  if (r < 0.65) return numberSchema(rng);
  if (r < 0.75) return { type: 'boolean' };
  if (r < 0.8) return { type: 'null' };
  if (r < 0.9) return { enum: [pick(rng, WORDS), int(rng, -5, 50), true, null].slice(0, int(rng, 1, 4)) };
  return { const: pick(rng, [1, 'fixed', false, null, 2.5]) };
}

function node(rng: Rng, depth: number, defs: Record<string, JsonSchema>): JsonSchema {
  if (depth >= 3 || chance(rng, 0.3)) return leaf(rng);
  const r = rng.uniform();
  if (r < 0.35) {
    const n = int(rng, 1, 4);
    const properties: Record<string, JsonSchema> = {};
    for (let i = 0; i < n; i++) properties[propName(rng, i)] = node(rng, depth + 1, defs);
    const names = Object.keys(properties);
    const required = names.filter(() => chance(rng, 0.6));
    return {
      type: 'object',
      properties,
      ...(required.length ? { required } : {}),
      ...(chance(rng, 0.7) ? { additionalProperties: false } : {}),
    };
  }
  if (r < 0.55) {
    const maxItems = int(rng, 0, 3);
    if (chance(rng, 0.2)) {
      const prefixItems = Array.from({ length: int(rng, 1, 2) }, () => node(rng, depth + 1, defs));
      return { type: 'array', prefixItems, items: chance(rng, 0.5) ? false : leaf(rng), maxItems: Math.max(maxItems, 0) };
    }
    return { type: 'array', items: node(rng, depth + 1, defs), maxItems, ...(chance(rng, 0.3) ? { minItems: int(rng, 0, maxItems) } : {}) };
  }
  if (r < 0.7) {
    // Alternatives of distinct JSON types, so oneOf holds exactly one.
    const kinds = ['string', 'integer', 'boolean', 'null', 'object', 'array'].sort(() => rng.uniform() - 0.5).slice(0, int(rng, 2, 3));
    const alts = kinds.map((k) => {
      if (k === 'string') return stringSchema(rng);
      if (k === 'integer') return { type: 'integer', minimum: -9, maximum: 99 };
      if (k === 'object') return { type: 'object', properties: { v: leaf(rng) }, required: ['v'], additionalProperties: false };
      if (k === 'array') return { type: 'array', items: { type: 'boolean' }, maxItems: 2 };
      return { type: k };
    });
    return { [chance(rng, 0.5) ? 'anyOf' : 'oneOf']: alts };
  }
  if (r < 0.8) {
    const t = pick(rng, [['string', 'null'], ['integer', 'boolean'], ['number', 'null']]);
    return { type: t, ...(t.includes('string') ? { maxLength: int(rng, 1, 8) } : {}), ...(t.includes('integer') ? { minimum: 0, maximum: 500 } : {}) };
  }
  if (r < 0.92) {
    const name = `D${Object.keys(defs).length}`;
    defs[name] = {}; // reserved: nested definitions take the next names
    defs[name] = node(rng, depth + 1, defs);
    return chance(rng, 0.5) ? { $ref: `#/$defs/${name}` } : { $ref: `#/$defs/${name}`, description: 'a reference' };
  }
  return { allOf: [node(rng, depth + 1, defs)], title: 'single allOf' };
}

/** `count` schemas from a fixed seed, covering every supported keyword. */
export function randomSchemas(count: number, seed: number): JsonSchema[] {
  const rng = makeRng(seed);
  return Array.from({ length: count }, () => {
    const defs: Record<string, JsonSchema> = {};
    const root = node(rng, 0, defs);
    return Object.keys(defs).length ? { ...root, $defs: defs } : root;
  });
}

// ---------------------------------------------------------------- real-world schemas

const str = (maxLength: number, extra: JsonSchema = {}): JsonSchema => ({ type: 'string', maxLength, ...extra });
const arr = (items: JsonSchema, maxItems: number, extra: JsonSchema = {}): JsonSchema => ({ type: 'array', items, maxItems, ...extra });
const obj = (properties: Record<string, JsonSchema>, required: string[] = Object.keys(properties), extra: JsonSchema = {}): JsonSchema => ({
  type: 'object',
  properties,
  required,
  additionalProperties: false,
  ...extra,
});

const address = obj({
  street: str(24, { description: 'Street and number' }),
  city: str(16),
  postalCode: str(10, { pattern: '^[0-9A-Z -]{3,10}$' }),
  country: { type: 'string', enum: ['US', 'DE', 'FR', 'JP', 'BR'] },
  geo: obj({ lat: { type: 'number', minimum: -90, maximum: 90 }, lon: { type: 'number', minimum: -180, maximum: 180 } }),
}, ['street', 'city', 'country']);

export const REAL_WORLD_SCHEMAS: Array<{ name: string; schema: JsonSchema }> = [
  { name: 'animal', schema: obj({ animal: str(20), habitat: { type: 'string', enum: ['forest', 'desert', 'ocean', 'urban', 'unknown'] } }) },
  { name: 'person-address', schema: obj({ name: str(20), age: { type: 'integer', minimum: 0, maximum: 130 }, email: str(40, { format: 'email' }), address }, ['name', 'address']) },
  {
    name: 'company-addresses',
    schema: obj({ company: str(20), headquarters: address, offices: arr(address, 2), founded: str(10, { format: 'date' }) }, ['company', 'headquarters']),
  },
  {
    name: 'order',
    schema: obj({
      orderId: str(36, { format: 'uuid' }),
      status: { enum: ['pending', 'paid', 'shipped', 'cancelled'] },
      items: arr(obj({ sku: str(12, { pattern: '^[A-Z]{3}-\\d{3,6}$' }), quantity: { type: 'integer', minimum: 1, maximum: 99 }, price: { type: 'number', minimum: 0, maximum: 10000 } }), 3, { minItems: 1 }),
      shipTo: address,
    }),
  },
  { name: 'tags-enum-array', schema: obj({ title: str(30), tags: arr({ type: 'string', enum: ['news', 'sports', 'tech', 'health', 'travel'] }, 4) }) },
  {
    name: 'classification',
    schema: obj({ label: { type: 'string', enum: ['positive', 'negative', 'neutral'] }, confidence: { type: 'number', minimum: 0, maximum: 1 }, reasons: arr(str(30), 2) }, ['label', 'confidence']),
  },
  {
    name: 'entities',
    schema: obj({
      entities: arr(obj({ text: str(20), type: { enum: ['PERSON', 'ORG', 'LOC', 'DATE'] }, start: { type: 'integer', minimum: 0, maximum: 10000 }, end: { type: 'integer', minimum: 0, maximum: 10000 } }), 3),
    }),
  },
  {
    name: 'event',
    schema: obj({ title: str(30), starts: str(32, { format: 'date-time' }), ends: str(32, { format: 'date-time' }), allDay: { type: 'boolean' }, location: { type: ['string', 'null'], maxLength: 20 } }),
  },
  {
    name: 'recipe',
    schema: obj({
      name: str(24),
      servings: { type: 'integer', minimum: 1, maximum: 12 },
      ingredients: arr(obj({ item: str(16), amount: { type: 'number', exclusiveMinimum: 0, maximum: 1000 }, unit: { enum: ['g', 'ml', 'cup', 'tbsp', 'tsp', 'piece'] } }), 2, { minItems: 1 }),
      steps: arr(str(32), 2),
    }),
  },
  {
    name: 'movie-review',
    schema: obj({ movie: str(24), year: { type: 'integer', minimum: 1888, maximum: 2030 }, rating: { type: 'integer', enum: [1, 2, 3, 4, 5] }, pros: arr(str(20), 2), cons: arr(str(20), 2), verdict: { type: 'string', enum: ['watch', 'skip'] } }),
  },
  {
    name: 'weather',
    schema: obj({ city: str(16), date: str(10, { format: 'date' }), tempC: { type: 'number', minimum: -60, maximum: 60 }, condition: { enum: ['sunny', 'cloudy', 'rain', 'snow', 'storm'] }, humidity: { type: 'integer', minimum: 0, maximum: 100 } }),
  },
  {
    name: 'user-profile',
    schema: obj({ id: str(36, { format: 'uuid' }), username: str(16, { pattern: '^[a-z][a-z0-9_]{2,15}$' }), email: str(32, { format: 'email' }), roles: arr({ enum: ['admin', 'editor', 'viewer'] }, 3), active: { type: 'boolean' } }),
  },
  {
    name: 'log-entry',
    schema: obj({ timestamp: str(32, { format: 'date-time' }), level: { enum: ['DEBUG', 'INFO', 'WARN', 'ERROR'] }, message: str(48), context: { anyOf: [obj({ requestId: str(12), durationMs: { type: 'integer', minimum: 0, maximum: 60000 } }), { type: 'null' }] } }),
  },
  {
    name: 'tree',
    schema: {
      $defs: { node: obj({ value: { type: 'integer', minimum: 0, maximum: 99 }, children: arr({ $ref: '#/$defs/node' }, 2) }, ['value']) },
      $ref: '#/$defs/node',
    },
  },
  {
    name: 'org-chart',
    schema: {
      definitions: { employee: obj({ name: str(16), title: str(16), reports: arr({ $ref: '#/definitions/employee' }, 2) }, ['name', 'title']) },
      type: 'object',
      properties: { ceo: { $ref: '#/definitions/employee' } },
      required: ['ceo'],
      additionalProperties: false,
    },
  },
  {
    name: 'file-system',
    schema: {
      $defs: {
        entry: {
          oneOf: [
            obj({ kind: { const: 'file' }, name: str(12), size: { type: 'integer', minimum: 0, maximum: 1000000 } }),
            obj({ kind: { const: 'dir' }, name: str(12), entries: arr({ $ref: '#/$defs/entry' }, 2) }, ['kind', 'name']),
          ],
        },
      },
      $ref: '#/$defs/entry',
    },
  },
  {
    name: 'linked-list',
    schema: { $defs: { cell: obj({ head: str(6), tail: { anyOf: [{ $ref: '#/$defs/cell' }, { type: 'null' }] } }) }, $ref: '#/$defs/cell' },
  },
  {
    name: 'invoice',
    schema: obj({
      number: str(12, { pattern: '^INV-\\d{4,8}$' }),
      issued: str(10, { format: 'date' }),
      customer: obj({ name: str(20), billing: address }),
      lines: arr(obj({ description: str(20), qty: { type: 'integer', minimum: 1, maximum: 100 }, unitPrice: { type: 'number', minimum: 0, maximum: 99999.99 } }), 2, { minItems: 1 }),
      currency: { enum: ['USD', 'EUR', 'JPY'] },
    }),
  },
  {
    name: 'tool-call',
    schema: obj({ name: { const: 'get_weather' }, arguments: obj({ city: str(20), unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, ['city']) }),
  },
  {
    name: 'bank-transaction',
    schema: obj({ id: str(36, { format: 'uuid' }), amount: { type: 'number', minimum: -100000, maximum: 100000 }, currency: str(3, { pattern: '^[A-Z]{3}$' }), booked: str(32, { format: 'date-time' }), counterparty: { type: ['string', 'null'], maxLength: 24 } }),
  },
  {
    name: 'flight-booking',
    schema: obj({
      passengers: arr(obj({ first: str(12), last: str(12), seat: str(4, { pattern: '^\\d{1,2}[A-F]$' }) }), 2, { minItems: 1 }),
      from: str(3, { pattern: '^[A-Z]{3}$' }),
      to: str(3, { pattern: '^[A-Z]{3}$' }),
      departs: str(32, { format: 'date-time' }),
      cabin: { enum: ['economy', 'premium', 'business', 'first'] },
    }),
  },
  {
    name: 'medical-record',
    schema: obj({ patientId: str(10, { pattern: '^P\\d{6,9}$' }), allergies: arr(str(16), 3), bloodType: { anyOf: [{ enum: ['A+', 'A-', 'B+', 'B-', 'AB+', 'AB-', 'O+', 'O-'] }, { type: 'null' }] }, lastVisit: { type: ['string', 'null'], format: 'date', maxLength: 10 } }),
  },
  {
    name: 'config-type-arrays',
    schema: obj({ port: { type: ['integer', 'null'], minimum: 1, maximum: 65535 }, host: { type: ['string', 'null'], maxLength: 20 }, debug: { type: ['boolean', 'null'] }, ratio: { type: ['number', 'string'], minimum: 0, maximum: 1, maxLength: 4 } }),
  },
  {
    name: 'key-value-tuples',
    schema: obj({ pairs: arr({ type: 'array', prefixItems: [str(10), { type: 'integer', minimum: -100, maximum: 100 }], items: false, minItems: 2, maxItems: 2 }, 3) }),
  },
  { name: 'color-palette', schema: obj({ name: str(16), colors: arr(str(7, { pattern: '^#[0-9a-f]{6}$' }), 4, { minItems: 1 }) }) },
  { name: 'semver-package', schema: obj({ package: str(20, { pattern: '^[a-z][a-z0-9-]*$' }), version: str(16, { pattern: '^\\d{1,3}\\.\\d{1,3}\\.\\d{1,3}$' }), license: { enum: ['MIT', 'Apache-2.0', 'GPL-3.0'] } }) },
  { name: 'contact-phone', schema: obj({ name: str(20), phone: str(15, { pattern: '^\\+?[0-9]{7,14}$' }), preferred: { type: 'boolean' } }, ['name', 'phone']) },
  {
    name: 'math-solution',
    schema: obj({ steps: arr(obj({ explanation: str(40), output: str(20) }), 3), finalAnswer: { type: 'number', minimum: -1000000, maximum: 1000000 } }),
  },
  {
    name: 'survey',
    schema: obj({ respondent: str(36, { format: 'uuid' }), answers: arr(obj({ question: { type: 'integer', minimum: 1, maximum: 20 }, choice: { enum: ['strongly disagree', 'disagree', 'neutral', 'agree', 'strongly agree'] } }), 4), comment: { type: ['string', 'null'], maxLength: 40 } }, ['respondent', 'answers']),
  },
  {
    name: 'meeting-times',
    schema: obj({ topic: str(24), attendees: arr(str(24, { format: 'email' }), 2, { minItems: 1 }), slots: arr(obj({ day: str(10, { format: 'date' }), at: str(16, { format: 'time' }) }), 2, { minItems: 1 }) }),
  },
];

/** Upper bound on a document's bytes (recursion counted `recursion` levels deep), for max_tokens. */
export function maxDocumentBytes(schema: JsonSchema, recursion = 6): number {
  const root = schema;
  const go = (s: unknown, depth: number): number => {
    if (typeof s !== 'object' || s === null) return 4096;
    const o = s as JsonSchema;
    if (depth > 40) return 0;
    if (typeof o.$ref === 'string') {
      const path = o.$ref.slice(2).split('/');
      let t: unknown = root;
      for (const p of path) if (p) t = (t as JsonSchema)[p];
      return recursion-- > 0 ? go(t, depth + 1) : 4096;
    }
    if (Array.isArray(o.allOf)) return go(o.allOf[0], depth + 1);
    const alts = (o.anyOf ?? o.oneOf) as unknown[] | undefined;
    if (alts) return Math.max(...alts.map((a) => go(a, depth + 1)));
    if ('const' in o) return JSON.stringify(o.const).length;
    if (Array.isArray(o.enum)) return Math.max(...o.enum.map((v) => Buffer.byteLength(JSON.stringify(v))));
    const types = [o.type ?? 'any'].flat() as string[];
    return Math.max(
      ...types.map((t) => {
        switch (t) {
          case 'string':
            return 2 + 6 * ((o.maxLength as number | undefined) ?? 4096);
          case 'integer':
          case 'number':
            return 40;
          case 'boolean':
          case 'null':
            return 5;
          case 'object': {
            const props = (o.properties ?? {}) as Record<string, unknown>;
            return 2 + Object.entries(props).reduce((sum, [k, v]) => sum + Buffer.byteLength(JSON.stringify(k)) + 2 + go(v, depth + 1), 0);
          }
          case 'array': {
            const prefix = (o.prefixItems ?? []) as unknown[];
            const max = (o.maxItems as number | undefined) ?? 64;
            const items = o.items === false || o.items === undefined ? 0 : go(o.items, depth + 1);
            return 2 + prefix.reduce<number>((sum, p) => sum + 1 + go(p, depth + 1), 0) + Math.max(0, max - prefix.length) * (1 + items);
          }
          default:
            return 4096;
        }
      }),
    );
  };
  return go(schema, 0);
}
