package io.wmobs.spark;

import java.util.List;

/**
 * The idle-timeout rule, for one clock ({@code wmobs/policy/_python/_idle.py} is the Python
 * engine's copy; both answer to {@code tests/reference/idle_clock.json}).
 *
 * <p>A clock is a stream's (or a key's) largest system timestamp {@code M}, when it last had
 * input {@code a} (processing time), and up to when its idle clock has run ({@code -1}: not
 * idle since its last input). Once processing time reaches {@code a + timeout}, the clock runs
 * on: at the start of the idle period it jumps by the stream's lag behind processing time at
 * its last input ({@code a - M}, within 0 and the timeout), then moves one for one with
 * processing time. Each idle period that moves a clock is one firing.
 */
public final class IdleClock {
  /** {@link #advance}: the clock is not idle (not moved). */
  public static final int ACTIVE = -1;
  /** {@link #advance}: the clock moved on in an idle period that had already started. */
  public static final int MOVED = 0;
  /** {@link #advance}: the clock moved at the start of an idle period: one firing. */
  public static final int FIRED = 1;

  /** The key of the heartbeat's offset (the processing time of its tick, ms). */
  public static final String TICK = "wmobs_idle_tick";

  private IdleClock() {}

  /**
   * Whether a batch had input: a source other than the heartbeat moved its offset from the
   * batch before ({@code before}; null for none: any source with an offset). {@code
   * wmobs/policy/_python/_idle.py}'s {@code read_input} is the Python engine's.
   */
  public static boolean readInput(List<String> now, List<String> before) {
    boolean moved = false;
    if (before == null) {
      for (String line : now) {
        moved |= !line.strip().equals("-") && !line.contains(TICK);
      }
      return moved;
    }
    for (int i = 0; i < Math.min(now.size(), before.size()); i++) {
      String line = now.get(i);
      String was = before.get(i);
      moved |= !line.equals(was) && !line.contains(TICK) && !was.contains(TICK);
    }
    return moved;
  }

  /** How far a clock jumps when its idle period starts (ms). */
  public static long jumpMs(long lastInputMs, long largestMs, long timeoutMs) {
    return Math.min(Math.max(lastInputMs - largestMs, 0), timeoutMs);
  }

  /**
   * Moves one clock to {@code nowMs}, in place: {@code clock} is {max_us, seen_ms,
   * advanced_ms}. {@link #ACTIVE}, {@link #MOVED} or {@link #FIRED}.
   */
  public static int advance(long[] clock, long nowMs, long timeoutMs) {
    long idleSince = clock[1] + timeoutMs;
    if (nowMs < idleSince) {
      return ACTIVE;
    }
    boolean starting = clock[2] < 0;
    long jump = starting ? jumpMs(clock[1], Math.floorDiv(clock[0], 1000L), timeoutMs) : 0;
    long begin = starting ? idleSince : Math.max(clock[2], idleSince);
    clock[0] += (Math.max(nowMs - begin, 0) + jump) * 1000;
    clock[2] = nowMs;
    return starting ? FIRED : MOVED;
  }
}
