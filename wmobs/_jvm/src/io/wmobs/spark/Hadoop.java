package io.wmobs.spark;

import java.io.IOException;
import java.util.Locale;
import java.util.Set;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;

/**
 * Files beside Spark, from the tasks, with the session's Hadoop configuration: what {@code
 * wmobs/policy/_storage.py} and {@code _checkpoint.py} do in Python.
 */
final class Hadoop {
  static final String HINT =
      "Pass the query's checkpointLocation to TimePolicy.apply(df, checkpoint_location=...), "
          + "or name the query and set spark.sql.streaming.checkpointLocation.";

  /** Schemes of object stores: no atomic rename. */
  private static final Set<String> OBJECT_STORES =
      Set.of("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "az");

  private Hadoop() {}

  /** The query's checkpoint: {@code configured}, or a named query's below the session's root. */
  static String checkpoint(String configured, TaskContext task) {
    if (!configured.isEmpty()) {
      return configured.replaceAll("/+$", "");
    }
    String root = task.getLocalProperty("spark.sql.streaming.checkpointLocation");
    String description = task.getLocalProperty("spark.job.description");
    String name = description == null ? "" : description.split("\n", 2)[0].trim();
    if (root != null && !root.isEmpty() && !name.isEmpty() && !name.startsWith("id = ")) {
      return root.replaceAll("/+$", "") + "/" + name;
    }
    throw new IllegalStateException(
        "wmobs TimePolicy needs the query's checkpoint location to read the batch watermark. "
            + HINT);
  }

  /** The filesystem of {@code path}; the raw local one for local paths (no .crc files). */
  static FileSystem fileSystem(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    return fs instanceof LocalFileSystem local ? local.getRaw() : fs;
  }

  /**
   * {@code data} as the whole of {@code target}, at once: one PUT on an object store, a
   * temporary file and a rename elsewhere (a reader sees all of it or nothing; a retried
   * task's write replaces the first).
   */
  static void writeOnce(Path target, byte[] data, Configuration conf) throws IOException {
    FileSystem fs = fileSystem(target, conf);
    String scheme = target.toUri().getScheme();
    if (scheme != null && OBJECT_STORES.contains(scheme.toLowerCase(Locale.ROOT))) {
      try (FSDataOutputStream out = fs.create(target, true)) {
        out.write(data);
      }
      return;
    }
    String name = "." + target.getName() + "." + UUID.randomUUID() + ".tmp";
    Path temp = new Path(target.getParent(), name);
    try (FSDataOutputStream out = fs.create(temp, true)) {
      out.write(data);
    }
    if (!fs.rename(temp, target)) { // a retried task's file is there already
      fs.delete(target, false);
      if (!fs.rename(temp, target)) {
        fs.delete(temp, false);
        throw new IOException("could not rename " + temp + " to " + target);
      }
    }
  }
}
