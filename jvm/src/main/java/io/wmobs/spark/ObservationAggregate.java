package io.wmobs.spark;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.aggregate.ImperativeAggregate;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code wmobs_policy_observation(spec, verdict, ts, event, idle[, delay, lateness][, queue])}: the
 * {@link Observation} of a micro-batch, as one aggregate for {@code observe}.
 *
 * <p>Spark evaluates every aggregate of {@code observe} row by row outside the stage's
 * generated code (~20 ns per row and aggregate) and plans each of them again in every
 * micro-batch; one aggregate does it once. A Catalyst aggregate, not an {@code Aggregator}: an
 * {@code Aggregator} gets each row copied into a new row and decoded into a {@code Row} of
 * boxed values (a third of its time); this one reads plain long and int columns of the row in
 * place, and evaluates any other argument.
 */
public final class ObservationAggregate extends WmobsAggregate<Observation.State>
    implements Serializable, Observation.Arguments, MicroBatch.Told {
  private static final long serialVersionUID = 1L;

  private final Observation observation;
  /** Where a micro-batch's counts are kept until Spark commits it; null: not kept. */
  private final KeptCounts kept;
  private final List<Expression> arguments;
  private final Expression[] argument;
  private final int mutableAggBufferOffset;
  private final int inputAggBufferOffset;
  /** Per argument: the input row's ordinal of a plain long or int column, else -1. */
  private transient int[] ordinals;
  private transient boolean[] ints;
  /** The row being counted, and the arguments evaluated on it (those not plain columns). */
  private transient InternalRow row;
  private transient long[] evaluated;

  ObservationAggregate(
      Observation observation,
      KeptCounts kept,
      List<Expression> arguments,
      int mutableAggBufferOffset,
      int inputAggBufferOffset) {
    this.observation = observation;
    this.kept = kept;
    this.arguments = List.copyOf(arguments);
    this.argument = arguments.toArray(new Expression[0]);
    this.mutableAggBufferOffset = mutableAggBufferOffset;
    this.inputAggBufferOffset = inputAggBufferOffset;
  }

  /** The function {@code name}, built from its arguments (the spec first). */
  static Expression build(String name, List<Expression> arguments) {
    com.fasterxml.jackson.databind.JsonNode spec = Spec.json(name, arguments);
    Observation observation = Observation.of(spec, name);
    List<Expression> rest = Spec.rest(arguments);
    Spec.arity(name, rest, observation.arity());
    return new ObservationAggregate(observation, KeptCounts.of(observation), rest, 0, 0);
  }

  /** The ordinals, found on the first row (the arguments are bound by then). */
  private void locate() {
    ordinals = new int[argument.length];
    ints = new boolean[argument.length];
    for (int i = 0; i < argument.length; i++) {
      DataType type = argument[i].dataType();
      ints[i] = type.equals(DataTypes.IntegerType);
      boolean plain = argument[i] instanceof BoundReference;
      ordinals[i] =
          plain && (ints[i] || type.equals(DataTypes.LongType))
              ? ((BoundReference) argument[i]).ordinal()
              : -1;
    }
    evaluated = new long[argument.length];
  }

  @Override
  public boolean isNull(int index) {
    int ordinal = ordinals[index];
    if (ordinal >= 0) {
      return row.isNullAt(ordinal);
    }
    Object value = argument[index].eval(row);
    if (value == null) {
      return true;
    }
    evaluated[index] = ((Number) value).longValue();
    return false;
  }

  @Override
  public long get(int index) {
    int ordinal = ordinals[index];
    if (ordinal < 0) {
      return evaluated[index]; // isNull(index) evaluated it
    }
    return ints[index] ? row.getInt(ordinal) : row.getLong(ordinal);
  }

  @Override
  public Observation.State createAggregationBuffer() {
    return observation.zero();
  }

  @Override
  public Observation.State update(Observation.State state, InternalRow input) {
    if (ordinals == null) {
      locate();
    }
    if (!state.placed) {
      TaskContext task = TaskContext.get();
      if (task != null) {
        Observation.place(state, task.partitionId());
        if (kept != null) {
          kept.keepAtTaskEnd(task, observation, state);
        }
      }
      state.placed = true;
    }
    row = input;
    observation.reduce(state, this);
    return state;
  }

  @Override
  public Observation.State merge(Observation.State state, Observation.State other) {
    return observation.merge(state, other);
  }

  @Override
  public Object eval(Observation.State state) {
    if (kept != null && TaskContext.get() == null) {
      // On the driver, counts of no partition in the first micro-batch of a query run: a
      // micro-batch its sink skipped when it ran again after a crash reports the counts of the
      // attempt the sink committed.
      Observation.State recalled = kept.recall(observation, state.partitions.isEmpty());
      if (recalled != null) {
        return UTF8String.fromString(observation.finish(recalled));
      }
    }
    return UTF8String.fromString(observation.finish(state));
  }

  @Override
  public byte[] serialize(Observation.State state) {
    return observation.serialize(state);
  }

  @Override
  public Observation.State deserialize(byte[] stored) {
    return observation.deserialize(stored);
  }

  @Override
  public int mutableAggBufferOffset() {
    return mutableAggBufferOffset;
  }

  @Override
  public ImperativeAggregate withNewMutableAggBufferOffset(int offset) {
    return new ObservationAggregate(observation, kept, arguments, offset, inputAggBufferOffset);
  }

  @Override
  public int inputAggBufferOffset() {
    return inputAggBufferOffset;
  }

  @Override
  public ImperativeAggregate withNewInputAggBufferOffset(int offset) {
    return new ObservationAggregate(observation, kept, arguments, mutableAggBufferOffset, offset);
  }

  @Override
  public Expression told(MicroBatch batch) {
    KeptCounts toldKept = kept == null ? null : kept.told(batch);
    if (toldKept == kept) {
      return this;
    }
    return new ObservationAggregate(
        observation, toldKept, arguments, mutableAggBufferOffset, inputAggBufferOffset);
  }

  @Override
  protected List<Expression> arguments() {
    return arguments;
  }

  @Override
  protected Expression withArguments(List<Expression> newArguments) {
    return new ObservationAggregate(
        observation, kept, newArguments, mutableAggBufferOffset, inputAggBufferOffset);
  }

  @Override
  protected List<Object> fields() {
    return java.util.Arrays.asList(
        observation, kept, arguments, mutableAggBufferOffset, inputAggBufferOffset);
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public DataType dataType() {
    return DataTypes.StringType;
  }

  @Override
  public String prettyName() {
    return observation.toString();
  }
}
