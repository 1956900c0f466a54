package io.wmobs.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.BitSet;

/**
 * A task's {@link Observation.State} as bytes, for the driver to merge: a fixed layout, since
 * every task of a micro-batch counts with the same spec (the arrays' lengths come from it).
 */
final class ObservationBytes {
  private ObservationBytes() {}

  /** {@code state} as bytes. */
  static byte[] write(Observation.State state) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeLong(state.rows);
      out.writeLong(state.deadLetters);
      out.writeLong(state.firings);
      for (long count : state.counts) {
        out.writeLong(count);
      }
      for (long bucket : state.buckets) {
        out.writeLong(bucket);
      }
      for (long bucket : state.queue) {
        out.writeLong(bucket);
      }
      out.writeBoolean(state.hasTs);
      out.writeLong(state.maxTs);
      out.writeBoolean(state.hasEvent);
      out.writeLong(state.maxEvent);
      for (int i = 0; i < state.sums.length; i++) {
        out.writeBoolean(state.summed[i]);
        out.writeDouble(state.sums[i]);
      }
      out.writeBoolean(state.spread);
      out.writeLong(state.slowest);
      out.writeLong(state.fastest);
      long[] partitions = state.partitions.toLongArray();
      out.writeInt(partitions.length);
      for (long word : partitions) {
        out.writeLong(word);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  /** Reads {@code stored} into {@code state}, a zero state of the same spec. */
  static void read(byte[] stored, Observation.State state) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(stored))) {
      state.rows = in.readLong();
      state.deadLetters = in.readLong();
      state.firings = in.readLong();
      for (int i = 0; i < state.counts.length; i++) {
        state.counts[i] = in.readLong();
      }
      for (int i = 0; i < state.buckets.length; i++) {
        state.buckets[i] = in.readLong();
      }
      for (int i = 0; i < state.queue.length; i++) {
        state.queue[i] = in.readLong();
      }
      state.hasTs = in.readBoolean();
      state.maxTs = in.readLong();
      state.hasEvent = in.readBoolean();
      state.maxEvent = in.readLong();
      for (int i = 0; i < state.sums.length; i++) {
        state.summed[i] = in.readBoolean();
        state.sums[i] = in.readDouble();
      }
      state.spread = in.readBoolean();
      state.slowest = in.readLong();
      state.fastest = in.readLong();
      long[] partitions = new long[in.readInt()];
      for (int i = 0; i < partitions.length; i++) {
        partitions[i] = in.readLong();
      }
      state.partitions = BitSet.valueOf(partitions);
      state.placed = !state.partitions.isEmpty();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
