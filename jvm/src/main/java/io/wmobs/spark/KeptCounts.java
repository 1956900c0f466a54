package io.wmobs.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.util.SerializableConfiguration;

/**
 * A micro-batch's counts kept beside the checkpoint until Spark has committed it, so that they
 * are reported once whatever the sink does when the micro-batch runs again.
 *
 * <p>The window: a crash (or a {@code stop()}) after the sink has committed micro-batch N and
 * before Spark has. Spark posts a micro-batch's progress, and with it what {@code observe}
 * counted, only after its own commit, so the first attempt's counts are never reported; on
 * restart Spark runs N again, and a sink that has N already (the file sink, Delta's, a {@code
 * foreachBatch} that skips batches it has seen) skips it without running the plan, which then
 * counts nothing. So each task that counted rows writes its counts, at its end, to {@code
 * <checkpoint>/<directory>/part-<partition>} (the micro-batch's id, {@link #FORMAT} and the
 * counts' layout first; one small file per task, replaced by the next micro-batch's, and by a
 * retried task's, which counts the same rows).
 * On the driver, where Spark evaluates the counts after its commit, a micro-batch that counted no
 * partition and is the first of its query run (the only one that can be a micro-batch run
 * again) reads the files of its own id back: the counts of the attempt that the sink committed.
 * A micro-batch run again by a sink that runs its plan counts its own rows, and its tasks
 * replace the files.
 */
final class KeptCounts implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final String PREFIX = "part-";
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(KeptCounts.class);
  /** The kept files' format ("wmk1"), after the micro-batch's id. */
  static final int FORMAT = 0x776d6b31;
  /** The bytes before the counts: the id, the format and the layout. */
  private static final int HEADER = 8 + 4 + 8;
  /** How many query runs (and policies) {@link #STARTED} remembers. */
  static final int REMEMBERED = 4096;

  /**
   * Query runs (and policies) whose first micro-batch has been evaluated on this driver: the
   * {@link #REMEMBERED} most recent, so that a driver that starts queries for months holds a
   * bounded set. A run forgotten while it still runs lists its folder again, for a micro-batch
   * that counted nothing, and finds no file of that micro-batch's id.
   */
  private static final Set<String> STARTED =
      Collections.newSetFromMap(
          Collections.synchronizedMap(
              new LinkedHashMap<String, Boolean>() {
                private static final long serialVersionUID = 1L;

                @Override
                protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
                  return size() > REMEMBERED;
                }
              }));

  private final Hadoop.Checkpoint checkpoint;
  private final String directory;
  private final Broadcast<SerializableConfiguration> conf;
  /** The micro-batch it was planned for, or null: the task's own local properties. */
  private final MicroBatch told;

  private KeptCounts(
      Hadoop.Checkpoint checkpoint,
      String directory,
      Broadcast<SerializableConfiguration> conf,
      MicroBatch told) {
    this.checkpoint = checkpoint;
    this.directory = directory;
    this.conf = conf;
    this.told = told;
  }

  /** The same, its tasks told the micro-batch it was planned for. */
  KeptCounts told(MicroBatch batch) {
    return batch.equals(told) ? this : new KeptCounts(checkpoint, directory, conf, batch);
  }

  /** As the observation's spec says ({@code kept}: null, or its checkpoint and directory). */
  static KeptCounts of(Observation observation) {
    if (observation.keptCheckpoint() == null) {
      return null;
    }
    return new KeptCounts(
        Hadoop.Checkpoint.onDriver(observation.keptCheckpoint()),
        observation.keptDirectory(),
        Hadoop.sessionConf(),
        null);
  }

  /**
   * In a task, when it first counts a row: its counts ({@code state}, final when the task ends)
   * written when the task ends, unless it failed.
   */
  void keepAtTaskEnd(TaskContext task, Observation observation, Observation.State state) {
    java.util.function.UnaryOperator<String> property = MicroBatch.of(told, task);
    String batch = property.apply(MicroBatch.BATCH_ID);
    if (batch == null) {
      return; // not a micro-batch
    }
    Path target =
        new Path(checkpoint.in(property) + "/" + directory, PREFIX + task.partitionId());
    task.addTaskCompletionListener(
        (org.apache.spark.util.TaskCompletionListener)
            done -> {
              if (done.isInterrupted() || done.isFailed()) {
                return;
              }
              try {
                Hadoop.writeOnce(
                    target,
                    framed(Long.parseLong(batch), observation, state),
                    conf.value().value());
              } catch (IOException e) {
                throw new UncheckedIOException(
                    "wmobs: could not keep the counts of batch " + batch + " in " + target, e);
              }
            });
  }

  /**
   * On the driver, as each micro-batch's counts are evaluated: where the micro-batch running on
   * this thread is the first of its query run (for this policy) and {@code countedNothing}, the
   * kept counts of that micro-batch, if its tasks left any; else null (and nothing read).
   */
  Observation.State recall(Observation observation, boolean countedNothing) {
    // Spark evaluates observed counts elsewhere too (a listener reading a query execution's):
    // only a micro-batch's thread has a session and a batch id.
    scala.Option<SparkSession> session = SparkSession.getActiveSession();
    if (session.isEmpty()) {
      return null;
    }
    SparkContext context = session.get().sparkContext();
    String batch = context.getLocalProperty("streaming.sql.batchId");
    String run = runOf(context, batch);
    if (batch == null
        || run == null
        || !first(run + "\n" + directory) // each policy's first, once
        || !countedNothing) {
      return null;
    }
    Configuration hadoop = conf.value().value();
    Path folder = new Path(checkpoint.onThisThread() + "/" + directory);
    long id = Long.parseLong(batch);
    Observation.State merged = null;
    long layout = observation.layout();
    try {
      for (Hadoop.Entry entry : Hadoop.list(folder, hadoop)) {
        if (!entry.name().startsWith(PREFIX)) {
          continue; // a temporary file
        }
        byte[] bytes = Hadoop.read(new Path(folder, entry.name()), hadoop);
        DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes));
        if (bytes.length >= 8 && in.readLong() != id) {
          continue; // another micro-batch's
        }
        if (bytes.length < HEADER || in.readInt() != FORMAT || in.readLong() != layout) {
          // Kept by a policy that counted otherwise (changed in the restart) or by another
          // version of wmobs: what its counts mean is not known here.
          LOG.warn(
              "wmobs: the counts of batch {} kept in {} were counted by another policy or"
                  + " version of wmobs and are not reported: {}",
              batch,
              folder,
              entry.name());
          continue;
        }
        Observation.State counts =
            observation.deserialize(Arrays.copyOfRange(bytes, HEADER, bytes.length));
        merged = merged == null ? counts : observation.merge(merged, counts);
      }
    } catch (IOException | RuntimeException e) {
      // Spark has committed the micro-batch: failing the query here would lose the counts as
      // surely, and stop it besides.
      LOG.warn(
          "wmobs: the counts of batch {} kept in {} could not be read and are not reported",
          batch,
          folder,
          e);
      return null;
    }
    return merged;
  }

  /** Whether this is the first time {@code run} (a query run and policy) is asked about. */
  static boolean first(String run) {
    return STARTED.add(run);
  }

  /**
   * The query run of micro-batch {@code batch}, running on this thread: as the extension's rule
   * told it when it planned the micro-batch ({@link QueryCheckpoint#RUN}), or from the job
   * description Spark gives it ("name\nid = ...\nrunId = ...\n...", which a {@code
   * foreachBatch} function may have replaced, {@code setJobDescription}); null for neither.
   */
  private static String runOf(SparkContext context, String batch) {
    String run = context.getLocalProperty(QueryCheckpoint.RUN);
    String query = context.getLocalProperty("sql.streaming.queryId");
    if (run != null
        && batch != null
        && batch.equals(context.getLocalProperty(QueryCheckpoint.BATCH))
        && query != null
        && query.equals(context.getLocalProperty(QueryCheckpoint.BATCH_QUERY))) {
      return run; // told for this very micro-batch
    }
    String description = context.getLocalProperty("spark.job.description");
    for (String line : description == null ? new String[0] : description.split("\n")) {
      if (line.startsWith("runId = ")) {
        return line.substring("runId = ".length()).trim();
      }
    }
    return null;
  }

  /** A kept file: the micro-batch's id, {@link #FORMAT}, the counts' layout, the counts. */
  static byte[] framed(long batch, Observation observation, Observation.State state)
      throws IOException {
    byte[] counts = observation.serialize(state);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(counts.length + HEADER);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeLong(batch);
      out.writeInt(FORMAT);
      out.writeLong(observation.layout());
      out.write(counts);
    }
    return bytes.toByteArray();
  }
}
