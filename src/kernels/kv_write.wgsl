// Appends this pass's keys and values to the paged KV cache.
// Cache layout per layer: [blocks * block_size, kv_dim] f32; a sequence's position j lives
// in block block_table[table_off + j / block_size], row j % block_size.
// Bindings: 0 params, 1 step, 2 k [M, kv_dim], 3 v [M, kv_dim], 4 token_pos [M],
// 5 token_table [M] (offset of the token's sequence in block_table), 6 block_table,
// 7 k_cache rw, 8 v_cache rw.
// Plan: one invocation per (token, 4 channels).
struct Params { kv_dim: u32, block_size: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> token_pos: array<u32>;
@group(0) @binding(5) var<storage, read> token_table: array<u32>;
@group(0) @binding(6) var<storage, read> block_table: array<u32>;
@group(0) @binding(7) var<storage, read_write> k_cache: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let q4 = p.kv_dim / 4u;
  let c = gid.x % q4;
  let m = gid.x / q4;
  if (m >= step.n_tokens) { return; }
  let pos = token_pos[m];
  let slot = block_table[token_table[m] + pos / p.block_size] * p.block_size + pos % p.block_size;
  k_cache[slot * q4 + c] = k[m * q4 + c];
  v_cache[slot * q4 + c] = v[m * q4 + c];
}
