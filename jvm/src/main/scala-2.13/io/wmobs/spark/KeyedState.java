package io.wmobs.spark;

import io.wmobs.spark.SubstreamBeans.In;
import io.wmobs.spark.SubstreamBeans.KeyState;
import io.wmobs.spark.SubstreamBeans.Out;
import io.wmobs.spark.SubstreamBeans.TimedKeyState;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Substreams in Spark 4's {@code transformWithState}, where the query's state store is
 * RocksDB (the only store that operator runs on): each key's clock in a value state and, with
 * an idle timeout or a TTL, one processing-time timer per key, which Spark keeps in an index by
 * time and reads only as they fall due. Under {@code flatMapGroupsWithState}, every key held is
 * read at every micro-batch to find those whose timeout passed. The Spark 3.5 copy of this
 * class never chooses it.
 */
final class KeyedState {
  private static final String ROCKSDB = ".RocksDBStateStoreProvider";
  private static final String PROVIDER = "spark.sql.streaming.stateStore.providerClass";

  private KeyedState() {}

  /** Whether substreams run in {@code transformWithState}: the session keeps state in RocksDB. */
  static boolean chosen(SparkSession spark) {
    return spark.conf().get(PROVIDER, "").endsWith(ROCKSDB);
  }

  /**
   * Where a micro-batch's plan (its operators' names: {@code operators}) has substreams in
   * {@code transformWithState}, chosen from the session's provider when the policy was applied,
   * and the query's own configuration, into which Spark restored the provider its checkpoint
   * began with, has another: why the query stops; else null.
   */
  static String plannedForAnotherStore(java.util.Set<String> operators) {
    String provider = org.apache.spark.sql.internal.SQLConf.get().getConfString(PROVIDER, "");
    if (!operators.contains("TransformWithState") || provider.endsWith(ROCKSDB)) {
      return null;
    }
    return "wmobs: substreams were planned in Spark's transformWithState, which runs on RocksDB"
        + " only, as the session sets " + PROVIDER + " to it; but Spark restores the state"
        + " store provider a checkpoint began with, whatever the session sets, and this query's"
        + " checkpoint began with " + (provider.isEmpty() ? "Spark's default" : provider)
        + ". Apply the policy with the session's setting as the checkpoint began (unset it),"
        + " or start the query on a new checkpoint.";
  }

  /** {@code grouped} judged per key by {@code judge}, in Spark's {@code transformWithState}. */
  static Dataset<Out> judge(
      KeyValueGroupedDataset<Long, In> grouped, KeyJudge judge, boolean timeouts) {
    return grouped.transformWithState(
        new Processor(judge),
        timeouts ? TimeMode.ProcessingTime() : TimeMode.None(),
        OutputMode.Append(),
        Encoders.bean(Out.class));
  }

  /** The key's judge over a value state and its timer. */
  static final class Processor extends StatefulProcessor<Long, In, Out> {
    private static final long serialVersionUID = 1L;
    private final KeyJudge judge;
    private transient ValueState<TimedKeyState> clock;

    Processor(KeyJudge judge) {
      this.judge = judge;
    }

    /** What a plan shows of it, and how {@link RealTimeMode} finds it there. */
    @Override
    public String toString() {
      return RealTimeMode.KEYED_STATE;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      clock =
          getHandle()
              .getValueState("clock", Encoders.bean(TimedKeyState.class), TTLConfig.NONE());
    }

    @Override
    public Iterator<Out> handleInputRows(Long key, Iterator<In> rows, TimerValues timers) {
      return CollectionConverters.asScala(
          judge.rows(key, CollectionConverters.asJava(rows), store(timers, -1)));
    }

    @Override
    public Iterator<Out> handleExpiredTimer(
        Long key, TimerValues timers, ExpiredTimerInfo expired) {
      return CollectionConverters.asScala(
          judge.timedOut(store(timers, expired.getExpiryTimeInMs())));
    }

    /** The key's state; {@code firing}: the timer Spark is firing (and deletes), or -1. */
    private KeyJudge.Store store(TimerValues timers, long firing) {
      return new KeyJudge.Store() {
        private TimedKeyState held;
        private boolean read;

        @Override
        public long now() {
          return timers.getCurrentProcessingTimeInMs();
        }

        @Override
        public KeyState get() {
          if (!read) {
            held = clock.get(); // null where the key is not held
            read = true;
          }
          return held;
        }

        @Override
        public void keep(KeyState value, long dueMs) {
          forgetTimer();
          // Spark fires a timer at a micro-batch whose time has reached it, as
          // flatMapGroupsWithState does a timeout that the micro-batch's time has passed.
          long timer = dueMs >= 0 ? dueMs + 1 : -1;
          if (timer >= 0) {
            getHandle().registerTimer(timer);
          }
          held = TimedKeyState.of(value, timer);
          clock.update(held);
        }

        @Override
        public void remove() {
          forgetTimer();
          held = null;
          clock.clear();
        }

        private void forgetTimer() {
          KeyState before = get();
          long at = before == null ? -1 : ((TimedKeyState) before).getTimerMs();
          if (at >= 0 && at != firing) {
            getHandle().deleteTimer(at);
          }
        }
      };
    }
  }
}
