package io.wmobs.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Files beside Spark, from the tasks, with the session's Hadoop configuration: what {@code
 * wmobs/policy/_storage.py} and {@code _python/_checkpoint.py} do in Python.
 */
final class Hadoop {
  static final String HINT =
      "Pass the query's checkpointLocation to TimePolicy.apply(df, checkpoint_location=...), "
          + "or name the query and set spark.sql.streaming.checkpointLocation.";

  /**
   * Schemes of object stores whose object appears only once it is written whole (one PUT). Not
   * ABFS: its driver creates the file at once and appends to it, so a reader could see part of
   * it; a temporary file and a rename there (atomic with a hierarchical namespace).
   */
  private static final Set<String> OBJECT_STORES =
      Set.of("s3", "s3a", "s3n", "gs", "gcs", "wasb", "wasbs", "az");

  private Hadoop() {}

  /**
   * The Hadoop configuration of the session that is analysing a call (the one Spark writes the
   * query's checkpoint with), broadcast once: every executor fetches it once. Called where a
   * function is built, on the driver.
   */
  static Broadcast<SerializableConfiguration> sessionConf() {
    SparkSession spark = SparkSession.active();
    Configuration hadoop = spark.sessionState().newHadoopConf();
    return JavaSparkContext.fromSparkContext(spark.sparkContext())
        .broadcast(new SerializableConfiguration(hadoop));
  }

  /**
   * {@code path} as Spark qualifies a relative {@code checkpointLocation}: against Hadoop's
   * default filesystem and its working directory (the driver's, for a local one), so that
   * tasks on executors with working directories of their own find the same files. A URI, an
   * absolute path and "" (a named query's checkpoint) stay as they are. Called on the driver,
   * where a function or source is built ({@code wmobs/_spark.py}'s {@code qualified_path} does
   * the same for a classic session's Python side).
   */
  static String qualified(String path) {
    if (path.isEmpty()) {
      return path;
    }
    Path relative = new Path(path);
    if (relative.isAbsolute()) {
      return path;
    }
    Configuration conf = SparkSession.active().sessionState().newHadoopConf();
    try {
      return relative.getFileSystem(conf).makeQualified(relative).toString();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("wmobs: no Hadoop filesystem for " + path, e);
    }
  }

  /** True for a relative path: not "", not absolute, not a URI. */
  private static boolean relative(String path) {
    return !path.isEmpty() && !new Path(path).isAbsolute();
  }

  /**
   * Where a task finds the query's checkpoint: {@code configured}, else the running query's,
   * which the extension's {@link QueryCheckpoint} rule gives every task of a micro-batch as a
   * local property, else for a named query ("") below the session's root, which Spark gives
   * every task as a local property; a relative
   * root resolved against {@code relativeTo}, the driver's working directory, as Spark resolved
   * it on the driver (a task's own working directory is another on a cluster). Mirrors {@code
   * _checkpoint._resolve_checkpoint}.
   */
  record Checkpoint(String configured, String relativeTo) implements java.io.Serializable {
    /** Built on the driver, where a function is built: a relative path qualified there. */
    static Checkpoint onDriver(String path) {
      String configured = qualified(path.replaceAll("/+$", ""));
      if (!configured.isEmpty()) {
        return new Checkpoint(configured, "");
      }
      try { // (the session's root may be set after the DataFrame was analysed: not looked at)
        FileSystem fs = FileSystem.get(SparkSession.active().sessionState().newHadoopConf());
        return new Checkpoint("", fs.makeQualified(fs.getWorkingDirectory()).toString());
      } catch (IOException e) {
        throw new java.io.UncheckedIOException("wmobs: no default Hadoop filesystem", e);
      }
    }

    /** The checkpoint of the query whose task this is. */
    String in(TaskContext task) {
      return in(task::getLocalProperty);
    }

    /**
     * The checkpoint of the query whose micro-batch runs on the calling thread (the driver's
     * stream thread, which has the local properties Spark gives the micro-batch's tasks).
     */
    String onThisThread() {
      return in(SparkSession.active().sparkContext()::getLocalProperty);
    }

    /** The checkpoint of the query whose micro-batch has these local properties. */
    String in(java.util.function.UnaryOperator<String> property) {
      if (!configured.isEmpty()) {
        return configured;
      }
      String told = property.apply(QueryCheckpoint.ROOT);
      String query = property.apply("sql.streaming.queryId");
      if (told != null && query != null && query.equals(property.apply(QueryCheckpoint.QUERY))) {
        return told.replaceAll("/+$", ""); // the running query's own (QueryCheckpoint)
      }
      String root = property.apply("spark.sql.streaming.checkpointLocation");
      root = root == null ? "" : root.replaceAll("/+$", "");
      String description = property.apply("spark.job.description");
      String name = description == null ? "" : description.split("\n", 2)[0].trim();
      if (!root.isEmpty() && !name.isEmpty() && !name.startsWith("id = ")) {
        boolean against = !relativeTo.isEmpty() && relative(root);
        return (against ? relativeTo.replaceAll("/+$", "") + "/" + root : root) + "/" + name;
      }
      throw new IllegalStateException(
          "wmobs TimePolicy needs the query's checkpoint location to read the batch watermark. "
              + HINT);
    }
  }

  /** A file of a listing: its name and when it was last modified (ms). */
  record Entry(String name, long modifiedMs) {}

  /**
   * The local file of {@code path}, or null where it is on another filesystem. Local files are
   * reached with java.nio: Hadoop's local filesystem sets each new file's permissions with a
   * {@code chmod} process where its native library is missing (~3 ms a file).
   */
  static java.io.File local(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    if (fs instanceof LocalFileSystem checked) {
      return checked.getRaw() instanceof RawLocalFileSystem raw ? raw.pathToFile(path) : null;
    }
    return fs instanceof RawLocalFileSystem raw ? raw.pathToFile(path) : null;
  }

  /** The files in {@code folder}; none if it does not exist. */
  static List<Entry> list(Path folder, Configuration conf) throws IOException {
    List<Entry> entries = new ArrayList<>();
    java.io.File file = local(folder, conf);
    if (file != null) {
      java.io.File[] files = file.listFiles();
      for (java.io.File f : files == null ? new java.io.File[0] : files) {
        entries.add(new Entry(f.getName(), f.lastModified()));
      }
      return entries;
    }
    try {
      for (FileStatus status : folder.getFileSystem(conf).listStatus(folder)) {
        entries.add(new Entry(status.getPath().getName(), status.getModificationTime()));
      }
    } catch (FileNotFoundException e) {
      // no folder: no files
    }
    return entries;
  }

  static byte[] read(Path path, Configuration conf) throws IOException {
    java.io.File file = local(path, conf);
    if (file != null) {
      return Files.readAllBytes(file.toPath());
    }
    try (FSDataInputStream in = path.getFileSystem(conf).open(path)) {
      return in.readAllBytes();
    }
  }

  /** Deletes {@code path} if it is there (another attempt of the task may have). */
  static void delete(Path path, Configuration conf) throws IOException {
    java.io.File file = local(path, conf);
    if (file != null) {
      Files.deleteIfExists(file.toPath());
    } else {
      path.getFileSystem(conf).delete(path, false);
    }
  }

  /**
   * Deletes the folder {@code path} if it is empty (not recursively: a folder with files
   * stays; on an object store an empty prefix is gone already).
   */
  static void deleteEmptyFolder(Path path, Configuration conf) {
    try {
      delete(path, conf);
    } catch (IOException e) {
      // not empty
    }
  }

  /** A file's bytes, written to a stream. */
  interface Content {
    void writeTo(java.io.OutputStream out) throws IOException;
  }

  /** {@code data} as the whole of {@code target}, at once ({@link #writeOnce(Path, Content,
   * Configuration)}). */
  static void writeOnce(Path target, byte[] data, Configuration conf) throws IOException {
    writeOnce(target, out -> out.write(data), conf);
  }

  /**
   * {@code data} as the whole of {@code target}, at once: one object on an object store (a
   * PUT, or a multipart upload that completes at the end), a temporary file and a rename
   * elsewhere (a reader sees all of it or nothing; a retried task's write replaces the first).
   */
  static void writeOnce(Path target, Content data, Configuration conf) throws IOException {
    String name = "." + target.getName() + "." + UUID.randomUUID() + ".tmp";
    java.io.File file = local(target, conf);
    if (file != null) {
      java.nio.file.Path parent = file.toPath().getParent();
      Files.createDirectories(parent);
      java.nio.file.Path temp = parent.resolve(name);
      try {
        try (java.io.OutputStream out = Files.newOutputStream(temp)) {
          data.writeTo(out);
        }
        Files.move(temp, file.toPath(), StandardCopyOption.ATOMIC_MOVE);
      } finally {
        Files.deleteIfExists(temp);
      }
      return;
    }
    FileSystem fs = target.getFileSystem(conf);
    String scheme = target.toUri().getScheme();
    if (scheme != null && OBJECT_STORES.contains(scheme.toLowerCase(Locale.ROOT))) {
      FSDataOutputStream out = fs.create(target, true);
      try {
        data.writeTo(out);
      } catch (IOException | RuntimeException e) { // closed, a part would be the object
        try {
          out.abort();
        } catch (RuntimeException notAborted) { // a store that cannot abort: the part removed
          try {
            out.close();
            fs.delete(target, false);
          } catch (IOException | RuntimeException notRemoved) {
            e.addSuppressed(notRemoved);
          }
        }
        throw e;
      }
      out.close();
      return;
    }
    Path temp = new Path(target.getParent(), name);
    try {
      try (FSDataOutputStream out = fs.create(temp, true)) {
        data.writeTo(out);
      }
      if (!fs.rename(temp, target)) { // a retried task's file is there already
        fs.delete(target, false);
        if (!fs.rename(temp, target)) {
          throw new IOException("could not rename " + temp + " to " + target);
        }
      }
    } catch (IOException | RuntimeException e) { // no temporary file left behind
      try {
        fs.delete(temp, false);
      } catch (IOException ignored) {
        e.addSuppressed(ignored);
      }
      throw e;
    }
  }
}
