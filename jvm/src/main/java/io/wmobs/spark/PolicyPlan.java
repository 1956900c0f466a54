package io.wmobs.spark;

import static org.apache.spark.sql.functions.call_function;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.expr;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.spark_partition_id;
import static org.apache.spark.sql.functions.struct;
import static org.apache.spark.sql.functions.timestamp_micros;
import static org.apache.spark.sql.functions.unix_micros;
import static org.apache.spark.sql.functions.when;

import com.fasterxml.jackson.core.JsonProcessingException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A time policy's plan on the JVM engine, built from SQL ({@code wmobs_time_policy}, {@link
 * PolicyTable}): the stages the Python API builds (its {@code wmobs/policy/_plan.py}), over the
 * same functions of this extension ({@link PolicyRules}, {@link Substreams}, {@link
 * ObservationAggregate}, {@link DeadLetterWriter}, {@link IdleHeartbeat}), with the same
 * internal columns, observation and metrics. Invalid time, early and late arrival, out of order
 * against the micro-batch's watermark or per key in Spark's state store; the counts, one
 * {@code observe} named {@code wmobs.policy.<name>}; dropped rows filtered out or written to the
 * dead letters; the input's columns, {@code system_timestamp} and the watermark on it.
 */
final class PolicyPlan {
  // Verdict bits and internal columns: wmobs/policy/_verdicts.py.
  static final long INVALID_DROPPED = 1;
  static final long OOO_ADJUSTED = 32;
  static final long OOO_DROPPED = 64;
  /** One verdict a row can get: its rule, its action and its bit. */
  record Verdict(String rule, String action, long bit) {
    boolean dropped() {
      return action.equals("dropped");
    }
  }

  static final List<Verdict> VERDICTS =
      List.of(
          new Verdict("invalid_time", "dropped", INVALID_DROPPED),
          new Verdict("early_arrival", "adjusted", 2),
          new Verdict("early_arrival", "dropped", 4),
          new Verdict("late_arrival", "adjusted", 8),
          new Verdict("late_arrival", "dropped", 16),
          new Verdict("out_of_order", "adjusted", OOO_ADJUSTED),
          new Verdict("out_of_order", "dropped", OOO_DROPPED));
  static final long DROPPED_BITS =
      VERDICTS.stream().filter(Verdict::dropped).mapToLong(Verdict::bit).sum();
  static final String TS = "wmobs__ts_us";
  static final String ARRIVAL = "wmobs__arrival_us";
  static final String VERDICT = "wmobs__verdict";
  static final String KEY = "wmobs__key";
  static final String WATERMARK = "wmobs_watermark_ms";
  static final String BATCH_TIME = "wmobs_batch_time_ms";
  static final String IDLE = "wmobs__idle";
  static final String DELAY = "wmobs__delay_us";
  static final String LATENESS = "wmobs__lateness_us";
  static final String QUEUE = "wmobs__queue_us";
  static final String EVENT = "wmobs__event_us";
  static final String SLOWEST = "wmobs__key_slowest_us";
  static final String FASTEST = "wmobs__key_fastest_us";
  /** A row's place before the shuffle by key ({@link RowBytes#PLACE}): see {@link Substreams}. */
  static final String PLACE = "wmobs__place";
  static final List<String> INTERNAL =
      List.of(TS, ARRIVAL, VERDICT, KEY, WATERMARK, BATCH_TIME, IDLE, DELAY, LATENESS,
          "wmobs__delay_bucket", "wmobs__lateness_bucket", "wmobs__buckets", EVENT, QUEUE,
          "wmobs__queue_bucket", SLOWEST, FASTEST, PLACE);
  static final String SYSTEM_TIMESTAMP = "system_timestamp";
  static final long REAL = -1;
  static final long HEARTBEAT = -2;
  /** Bucket bounds (s) of the distributions: wmobs/observations.py's HISTOGRAMS. */
  private static final double[] POSITIVE = {
    0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    21600.0, 86400.0
  };

  private PolicyPlan() {}

  /** Bucket bounds (µs) of {@code histogram}: arrival_delay, lateness or queueing_delay. */
  static long[] boundsUs(String histogram) {
    List<Double> bounds = new ArrayList<>();
    if (histogram.equals("lateness")) {
      bounds.add(0.0);
    } else {
      for (double below : new double[] {-86400.0, -3600.0, -600.0, -60.0, -10.0, -1.0, 0.0}) {
        bounds.add(below);
      }
    }
    for (double bound : POSITIVE) {
      bounds.add(bound);
    }
    return bounds.stream().mapToLong(b -> Math.round(b * 1e6)).toArray();
  }

  /** {@code df} judged by the policy of {@code options} (the columns checked first). */
  static Dataset<Row> apply(Dataset<Row> df, PolicyOptions options) {
    PolicyInput.check(df.schema(), options);
    List<String> columns = List.of(df.columns());
    Dataset<Row> staged =
        options.substreamBy() == null ? global(df, options) : substreams(df, options);
    boolean deadLetters = options.deadLetter() != null;
    Dataset<Row> observed =
        staged.observe(
            "wmobs.policy." + options.name(),
            observation(options, deadLetters).as("columns"),
            lit("jvm").as("engine"),
            lit(deadLetters ? "jvm" : "none").as("dead_letter_plan"));
    Column dropped = col(VERDICT).bitwiseAND(lit(DROPPED_BITS)).notEqual(lit(0L));
    Dataset<Row> kept;
    if (deadLetters) {
      Column[] row = columns.stream().map(c -> named(c).as(c)).toArray(Column[]::new);
      Map<String, Object> spec = new LinkedHashMap<>();
      spec.put("directory", options.deadLetter());
      spec.put("rules", dropRules());
      spec.put("policy", options.name());
      Column write =
          call_function("wmobs_dead_letters", lit(json(spec)), struct(row),
              col(VERDICT).cast(DataTypes.LongType));
      kept = observed.where(when(dropped, write).otherwise(lit(true)));
    } else {
      kept = observed.where(dropped.unary_$bang());
    }
    List<Column> out = new ArrayList<>();
    columns.forEach(c -> out.add(named(c)));
    out.add(timestamp_micros(col(TS)).as(SYSTEM_TIMESTAMP));
    if (idle(options)) {
      out.add(col(IDLE));
    }
    Dataset<Row> result =
        kept.select(out.toArray(new Column[0]))
            .withWatermark(SYSTEM_TIMESTAMP, options.watermarkDelayUs() + " microseconds");
    if (!idle(options)) {
      return result;
    }
    // Synthetic rows have moved the watermark; none goes further (the filter names
    // system_timestamp so the optimizer cannot push it below withWatermark, and is not
    // deterministic, so that a user's filter after it stays after it: _plan.py's build).
    Column real = col(IDLE).equalTo(lit(REAL)).or(col(SYSTEM_TIMESTAMP).isNull());
    return result.where(real.and(spark_partition_id().geq(lit(0)))).drop(IDLE);
  }

  private static boolean idle(PolicyOptions options) {
    return options.idleTimeoutUs() != null;
  }

  /** The arrival policies and out of order against the micro-batch's watermark. */
  private static Dataset<Row> global(Dataset<Row> df, PolicyOptions options) {
    Dataset<Row> judged = judge(df, options, true);
    return idle(options) ? withHeartbeat(judged, options) : judged;
  }

  /** The arrival policies, then out of order per key in Spark's state store. */
  private static Dataset<Row> substreams(Dataset<Row> df, PolicyOptions options) {
    Dataset<Row> keyed = df.withColumn(KEY, Substreams.key(options.substreamBy()));
    if (idle(options)) {
      keyed = keyed.withColumn(IDLE, lit(REAL));
    }
    if (idle(options) || options.substreamTtlUs() != null) {
      keyed = keyed.unionByName(heartbeat(keyed, options));
    }
    // Each row's place before the shuffle, which hands a partition's rows over in an order
    // that changes between attempts: ties in arrival are judged in the same order in every one.
    keyed = keyed.withColumn(PLACE, call_function(RowBytes.PLACE));
    Dataset<Row> staged = judge(keyed.repartition(col(KEY)), options, false);
    Map<String, Object> spec = new LinkedHashMap<>();
    Long ttl = options.substreamTtlUs();
    Long timeout = options.idleTimeoutUs();
    spec.put("tolerance_us", options.outOfOrderUs());
    spec.put("drop", options.outOfOrderDrop());
    spec.put("ttl_ms", ttl == null ? null : Math.max(1, ttl / 1000));
    spec.put("idle_timeout_ms", timeout == null ? null : timeout / 1000);
    spec.put("check_interval_ms", timeout == null ? null : intervalMs(options));
    spec.put("candidate_bits", DROPPED_BITS);
    spec.put("ooo_bit", options.outOfOrderDrop() ? OOO_DROPPED : OOO_ADJUSTED);
    spec.put("key", KEY);
    spec.put("ts", TS);
    spec.put("arrival", ARRIVAL);
    spec.put("verdict", VERDICT);
    spec.put("place", PLACE);
    spec.put("idle", idle(options) ? IDLE : null);
    spec.put("appended", List.of(LATENESS, SLOWEST, FASTEST));
    spec.put("checkpoint", checkpoint(options));
    spec.put("files", "wmobs/substreams");
    return Substreams.judge(staged, json(spec));
  }

  /** How often the idle timeout looks: a quarter of it within [100 ms, 5 s], or as given. */
  private static long intervalMs(PolicyOptions options) {
    Long interval = options.idleCheckIntervalUs();
    if (interval != null) {
      return Math.max(1, interval / 1000);
    }
    return Math.min(Math.max(options.idleTimeoutUs() / 1000 / 4, 100), 5_000);
  }

  private static String checkpoint(PolicyOptions options) {
    return options.checkpoint() == null ? "" : options.checkpoint();
  }

  /**
   * {@code df} judged by {@link PolicyRules}: its event and arrival times, the batch's times,
   * then each field of the judgement; with {@code outOfOrder} the global policy's out of order
   * too (and the row's lateness), else the arrival time the per-key judge orders by.
   */
  private static Dataset<Row> judge(Dataset<Row> df, PolicyOptions options, boolean outOfOrder) {
    String checkpoint = checkpoint(options);
    Column noTime = lit(null).cast(DataTypes.LongType);
    List<Column> columns = new ArrayList<>();
    for (String name : df.columns()) {
      columns.add(named(name));
    }
    columns.add(eventMicros(df.schema(), options).as(EVENT));
    columns.add(
        options.arrivalTime() == null
            ? noTime.as(ARRIVAL)
            : unix_micros(named(options.arrivalTime()).cast(DataTypes.TimestampType)).as(ARRIVAL));
    columns.add(
        (outOfOrder ? call_function("wmobs_batch_watermark", lit(checkpoint)) : noTime)
            .as(WATERMARK));
    columns.add(call_function("wmobs_batch_timestamp", lit(checkpoint)).as(BATCH_TIME));
    Dataset<Row> staged = df.select(columns.toArray(new Column[0]));
    Map<String, Object> spec = new LinkedHashMap<>();
    spec.put("early_arrival_us", options.earlyArrivalUs());
    spec.put("early_arrival_drop", options.earlyDrop());
    spec.put("late_arrival_us", options.lateArrivalUs());
    spec.put("late_arrival_drop", options.lateDrop());
    spec.put("out_of_order_us", outOfOrder ? options.outOfOrderUs() : null);
    spec.put("out_of_order_drop", options.outOfOrderDrop());
    List<List<Object>> bits = new ArrayList<>();
    for (Verdict verdict : VERDICTS) {
      bits.add(List.of(verdict.rule(), verdict.action(), verdict.bit()));
    }
    spec.put("bits", bits);
    Map<String, String> fields = new LinkedHashMap<>();
    fields.put(TS, "system");
    fields.put(VERDICT, "verdict");
    fields.put(DELAY, "delay");
    fields.put(QUEUE, "queue");
    fields.put(outOfOrder ? LATENESS : ARRIVAL, outOfOrder ? "lateness" : "arrival");
    Column[] times = {col(EVENT), col(ARRIVAL), col(WATERMARK), col(BATCH_TIME)};
    List<Column> judged = new ArrayList<>();
    for (String name : staged.columns()) {
      if (!fields.containsKey(name)
          && !name.equals(WATERMARK)
          && !name.equals(BATCH_TIME)
          && !(outOfOrder && name.equals(ARRIVAL))) {
        judged.add(named(name));
      }
    }
    for (Map.Entry<String, String> field : fields.entrySet()) {
      Map<String, Object> one = new LinkedHashMap<>(spec);
      one.put("field", field.getValue());
      List<Column> arguments = new ArrayList<>();
      arguments.add(lit(json(one)));
      arguments.addAll(List.of(times));
      judged.add(call_function("wmobs_judge", arguments.toArray(new Column[0])).as(field.getKey()));
    }
    return staged.select(judged.toArray(new Column[0]));
  }

  /** Each row's event time (µs); null where it is missing or unparseable. */
  private static Column eventMicros(StructType schema, PolicyOptions options) {
    Column column = named(options.eventTime());
    if (schema.apply(options.eventTime()).dataType() instanceof StringType) {
      // As Spark casts a string to a timestamp with a time zone, its offset kept
      // (try_to_timestamp and the name TIMESTAMP give a TIMESTAMP_NTZ, which drops it, where
      // spark.sql.timestampType says so); unparseable -> null -> invalid_time.
      String quoted = "`" + options.eventTime().replace("`", "``") + "`";
      column = expr("try_cast(" + quoted + " AS TIMESTAMP_LTZ)");
    }
    return unix_micros(column.cast(DataTypes.TimestampType));
  }

  /** The idle column (real rows), and the heartbeat's synthetic rows (the global policy). */
  private static Dataset<Row> withHeartbeat(Dataset<Row> df, PolicyOptions options) {
    Dataset<Row> marked = df.withColumn(IDLE, lit(REAL));
    return marked.unionByName(heartbeat(marked, options));
  }

  /** wmobs' heartbeat source, with the columns of {@code like}. */
  private static Dataset<Row> heartbeat(Dataset<Row> like, PolicyOptions options) {
    boolean substreams = options.substreamBy() != null;
    long timeoutMs = options.idleTimeoutUs() == null ? 0 : options.idleTimeoutUs() / 1000;
    Dataset<Row> beats =
        like.sparkSession()
            .readStream()
            .format(IdleHeartbeat.class.getName())
            .option("mode", substreams ? "substreams" : "global")
            .option("checkpoint", checkpoint(options))
            .option("timeout_ms", Long.toString(timeoutMs))
            .option("interval_ms", Long.toString(timeoutMs == 0 ? 100 : intervalMs(options)))
            .option("delay_ms", Long.toString(options.outOfOrderUs() / 1000))
            .option("buckets", "64")
            .load();
    List<Column> columns = new ArrayList<>();
    for (StructField field : like.schema().fields()) {
      Column value;
      if (field.name().equals(TS)) {
        value = substreams ? lit(0L) : col("wmobs_idle_ts_us");
      } else if (field.name().equals(IDLE)) {
        value = substreams ? lit(HEARTBEAT) : col("wmobs_idle_firings");
      } else if (field.name().equals(KEY)) {
        value = col("wmobs_idle_bucket");
      } else {
        value = placeholder(field.dataType());
      }
      columns.add(value.cast(field.dataType()).as(field.name()));
    }
    return beats.select(columns.toArray(new Column[0]));
  }

  /** A non-null value of {@code type} for a synthetic row's columns (never seen by users). */
  private static Column placeholder(DataType type) {
    if (type instanceof StructType struct) {
      Column[] fields = new Column[struct.fields().length];
      for (int i = 0; i < fields.length; i++) {
        StructField field = struct.fields()[i];
        fields[i] = placeholder(field.dataType()).as(field.name());
      }
      return struct(fields);
    }
    if (type instanceof ArrayType || type instanceof MapType) {
      return lit(null).cast(type);
    }
    if (type instanceof TimestampType || type instanceof TimestampNTZType
        || type.equals(DataTypes.DateType)) {
      return lit("1970-01-01").cast(type);
    }
    if (type instanceof StringType || type.equals(DataTypes.BinaryType)) {
      return lit("").cast(type); // (ANSI casts no number to binary)
    }
    if (type.equals(DataTypes.BooleanType)
        || type instanceof org.apache.spark.sql.types.NumericType) {
      return lit(0).cast(type);
    }
    return lit(null).cast(type);
  }

  /** Everything the policy observes, one aggregate ({@code _jvm/_observe.observation}). */
  private static Column observation(PolicyOptions options, boolean deadLetters) {
    boolean queueing = options.distributions() && options.arrivalTime() != null;
    boolean substreams = options.substreamBy() != null;
    Map<String, Object> spec = new LinkedHashMap<>();
    List<List<Object>> counts = new ArrayList<>();
    for (Verdict verdict : VERDICTS) {
      if (canHappen(options, verdict)) {
        counts.add(List.of("rule:" + verdict.rule() + ":" + verdict.action(), verdict.bit()));
      }
    }
    spec.put("counts", counts);
    spec.put("dropped_bits", DROPPED_BITS);
    spec.put("dead_letters", deadLetters ? "dead_letter_rows" : null);
    spec.put("firings", idle(options) ? "idle_timeout_firings" : null);
    spec.put("watermark", "input_watermark_us");
    spec.put("event_time", "input_event_time_us");
    spec.put("tolerance_us", options.watermarkDelayUs());
    if (options.distributions()) {
      Map<String, Object> histogram = new LinkedHashMap<>();
      histogram.put("buckets", "hist:arrival_delay*lateness:buckets");
      histogram.put("sums", List.of("hist:arrival_delay:sum_us", "hist:lateness:sum_us"));
      histogram.put("bounds", List.of(boundsUs("arrival_delay"), boundsUs("lateness")));
      spec.put("histogram", histogram);
    } else {
      spec.put("histogram", null);
    }
    if (queueing) {
      Map<String, Object> queue = new LinkedHashMap<>();
      queue.put("buckets", "hist:queueing_delay:buckets");
      queue.put("sum", "hist:queueing_delay:sum_us");
      queue.put("bounds", boundsUs("queueing_delay"));
      spec.put("queueing", queue);
    } else {
      spec.put("queueing", null);
    }
    spec.put("spread", substreams ? "substream_spread_us" : null);
    Map<String, Object> kept = new LinkedHashMap<>();
    kept.put("checkpoint", checkpoint(options));
    kept.put("directory", "wmobs/observations/" + options.name());
    spec.put("kept", kept);
    List<Column> arguments = new ArrayList<>();
    arguments.add(lit(json(spec)));
    arguments.add(col(VERDICT));
    arguments.add(col(TS));
    arguments.add(col(EVENT));
    arguments.add(idle(options) ? col(IDLE) : lit(REAL));
    if (options.distributions()) {
      arguments.add(col(DELAY));
      arguments.add(col(LATENESS));
    }
    if (queueing) {
      arguments.add(col(QUEUE));
    }
    if (substreams) {
      arguments.add(col(SLOWEST));
      arguments.add(col(FASTEST));
    }
    return call_function("wmobs_policy_observation", arguments.toArray(new Column[0]));
  }

  /** The verdicts this policy can give ({@code Context.can_happen}). */
  private static boolean canHappen(PolicyOptions options, Verdict verdict) {
    boolean dropped = verdict.dropped();
    return switch (verdict.rule()) {
      case "invalid_time" -> dropped;
      case "early_arrival" -> options.earlyArrivalUs() != null && options.earlyDrop() == dropped;
      case "late_arrival" -> options.lateDrop() == dropped;
      default -> options.outOfOrderDrop() == dropped;
    };
  }

  /** (rule, bit) of every dropping verdict, in the order the rules judge. */
  private static List<List<Object>> dropRules() {
    List<List<Object>> rules = new ArrayList<>();
    for (Verdict verdict : VERDICTS) {
      if (verdict.dropped()) {
        rules.add(List.of(verdict.rule(), verdict.bit()));
      }
    }
    return rules;
  }

  static Column named(String name) {
    return col("`" + name.replace("`", "``") + "`");
  }

  static String json(Object value) {
    try {
      return Spec.JSON.writeValueAsString(value);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}
