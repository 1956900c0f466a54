package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.UnaryOperator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.SerializableConfiguration;

/**
 * The idle-timeout heartbeat as a streaming source of the JVM engine ({@code
 * spark.readStream.format("io.wmobs.spark.IdleHeartbeat")}): what {@code
 * wmobs/policy/_python/_idle_source.py} is for the Python engine, with the same offsets and
 * rows, so that idle timeout needs no Python data source (Spark 3.5 has none).
 *
 * <p>On the driver, {@link Stream#latestOffset(Offset, ReadLimit)} decides whether a tick is
 * due: only once the query has had no input for the timeout (judged from its offsets log: a
 * batch had input when a source other than the heartbeat moved its offset). A tick is a new
 * offset ({@code {"wmobs_idle_tick": <ms>, "idle_since": <ms>}}), so Spark runs a micro-batch
 * although no other source has data. In the task, the tick becomes the one synthetic row
 * ({@code wmobs_idle_bucket INT, wmobs_idle_ts_us LONG, wmobs_idle_firings LONG}) that moves the
 * watermark ({@link IdleClock} from the batch's watermark).
 *
 * <p>With substreams ({@code mode} substreams) the JVM engine's keys keep their clocks with
 * Spark's processing-time timeouts ({@link Substreams}), which make Spark run a micro-batch at
 * every trigger. The source yields no rows; it refuses {@code Trigger.AvailableNow}, which such
 * timeouts keep running for ever (Spark asks for another micro-batch after each one), and on
 * Spark 3.5, which reports no observed metrics for a micro-batch without new data, it ticks in
 * every micro-batch, so that the firings of the timeouts Spark runs there are counted.
 *
 * <p>Options: {@code mode} (global or substreams), {@code checkpoint} (the query's; "" for the
 * one Spark gives the source), {@code timeout_ms}, {@code interval_ms}, {@code delay_ms} (the
 * out-of-order tolerance).
 */
public final class IdleHeartbeat implements TableProvider {
  static final String TICK = IdleClock.TICK;
  static final String IDLE_SINCE = "idle_since";
  static final String AVAILABLE_NOW = "available_now";
  /** Why substreams with timeouts refuse {@code Trigger.AvailableNow} (the Python side too). */
  static final String AVAILABLE_NOW_REFUSED =
      "wmobs: substreams with idle_timeout or substream_ttl keep each key's clock with Spark's"
          + " processing-time timeouts, which Spark runs a micro-batch for at every trigger: a"
          + " Trigger.AvailableNow query would never end. Run it with a processing-time trigger"
          + " (trigger(processingTime=...)), or without idle_timeout and substream_ttl.";
  static final StructType SCHEMA =
      new StructType()
          .add("wmobs_idle_bucket", DataTypes.IntegerType)
          .add("wmobs_idle_ts_us", DataTypes.LongType)
          .add("wmobs_idle_firings", DataTypes.LongType);
  private static final ObjectMapper JSON = new ObjectMapper();

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> options) {
    return new HeartbeatTable();
  }

  /**
   * A tick: when it was (ms), since when the stream was idle (globally; -1 otherwise), and
   * whether a {@code Trigger.AvailableNow} run made it (it then moves no clock of substreams
   * in a micro-batch that read input, as a global tick never does; journaled in the offsets
   * log, so a batch run again decides the same).
   */
  static final class Tick extends Offset implements Serializable {
    private static final long serialVersionUID = 1L;
    final long tick;
    final long idleSince;
    final boolean availableNow;

    Tick(long tick, long idleSince, boolean availableNow) {
      this.tick = tick;
      this.idleSince = idleSince;
      this.availableNow = availableNow;
    }

    static Tick parse(String json) {
      try {
        JsonNode node = JSON.readTree(json);
        return new Tick(
            node.path(TICK).asLong(0),
            node.path(IDLE_SINCE).asLong(-1),
            node.path(AVAILABLE_NOW).asBoolean(false));
      } catch (IOException e) {
        throw new UncheckedIOException("wmobs: not a heartbeat offset: " + json, e);
      }
    }

    @Override
    public String json() {
      ObjectNode node = JSON.createObjectNode().put(TICK, tick);
      if (idleSince >= 0) {
        node.put(IDLE_SINCE, idleSince);
      }
      if (availableNow) {
        node.put(AVAILABLE_NOW, true);
      }
      return node.toString();
    }
  }

  private static final class HeartbeatTable implements Table, SupportsRead {
    @Override
    public String name() {
      return "wmobs_idle_heartbeat";
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      Map<String, String> settings = new TreeMap<>(options.asCaseSensitiveMap());
      return () -> new HeartbeatScan(settings);
    }
  }

  private static final class HeartbeatScan implements Scan {
    private final Map<String, String> options;

    HeartbeatScan(Map<String, String> options) {
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return SCHEMA;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new Stream(options, checkpointLocation);
    }
  }

  /** What a task needs to turn a tick into rows. */
  private static final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;
    final boolean global;
    final String checkpoint;
    final long timeoutMs;
    final long intervalMs;
    final long delayMs;
    /** Substreams on a Spark whose micro-batches without new data lose their observations. */
    final boolean tickEveryBatch;
    final Broadcast<SerializableConfiguration> conf;

    Settings(Map<String, String> options, String sourceCheckpoint) {
      global = !"substreams".equals(options.getOrDefault("mode", "global"));
      String configured =
          Hadoop.qualified(options.getOrDefault("checkpoint", "").replaceAll("/+$", ""));
      // Spark gives the source <query checkpoint>/sources/<n>: the query's is two levels up.
      checkpoint =
          configured.isEmpty() ? new Path(sourceCheckpoint).getParent().getParent().toString()
              : configured;
      timeoutMs = Long.parseLong(options.get("timeout_ms"));
      intervalMs = Long.parseLong(options.get("interval_ms"));
      delayMs = Long.parseLong(options.getOrDefault("delay_ms", "0"));
      tickEveryBatch = !global && org.apache.spark.package$.MODULE$.SPARK_VERSION().startsWith("3.");
      conf = Hadoop.sessionConf();
    }
  }

  private static final class Stream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private final Settings settings;
    private final Activity activity;
    private long nextRefresh;
    /** Under {@code Trigger.AvailableNow}: the time the run started, its one "now"; else -1. */
    private long availableNowAt = -1;

    Stream(Map<String, String> options, String sourceCheckpoint) {
      settings = new Settings(options, sourceCheckpoint);
      activity = new Activity(settings.checkpoint, settings.conf.value().value());
    }

    @Override
    public Offset initialOffset() {
      return new Tick(0, -1, false);
    }

    /**
     * A {@code Trigger.AvailableNow} run sees the heartbeat as of its start: at most one tick,
     * decided then (without this Spark falls back to a single micro-batch for the whole query).
     */
    @Override
    public void prepareForTriggerAvailableNow() {
      if (!settings.global) {
        throw new IllegalStateException(AVAILABLE_NOW_REFUSED);
      }
      availableNowAt = System.currentTimeMillis();
    }

    @Override
    public Offset deserializeOffset(String json) {
      return Tick.parse(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      return ReadLimit.allAvailable();
    }

    @Override
    public Offset latestOffset() {
      throw new UnsupportedOperationException("wmobs: latestOffset(start, limit) only");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
      Tick start = startOffset == null ? new Tick(0, -1, false) : Tick.parse(startOffset.json());
      boolean availableNow = availableNowAt >= 0;
      long now = availableNow ? availableNowAt : System.currentTimeMillis();
      if (!settings.global) { // substreams: Spark's timeouts run the micro-batches
        return settings.tickEveryBatch && now > start.tick ? new Tick(now, -1, false) : start;
      }
      if (now - start.tick < settings.intervalMs) {
        return start;
      }
      boolean refreshed = now >= nextRefresh;
      if (refreshed) {
        refresh(now);
      }
      long last = activity.lastInputMs;
      if (last != Long.MIN_VALUE && now >= last + settings.timeoutMs && !refreshed) {
        // A tick is due by what the log said at the last look: input may have come since (a
        // micro-batch between two looks). Looked at again before it is given.
        refresh(now);
      }
      if (activity.lastInputMs == Long.MIN_VALUE) {
        return start; // no input yet: nothing to close
      }
      long idleSince = activity.lastInputMs + settings.timeoutMs;
      return now < idleSince ? start : new Tick(now, idleSince, availableNow);
    }

    private void refresh(long now) {
      try {
        activity.refresh();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      nextRefresh = now + settings.intervalMs;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      Tick from = Tick.parse(start.json());
      Tick to = Tick.parse(end.json());
      if (!settings.global || from.tick == to.tick) {
        return new InputPartition[0];
      }
      // Planned on the query's thread: its micro-batch, for a task of any thread's job.
      return new InputPartition[] {new Beat(from, to, MicroBatch.onThisThread())};
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Factory(settings);
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {}
  }

  /** A tick, and the micro-batch it was planned in (null: the task's own properties). */
  private record Beat(Tick start, Tick end, MicroBatch told) implements InputPartition {}

  private record Factory(Settings settings) implements PartitionReaderFactory {
    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      Beat beat = (Beat) partition;
      List<InternalRow> rows = new ArrayList<>();
      UnaryOperator<String> property = MicroBatch.of(beat.told(), TaskContext.get());
      if (readInput(property)) {
        // The query is not idle: a source had input in this very micro-batch (a tick decided
        // as a restarted query or an AvailableNow run met a backlog). No clock moves, or the
        // backlog's rows that later micro-batches read would be judged against it.
      } else {
        long[] synthetic = synthetic(beat, property);
        if (synthetic != null) {
          rows.add(new GenericInternalRow(new Object[] {null, synthetic[0], synthetic[1]}));
        }
      }
      return new PartitionReader<>() {
        private int next = -1;

        @Override
        public boolean next() {
          return ++next < rows.size();
        }

        @Override
        public InternalRow get() {
          return rows.get(next);
        }

        @Override
        public void close() {}
      };
    }

    /** Whether a source other than the heartbeat moved its offset in the running batch. */
    private boolean readInput(UnaryOperator<String> property) {
      long batch = Long.parseLong(property.apply(MicroBatch.BATCH_ID));
      Configuration hadoop = settings.conf.value().value();
      try {
        List<String> now = sources(settings.checkpoint, batch, hadoop);
        List<String> before = batch == 0 ? null : sources(settings.checkpoint, batch - 1, hadoop);
        return IdleClock.readInput(now, before);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    /** {system timestamp µs, firings} of the tick's synthetic row, or null: nothing to move. */
    private long[] synthetic(Beat beat, UnaryOperator<String> property) {
      if (beat.end().idleSince < 0) {
        return null;
      }
      long[] times;
      try {
        times =
            BatchTimes.of(
                new Hadoop.Checkpoint(settings.checkpoint, ""),
                property,
                settings.conf.value().value());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      if (times[0] == Long.MIN_VALUE) {
        return null; // no watermark yet
      }
      long idleSince = beat.end().idleSince;
      long previous = beat.start().tick;
      long largestUs = (times[0] + settings.delayMs) * 1000;
      long[] clock = {largestUs, idleSince - settings.timeoutMs, previous >= idleSince ? previous : -1};
      int moved = IdleClock.advance(clock, beat.end().tick, settings.timeoutMs);
      if (moved == IdleClock.ACTIVE || (moved == IdleClock.MOVED && clock[0] == largestUs)) {
        return null;
      }
      return new long[] {clock[0], moved == IdleClock.FIRED ? 1 : 0};
    }
  }

  /** The source lines (one per source, "-" for none) of {@code offsets/<batch>}. */
  static List<String> sources(String checkpoint, long batch, Configuration hadoop)
      throws IOException {
    List<String> lines =
        BatchTimes.readText(checkpoint + "/offsets/" + batch, hadoop).lines().toList();
    return lines.subList(Math.min(2, lines.size()), lines.size());
  }

  /**
   * When the query last had input, from its offsets log ({@code
   * wmobs/policy/_python/_idle.py}'s {@code InputActivity}): each {@code offsets/<id>} read once,
   * as it appears; a batch had input when a source other than the heartbeat moved its offset.
   */
  private static final class Activity {
    private final String checkpoint;
    private final Configuration hadoop;
    long lastInputMs = Long.MIN_VALUE;
    private long scanned = -1;
    private List<String> previous;

    Activity(String checkpoint, Configuration hadoop) {
      this.checkpoint = checkpoint;
      this.hadoop = hadoop;
    }

    void refresh() throws IOException {
      List<Long> batches = new ArrayList<>();
      for (Hadoop.Entry entry : Hadoop.list(new Path(checkpoint + "/offsets"), hadoop)) {
        if (entry.name().matches("[0-9]+")) {
          batches.add(Long.parseLong(entry.name()));
        }
      }
      batches.sort(null);
      for (long batch : batches) {
        if (batch <= scanned) {
          continue;
        }
        List<String> lines;
        long timestamp;
        try {
          lines = BatchTimes.readText(checkpoint + "/offsets/" + batch, hadoop).lines().toList();
          if (lines.size() < 2) {
            break; // being written: read it next time
          }
          timestamp = JSON.readTree(lines.get(1)).path("batchTimestampMs").asLong(0);
        } catch (IOException e) {
          break; // being written: read it next time
        }
        List<String> sources = lines.subList(2, lines.size());
        // The first batch read: an older log's first retained batch counts as input.
        if ((previous == null && batch != 0) || IdleClock.readInput(sources, previous)) {
          lastInputMs = timestamp;
        }
        previous = sources;
        scanned = batch;
      }
    }
  }
}
