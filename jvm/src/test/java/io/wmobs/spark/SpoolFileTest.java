package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.parquet.io.PositionOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A task's dead-letter file as it is written: in memory while small, then in a local file, its
 * bytes the same either way (and as often as they are read), the local file removed.
 */
class SpoolFileTest {
  private static byte[] bytes(int n) {
    byte[] out = new byte[n];
    for (int i = 0; i < n; i++) {
      out[i] = (byte) (i * 31);
    }
    return out;
  }

  @Test
  void smallStaysInMemoryLargeGoesToALocalFileWithTheSameBytes(@TempDir Path dir)
      throws Exception {
    byte[] data = bytes(1000);
    for (int inMemory : new int[] {4096, 100}) {
      File kept;
      try (SpoolFile spool = new SpoolFile(inMemory)) {
        PositionOutputStream out = spool.create(0);
        out.write(data, 0, 60);
        out.write(data[60]);
        out.write(data, 61, data.length - 61);
        assertEquals(data.length, out.getPos());
        out.close(); // as Parquet's writer closes it: the bytes stay
        assertEquals(inMemory < data.length, spool.spilled());
        ByteArrayOutputStream read = new ByteArrayOutputStream();
        spool.writeTo(read);
        assertArrayEquals(data, read.toByteArray());
        // Read again, as a retried write of the file would.
        Path copy = dir.resolve("part-" + inMemory);
        try (java.io.OutputStream file = Files.newOutputStream(copy)) {
          spool.writeTo(file);
        }
        assertArrayEquals(data, Files.readAllBytes(copy));
        kept = spilledFile(spool);
      }
      if (kept != null) {
        assertFalse(kept.exists(), "the local file is removed with the spool");
      }
    }
  }

  @Test
  void writtenAgainFromTheStart() throws Exception {
    try (SpoolFile spool = new SpoolFile(8)) {
      spool.create(0).write(bytes(20), 0, 20);
      assertTrue(spool.spilled());
      PositionOutputStream again = spool.createOrOverwrite(0);
      again.write(bytes(3), 0, 3);
      assertFalse(spool.spilled());
      assertEquals(3, spool.size());
    }
  }

  private static File spilledFile(SpoolFile spool) throws Exception {
    java.lang.reflect.Field field = SpoolFile.class.getDeclaredField("spilled");
    field.setAccessible(true);
    return (File) field.get(spool);
  }
}
