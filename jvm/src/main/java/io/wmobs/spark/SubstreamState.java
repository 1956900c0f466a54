package io.wmobs.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * The state files of one query's substreams ({@code wmobs/policy/_substream_state.py} is the
 * Python engine's copy; a query can restart on either engine): one Arrow IPC file per task and
 * micro-batch, {@code <root>/<batchId>-<buckets>.arrow} (the buckets as the bits of 16 hex
 * digits), written whole at once, with each key's {@code {max_us, seen_ms, advanced_ms}}. Batch
 * N reads each bucket from the newest file before N that holds it, so a retried batch reads the
 * same state again. Files of the per-bucket layout of earlier versions ({@code <root>/<bucket>/
 * <batchId>.arrow}) are read where newer, and deleted once a task file is.
 */
final class SubstreamState {
  private static final long STALE_MS = 3_600_000L;
  private static final String[] STATE_COLUMNS = {"key", "max_us", "seen_ms", "advanced_ms"};
  private static final BufferAllocator ARROW = new RootAllocator(Long.MAX_VALUE);

  private final String root;
  private final int buckets;
  private final Configuration hadoop;

  SubstreamState(String root, int buckets, Configuration hadoop) {
    this.root = root.replaceAll("/+$", "");
    this.buckets = buckets;
    this.hadoop = hadoop;
  }

  /** A task file: {version, buckets}. */
  private static long[] parse(String name) {
    int dash = name.indexOf('-');
    if (!name.endsWith(".arrow") || dash <= 0 || name.length() - ".arrow".length() - dash != 17) {
      return null;
    }
    String version = name.substring(0, dash);
    String bits = name.substring(dash + 1, dash + 17);
    if (!version.chars().allMatch(Character::isDigit) || !bits.matches("[0-9a-f]{16}")) {
      return null;
    }
    return new long[] {Long.parseLong(version), Long.parseUnsignedLong(bits, 16)};
  }

  private static String name(long version, long bits) {
    return version + "-" + String.format("%016x", bits) + ".arrow";
  }

  /**
   * Into {@code state}, the keys of the buckets in {@code wanted} as the newest batch before
   * {@code batchId} left them ({@code loaded}: how many per bucket); the files no longer
   * needed by this task's buckets go on the way.
   */
  void load(boolean[] wanted, long batchId, Map<Long, long[]> state, int[] loaded)
      throws IOException {
    long stale = System.currentTimeMillis() - STALE_MS;
    List<long[]> files = new ArrayList<>();
    boolean[] legacy = new boolean[buckets];
    for (Hadoop.Entry entry : Hadoop.list(new Path(root), hadoop)) {
      String name = entry.name();
      long[] file = parse(name);
      if (file != null) {
        if (file[0] < batchId) {
          files.add(file);
        }
      } else if (name.endsWith(".tmp")) {
        if (entry.modifiedMs() < stale) { // left by a task that died an hour ago or more
          Hadoop.delete(new Path(root + "/" + name), hadoop);
        }
      } else if (name.matches("[0-9]{1,2}") && Integer.parseInt(name) < buckets) {
        legacy[Integer.parseInt(name)] = true;
      }
    }
    // In order (by version, ties by buckets): the last file holding a bucket is its newest.
    files.sort(
        (a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compareUnsigned(a[1], b[1]));
    long[][] newest = new long[buckets][];
    for (long[] file : files) {
      for (int bucket = 0; bucket < buckets; bucket++) {
        if ((file[1] >>> bucket & 1) != 0) {
          newest[bucket] = file;
        }
      }
    }
    Map<String, Long> chosen = new TreeMap<>(); // file to read -> the buckets to take from it
    long mine = 0;
    for (int bucket = 0; bucket < buckets; bucket++) {
      if (!wanted[bucket]) {
        continue;
      }
      mine |= 1L << bucket;
      long[] found = newest[bucket];
      String old = legacy[bucket] ? legacy(bucket, batchId, found) : null;
      String file = old != null ? old : found == null ? null : name(found[0], found[1]);
      if (file != null) {
        chosen.merge(file, 1L << bucket, (a, b) -> a | b);
      }
    }
    for (long[] file : files) { // none of its buckets' newest (so no retry reads it): gone
      boolean done = (file[1] & mine) != 0;
      for (int bucket = 0; bucket < buckets && done; bucket++) {
        done = (file[1] >>> bucket & 1) == 0 || newest[bucket][0] > file[0];
      }
      if (done) {
        Hadoop.delete(new Path(root + "/" + name(file[0], file[1])), hadoop);
      }
    }
    List<String> names = new ArrayList<>(chosen.keySet());
    List<Callable<byte[]>> reads = new ArrayList<>();
    for (String file : names) {
      reads.add(() -> Hadoop.read(new Path(root + "/" + file), hadoop));
    }
    List<byte[]> data = Hadoop.inParallel(reads); // side by side (most often, one file)
    for (int f = 0; f < names.size(); f++) {
      read(data.get(f), chosen.get(names.get(f)), state, loaded);
    }
  }

  /**
   * The bucket's file of the per-bucket layout to read (relative to the root), if it is
   * newer than {@code newer}; its other versions before {@code batchId} go, and its folder
   * once empty.
   */
  private String legacy(int bucket, long batchId, long[] newer) throws IOException {
    Path folder = new Path(root + "/" + bucket);
    List<Long> versions = new ArrayList<>();
    for (Hadoop.Entry entry : Hadoop.list(folder, hadoop)) {
      String name = entry.name();
      if (name.endsWith(".tmp")) { // its writers were an earlier wmobs: dead
        Hadoop.delete(new Path(folder, name), hadoop);
      } else if (name.matches("[0-9]+\\.arrow")) {
        long version = Long.parseLong(name.substring(0, name.length() - ".arrow".length()));
        if (version < batchId) {
          versions.add(version);
        }
      }
    }
    long keep = -1;
    for (long version : versions) {
      keep = Math.max(keep, version);
    }
    if (keep >= 0 && newer != null && newer[0] >= keep) {
      keep = -1;
    }
    for (long version : versions) {
      if (version != keep) {
        Hadoop.delete(new Path(folder, version + ".arrow"), hadoop);
      }
    }
    if (keep < 0) {
      Hadoop.deleteEmptyFolder(folder, hadoop);
      return null;
    }
    return bucket + "/" + keep + ".arrow";
  }

  /** The keys of {@code bits}' buckets in one file, into {@code state}. */
  private void read(byte[] data, long bits, Map<Long, long[]> state, int[] loaded)
      throws IOException {
    try (BufferAllocator allocator = ARROW.newChildAllocator("wmobs-state", 0, Long.MAX_VALUE);
        ArrowStreamReader reader =
            new ArrowStreamReader(new ByteArrayInputStream(data), allocator)) {
      VectorSchemaRoot table = reader.getVectorSchemaRoot();
      while (reader.loadNextBatch()) {
        BigIntVector[] columns = new BigIntVector[STATE_COLUMNS.length];
        for (int c = 0; c < columns.length; c++) {
          columns[c] = (BigIntVector) table.getVector(STATE_COLUMNS[c]);
        }
        for (int r = 0; r < table.getRowCount(); r++) {
          long k = columns[0].get(r);
          int bucket = (int) Math.floorMod(k, (long) buckets);
          if ((bits >>> bucket & 1) != 0) {
            state.put(k, new long[] {columns[1].get(r), columns[2].get(r), columns[3].get(r)});
            loaded[bucket]++;
          }
        }
      }
    }
  }

  /** Writes the state of {@code bits}' buckets after {@code batchId}: one file, keys in order. */
  void save(long batchId, long bits, TreeMap<Long, long[]> keys) throws IOException {
    List<Field> fields = new ArrayList<>();
    for (String name : STATE_COLUMNS) {
      fields.add(Field.nullable(name, new ArrowType.Int(64, true)));
    }
    ByteArrayOutputStream buffer = new ByteArrayOutputStream();
    try (BufferAllocator allocator = ARROW.newChildAllocator("wmobs-state", 0, Long.MAX_VALUE);
        VectorSchemaRoot table = VectorSchemaRoot.create(new Schema(fields), allocator)) {
      BigIntVector[] columns = new BigIntVector[STATE_COLUMNS.length];
      for (int c = 0; c < columns.length; c++) {
        columns[c] = (BigIntVector) table.getVector(c);
        columns[c].allocateNew(keys.size());
      }
      int r = 0;
      for (Map.Entry<Long, long[]> e : keys.entrySet()) {
        columns[0].set(r, e.getKey());
        for (int c = 1; c < columns.length; c++) {
          columns[c].set(r, e.getValue()[c - 1]);
        }
        r++;
      }
      table.setRowCount(keys.size());
      try (ArrowStreamWriter writer =
          new ArrowStreamWriter(table, null, Channels.newChannel(buffer))) {
        writer.start();
        writer.writeBatch();
        writer.end();
      }
    }
    Hadoop.writeOnce(new Path(root + "/" + name(batchId, bits)), buffer.toByteArray(), hadoop);
  }
}
