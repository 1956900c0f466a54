package io.wmobs.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Map;

/**
 * Substreams' per-key rules, without Spark: the out-of-order judge, the TTL and the idle
 * clocks over one partition's rows and the state of their keys ({@code
 * wmobs/policy/_substream_judge.py} is the Python engine's copy; both answer to {@code
 * tests/reference/}).
 *
 * <p>Per key, in arrival order (ties keep input order): the key's watermark is the largest
 * system timestamp of its earlier candidate rows (and of its state) minus the tolerance; a
 * candidate row below it is out of order, adjusted up to it or dropped. Neither an adjusted
 * nor a dropped row raises the key's maximum. State per key: {@code {max_us, seen_ms,
 * advanced_ms}} (largest system timestamp, when it last had input, up to when its idle clock
 * has run or -1).
 */
public final class SubstreamRules implements Serializable {
  private static final long serialVersionUID = 1L;
  /** No maximum yet. */
  public static final long NONE = Long.MIN_VALUE;

  final long toleranceUs;
  final boolean drop;
  final long ttlMs; // -1: none
  final long idleTimeoutMs; // -1: none
  final long candidateBits;
  final long oooBit;

  /**
   * {@code candidateBits}: verdict bits of rows no longer in play; {@code oooBit}: the bit of an
   * out-of-order row; {@code ttlMs} and {@code idleTimeoutMs}: -1 for none.
   */
  public SubstreamRules(
      long toleranceUs, boolean drop, long ttlMs, long idleTimeoutMs, long candidateBits, long oooBit) {
    this.toleranceUs = toleranceUs;
    this.drop = drop;
    this.ttlMs = ttlMs;
    this.idleTimeoutMs = idleTimeoutMs;
    this.candidateBits = candidateBits;
    this.oooBit = oooBit;
  }

  /** Forgets the keys not seen for the TTL (first: a key back after it starts afresh). */
  public void forget(Map<Long, long[]> state, long nowMs) {
    if (ttlMs >= 0) {
      state.values().removeIf(s -> s[1] < nowMs - ttlMs);
    }
  }

  /**
   * Judges {@code n} rows of many keys against {@code state}, which it updates (new maximum,
   * seen now, no longer idle; a new key only if one of its rows counted). Out: each row's
   * system timestamp, its verdict ({@code verdicts}, with the out-of-order bit added) and how
   * far it is behind its key's largest system timestamp before it ({@code behind}: 0 if not
   * behind or none yet, -1 for a row not in play). Returns the smallest and the largest of
   * the rows' keys' largest system timestamps after them ({@link #NONE} for no key with
   * one): how far the slowest key seen runs behind the fastest.
   */
  public long[] judge(
      int n,
      long[] keys,
      long[] arrivals,
      long[] times,
      long[] verdicts,
      Map<Long, long[]> state,
      long nowMs,
      long[] system,
      long[] behind) {
    // Each row's key as a group number (open addressing over the keys, no boxing), then the
    // rows of each group together, in input order (a counting sort).
    int slots = Integer.highestOneBit(Math.max(n, 2) * 2 - 1) * 2;
    long[] slotKey = new long[slots];
    int[] slotGroup = new int[slots];
    Arrays.fill(slotGroup, -1);
    int[] groupOf = new int[n];
    long[] groupKey = new long[n];
    int[] starts = new int[n + 2];
    int groups = 0;
    for (int i = 0; i < n; i++) {
      long k = keys[i];
      int slot = (int) (mix(k) & (slots - 1));
      while (slotGroup[slot] >= 0 && slotKey[slot] != k) {
        slot = (slot + 1) & (slots - 1);
      }
      if (slotGroup[slot] < 0) {
        slotKey[slot] = k;
        slotGroup[slot] = groups;
        groupKey[groups++] = k;
      }
      groupOf[i] = slotGroup[slot];
      starts[groupOf[i] + 2]++;
    }
    for (int g = 0; g < groups; g++) { // starts[g + 1]: where group g begins
      starts[g + 2] += starts[g + 1];
    }
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      order[starts[groupOf[i] + 1]++] = i;
    }
    int[] scratch = null;
    long slowest = NONE;
    long fastest = NONE;
    for (int g = 0; g < groups; g++) { // group g is order[starts[g], starts[g + 1])
      int from = starts[g];
      int to = starts[g + 1];
      if (!sorted(order, from, to, arrivals)) {
        scratch = scratch == null ? new int[n] : scratch;
        sortByArrival(order, from, to, arrivals, scratch);
      }
      long[] known = state.get(groupKey[g]);
      long start = known == null ? NONE : known[0];
      long best = NONE; // the largest candidate timestamp before the row
      for (int k = from; k < to; k++) {
        int i = order[k];
        boolean candidate = (verdicts[i] & candidateBits) == 0;
        long before = Math.max(best, start);
        boolean hasMark = before != NONE;
        long watermark = hasMark ? before - toleranceUs : NONE;
        boolean late = candidate && hasMark && times[i] < watermark;
        system[i] = late && !drop ? watermark : times[i];
        behind[i] = candidate ? (hasMark ? Math.max(before - times[i], 0) : 0) : -1;
        if (late) {
          verdicts[i] |= oooBit;
        }
        if (candidate) {
          best = Math.max(best, times[i]);
        }
      }
      long last = Math.max(best, start);
      if (last != NONE) {
        slowest = slowest == NONE ? last : Math.min(slowest, last);
        fastest = Math.max(fastest, last);
      }
      if (known != null) {
        known[0] = last;
        known[1] = nowMs;
        known[2] = -1;
      } else if (last != NONE) {
        state.put(groupKey[g], new long[] {last, nowMs, -1});
      }
    }
    return new long[] {slowest, fastest};
  }

  /**
   * Every key idle for the timeout has its clock moved on ({@link IdleClock}), in place.
   * {largest moved timestamp µs, firings}, or null when no clock moved (or no idle timeout).
   */
  public long[] advanceIdle(Map<Long, long[]> state, long nowMs) {
    if (idleTimeoutMs < 0) {
      return null;
    }
    long top = NONE;
    long firings = 0;
    boolean any = false;
    for (long[] clock : state.values()) {
      int moved = IdleClock.advance(clock, nowMs, idleTimeoutMs);
      if (moved != IdleClock.ACTIVE) {
        any = true;
        firings += moved;
        top = Math.max(top, clock[0]);
      }
    }
    return any ? new long[] {top, firings} : null;
  }

  /** A 64-bit finalizer (MurmurHash3's): keys that differ in their high bits spread too. */
  private static long mix(long k) {
    k = (k ^ (k >>> 33)) * 0xff51afd7ed558ccdL;
    k = (k ^ (k >>> 33)) * 0xc4ceb9fe1a85ec53L;
    return k ^ (k >>> 33);
  }

  private static boolean sorted(int[] order, int from, int to, long[] arrivals) {
    for (int k = from + 1; k < to; k++) {
      if (arrivals[order[k - 1]] > arrivals[order[k]]) {
        return false;
      }
    }
    return true;
  }

  /**
   * {@code order[from, to)} sorted by arrival, ties in the order they are in (a merge sort:
   * stable, and of the rows' numbers, not boxed).
   */
  private static void sortByArrival(int[] order, int from, int to, long[] arrivals, int[] scratch) {
    if (to - from <= 16) { // insertion sort
      for (int k = from + 1; k < to; k++) {
        int row = order[k];
        int j = k - 1;
        while (j >= from && arrivals[order[j]] > arrivals[row]) {
          order[j + 1] = order[j];
          j--;
        }
        order[j + 1] = row;
      }
      return;
    }
    int middle = (from + to) >>> 1;
    sortByArrival(order, from, middle, arrivals, scratch);
    sortByArrival(order, middle, to, arrivals, scratch);
    if (arrivals[order[middle - 1]] <= arrivals[order[middle]]) {
      return; // already in order
    }
    System.arraycopy(order, from, scratch, from, to - from);
    int left = from;
    int right = middle;
    for (int k = from; k < to; k++) {
      if (right >= to || (left < middle && arrivals[scratch[left]] <= arrivals[scratch[right]])) {
        order[k] = scratch[left++];
      } else {
        order[k] = scratch[right++];
      }
    }
  }
}
