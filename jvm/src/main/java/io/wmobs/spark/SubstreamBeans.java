package io.wmobs.spark;

import java.io.Serializable;

/**
 * The JavaBeans of substreams' state function ({@link Substreams}): a row on its way in, a row
 * on its way out, and a key's state, as Spark's bean encoders read and write them (Spark keeps
 * the state in its state store by these beans' property names and types, not their classes').
 */
public final class SubstreamBeans {
  private SubstreamBeans() {}

  /** A row on its way into the state function. */
  public static final class In implements Serializable {
    private static final long serialVersionUID = 1L;
    private Long ts;
    private long arrival;
    private long seq;
    private long verdict;
    private long idle;
    private byte[] row;

    public Long getTs() {
      return ts;
    }

    public void setTs(Long ts) {
      this.ts = ts;
    }

    public long getArrival() {
      return arrival;
    }

    public void setArrival(long arrival) {
      this.arrival = arrival;
    }

    public long getSeq() {
      return seq;
    }

    public void setSeq(long seq) {
      this.seq = seq;
    }

    public long getVerdict() {
      return verdict;
    }

    public void setVerdict(long verdict) {
      this.verdict = verdict;
    }

    public long getIdle() {
      return idle;
    }

    public void setIdle(long idle) {
      this.idle = idle;
    }

    public byte[] getRow() {
      return row;
    }

    public void setRow(byte[] row) {
      this.row = row;
    }
  }

  /** A row on its way out: judged, or synthetic (an idle clock moved on). */
  public static final class Out implements Serializable {
    private static final long serialVersionUID = 1L;
    private Long ts;
    private long verdict;
    private long idle = Substreams.REAL;
    private Long lateness;
    private Long slowest;
    private Long fastest;
    private byte[] row;

    public Long getTs() {
      return ts;
    }

    public void setTs(Long ts) {
      this.ts = ts;
    }

    public long getVerdict() {
      return verdict;
    }

    public void setVerdict(long verdict) {
      this.verdict = verdict;
    }

    public long getIdle() {
      return idle;
    }

    public void setIdle(long idle) {
      this.idle = idle;
    }

    public Long getLateness() {
      return lateness;
    }

    public void setLateness(Long lateness) {
      this.lateness = lateness;
    }

    public Long getSlowest() {
      return slowest;
    }

    public void setSlowest(Long slowest) {
      this.slowest = slowest;
    }

    public Long getFastest() {
      return fastest;
    }

    public void setFastest(Long fastest) {
      this.fastest = fastest;
    }

    public byte[] getRow() {
      return row;
    }

    public void setRow(byte[] row) {
      this.row = row;
    }
  }

  /**
   * A key's state in Spark's state store: its largest system timestamp (µs), when it last had
   * input, and up to when its idle clock has run (-1: not idle since).
   */
  public static class KeyState implements Serializable {
    private static final long serialVersionUID = 1L;
    private long largestUs;
    private long seenMs;
    private long idleUntilMs = -1;

    static KeyState of(long[] clock) {
      KeyState state = new KeyState();
      state.largestUs = clock[0];
      state.seenMs = clock[1];
      state.idleUntilMs = clock[2];
      return state;
    }

    long[] clock() {
      return new long[] {largestUs, seenMs, idleUntilMs};
    }

    public long getLargestUs() {
      return largestUs;
    }

    public void setLargestUs(long largestUs) {
      this.largestUs = largestUs;
    }

    public long getSeenMs() {
      return seenMs;
    }

    public void setSeenMs(long seenMs) {
      this.seenMs = seenMs;
    }

    public long getIdleUntilMs() {
      return idleUntilMs;
    }

    public void setIdleUntilMs(long idleUntilMs) {
      this.idleUntilMs = idleUntilMs;
    }
  }

  /**
   * A key's state under {@code transformWithState}: its {@link KeyState} and when its timer is
   * set for (-1: none), so that the timer is replaced without Spark's {@code listTimers}, which
   * holds an iterator open per call until the task ends.
   */
  public static final class TimedKeyState extends KeyState {
    private static final long serialVersionUID = 1L;
    private long timerMs = -1;

    static TimedKeyState of(KeyState state, long timerMs) {
      TimedKeyState timed = new TimedKeyState();
      timed.setLargestUs(state.getLargestUs());
      timed.setSeenMs(state.getSeenMs());
      timed.setIdleUntilMs(state.getIdleUntilMs());
      timed.timerMs = timerMs;
      return timed;
    }

    public long getTimerMs() {
      return timerMs;
    }

    public void setTimerMs(long timerMs) {
      this.timerMs = timerMs;
    }
  }
}
