package io.wmobs.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
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
   * The state directory as a task finds it before micro-batch {@code batchId}: listed once,
   * then read bucket by bucket as the task's rows turn them up ({@link #load}), each file
   * once; {@link #tidy} deletes what no retry reads any more.
   */
  final class Listing {
    private final long batchId;
    private final List<long[]> files = new ArrayList<>();
    private final boolean[] legacy = new boolean[buckets];
    /** Per bucket, the newest file holding it: {version, buckets}. */
    private final long[][] newest = new long[buckets][];
    /** File name -> its keys per bucket: {key, max_us, seen_ms, advanced_ms}. */
    private final Map<String, Map<Integer, List<long[]>>> read = new HashMap<>();
    /** The buckets loaded. */
    private long mine;

    private Listing(long batchId) {
      this.batchId = batchId;
    }
  }

  /** The state directory before {@code batchId}; temporary files dead for an hour go. */
  Listing list(long batchId) throws IOException {
    Listing at = new Listing(batchId);
    long stale = System.currentTimeMillis() - STALE_MS;
    for (Hadoop.Entry entry : Hadoop.list(new Path(root), hadoop)) {
      String name = entry.name();
      long[] file = parse(name);
      if (file != null) {
        if (file[0] < batchId) {
          at.files.add(file);
        }
      } else if (name.endsWith(".tmp")) {
        if (entry.modifiedMs() < stale) { // left by a task that died an hour ago or more
          Hadoop.delete(new Path(root + "/" + name), hadoop);
        }
      } else if (name.matches("[0-9]{1,2}") && Integer.parseInt(name) < buckets) {
        at.legacy[Integer.parseInt(name)] = true;
      }
    }
    // In order (by version, ties by buckets): the last file holding a bucket is its newest.
    at.files.sort(
        (a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compareUnsigned(a[1], b[1]));
    for (long[] file : at.files) {
      for (int bucket = 0; bucket < buckets; bucket++) {
        if ((file[1] >>> bucket & 1) != 0) {
          at.newest[bucket] = file;
        }
      }
    }
    return at;
  }

  /**
   * Into {@code state}, the keys of {@code bucket} as the newest batch before the listing's
   * left them; how many.
   */
  int load(Listing at, int bucket, Map<Long, long[]> state) throws IOException {
    at.mine |= 1L << bucket;
    long[] found = at.newest[bucket];
    String old = at.legacy[bucket] ? legacy(bucket, at.batchId, found) : null;
    String file = old != null ? old : found == null ? null : name(found[0], found[1]);
    if (file == null) {
      return 0;
    }
    Map<Integer, List<long[]>> keys = at.read.get(file);
    if (keys == null) {
      keys = read(Hadoop.read(new Path(root + "/" + file), hadoop));
      at.read.put(file, keys);
    }
    List<long[]> mine = keys.getOrDefault(bucket, List.of());
    for (long[] key : mine) {
      state.put(key[0], new long[] {key[1], key[2], key[3]});
    }
    return mine.size();
  }

  /**
   * Deletes the files that hold a bucket the task loaded and in which no bucket is newest any
   * more (no retry reads them).
   */
  void tidy(Listing at) throws IOException {
    for (long[] file : at.files) {
      boolean done = (file[1] & at.mine) != 0;
      for (int bucket = 0; bucket < buckets && done; bucket++) {
        done = (file[1] >>> bucket & 1) == 0 || at.newest[bucket][0] > file[0];
      }
      if (done) {
        Hadoop.delete(new Path(root + "/" + name(file[0], file[1])), hadoop);
      }
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

  /** One file's keys, per bucket: {key, max_us, seen_ms, advanced_ms}. */
  private Map<Integer, List<long[]>> read(byte[] data) throws IOException {
    Map<Integer, List<long[]>> keys = new HashMap<>();
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
          keys.computeIfAbsent(bucket, b -> new ArrayList<>())
              .add(new long[] {k, columns[1].get(r), columns[2].get(r), columns[3].get(r)});
        }
      }
    }
    return keys;
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
