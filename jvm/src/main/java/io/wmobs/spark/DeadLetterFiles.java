package io.wmobs.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;

/**
 * A policy's dead-letter files in a micro-batch's folder: their names, and the files that an
 * earlier run of the query left there for a micro-batch that this run runs again.
 *
 * <p>A file is {@code part-<partition>-<policy>-<query id>-<run id>.<format>}: a task that
 * runs again in the same query run writes its own file again, and so does a micro-batch that
 * the run's sink runs twice. A query that crashed (or stopped) during micro-batch N runs N again
 * when it restarts, and where its sink runs N's plan again (an at-least-once sink; a sink that
 * had committed N skips it and runs nothing), the new run's dead letters of N are the ones that
 * go with what the sink holds. The earlier run's files of N are then stale: where N's input is
 * split otherwise in the new run (a file source on a cluster of another size), they would hold
 * rows a second time under other partitions' names. So the first task of a run on each JVM
 * that writes a file (for a policy and directory) deletes, after writing its own, the files of
 * that policy and query in its folder that another run (or a version of wmobs that named no
 * run) wrote. Only a run's first micro-batch can find any: a run ends in the micro-batch whose
 * offsets it wrote last, and is the only one to run the micro-batches after it. {@code
 * deadletter.py}'s {@code stale} is the Python engine's.
 */
final class DeadLetterFiles {
  private static final Pattern UUID =
      Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  /** Runs (with a directory and policy) whose stale files a task of this JVM looked for. */
  private static final Set<String> LOOKED = Recent.set(KeptCounts.REMEMBERED);

  private DeadLetterFiles() {}

  /** The query run of the task: Spark's job group of a micro-batch (its run id), else null. */
  static String runOf(TaskContext task) {
    String group = task.getLocalProperty("spark.jobGroup.id");
    return group != null && UUID.matcher(group).matches() ? group : null;
  }

  /**
   * The name of the task's file: {@code part-<partition>-<policy>-<query id>-<run id>.parquet};
   * without a run (a job group of the user's own) or a query (not a micro-batch), without them.
   * {@code deadletter.py}'s {@code file_name} names the same.
   */
  static String name(TaskContext task, String policy) {
    String query = task.getLocalProperty("sql.streaming.queryId");
    String run = runOf(task);
    String writer = query == null ? policy : policy + "-" + query + (run == null ? "" : "-" + run);
    return String.format("part-%05d-%s.parquet", task.partitionId(), writer);
  }

  /**
   * After the task wrote its file in {@code folder}: if it is the first of its run on this JVM
   * to write one for {@code directory} and {@code policy}, the stale files of {@code folder}
   * (of that policy and query, another run's) deleted.
   */
  static void removeStale(
      Path folder, String directory, String policy, TaskContext task, Configuration conf)
      throws IOException {
    String query = task.getLocalProperty("sql.streaming.queryId");
    String run = runOf(task);
    String key = run + "\n" + directory + "\n" + policy;
    if (query == null || run == null || LOOKED.contains(key)) {
      return;
    }
    List<String> names = new ArrayList<>();
    for (Hadoop.Entry entry : Hadoop.list(folder, conf)) {
      names.add(entry.name());
    }
    for (String name : stale(names, policy + "-" + query, run, "parquet")) {
      Hadoop.delete(new Path(folder, name), conf);
    }
    LOOKED.add(key); // once they are gone: a task that failed to delete them leaves it to another
  }

  /**
   * Of {@code names} (a micro-batch's folder), the files of {@code writer} ({@code
   * <policy>-<query id>}) in {@code format} that a run other than {@code run} wrote, or that
   * name no run.
   */
  static List<String> stale(List<String> names, String writer, String run, String format) {
    Pattern file =
        Pattern.compile(
            "part-[0-9]{5,}-"
                + Pattern.quote(writer)
                + "(?:-("
                + UUID.pattern()
                + "))?\\."
                + Pattern.quote(format));
    List<String> found = new ArrayList<>();
    for (String name : names) {
      Matcher matched = file.matcher(name);
      if (matched.matches() && !run.equals(matched.group(1))) {
        found.add(name);
      }
    }
    return found;
  }
}
