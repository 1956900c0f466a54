package io.wmobs.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.collection.unsafe.sort.PrefixComparators;
import org.apache.spark.util.collection.unsafe.sort.RecordComparator;

/**
 * One key's rows of a micro-batch in arrival order, then by their place in their input
 * partition ({@code wmobs_row_place}): the order substreams judge them in. A key's rows are few
 * in most micro-batches and sorted on the heap; past {@link #IN_MEMORY} of them or {@link
 * #IN_MEMORY_BYTES}, or fewer where Spark's sorters are told to spill sooner ({@link
 * #heapRows}), they go into Spark's external sorter (its memory pages, spilled to disk when
 * the task's memory runs short, as Spark's own sorts do), so a micro-batch of a few busy keys
 * never holds them on the heap.
 */
final class KeyRows {
  /**
   * How many of a key's rows are sorted on the heap at most; past that, or past {@link
   * #IN_MEMORY_BYTES}, a key's rows go to the external sorter.
   */
  static final int IN_MEMORY = 1 << 16;

  /** How many bytes of a key's rows (their columns, and about {@link #ROW_BYTES} each around
   * them) are held on the heap at most: memory Spark's task memory manager does not see. */
  static final long IN_MEMORY_BYTES = 16L << 20;

  private static final long ROW_BYTES = 80;

  /** By arrival, then place. */
  private static final Comparator<SubstreamBeans.In> ORDER =
      (a, b) -> {
        int byArrival = Long.compare(a.getArrival(), b.getArrival());
        return byArrival != 0 ? byArrival : Long.compare(a.getSeq(), b.getSeq());
      };

  private static final StructType SCHEMA =
      new StructType()
          .add("arrival", DataTypes.LongType, false)
          .add("seq", DataTypes.LongType, false)
          .add("ts", DataTypes.LongType, true)
          .add("verdict", DataTypes.LongType, false)
          .add("idle", DataTypes.LongType, false)
          .add("row", DataTypes.BinaryType, true);

  private KeyRows() {}

  /**
   * How many of a key's rows this executor sorts on the heap: {@link #IN_MEMORY}, or fewer where
   * Spark's sorters are told to spill sooner ({@code
   * spark.shuffle.spill.numElementsForceSpillThreshold}, read as Spark's sorters read it).
   */
  static int heapRows() {
    SparkEnv env = SparkEnv.get();
    if (env == null) {
      return IN_MEMORY;
    }
    Object spillEvery =
        env.conf()
            .get(
                org.apache.spark.internal.config.package$.MODULE$
                    .SHUFFLE_SPILL_NUM_ELEMENTS_FORCE_SPILL_THRESHOLD());
    return (int) Math.max(0, Math.min(IN_MEMORY, ((Number) spillEvery).longValue()));
  }

  /** {@code input}'s rows, sorted; past {@code heapRows} of them, by Spark's external sorter. */
  static Iterator<SubstreamBeans.In> sorted(Iterator<SubstreamBeans.In> input, int heapRows) {
    List<SubstreamBeans.In> held = new ArrayList<>();
    long bytes = 0;
    while (input.hasNext() && held.size() < heapRows && bytes < IN_MEMORY_BYTES) {
      SubstreamBeans.In in = input.next();
      held.add(in);
      bytes += ROW_BYTES + (in.getRow() == null ? 0 : in.getRow().length);
    }
    if (!input.hasNext()) {
      if (!inOrder(held)) {
        held.sort(ORDER);
      }
      return held.iterator();
    }
    try {
      return external(held, input);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static boolean inOrder(List<SubstreamBeans.In> rows) {
    for (int i = 1; i < rows.size(); i++) {
      if (ORDER.compare(rows.get(i - 1), rows.get(i)) > 0) {
        return false;
      }
    }
    return true;
  }

  private static Iterator<SubstreamBeans.In> external(
      List<SubstreamBeans.In> held, Iterator<SubstreamBeans.In> rest) throws IOException {
    UnsafeExternalRowSorter sorter =
        UnsafeExternalRowSorter.createWithRecordComparator(
            SCHEMA,
            Order::new,
            PrefixComparators.LONG,
            new ArrivalPrefix(),
            SparkEnv.get().memoryManager().pageSizeBytes(),
            false);
    UnsafeProjection project = UnsafeProjection.create(SCHEMA);
    GenericInternalRow row = new GenericInternalRow(SCHEMA.length());
    for (SubstreamBeans.In in : held) {
      sorter.insertRow(project.apply(fill(row, in)));
    }
    held.clear();
    while (rest.hasNext()) {
      sorter.insertRow(project.apply(fill(row, rest.next())));
    }
    scala.collection.Iterator<InternalRow> out = sorter.sort();
    return new Iterator<>() {
      @Override
      public boolean hasNext() {
        return out.hasNext();
      }

      @Override
      public SubstreamBeans.In next() {
        InternalRow sorted = out.next();
        SubstreamBeans.In in = new SubstreamBeans.In();
        in.setArrival(sorted.getLong(0));
        in.setSeq(sorted.getLong(1));
        in.setTs(sorted.isNullAt(2) ? null : sorted.getLong(2));
        in.setVerdict(sorted.getLong(3));
        in.setIdle(sorted.getLong(4));
        in.setRow(sorted.isNullAt(5) ? null : sorted.getBinary(5));
        return in;
      }
    };
  }

  private static InternalRow fill(GenericInternalRow row, SubstreamBeans.In in) {
    row.update(0, in.getArrival());
    row.update(1, in.getSeq());
    row.update(2, in.getTs());
    row.update(3, in.getVerdict());
    row.update(4, in.getIdle());
    row.update(5, in.getRow());
    return row;
  }

  /** By arrival (the prefix), then place: Spark compares records only where prefixes tie. */
  private static final class Order extends RecordComparator {
    private final UnsafeRow left = new UnsafeRow(SCHEMA.length());
    private final UnsafeRow right = new UnsafeRow(SCHEMA.length());

    @Override
    public int compare(Object lo, long lOffset, int lLength, Object ro, long rOffset, int rLength) {
      left.pointTo(lo, lOffset, lLength);
      right.pointTo(ro, rOffset, rLength);
      int byArrival = Long.compare(left.getLong(0), right.getLong(0));
      return byArrival != 0 ? byArrival : Long.compare(left.getLong(1), right.getLong(1));
    }
  }

  private static final class ArrivalPrefix extends UnsafeExternalRowSorter.PrefixComputer {
    private final Prefix prefix = new Prefix();

    @Override
    public Prefix computePrefix(InternalRow row) {
      prefix.value = row.getLong(0);
      prefix.isNull = false;
      return prefix;
    }
  }
}
