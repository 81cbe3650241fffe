// The recurrent layers' states of a hybrid model (LoadedModel.states), one slot per engine
// slot beside the KV blocks of its attention layers. A sequence's chunks read and write its
// slot's state (SeqChunk.state); a chunk at position 0 starts from zeros, so a new sequence
// needs no reset. What a KV block table gives for free needs a copy here: an n > 1 choice
// forked from the first choice's prompt takes a copy of that choice's state, and a
// speculating sequence keeps its state in a snapshot slot through a verify round, to go
// back to where drafts are rejected.
import type { RecurrentState } from '../models/model.js';

export class RecurrentStates {
  /** One slot's state of one layer on its way (a buffer cannot copy into itself). */
  private readonly staging?: GPUBuffer;

  constructor(private readonly device: GPUDevice, private readonly states: RecurrentState[]) {
    const bytes = Math.max(0, ...states.map((s) => s.slotBytes));
    if (bytes > 0) this.staging = device.createBuffer({ label: 'state_staging', size: bytes, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  }

  /** Whether the model has any (a hybrid state-space model). */
  get any(): boolean {
    return this.states.length > 0;
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
}
