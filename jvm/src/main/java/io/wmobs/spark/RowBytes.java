package io.wmobs.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A row's columns carried through substreams' stateful operator as one value: {@code
 * wmobs_row_pack(struct)} is the struct's bytes (Spark's own row format, {@link UnsafeRow}),
 * {@code wmobs_row_unpack(schema, bytes)} the struct again, read in place. The operator's state
 * function sees the bytes as one {@code byte[]}, so a row's columns are never converted to Java
 * objects and back (a {@code Row} per row cost 0.05x of the query when substreams were a
 * {@code mapPartitions} function).
 */
public final class RowBytes {
  private RowBytes() {}

  static final String PACK = "wmobs_row_pack";
  static final String UNPACK = "wmobs_row_unpack";
  static final String PLACE = "wmobs_row_place";

  static Expression place(List<Expression> arguments) {
    Spec.arity(PLACE, arguments, 0);
    return new Place();
  }

  /**
   * {@code wmobs_row_pack([folder,] struct)}; {@code folder}: where, below the query's
   * checkpoint, the per-key state files of wmobs 0.2 and of the Python engine would be for the
   * substreams that pack rows so, which the query must not have ({@link
   * QueryCheckpoint#substreamsRefused}).
   */
  static Expression pack(List<Expression> arguments) {
    Spec.arity(PACK, arguments, 1, 2);
    String folder = arguments.size() == 2 ? Spec.text(PACK, arguments) : "";
    Expression struct = arguments.get(arguments.size() - 1);
    if (!(struct.dataType() instanceof StructType)) {
      throw new IllegalArgumentException("wmobs: " + PACK + " takes a struct, not " + struct);
    }
    return new Pack(struct, folder);
  }

  static Expression unpack(List<Expression> arguments) {
    Spec.arity(UNPACK, arguments, 2);
    DataType schema = DataType.fromJson(Spec.text(UNPACK, arguments));
    Expression bytes = arguments.get(1);
    if (!(schema instanceof StructType struct) || !(bytes.dataType() instanceof BinaryType)) {
      throw new IllegalArgumentException(
          "wmobs: " + UNPACK + " takes a struct's schema (JSON) and its bytes");
    }
    return new Unpack(struct, bytes);
  }

  /**
   * The bytes of a row of {@code schema} whose every column has a value that is not null (each
   * type's default: 0, "", an empty array, ...; null only where a type has none): what the
   * idle timeout's synthetic rows carry in the input's columns, which no one sees (they are
   * filtered out right after the watermark), without making a column that is never null
   * nullable.
   */
  static byte[] placeholder(StructType schema) {
    List<Expression> values = new ArrayList<>();
    for (StructField field : schema.fields()) {
      values.add(defaultOf(field.dataType()));
    }
    return UnsafeProjection.create(Scala.seq(values)).apply(null).getBytes();
  }

  private static Expression defaultOf(DataType type) {
    try { // Literal.default (a Java keyword)
      return (Expression) Literal.class.getMethod("default", DataType.class).invoke(null, type);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return Literal.create(null, type);
    }
  }

  /** {@code wmobs_row_pack(struct)}: the struct's bytes. */
  public static final class Pack extends WmobsExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    private final Expression struct;
    private final String folder;
    private transient UnsafeProjection project;

    Pack(Expression struct, String folder) {
      this.struct = struct;
      this.folder = folder;
    }

    /** The substreams' folder of per-key state files a query must not have ("": none). */
    String folder() {
      return folder;
    }

    /**
     * The bytes of {@code row}, a value of the struct (those of a projection's reused buffer
     * where it was not one already: the caller copies them at once, as Spark's row writer does).
     */
    public byte[] bytes(InternalRow row) {
      if (row instanceof UnsafeRow unsafe) {
        return unsafe.getBytes();
      }
      if (project == null) {
        StructType schema = (StructType) struct.dataType();
        project = UnsafeProjection.create(schema);
      }
      return project.apply(row).getBytes();
    }

    @Override
    public Object eval(InternalRow input) {
      Object row = struct.eval(input);
      return row == null ? null : bytes((InternalRow) row);
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      return call(ctx, ev, this, "bytes", struct, "byte[]", DataTypes.BinaryType);
    }

    @Override
    protected List<Expression> arguments() {
      return List.of(struct);
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return new Pack(arguments.get(0), folder);
    }

    @Override
    protected List<Object> fields() {
      return List.of(struct, folder);
    }

    @Override
    public boolean nullable() {
      return struct.nullable();
    }

    @Override
    public DataType dataType() {
      return DataTypes.BinaryType;
    }

    @Override
    public String prettyName() {
      return PACK;
    }
  }

  /** {@code wmobs_row_unpack(schema, bytes)}: the struct of {@code schema} those bytes are. */
  public static final class Unpack extends WmobsExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    private final StructType schema;
    private final Expression bytes;

    Unpack(StructType schema, Expression bytes) {
      this.schema = schema;
      this.bytes = bytes;
    }

    /** The row those bytes are (read in place). */
    public InternalRow row(byte[] data) {
      UnsafeRow row = new UnsafeRow(schema.length());
      row.pointTo(data, data.length);
      return row;
    }

    @Override
    public Object eval(InternalRow input) {
      Object data = bytes.eval(input);
      return data == null ? null : row((byte[]) data);
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      return call(ctx, ev, this, "row", bytes, InternalRow.class.getName(), schema);
    }

    @Override
    protected List<Expression> arguments() {
      return List.of(bytes);
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return new Unpack(schema, arguments.get(0));
    }

    @Override
    protected List<Object> fields() {
      return List.of(schema, bytes);
    }

    @Override
    public boolean nullable() {
      return false; // substreams' rows always carry their bytes (a synthetic row: defaults)
    }

    @Override
    public DataType dataType() {
      return schema;
    }

    @Override
    public String prettyName() {
      return UNPACK;
    }
  }

  /**
   * {@code wmobs_row_place()}: a row's place in its partition's input, from the partition's
   * index (as Spark's {@code monotonically_increasing_id}, which streaming queries refuse):
   * unique within the micro-batch, and the same when the micro-batch runs again on the same
   * input.
   */
  public static final class Place extends WmobsExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    /** The task attempt counted for, plus one: 0, as a deserialized copy has it, is none. */
    private transient long counting;
    private transient long next;

    Place() {}

    @Override
    public Object eval(InternalRow input) {
      org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
      long attempt = task == null ? 0 : task.taskAttemptId();
      if (attempt + 1 != counting) {
        counting = attempt + 1;
        next = task == null ? 0 : ((long) task.partitionId()) << 33;
      }
      return next++;
    }

    @Override
    public boolean deterministic() {
      return false;
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      String next = ctx.addMutableState("long", "wmobsPlace", v -> "", true, true);
      ctx.addPartitionInitializationStatement(next + " = ((long) partitionIndex) << 33;");
      String value = ctx.freshName("place");
      String code = "final long " + value + " = " + next + "++;";
      return ExprCode.apply(
          new CodeBlock(Scala.seq(List.of(code)), Scala.seq(List.<JavaCode>of())),
          JavaCode.isNullGlobal("false"),
          JavaCode.variable(value, DataTypes.LongType));
    }

    @Override
    protected List<Expression> arguments() {
      return List.of();
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return this;
    }

    @Override
    protected List<Object> fields() {
      return List.of();
    }

    @Override
    public boolean nullable() {
      return false;
    }

    @Override
    public DataType dataType() {
      return DataTypes.LongType;
    }

    @Override
    public String prettyName() {
      return PLACE;
    }
  }

  /**
   * Generated code that calls {@code method} of {@code self} on the value of {@code child} (null
   * stays null).
   */
  private static ExprCode call(
      CodegenContext ctx,
      ExprCode ev,
      Expression self,
      String method,
      Expression child,
      String javaType,
      DataType type) {
    String reference = ctx.addReferenceObj("wmobsRowBytes", self, self.getClass().getName());
    ExprCode argument = child.genCode(ctx);
    String isNull = ctx.freshName("isNull");
    String value = ctx.freshName("value");
    String code =
        argument.code()
            + "\nboolean " + isNull + " = " + argument.isNull() + ";\n"
            + javaType + " " + value + " = null;\n"
            + "if (!" + isNull + ") {\n"
            + "  " + value + " = " + reference + "." + method + "(" + argument.value() + ");\n"
            + "}";
    return ExprCode.apply(
        new CodeBlock(Scala.seq(List.of(code)), Scala.seq(List.<JavaCode>of())),
        JavaCode.isNullVariable(isNull),
        JavaCode.variable(value, type));
  }
}
