package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * A time policy's stateless rules, row by row: invalid time, early and late arrival, and (for
 * the global policy) out of order against the micro-batch's watermark. The JVM engine's copy of
 * the rules; the Python engine's are Column expressions ({@code
 * wmobs/policy/_python/_rules.py}), and both answer to the reference cases in {@code
 * tests/reference/}.
 *
 * <p>Every value is a long, µs unless named ms, with {@link #NULL} for SQL's null: the row's
 * event and arrival times (null: unparseable; no arrival column), the batch's watermark and
 * timestamp (ms). {@link #judge} gives one {@link Field} of the row's judgement; Catalyst
 * evaluates one expression per field ({@link Judge}), a handful of comparisons each, where the
 * same rules as Column expressions made dozens of nested CASE WHENs that Spark optimizes and
 * plans again in every micro-batch.
 */
public final class PolicyRules implements Serializable {
  private static final long serialVersionUID = 1L;

  /** SQL's null. */
  public static final long NULL = Long.MIN_VALUE;

  /** What {@link #judge} gives. */
  public enum Field {
    /** The verdict bits (never null). */
    VERDICT,
    /** The system timestamp: the event time, or what an adjusting rule moved it to. */
    SYSTEM,
    /** Arrival time - event time (the arrival delay). */
    DELAY,
    /** How far behind the watermark's largest timestamp a row still in play is (global only). */
    LATENESS,
    /** The batch's time - arrival time: how long the row waited in the broker. */
    QUEUE,
    /** The arrival time, the batch's time where the row has none. */
    ARRIVAL;

    static Field named(String name) {
      try {
        return valueOf(name.toUpperCase(java.util.Locale.ROOT));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            "wmobs: no field " + name + " of a policy's judgement; one of "
                + java.util.Arrays.toString(values()), e);
      }
    }
  }

  private final long earlyUs;
  private final boolean earlyDrop;
  private final long lateUs;
  private final boolean lateDrop;
  private final long outOfOrderUs;
  private final boolean outOfOrderDrop;
  private final int invalid;
  private final int earlyBit;
  private final int lateBit;
  private final int outOfOrderBit;
  private final int droppedBits;

  /**
   * The rules: {@code earlyUs} {@link #NULL} for no early-arrival policy, {@code outOfOrderUs}
   * {@link #NULL} where out of order is judged per key (substreams); {@code bits}: each
   * verdict's bit, by {@code "rule.action"} ({@code "late_arrival.adjusted"}, ...).
   */
  PolicyRules(long earlyUs, boolean earlyDrop, long lateUs, boolean lateDrop, long outOfOrderUs,
      boolean outOfOrderDrop, Map<String, Integer> bits) {
    this.earlyUs = earlyUs;
    this.earlyDrop = earlyDrop;
    this.lateUs = lateUs;
    this.lateDrop = lateDrop;
    this.outOfOrderUs = outOfOrderUs;
    this.outOfOrderDrop = outOfOrderDrop;
    this.invalid = bit(bits, "invalid_time", true);
    this.earlyBit = bit(bits, "early_arrival", earlyDrop);
    this.lateBit = bit(bits, "late_arrival", lateDrop);
    this.outOfOrderBit = bit(bits, "out_of_order", outOfOrderDrop);
    int dropped = 0;
    for (Map.Entry<String, Integer> entry : bits.entrySet()) {
      if (entry.getKey().endsWith(".dropped")) {
        dropped |= entry.getValue();
      }
    }
    this.droppedBits = dropped;
  }

  private static int bit(Map<String, Integer> bits, String rule, boolean drop) {
    String name = rule + (drop ? ".dropped" : ".adjusted");
    Integer bit = bits.get(name);
    if (bit == null) {
      throw new IllegalArgumentException("wmobs: the spec has no verdict bit for " + name);
    }
    return bit;
  }

  /**
   * The rules of a spec: {@code early_arrival_us} (null: none), {@code early_arrival_drop},
   * {@code late_arrival_us}, {@code late_arrival_drop}, {@code out_of_order_us} (null: per key),
   * {@code out_of_order_drop}, {@code bits} ({@code [[rule, action, bit], ...]}).
   */
  /** A {@code wmobs_judge} spec's members (wmobs/policy/_jvm/_specs.py's {@code JudgeSpec}). */
  static final Set<String> MEMBERS =
      Set.of(
          "early_arrival_us", "early_arrival_drop", "late_arrival_us", "late_arrival_drop",
          "out_of_order_us", "out_of_order_drop", "bits", "field");

  static PolicyRules of(JsonNode spec) {
    Spec.Reader read = new Spec.Reader("wmobs_judge", spec);
    Map<String, Integer> bits = new HashMap<>();
    for (JsonNode bit : read.tuples("bits", "ssi")) {
      bits.put(bit.get(0).textValue() + "." + bit.get(1).textValue(), bit.get(2).intValue());
    }
    return new PolicyRules(
        read.integerOr("early_arrival_us", NULL),
        read.bool("early_arrival_drop"),
        read.integerOr("late_arrival_us", NULL),
        read.bool("late_arrival_drop"),
        read.integerOr("out_of_order_us", NULL),
        read.bool("out_of_order_drop"),
        bits);
  }

  /**
   * One field of a row's judgement ({@link #NULL} for null): {@code event} and {@code arrival}
   * the row's times (µs), {@code watermarkMs} and {@code batchMs} the micro-batch's.
   */
  public long judge(int field, long event, long arrival, long watermarkMs, long batchMs) {
    long batch = batchMs == NULL ? NULL : batchMs * 1000;
    if (field == QUEUE) {
      return arrival == NULL || batch == NULL ? NULL : batch - arrival;
    }
    long arrived = arrival == NULL ? batch : arrival;
    if (field == ARRIVAL) {
      return arrived;
    }
    if (field == DELAY) {
      return event == NULL || arrived == NULL ? NULL : arrived - event;
    }
    int verdict = event == NULL ? invalid : 0;
    long system = event;
    if (event != NULL && earlyUs != NULL && arrived != NULL && event > arrived + earlyUs) {
      verdict = earlyBit;
      if (!earlyDrop) {
        system = arrived;
      }
    }
    if ((verdict & droppedBits) == 0 && arrived != NULL && system < arrived - lateUs) {
      verdict |= lateBit;
      if (!lateDrop) {
        system = arrived - lateUs;
      }
    }
    if (outOfOrderUs == NULL) { // judged per key, after this
      return field == VERDICT ? verdict : field == SYSTEM ? system : NULL;
    }
    boolean candidate = (verdict & droppedBits) == 0;
    long mark = watermarkMs == NULL ? NULL : watermarkMs * 1000;
    if (field == LATENESS) {
      return !candidate ? NULL : mark == NULL ? 0 : Math.max(mark + outOfOrderUs - system, 0);
    }
    if (candidate && mark != NULL && system < mark) {
      verdict |= outOfOrderBit;
      if (!outOfOrderDrop) {
        system = mark;
      }
    }
    return field == VERDICT ? verdict : system;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof PolicyRules o
        && earlyUs == o.earlyUs && earlyDrop == o.earlyDrop && lateUs == o.lateUs
        && lateDrop == o.lateDrop && outOfOrderUs == o.outOfOrderUs
        && outOfOrderDrop == o.outOfOrderDrop && invalid == o.invalid && earlyBit == o.earlyBit
        && lateBit == o.lateBit && outOfOrderBit == o.outOfOrderBit
        && droppedBits == o.droppedBits;
  }

  @Override
  public int hashCode() {
    return Objects.hash(earlyUs, lateUs, outOfOrderUs, earlyBit, lateBit, outOfOrderBit);
  }

  private static final int VERDICT = Field.VERDICT.ordinal();
  private static final int SYSTEM = Field.SYSTEM.ordinal();
  private static final int DELAY = Field.DELAY.ordinal();
  private static final int LATENESS = Field.LATENESS.ordinal();
  private static final int QUEUE = Field.QUEUE.ordinal();
  private static final int ARRIVAL = Field.ARRIVAL.ordinal();

  /**
   * {@code wmobs_judge(spec, event_us, arrival_us, watermark_ms, batch_ms)}: one {@link Field}
   * of a row's judgement ({@code spec}: the rules' and {@code field}).
   */
  static Expression build(String name, List<Expression> arguments) {
    JsonNode spec = Spec.json(name, arguments);
    Spec.members(name, spec, MEMBERS, Set.of());
    List<Expression> rest = Spec.rest(arguments);
    Spec.arity(name, rest, 4);
    return new Judge(of(spec), field(name, spec), name, rest);
  }

  /** The field of the judgement a call returns: its spec's {@code field}. */
  static Field field(String name, JsonNode spec) {
    return Field.named(new Spec.Reader(name, spec).text("field"));
  }

  /**
   * One field of the judgement as Spark evaluates it: in generated code, one call of {@link
   * #judge} on the four children's values.
   */
  public static final class Judge extends WmobsExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    private final PolicyRules rules;
    private final Field field;
    private final String name;
    private final List<Expression> times;

    Judge(PolicyRules rules, Field field, String name, List<Expression> times) {
      this.rules = rules;
      this.field = field;
      this.name = name;
      this.times = List.copyOf(times);
    }

    @Override
    public Object eval(InternalRow row) {
      long[] values = new long[4];
      for (int i = 0; i < 4; i++) {
        Object value = times.get(i).eval(row);
        values[i] = value == null ? NULL : ((Number) value).longValue();
      }
      long judged = rules.judge(field.ordinal(), values[0], values[1], values[2], values[3]);
      if (judged == NULL) {
        return null;
      }
      return field == Field.VERDICT ? (Object) (int) judged : (Object) judged;
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      String reference = ctx.addReferenceObj("wmobsRules", rules, PolicyRules.class.getName());
      StringBuilder code = new StringBuilder();
      StringBuilder call = new StringBuilder();
      for (Expression time : times) {
        ExprCode child = time.genCode(ctx);
        code.append(child.code()).append('\n');
        call.append(", ")
            .append(child.isNull()).append(" ? java.lang.Long.MIN_VALUE : (long) ")
            .append(child.value());
      }
      String judged = ctx.freshName("wmobsJudged");
      String isNull = ctx.freshName("wmobsIsNull");
      String value = ctx.freshName("wmobsValue");
      String type = field == Field.VERDICT ? "int" : "long";
      code.append("long ").append(judged).append(" = ").append(reference).append(".judge(")
          .append(field.ordinal()).append(call).append(");\n")
          .append("boolean ").append(isNull).append(" = ").append(judged)
          .append(" == java.lang.Long.MIN_VALUE;\n")
          .append(type).append(' ').append(value).append(" = (").append(type).append(") ")
          .append(judged).append(';');
      return ExprCode.apply(
          new CodeBlock(Scala.seq(List.of(code.toString())), Scala.seq(List.<JavaCode>of())),
          JavaCode.isNullVariable(isNull),
          JavaCode.variable(value, dataType()));
    }

    @Override
    protected List<Expression> arguments() {
      return times;
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return new Judge(rules, field, name, arguments);
    }

    @Override
    protected List<Object> fields() {
      return List.of(rules, field, name, times);
    }

    @Override
    public boolean nullable() {
      return field != Field.VERDICT;
    }

    @Override
    public DataType dataType() {
      return field == Field.VERDICT ? DataTypes.IntegerType : DataTypes.LongType;
    }

    @Override
    public String prettyName() {
      return name;
    }

    @Override
    public String toString() {
      return name + "_" + field.name().toLowerCase(java.util.Locale.ROOT) + times;
    }
  }
}
