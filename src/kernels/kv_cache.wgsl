// The paged KV cache, shared by its writer (rope_kv_write.wgsl) and its readers
// (attention.wgsl, attention_decode_workgroup.wgsl). Per layer, keys and values are each
// [rows, kv_heads * head_dim] (rows as the layout below has them), flat in a texture KV_WIDTH texels wide
// (runtime/tensors.ts kvCacheTexture): vec4 i at texel (i % KV_WIDTH, i / KV_WIDTH).
// Keys and values each have their type (K_TYPE, V_TYPE): f32, an rgba32float texel, or
// f16, an rgba16float texel, half the bytes; loads widen to f32, so the kernels compute in
// f32 either way and need no shader-f16. The writer rounds a value to f16 itself
// (kv_round) before the store: some adapters' stores to rgba16float truncate (llvmpipe's
// do), and a value f16 holds exactly converts exactly.
// A layer keeps its positions in one of two layouts (p.ring says which, per layer):
// - paged (p.ring == 0): a sequence's position j lives in row block_table[table + j /
//   block_size] * block_size + j % block_size, where `table` is where its entries start in
//   block_table (token_table[m] for token m);
// - a ring (p.ring > 0, a sliding-window layer): each slot (token_slot[m], the sequence's
//   engine slot) owns rows [slot * p.ring, (slot + 1) * p.ring), and position j lives in row
//   slot * p.ring + j % p.ring. A ring of window + chunk - 1 positions holds everything one
//   pass reads: a chunk's positions are all written before any is read, and its first token
//   reads back window - 1 positions before it.
// The kernel declares block_table, token_table, token_slot, p.block_size and p.ring, and the
// textures: write-only storage bindings in the writer; in the readers read-only storage
// bindings where WGSL allows them, else sampled ones (attention_io.wgsl includes those).
// One dispatch may not both write and read a texture, so the append is a dispatch of its
// own.
// Why textures: on llvmpipe a storage-buffer load at an address that differs per invocation
// is a per-lane scalar loop (four per vec4), while a texel load is one gather for all the
// lanes.
override KV_WIDTH: u32 = 4096u;

fn kv_texel(i: u32) -> vec2<u32> {
  return vec2<u32>(i % KV_WIDTH, i / KV_WIDTH);
}

// Where token m's sequence keeps its positions: its block table's start, and its ring's
// first row.
struct KvSeq { table: u32, ring_base: u32 }

fn kv_seq(m: u32) -> KvSeq {
  return KvSeq(token_table[m], token_slot[m] * p.ring);
}

// Cache row of position j of sequence s.
fn kv_slot(s: KvSeq, j: u32) -> u32 {
  if (p.ring != 0u) { return s.ring_base + j % p.ring; }
  return block_table[s.table + j / p.block_size] * p.block_size + j % p.block_size;
}

// x rounded to the nearest f16 values (ties to even: pack2x16float's rounding, core WGSL).
fn kv_round(x: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(pack2x16float(x.xy)), unpack2x16float(pack2x16float(x.zw)));
}
