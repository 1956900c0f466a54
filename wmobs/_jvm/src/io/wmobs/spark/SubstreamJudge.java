package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
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
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Generator;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import scala.Enumeration;
import scala.collection.IterableOnce;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Substreams in the JVM: the per-key out-of-order judge over one partition of rows shuffled by
 * key bucket, with its state in the query's checkpoint. The same rules, state files and output
 * as the Python stage ({@code wmobs/policy/_substream_stage.py}, {@code _substream_judge.py},
 * {@code _substream_state.py}), which stays the fallback where the JAR is not loaded; a query
 * can restart on either.
 *
 * <p>Per key, in arrival order (ties keep input order): the key's watermark is the largest
 * system timestamp of its earlier candidate rows (and of its state) minus the tolerance; a
 * candidate row below it is out of order, adjusted up to it or dropped. State per key: the
 * largest system timestamp, when it was last seen and up to when its idle clock has run, one
 * Arrow IPC file per task and micro-batch with the keys of the task's buckets ({@code
 * <root>/<batchId>-<buckets>.arrow}), written whole at once; batch N reads each bucket from the
 * newest file before N that holds it, so a retried batch reads the same state again.
 *
 * <p>Spark runs it as a Catalyst generator ({@link Judge}, a SQL function of every column):
 * the partition's rows stay Spark's binary rows, copied once into a buffer, judged when the
 * partition ends, their three judged fields written in place. (It was a {@code mapPartitions}
 * function: every row became a {@code Row} of Java objects and back, 0.05x of the query.)
 */
public final class SubstreamJudge implements Serializable {
  private static final long serialVersionUID = 2L;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long NONE = Long.MIN_VALUE;
  private static final long HEARTBEAT = -2;
  private static final long STALE_MS = 3_600_000L;
  private static final String[] STATE_COLUMNS = {"key", "max_us", "seen_ms", "advanced_ms"};
  private static final BufferAllocator ARROW = new RootAllocator(Long.MAX_VALUE);
  private static final Seq<InternalRow> NO_ROWS = Catalyst.seq(List.of());

  private final String checkpoint;
  private final String directory;
  private final int buckets;
  private final long toleranceUs;
  private final boolean drop;
  private final long ttlMs; // -1: none
  private final long idleTimeoutMs; // -1: none
  private final long candidateBits;
  private final long oooBit;
  private final int key;
  private final int ts;
  private final int arrival;
  private final int verdict;
  private final int idle; // -1: none
  private final int lateness;
  private final String[] names;
  private final boolean passThrough;
  private final Broadcast<SerializableConfiguration> conf;

  private SubstreamJudge(JsonNode spec, Broadcast<SerializableConfiguration> conf) {
    checkpoint = spec.get("checkpoint").asText();
    directory = spec.get("directory").asText();
    buckets = spec.get("buckets").asInt();
    toleranceUs = spec.get("tolerance_us").asLong();
    drop = spec.get("drop").asBoolean();
    ttlMs = spec.path("ttl_ms").asLong(-1);
    idleTimeoutMs = spec.path("idle_timeout_ms").asLong(-1);
    candidateBits = spec.get("candidate_bits").asLong();
    oooBit = spec.get("ooo_bit").asLong();
    key = spec.get("key").asInt();
    ts = spec.get("ts").asInt();
    arrival = spec.get("arrival").asInt();
    verdict = spec.get("verdict").asInt();
    idle = spec.path("idle").asInt(-1);
    lateness = spec.get("lateness").asInt();
    JsonNode columns = spec.get("columns");
    names = new String[columns.size()];
    for (int i = 0; i < names.length; i++) {
      names[i] = columns.get(i).asText();
    }
    passThrough = spec.path("pass_through").asBoolean(false);
    this.conf = conf;
  }

  /**
   * Registers {@code name} in {@code spark}: a generator of every column, {@code
   * name(c0, c1, ...)} in a {@code select} of its own, which yields the judged rows with the
   * same columns. {@code spec}: JSON with {@code columns} (the arguments' names, also the
   * output's), {@code checkpoint} ("" for a named query's), {@code directory} (the state's,
   * below the checkpoint), {@code buckets}, {@code tolerance_us}, {@code drop}, {@code ttl_ms}
   * and {@code idle_timeout_ms} (null: none), {@code candidate_bits} (verdict bits of rows no
   * longer in play), {@code ooo_bit}, and the argument positions of {@code key}, {@code ts},
   * {@code arrival}, {@code verdict}, {@code idle} (null: no idle timeout) and {@code
   * lateness}. ({@code pass_through}: yield every row as it is, judge nothing; a diagnostic of
   * the benchmarks, to measure what the judge costs.)
   */
  public static void register(SparkSession spark, String name, String spec) throws IOException {
    Configuration hadoop = spark.sessionState().newHadoopConf();
    SubstreamJudge judge =
        new SubstreamJudge(
            JSON.readTree(spec), SerializableConfiguration.broadcast(spark.sparkContext(), hadoop));
    Catalyst.register(
        spark, name, judge.names.length, arguments -> new Judge(judge, name, arguments));
  }

  /**
   * One partition's rows (each a copy of its own, with the arguments' columns), judged: the
   * real rows with their system timestamp, verdict and lateness written in place, in input
   * order, then the synthetic row of an idle-timeout firing, if any. {@code intVerdict}: the
   * verdict column is an int, not a long.
   */
  List<UnsafeRow> judge(List<UnsafeRow> rows, boolean intVerdict) throws IOException {
    long nowMs = System.currentTimeMillis();
    int n = rows.size();
    boolean[] beat = new boolean[n];
    boolean heartbeat = false;
    boolean[] seen = new boolean[buckets];
    for (int i = 0; i < n; i++) {
      UnsafeRow row = rows.get(i);
      if (idle >= 0 && idleTimeoutMs >= 0 && row.getLong(idle) == HEARTBEAT) {
        beat[i] = true;
        heartbeat = true;
      }
      seen[(int) Math.floorMod(row.getLong(key), (long) buckets)] = true;
    }
    TaskContext task = TaskContext.get();
    String batch = task == null ? null : task.getLocalProperty("streaming.sql.batchId");
    Store store = null;
    long batchId = -1;
    if (batch != null) {
      batchId = Long.parseLong(batch);
      store = new Store(Hadoop.checkpoint(checkpoint, task) + "/" + directory);
    }
    Map<Long, long[]> state = new HashMap<>(); // key -> {max_us, seen_ms, advanced_ms}
    int[] loaded = new int[buckets]; // keys read per bucket
    if (store != null) {
      store.load(seen, batchId, state, loaded);
    }
    if (ttlMs >= 0) { // forgotten first: a key back after the TTL starts afresh
      state.values().removeIf(s -> s[1] < nowMs - ttlMs);
    }

    long[] system = new long[n];
    long[] verdicts = new long[n];
    long[] behind = new long[n];
    judge(rows, intVerdict, beat, state, nowMs, system, verdicts, behind);
    long[] synthetic = null;
    if (heartbeat && idleTimeoutMs >= 0) {
      synthetic = advanceIdle(state, nowMs);
    }
    if (store != null) { // written before any row goes on
      TreeMap<Long, long[]> sorted = new TreeMap<>(state);
      long written = 0; // buckets with keys before or after (none: no file)
      for (int bucket = 0; bucket < buckets; bucket++) {
        if (seen[bucket] && loaded[bucket] > 0) {
          written |= 1L << bucket;
        }
      }
      for (long k : sorted.keySet()) {
        written |= 1L << Math.floorMod(k, (long) buckets);
      }
      if (written != 0) {
        store.save(batchId, written, sorted);
      }
    }

    List<UnsafeRow> out = new ArrayList<>(n + 1);
    int firstBeat = -1;
    for (int i = 0; i < n; i++) {
      UnsafeRow row = rows.get(i);
      if (beat[i]) {
        firstBeat = firstBeat < 0 ? i : firstBeat;
        continue;
      }
      if (!row.isNullAt(ts)) {
        row.setLong(ts, system[i]);
      }
      setVerdict(row, intVerdict, verdicts[i]);
      if (behind[i] < 0) {
        row.setNullAt(lateness);
      } else {
        row.setLong(lateness, behind[i]);
      }
      out.add(row);
    }
    if (synthetic != null && firstBeat >= 0) { // a heartbeat row carrying the moved clock
      UnsafeRow row = rows.get(firstBeat);
      row.setLong(ts, synthetic[0]);
      setVerdict(row, intVerdict, 0);
      row.setLong(idle, synthetic[1]);
      out.add(row);
    }
    return out;
  }

  private void setVerdict(UnsafeRow row, boolean intVerdict, long value) {
    if (intVerdict) {
      row.setInt(verdict, (int) value);
    } else {
      row.setLong(verdict, value);
    }
  }

  /**
   * The out-of-order verdicts of the real rows, per key in arrival order, and the keys' new
   * state; heartbeat rows are left alone.
   */
  private void judge(
      List<UnsafeRow> rows,
      boolean intVerdict,
      boolean[] beat,
      Map<Long, long[]> state,
      long nowMs,
      long[] system,
      long[] verdicts,
      long[] behind) {
    int n = rows.size();
    long[] arrivals = new long[n];
    long[] times = new long[n];
    boolean[] candidate = new boolean[n];
    // Each row's key as a group number (open addressing over the keys, no boxing), then the
    // rows of each group together, in input order (a counting sort).
    int slots = Integer.highestOneBit(Math.max(n, 2) * 2 - 1) * 2;
    long[] slotKey = new long[slots];
    int[] slotGroup = new int[slots];
    Arrays.fill(slotGroup, -1);
    int[] groupOf = new int[n];
    long[] groupKey = new long[n];
    int[] starts = new int[n + 2];
    int groups = 0;
    for (int i = 0; i < n; i++) {
      if (beat[i]) {
        continue;
      }
      UnsafeRow row = rows.get(i);
      long k = row.getLong(key);
      arrivals[i] = row.isNullAt(arrival) ? 0 : row.getLong(arrival);
      times[i] = row.isNullAt(ts) ? 0 : row.getLong(ts);
      verdicts[i] = intVerdict ? row.getInt(verdict) : row.getLong(verdict);
      candidate[i] = (verdicts[i] & candidateBits) == 0;
      int slot = (int) (mix(k) & (slots - 1));
      while (slotGroup[slot] >= 0 && slotKey[slot] != k) {
        slot = (slot + 1) & (slots - 1);
      }
      if (slotGroup[slot] < 0) {
        slotKey[slot] = k;
        slotGroup[slot] = groups;
        groupKey[groups++] = k;
      }
      groupOf[i] = slotGroup[slot];
      starts[groupOf[i] + 2]++;
    }
    for (int g = 0; g < groups; g++) { // starts[g + 1]: where group g begins
      starts[g + 2] += starts[g + 1];
    }
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      if (!beat[i]) {
        order[starts[groupOf[i] + 1]++] = i;
      }
    }
    int[] scratch = null;
    for (int g = 0; g < groups; g++) { // group g is order[starts[g], starts[g + 1])
      int from = starts[g];
      int to = starts[g + 1];
      if (!sorted(order, from, to, arrivals)) {
        scratch = scratch == null ? new int[n] : scratch;
        sortByArrival(order, from, to, arrivals, scratch);
      }
      long[] known = state.get(groupKey[g]);
      long start = known == null ? NONE : known[0];
      long best = NONE; // the largest candidate timestamp before the row
      for (int k = from; k < to; k++) {
        int i = order[k];
        long before = Math.max(best, start);
        boolean hasMark = before != NONE;
        long watermark = hasMark ? before - toleranceUs : NONE;
        boolean late = candidate[i] && hasMark && times[i] < watermark;
        system[i] = late && !drop ? watermark : times[i];
        behind[i] = candidate[i] ? (hasMark ? Math.max(before - times[i], 0) : 0) : -1;
        if (late) {
          verdicts[i] |= oooBit;
        }
        if (candidate[i]) {
          best = Math.max(best, times[i]);
        }
      }
      long last = Math.max(best, start);
      if (known != null) { // new maximum, seen now, no longer idle
        known[0] = last;
        known[1] = nowMs;
        known[2] = -1;
      } else if (last != NONE) { // a new key, if a row counted
        state.put(groupKey[g], new long[] {last, nowMs, -1});
      }
    }
  }

  /** A 64-bit finalizer (MurmurHash3's): keys that differ in their high bits spread too. */
  private static long mix(long k) {
    k = (k ^ (k >>> 33)) * 0xff51afd7ed558ccdL;
    k = (k ^ (k >>> 33)) * 0xc4ceb9fe1a85ec53L;
    return k ^ (k >>> 33);
  }

  private static boolean sorted(int[] order, int from, int to, long[] arrivals) {
    for (int k = from + 1; k < to; k++) {
      if (arrivals[order[k - 1]] > arrivals[order[k]]) {
        return false;
      }
    }
    return true;
  }

  /**
   * {@code order[from, to)} sorted by arrival, ties in the order they are in (a merge sort:
   * stable, and of the rows' numbers, not boxed).
   */
  private static void sortByArrival(int[] order, int from, int to, long[] arrivals, int[] scratch) {
    if (to - from <= 16) { // insertion sort
      for (int k = from + 1; k < to; k++) {
        int row = order[k];
        int j = k - 1;
        while (j >= from && arrivals[order[j]] > arrivals[row]) {
          order[j + 1] = order[j];
          j--;
        }
        order[j + 1] = row;
      }
      return;
    }
    int middle = (from + to) >>> 1;
    sortByArrival(order, from, middle, arrivals, scratch);
    sortByArrival(order, middle, to, arrivals, scratch);
    if (arrivals[order[middle - 1]] <= arrivals[order[middle]]) {
      return; // already in order
    }
    System.arraycopy(order, from, scratch, from, to - from);
    int left = from;
    int right = middle;
    for (int k = from; k < to; k++) {
      if (right >= to || (left < middle && arrivals[scratch[left]] <= arrivals[scratch[right]])) {
        order[k] = scratch[left++];
      } else {
        order[k] = scratch[right++];
      }
    }
  }

  /**
   * The idle-timeout rule ({@code wmobs/policy/_idle.py}), in place: every key idle for the
   * timeout has its clock moved on. {largest moved timestamp µs, firings}, or null when no
   * clock moved.
   */
  private long[] advanceIdle(Map<Long, long[]> state, long nowMs) {
    long top = NONE;
    long firings = 0;
    boolean any = false;
    for (long[] s : state.values()) {
      long idleSince = s[1] + idleTimeoutMs;
      if (nowMs < idleSince) {
        continue;
      }
      any = true;
      boolean starting = s[2] < 0;
      long lagMs = s[1] - Math.floorDiv(s[0], 1000L);
      long jumpMs = starting ? Math.min(Math.max(lagMs, 0), idleTimeoutMs) : 0;
      long begin = starting ? idleSince : Math.max(s[2], idleSince);
      s[0] = s[0] + (Math.max(nowMs - begin, 0) + jumpMs) * 1000;
      s[2] = nowMs;
      firings += starting ? 1 : 0;
      top = Math.max(top, s[0]);
    }
    return any ? new long[] {top, firings} : null;
  }

  /**
   * The judge as Spark evaluates it: a generator that copies each row of its partition into a
   * buffer and yields nothing, then, when the partition ends, judges them all and yields them
   * ({@link SubstreamJudge#judge}). Spark plans it outside generated code ({@code GenerateExec}
   * without code generation), which is what a partition-wide step needs.
   */
  public static final class Judge extends Expression implements Generator, Serializable {
    private static final long serialVersionUID = 1L;
    private final SubstreamJudge judge;
    private final String name;
    private final Seq<Expression> children;
    private Seq<Enumeration.Value> nodePatterns;
    // The running task's buffer; each task deserializes an instance of its own.
    private transient List<UnsafeRow> rows;
    private transient UnsafeProjection project;
    private transient boolean inPlace;

    Judge(SubstreamJudge judge, String name, Seq<Expression> children) {
      this.judge = judge;
      this.name = name;
      this.children = children;
      Generator.$init$(this);
    }

    @Override
    public IterableOnce<InternalRow> eval(InternalRow row) {
      if (judge.passThrough) {
        return Catalyst.seq(List.of(row));
      }
      if (rows == null) {
        rows = new ArrayList<>();
        project = UnsafeProjection.create(children);
        inPlace = arguments();
      }
      if (inPlace && row instanceof UnsafeRow unsafe && unsafe.numFields() == judge.names.length) {
        rows.add(unsafe.copy());
      } else {
        rows.add(project.apply(row).copy());
      }
      return NO_ROWS;
    }

    /** True if the arguments are the input's columns in order (bound: its ordinals 0, 1, ...). */
    private boolean arguments() {
      for (int i = 0; i < children.size(); i++) {
        if (!(children.apply(i) instanceof BoundReference b) || b.ordinal() != i) {
          return false;
        }
      }
      return true;
    }

    @Override
    public IterableOnce<InternalRow> terminate() {
      List<UnsafeRow> buffered = rows;
      rows = null;
      if (buffered == null || buffered.isEmpty()) {
        return NO_ROWS;
      }
      boolean intVerdict = children.apply(judge.verdict).dataType() == DataTypes.IntegerType;
      try {
        List<InternalRow> judged = new ArrayList<>(judge.judge(buffered, intVerdict));
        return CollectionConverters.asScala(judged.iterator());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    @Override
    public StructType elementSchema() {
      StructField[] fields = new StructField[judge.names.length];
      for (int i = 0; i < fields.length; i++) {
        Expression child = children.apply(i);
        fields[i] =
            new StructField(judge.names[i], child.dataType(), child.nullable(), Metadata.empty());
      }
      return new StructType(fields);
    }

    @Override
    public boolean supportCodegen() {
      return false;
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      throw new UnsupportedOperationException("wmobs: " + name + " runs without generated code");
    }

    @Override
    public Seq<Enumeration.Value> nodePatterns() {
      return nodePatterns;
    }

    @Override
    public void org$apache$spark$sql$catalyst$expressions$Generator$_setter_$nodePatterns_$eq(
        Seq<Enumeration.Value> patterns) {
      nodePatterns = patterns;
    }

    @Override
    public DataType dataType() {
      return DataTypes.createArrayType(elementSchema());
    }

    @Override
    public boolean nullable() {
      return false;
    }

    @Override
    public Seq<Expression> children() {
      return children;
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
      return new Judge(judge, name, newChildren);
    }

    @Override
    public String prettyName() {
      return name;
    }

    @Override
    public int productArity() {
      return 3;
    }

    @Override
    public Object productElement(int n) {
      return switch (n) {
        case 0 -> judge;
        case 1 -> name;
        case 2 -> children;
        default -> throw new IndexOutOfBoundsException(n);
      };
    }

    @Override
    public boolean canEqual(Object other) {
      return other instanceof Judge;
    }
  }

  /**
   * The state files of one query's substreams ({@code _substream_state.StateStore}): one Arrow
   * IPC file per task and micro-batch, {@code <root>/<batchId>-<buckets>.arrow} (the buckets as
   * the bits of 16 hex digits), read per bucket from the newest file before the batch that
   * holds it; files of the per-bucket layout of earlier versions ({@code <root>/<bucket>/
   * <batchId>.arrow}) read where newer, and deleted once a task file is.
   */
  private final class Store {
    private final String root;
    private final Configuration hadoop = conf.value().value();

    Store(String root) {
      this.root = root.replaceAll("/+$", "");
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
}
