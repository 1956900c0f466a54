package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.SerializableConfiguration;

/**
 * The watermark or the timestamp of the running micro-batch, as a SQL function without
 * arguments: wmobs' global time policy judges every row against them.
 *
 * <p>Spark writes both into the query's checkpoint ({@code offsets/<batchId>}) before the
 * micro-batch runs, and gives every task of the micro-batch its id as a local property. Each
 * task reads them once (each executor once per micro-batch, through a small cache) with the
 * session's Hadoop configuration, the one Spark wrote the checkpoint with. This replaces a
 * one-row Python data source broadcast into the plan, which cost a Spark job of its own per
 * micro-batch. Mirrors {@code wmobs/policy/_checkpoint.py}, which stays the fallback.
 */
public final class BatchTimes implements UDF0<Long>, Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  /** (checkpoint, batch id, query id) -> {watermark or Long.MIN_VALUE for none, timestamp}. */
  private static final Map<String, long[]> READ = new ConcurrentHashMap<>();

  private final String checkpoint;
  private final boolean watermark;
  /** The session's Hadoop configuration, broadcast once: every executor fetches it once. */
  private final Broadcast<SerializableConfiguration> conf;

  // The value for the task that last called (deserialized: known = false).
  private transient boolean known;
  private transient long taskAttempt;
  private transient Long value;

  private BatchTimes(
      String checkpoint, boolean watermark, Broadcast<SerializableConfiguration> conf) {
    this.checkpoint = checkpoint;
    this.watermark = watermark;
    this.conf = conf;
  }

  /**
   * Registers two functions in {@code spark}: {@code watermarkName()} (the micro-batch's
   * watermark, ms, null before the first one) and {@code timestampName()} (its timestamp, ms).
   * {@code checkpoint}: the query's checkpoint location, or "" to find a named query's.
   */
  public static void register(
      SparkSession spark, String watermarkName, String timestampName, String checkpoint) {
    Configuration hadoop = spark.sessionState().newHadoopConf();
    Broadcast<SerializableConfiguration> conf =
        SerializableConfiguration.broadcast(spark.sparkContext(), hadoop);
    spark.udf().register(watermarkName, new BatchTimes(checkpoint, true, conf), DataTypes.LongType);
    spark.udf().register(timestampName, new BatchTimes(checkpoint, false, conf), DataTypes.LongType);
  }

  @Override
  public Long call() throws Exception {
    TaskContext task = TaskContext.get();
    if (task == null) {
      throw new IllegalStateException(
          "wmobs: the batch watermark is only known inside a streaming micro-batch's task");
    }
    if (!known || task.taskAttemptId() != taskAttempt) {
      value = lookUp(task);
      taskAttempt = task.taskAttemptId();
      known = true;
    }
    return value;
  }

  private Long lookUp(TaskContext task) throws IOException {
    String batch = task.getLocalProperty("streaming.sql.batchId");
    if (batch == null) {
      throw new IllegalStateException(
          "wmobs: the batch watermark is only known inside a streaming micro-batch");
    }
    String base = Hadoop.checkpoint(checkpoint, task);
    String queryId = task.getLocalProperty("sql.streaming.queryId");
    String key = base + "\n" + batch + "\n" + queryId;  // checked once per key
    long[] times = READ.get(key);
    if (times == null) {
      times = read(base, Long.parseLong(batch), queryId);
      if (READ.size() > 256) {
        READ.clear();
      }
      READ.put(key, times);
    }
    long found = watermark ? times[0] : times[1];
    return found == Long.MIN_VALUE ? null : found;
  }

  private long[] read(String base, long batch, String queryId) throws IOException {
    try {
      if (queryId != null) {
        String id = JSON.readTree(readText(base + "/metadata")).path("id").asText(null);
        if (!queryId.equals(id)) {
          throw new IllegalStateException(
              base + " is the checkpoint of query " + id + ", not of " + queryId);
        }
      }
      List<String> lines = readText(base + "/offsets/" + batch).lines().toList();
      if (lines.size() < 2) {
        throw new IOException("incomplete offsets file (being written?)");
      }
      JsonNode metadata = JSON.readTree(lines.get(1));
      long mark = metadata.path("batchWatermarkMs").asLong(0);
      JsonNode timestamp = metadata.get("batchTimestampMs");
      return new long[] {
        mark > 0 ? mark : Long.MIN_VALUE,
        timestamp == null || timestamp.isNull() ? Long.MIN_VALUE : timestamp.asLong()
      };
    } catch (IOException e) {
      throw new IOException(
          "wmobs TimePolicy could not read the watermark of batch " + batch
              + " from the checkpoint '" + base + "' (" + e + "). " + Hadoop.HINT,
          e);
    }
  }

  private String readText(String path) throws IOException {
    return new String(Hadoop.read(new Path(path), conf.value().value()), StandardCharsets.UTF_8);
  }
}
