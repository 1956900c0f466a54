package io.wmobs.spark;

import java.io.ByteArrayOutputStream;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.PositionOutputStream;

/**
 * A Parquet output file in memory: a task's dead letters are written whole, then stored once
 * ({@link DeadLetterWriter}), so an object store never sees a partial file.
 */
final class ParquetMemoryFile implements OutputFile {
  private final ByteArrayOutputStream buffer;

  ParquetMemoryFile(ByteArrayOutputStream buffer) {
    this.buffer = buffer;
  }

  @Override
  public PositionOutputStream create(long blockSizeHint) {
    return createOrOverwrite(blockSizeHint);
  }

  @Override
  public PositionOutputStream createOrOverwrite(long blockSizeHint) {
    buffer.reset();
    return new PositionOutputStream() {
      @Override
      public long getPos() {
        return buffer.size();
      }

      @Override
      public void write(int b) {
        buffer.write(b);
      }

      @Override
      public void write(byte[] b, int off, int len) {
        buffer.write(b, off, len);
      }
    };
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
