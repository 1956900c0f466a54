package io.wmobs.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;
import scala.Tuple2;

/**
 * The joint bucket counts of two distributions (a time policy's arrival delay and lateness),
 * as an aggregate function for {@code observe}: {@code f(a, b).points} has the value and the
 * type of {@code histogram_numeric(joint_index(a, b), bins)}, exact, as
 * {@code wmobs/observations.py} builds it and the listener reads it.
 *
 * <p>Spark runs {@code histogram_numeric} row by row outside generated code, a binary search
 * and an insertion into a list of bins per row, and the joint index before it is a tree of
 * several hundred comparisons in the stage's generated code. Here each row costs two binary
 * searches over the bounds and one increment of an array.
 *
 * <p>A value's bucket is the number of bounds below it (the last bucket is above every bound);
 * the digit of a null value is its histogram's bucket count; the joint index is {@code digitA *
 * (bucketsB + 1) + digitB}, and rows where both values are null are not counted.
 */
public final class JointHistogram
    extends Aggregator<Tuple2<Long, Long>, long[], JointHistogram.Points> {
  private static final long serialVersionUID = 1L;

  private final long[] first;
  private final long[] second;

  private JointHistogram(long[] first, long[] second) {
    this.first = first;
    this.second = second;
  }

  /**
   * Registers the function as {@code name} in {@code spark}: the bounds of each distribution
   * (µs, ascending) separated by commas.
   */
  public static void register(SparkSession spark, String name, String first, String second) {
    JointHistogram histogram = new JointHistogram(parse(first), parse(second));
    spark
        .udf()
        .register(name, functions.udaf(histogram, Encoders.tuple(Encoders.LONG(), Encoders.LONG())));
  }

  private static long[] parse(String bounds) {
    long[] parsed = Arrays.stream(bounds.split(",")).mapToLong(Long::parseLong).toArray();
    for (int i = 1; i < parsed.length; i++) {
      if (parsed[i] <= parsed[i - 1]) {
        throw new IllegalArgumentException("wmobs: bounds must ascend: " + bounds);
      }
    }
    return parsed;
  }

  /** The bucket of {@code value} among {@code bounds}, or their bucket count for null. */
  private static int digit(long[] bounds, Long value) {
    if (value == null) {
      return bounds.length + 1;
    }
    int found = Arrays.binarySearch(bounds, value);
    return found >= 0 ? found : -found - 1;
  }

  @Override
  public long[] zero() {
    return new long[(first.length + 2) * (second.length + 2)];
  }

  @Override
  public long[] reduce(long[] counts, Tuple2<Long, Long> row) {
    if (row._1() != null || row._2() != null) {
      counts[digit(first, row._1()) * (second.length + 2) + digit(second, row._2())] += 1;
    }
    return counts;
  }

  @Override
  public long[] merge(long[] a, long[] b) {
    for (int i = 0; i < a.length; i++) {
      a[i] += b[i];
    }
    return a;
  }

  @Override
  public Points finish(long[] counts) {
    List<Point> points = new ArrayList<>();
    for (int i = 0; i < counts.length; i++) {
      if (counts[i] != 0) {
        points.add(new Point(i, counts[i]));
      }
    }
    Points result = new Points();
    result.setPoints(points);
    return result;
  }

  @Override
  public Encoder<long[]> bufferEncoder() {
    return Encoders.javaSerialization(long[].class);
  }

  @Override
  public Encoder<Points> outputEncoder() {
    return Encoders.bean(Points.class);
  }

  /** One bin of {@code histogram_numeric}'s result: the joint index and its count. */
  public static final class Point implements Serializable {
    private static final long serialVersionUID = 1L;
    private double x;
    private double y;

    public Point() {}

    Point(double x, double y) {
      this.x = x;
      this.y = y;
    }

    public double getX() {
      return x;
    }

    public void setX(double x) {
      this.x = x;
    }

    public double getY() {
      return y;
    }

    public void setY(double y) {
      this.y = y;
    }
  }

  /** The result: {@code points}, the non-empty bins in ascending order of the index. */
  public static final class Points implements Serializable {
    private static final long serialVersionUID = 1L;
    private List<Point> points = new ArrayList<>();

    public List<Point> getPoints() {
      return points;
    }

    public void setPoints(List<Point> points) {
      this.points = points;
    }
  }
}
