package io.wmobs.spark;

import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.PositionOutputStream;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;

/**
 * A Parquet output file that a task writes whole before it is stored once ({@link
 * DeadLetterWriter}), so that an object store never sees a partial file: in memory up to
 * {@code inMemory} bytes, then in a file of the executor's local directories (Spark's own,
 * where it spills shuffles and sorts), so a task that drops a backlog's rows holds at most
 * that much of its file on the heap (beside the Parquet writer's row group), and the file has
 * no size limit but the disk's. {@link #close} removes the local file (when the task ends).
 */
final class SpoolFile implements OutputFile, Closeable {
  /** What a task's dead letters may take on the heap before they go to a local file. */
  static final int IN_MEMORY = 16 << 20;

  private final int inMemory;
  private ByteArrayOutputStream buffer = new ByteArrayOutputStream();
  private File spilled;
  private OutputStream out;
  private long size;

  SpoolFile(int inMemory) {
    this.inMemory = inMemory;
  }

  @Override
  public PositionOutputStream create(long blockSizeHint) throws IOException {
    return createOrOverwrite(blockSizeHint);
  }

  @Override
  public PositionOutputStream createOrOverwrite(long blockSizeHint) throws IOException {
    close();
    buffer = new ByteArrayOutputStream();
    size = 0;
    return new PositionOutputStream() {
      @Override
      public long getPos() {
        return size;
      }

      @Override
      public void write(int b) throws IOException {
        write(new byte[] {(byte) b}, 0, 1);
      }

      @Override
      public void write(byte[] b, int off, int len) throws IOException {
        if (buffer != null && size + len > inMemory) {
          spill();
        }
        (buffer != null ? buffer : out).write(b, off, len);
        size += len;
      }

      @Override
      public void flush() throws IOException {
        if (out != null) {
          out.flush();
        }
      }

      @Override
      public void close() throws IOException {
        flush(); // the bytes stay until writeTo; the file until SpoolFile.close
      }
    };
  }

  private void spill() throws IOException {
    spilled = localFile();
    out = new BufferedOutputStream(Files.newOutputStream(spilled.toPath()), 1 << 16);
    buffer.writeTo(out);
    buffer = null;
  }

  /** A new file in Spark's local directories (a temporary file outside an executor). */
  private static File localFile() throws IOException {
    if (TaskContext.get() == null) {
      return File.createTempFile("wmobs-dead-letters-", ".parquet");
    }
    return SparkEnv.get().blockManager().diskBlockManager().createTempLocalBlock()._2();
  }

  /** How many bytes were written. */
  long size() {
    return size;
  }

  /** Whether they went to a local file. */
  boolean spilled() {
    return spilled != null;
  }

  /** Writes what was written to {@code target}. */
  void writeTo(OutputStream target) throws IOException {
    if (buffer != null) {
      buffer.writeTo(target);
      return;
    }
    out.flush();
    Files.copy(spilled.toPath(), target);
  }

  /** Drops what was written, and the local file. */
  @Override
  public void close() throws IOException {
    buffer = null;
    try {
      if (out != null) {
        out.close();
      }
    } finally {
      out = null;
      if (spilled != null) {
        Files.deleteIfExists(spilled.toPath());
        spilled = null;
      }
    }
  }

  @Override
  public boolean supportsBlockSize() {
    return false;
  }

  @Override
  public long defaultBlockSize() {
    return 0;
  }
}
