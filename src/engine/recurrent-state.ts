// The recurrent layers' states of a hybrid model (LoadedModel.states), one slot per engine
// slot beside the KV blocks of its attention layers. A sequence's chunks read and write its
// slot's state (SeqChunk.state); a chunk at position 0 starts from zeros, so a new sequence
// needs no reset. What a KV block table gives for free needs a copy here: an n > 1 choice
// forked from the first choice's prompt takes a copy of that choice's state, and a
// speculating sequence keeps its state in a snapshot slot through a verify round, to go
// back to where drafts are rejected. The prompt cache keeps snapshots of every layer's
// state at cached prefixes' ends in buffers of its own (`snapshots` of them, each
// `snapshotBytes`), which a sequence that borrows the prefix starts from and a slot file
// saves and restores.
import { mapRead } from '../runtime/gpu.js';
import type { RecurrentState } from '../models/model.js';

export class RecurrentStates {
  /** One slot's state of one layer on its way (a buffer cannot copy into itself). */
  private readonly staging?: GPUBuffer;
  /** Per layer, the prompt cache's snapshots [snapshots, slotBytes]. */
  private readonly kept: GPUBuffer[];

  constructor(private readonly device: GPUDevice, private readonly states: RecurrentState[], snapshots: number) {
    const bytes = Math.max(0, ...states.map((s) => s.slotBytes));
    if (bytes > 0) this.staging = device.createBuffer({ label: 'state_staging', size: bytes, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const usage = GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    this.kept = snapshots > 0 ? states.map((s) => device.createBuffer({ label: 'state_snapshots', size: snapshots * s.slotBytes, usage })) : [];
  }

  /** Whether the model has any (a hybrid state-space model). */
  get any(): boolean {
    return this.states.length > 0;
  }

  /** Bytes of one slot's state over every recurrent layer: what a snapshot holds. */
  get snapshotBytes(): number {
    return this.states.reduce((n, s) => n + s.slotBytes, 0);
  }

  /** Copies slot `from`'s state of every layer to each of `to`, in one submission after the work already queued. */
  copy(from: number, to: number[]): void {
    if (!this.any || to.length === 0) return;
    const encoder = this.device.createCommandEncoder();
    for (const { buffer, slotBytes } of this.states) {
      encoder.copyBufferToBuffer(buffer, from * slotBytes, this.staging!, 0, slotBytes);
      for (const slot of to) encoder.copyBufferToBuffer(this.staging!, 0, buffer, slot * slotBytes, slotBytes);
    }
    this.device.queue.submit([encoder.finish()]);
  }

  /** Copies slot `slot`'s state into snapshot `snapshot`, after the work already queued. */
  save(slot: number, snapshot: number): void {
    this.between((encoder, { buffer, slotBytes }, kept) => encoder.copyBufferToBuffer(buffer, slot * slotBytes, kept, snapshot * slotBytes, slotBytes));
  }

  /** Copies snapshot `snapshot` into slot `slot`, after the work already queued. */
  load(snapshot: number, slot: number): void {
    this.between((encoder, { buffer, slotBytes }, kept) => encoder.copyBufferToBuffer(kept, snapshot * slotBytes, buffer, slot * slotBytes, slotBytes));
  }

  /** A snapshot's bytes, every layer's in order (the copy is queued before this returns). */
  async read(snapshot: number): Promise<Uint8Array> {
    const out = this.device.createBuffer({ label: 'state_read', size: Math.max(16, this.snapshotBytes), usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
    const encoder = this.device.createCommandEncoder();
    let offset = 0;
    for (const [i, { slotBytes }] of this.states.entries()) {
      encoder.copyBufferToBuffer(this.kept[i]!, snapshot * slotBytes, out, offset, slotBytes);
      offset += slotBytes;
    }
    this.device.queue.submit([encoder.finish()]);
    try {
      return new Uint8Array(await mapRead(out), 0, offset);
    } finally {
      out.destroy();
    }
  }

  /** Writes what `read` returns into snapshot `snapshot`. */
  write(snapshot: number, data: Uint8Array): void {
    if (data.length !== this.snapshotBytes) throw new Error(`state data of ${data.length} bytes, expected ${this.snapshotBytes}`);
    let offset = 0;
    for (const [i, { slotBytes }] of this.states.entries()) {
      this.device.queue.writeBuffer(this.kept[i]!, snapshot * slotBytes, data, offset, slotBytes);
      offset += slotBytes;
    }
  }

  private between(copy: (encoder: GPUCommandEncoder, state: RecurrentState, kept: GPUBuffer) => void): void {
    const encoder = this.device.createCommandEncoder();
    for (const [i, state] of this.states.entries()) copy(encoder, state, this.kept[i]!);
    this.device.queue.submit([encoder.finish()]);
  }
}
