package io.wmobs.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Map;

/**
 * Substreams' per-key rules, without Spark: the out-of-order judge, the TTL and the idle
 * clocks over one partition's rows and the state of their keys ({@code
 * wmobs/policy/_python/_substream_judge.py} is the Python engine's copy; both answer to {@code
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

  /** Judges rows that come one at a time, each key's in arrival order (see {@link Sorted}). */
  public Sorted sorted(Map<Long, long[]> state, long nowMs) {
    return new Sorted(state, nowMs);
  }

  /**
   * The judge of rows that come one at a time, each key's in arrival order (a task's rows
   * sorted by arrival, keys interleaved; or each key's together): {@link #row} judges one
   * against its key's watermark, {@link #finish} ends the micro-batch. {@code state} is
   * updated as a key's rows end or another key's row comes (new maximum, seen now, no longer
   * idle; a new key only if one of its rows counted), and a key's next row starts from there.
   */
  public final class Sorted {
    /** Where a key's state says this micro-batch judged its rows (the state's 4th long). */
    private static final int TOUCHED = 3;

    private final Map<Long, long[]> state;
    private final long nowMs;
    private boolean open;
    private long key;
    private long[] known;
    private long start = NONE; // the key's largest system timestamp before its current rows
    private long best = NONE; // the largest candidate timestamp of its current rows
    /** The last row's system timestamp. */
    public long system;
    /** The last row's verdict, with the out-of-order bit where it is behind. */
    public long verdict;
    /**
     * How far the last row is behind its key's largest system timestamp before it (0: not, or
     * none yet; -1: not in play).
     */
    public long behind;

    private Sorted(Map<Long, long[]> state, long nowMs) {
      this.state = state;
      this.nowMs = nowMs;
    }

    /** Judges one row: {@code k}'s, with system timestamp {@code time} and {@code bits}. */
    public void row(long k, long time, long bits) {
      if (!open || k != key) {
        close();
        open = true;
        key = k;
        known = state.get(k);
        start = known == null ? NONE : known[0];
        best = NONE;
      }
      boolean candidate = (bits & candidateBits) == 0;
      long before = Math.max(best, start);
      boolean hasMark = before != NONE;
      long watermark = hasMark ? before - toleranceUs : NONE;
      boolean late = candidate && hasMark && time < watermark;
      system = late && !drop ? watermark : time;
      behind = candidate ? (hasMark ? Math.max(before - time, 0) : 0) : -1;
      verdict = late ? bits | oooBit : bits;
      if (candidate) {
        best = Math.max(best, time);
      }
    }

    /**
     * Ends the micro-batch: the smallest and the largest of its keys' largest system
     * timestamps ({@link #NONE} for no key with one).
     */
    public long[] finish() {
      close();
      long slowest = NONE;
      long fastest = NONE;
      for (long[] s : state.values()) {
        if (s.length > TOUCHED && s[TOUCHED] != 0) {
          s[TOUCHED] = 0; // for the next micro-batch on the same state
          slowest = slowest == NONE ? s[0] : Math.min(slowest, s[0]);
          fastest = Math.max(fastest, s[0]);
        }
      }
      return new long[] {slowest, fastest};
    }

    private void close() {
      if (!open) {
        return;
      }
      open = false;
      long last = Math.max(best, start);
      if (known != null) {
        if (known.length <= TOUCHED) {
          known = Arrays.copyOf(known, TOUCHED + 1);
          state.put(key, known);
        }
      } else if (last != NONE) {
        known = new long[TOUCHED + 1];
        state.put(key, known);
      } else {
        return;
      }
      known[0] = last;
      known[1] = nowMs;
      known[2] = -1;
      known[TOUCHED] = 1;
    }
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
}
