package io.wmobs.spark;

import io.wmobs.spark.SubstreamBeans.In;
import io.wmobs.spark.SubstreamBeans.KeyState;
import io.wmobs.spark.SubstreamBeans.Out;
import java.io.Serializable;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;

/**
 * One key's judge, whichever stateful operator of Spark's calls it: a key's rows of the
 * micro-batch in arrival order, judged one at a time as Spark takes them; or, for a key
 * without rows whose time came, its idle clock moved on or the key forgotten. What it keeps of
 * a key goes through a {@link Store}: Spark's {@code GroupState} under {@code
 * flatMapGroupsWithState}, a value state and timers under {@code transformWithState}.
 */
final class KeyJudge implements Serializable {
  private static final long serialVersionUID = 1L;

  /** What an operator keeps of one key, and when it calls the judge again without rows. */
  interface Store {
    /** The micro-batch's processing time. */
    long now();

    /** The key's clock, or null for a key not held. */
    KeyState get();

    /** Keeps {@code state}; {@code dueMs}: when to call again without rows (-1: never). */
    void keep(KeyState state, long dueMs);

    /** Forgets the key. */
    void remove();
  }

  private final Substreams.Settings settings;
  private final SubstreamRules rules;
  private final byte[] placeholder;
  private final Substreams.Legacy legacy;
  /**
   * The largest moved clock a synthetic row of this task carried (one copy per task; set in
   * {@link #check}, since a deserialized copy does not run field initializers).
   */
  private transient long carried;
  private transient boolean checked;
  /** How many of a key's rows are sorted on the heap ({@link KeyRows#heapRows}). */
  private transient int heapRows;

  KeyJudge(Substreams.Settings settings, byte[] placeholder, Substreams.Legacy legacy) {
    this.settings = settings;
    this.rules = settings.rules();
    this.placeholder = placeholder;
    this.legacy = legacy;
  }

  private void check() {
    if (!checked) {
      legacy.check();
      heapRows = KeyRows.heapRows();
      carried = SubstreamRules.NONE;
      checked = true;
    }
  }

  /** The clock of a key held as {@code state}, or null where it is not held or was not seen
   * for the TTL. */
  private long[] clock(KeyState state, long now) {
    long[] clock = state == null ? null : state.clock();
    if (clock != null && settings.ttlMs() >= 0 && clock[1] < now - settings.ttlMs()) {
      return null; // not seen for the TTL: the key starts afresh
    }
    return clock;
  }

  /** A key's rows, judged. */
  Iterator<Out> rows(long key, Iterator<In> rows, Store store) {
    check();
    long now = store.now();
    KeyState held = store.get();
    return new Rows(key, clock(held, now), held != null, now, rows, store);
  }

  /** A key without rows whose time came: forgotten, or its idle clock moved on. */
  Iterator<Out> timedOut(Store store) {
    check();
    long now = store.now();
    long[] clock = clock(store.get(), now);
    if (clock == null || settings.idleTimeoutMs() < 0) {
      store.remove();
      return Collections.emptyIterator();
    }
    int moved = IdleClock.advance(clock, now, settings.idleTimeoutMs());
    keep(store, clock, now);
    if (moved == IdleClock.ACTIVE) {
      return Collections.emptyIterator();
    }
    // The watermark takes the largest clock: a task's synthetic rows carry only what moves
    // it past what they carried before, and every firing.
    if (carried != SubstreamRules.NONE && clock[0] <= carried && moved != IdleClock.FIRED) {
      return Collections.emptyIterator();
    }
    carried = carried == SubstreamRules.NONE ? clock[0] : Math.max(carried, clock[0]);
    Out synthetic = new Out();
    synthetic.setTs(clock[0]);
    synthetic.setVerdict(0);
    synthetic.setIdle(moved == IdleClock.FIRED ? 1 : 0);
    synthetic.setRow(placeholder);
    return List.of(synthetic).iterator();
  }

  /** The key's state saved, and when it is called again without rows, if ever. */
  private void keep(Store store, long[] clock, long now) {
    if (!settings.timeouts()) {
      store.keep(KeyState.of(clock), -1);
      return;
    }
    long due = Long.MAX_VALUE;
    if (settings.idleTimeoutMs() >= 0) {
      due = clock[2] < 0 ? clock[1] + settings.idleTimeoutMs() : now + settings.checkIntervalMs();
    }
    if (settings.ttlMs() >= 0) {
      due = Math.min(due, clock[1] + settings.ttlMs());
    }
    store.keep(KeyState.of(clock), now + Math.max(due - now, 1));
  }

  /**
   * A key's rows, judged in arrival order (then their place in their input partition), its
   * state saved after the last. Spark hands a key's rows in the order its shuffle brought
   * them: they are sorted here, a key at a time (Spark refuses a sort in a streaming plan).
   */
  private final class Rows implements Iterator<Out> {
    private final long key;
    private final Iterator<In> rows;
    private final Store store;
    private final long now;
    private final Map<Long, long[]> keys = new HashMap<>(2);
    private final SubstreamRules.Sorted judged;
    private final boolean forgotten;

    Rows(long key, long[] clock, boolean held, long now, Iterator<In> input, Store store) {
      this.key = key;
      this.rows = KeyRows.sorted(input, heapRows);
      this.store = store;
      this.now = now;
      this.forgotten = clock == null && held;
      if (clock != null) {
        keys.put(key, clock);
      }
      judged = rules.sorted(keys, now);
    }

    @Override
    public boolean hasNext() {
      return rows.hasNext();
    }

    @Override
    public Out next() {
      if (!rows.hasNext()) {
        throw new NoSuchElementException();
      }
      In in = rows.next();
      Long ts = in.getTs();
      judged.row(key, ts == null ? 0 : ts, in.getVerdict());
      Out out = new Out();
      out.setTs(ts == null ? null : judged.system);
      out.setVerdict(judged.verdict);
      out.setIdle(in.getIdle());
      out.setLateness(judged.behind >= 0 ? judged.behind : null);
      out.setRow(in.getRow());
      if (!rows.hasNext()) {
        long[] spread = judged.finish();
        if (spread[0] != SubstreamRules.NONE) {
          out.setSlowest(spread[0]);
          out.setFastest(spread[1]);
        }
        long[] after = keys.get(key);
        if (after != null) {
          keep(store, after, now);
        } else if (forgotten) {
          store.remove();
        }
      }
      return out;
    }
  }
}
