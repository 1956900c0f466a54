package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.PositionOutputStream;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.RecordConsumer;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Types;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.TaskCompletionListener;

/**
 * Dead letters written from the JVM: {@code wmobs_dead_letters(spec, row)}, of one struct (a
 * dropped row's input columns, then its verdict bits), false. The time policy calls it only
 * for the rows it drops, in a {@code CASE} branch of its filter, so kept rows never leave the
 * stage's generated code (nor does a dropped one: the struct is Spark's binary row). Each
 * task appends its dropped rows to one Parquet file in memory and, when the task succeeds,
 * writes it whole to {@code <directory>/batch_id=<N>/part-<partition>-<policy>-<query
 * id>.parquet} ({@link #fileName}) with the session's Hadoop configuration (the one Spark writes
 * the checkpoint with): one PUT on an object store, a temporary file and a rename elsewhere,
 * as {@code Storage.write_once} does in Python. A retried task writes the same file again; a
 * task that fails writes nothing, and one that cannot write fails (its {@code observe} counts
 * are discarded with it).
 *
 * <p>The file is what {@code wmobs/policy/deadletter.py} writes with pyarrow: the same
 * columns, {@code wmobs_rule}, {@code wmobs_policy} and {@code wmobs_batch_id}, and the Arrow schema pyarrow
 * stores ({@code ARROW:schema}, computed by the driver), so readers get the same types.
 *
 * <p>Field kinds ({@code spec.fields[].type}): byte, short, int, long, float, double, boolean,
 * string, binary, decimal (with precision and scale), date (days since the epoch, an int) and
 * timestamp (µs since the epoch, a long).
 */
public final class DeadLetterWriter implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  /** (task attempt, spec) -> the file it is writing: one per policy in a task. */
  private static final Map<List<Object>, TaskFile> OPEN = new ConcurrentHashMap<>();

  private final String directory;
  private final String[] names;
  private final String[] kinds;
  private final int[] precisions;
  private final int[] scales;
  private final int[] widths; // of a decimal's fixed-length bytes
  private final String[] ruleNames;
  private final long[] ruleBits;
  private final String policy;
  private final String arrowSchema;
  private final String spec;
  private final String sparkVersion;
  private final Broadcast<SerializableConfiguration> conf;

  DeadLetterWriter(JsonNode spec, String sparkVersion, Broadcast<SerializableConfiguration> conf) {
    // Built on the driver: a relative directory as Spark resolves the query's checkpoint.
    directory = Hadoop.qualified(spec.get("directory").asText().replaceAll("/+$", ""));
    JsonNode fields = spec.get("fields");
    int n = fields.size();
    names = new String[n];
    kinds = new String[n];
    precisions = new int[n];
    scales = new int[n];
    widths = new int[n];
    for (int i = 0; i < n; i++) {
      JsonNode field = fields.get(i);
      names[i] = field.get("name").asText();
      kinds[i] = field.get("type").asText();
      precisions[i] = field.path("precision").asInt(0);
      scales[i] = field.path("scale").asInt(0);
      widths[i] = decimalBytes(precisions[i]);
    }
    JsonNode rules = spec.get("rules");
    ruleNames = new String[rules.size()];
    ruleBits = new long[rules.size()];
    for (int i = 0; i < rules.size(); i++) {
      ruleNames[i] = rules.get(i).get(0).asText();
      ruleBits[i] = rules.get(i).get(1).asLong();
    }
    policy = spec.get("policy").asText();
    arrowSchema = spec.path("arrow_schema").asText("");
    this.spec = spec.toString();
    this.sparkVersion = sparkVersion;
    this.conf = conf;
    schema(); // a bad spec fails on the driver, not in a task
  }

  /**
   * The function {@code name}, built from its arguments: the spec (JSON with {@code
   * directory}, {@code fields} ({@code [{name, type, precision?, scale?}]}), {@code rules}
   * ({@code [[name, bit]]}: a row's rule is the first whose bit its verdict has), {@code
   * policy} (the time policy's name) and {@code arrow_schema}), then the row. Fails (on the driver) when Hadoop has no filesystem for the
   * directory.
   */
  static Expression build(String name, List<Expression> arguments) {
    Spec.arity(name, arguments, 2);
    Broadcast<SerializableConfiguration> conf = Hadoop.sessionConf();
    String version = org.apache.spark.sql.SparkSession.active().version();
    DeadLetterWriter writer = new DeadLetterWriter(Spec.json(name, arguments), version, conf);
    reachable(writer.directory, conf.value().value());
    Expression row = Spec.rest(arguments).get(0);
    if (!(row.dataType() instanceof org.apache.spark.sql.types.StructType struct)
        || struct.fields().length != writer.names.length + 1
        || !struct.fields()[writer.names.length].dataType().equals(DataTypes.LongType)) {
      throw new IllegalArgumentException(
          "wmobs: " + name + " takes a struct of the spec's fields and a long verdict, not "
              + row.dataType().simpleString());
    }
    return new Write(writer, name, row);
  }

  /**
   * On the driver, when the policy is applied: Hadoop reaches {@code directory} with the
   * session's configuration (a filesystem for its scheme; on an object store, its bucket with
   * the credentials found), else an error naming the directory and Hadoop's cause, as the
   * Python engine's {@code Storage.check_writable} does; and that a file can be written there
   * (one empty file, written and deleted). Otherwise the first dropped row, maybe days later,
   * would fail its micro-batch.
   */
  static void reachable(String directory, Configuration conf) {
    Path path = new Path(directory);
    FileSystem fs;
    try {
      fs = path.getFileSystem(conf);
    } catch (IOException | RuntimeException e) { // no connector: ClassNotFoundException inside
      throw new IllegalArgumentException(
          "wmobs: no Hadoop filesystem for the dead letters' directory " + directory + ": " + e,
          e);
    }
    boolean existed;
    try {
      existed = fs.exists(path);
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "wmobs: cannot reach the dead letters' directory " + directory + " (" + e
              + "); check the bucket and the credentials in the session's Hadoop configuration",
          e);
    }
    // Created and written to now, once (an empty file, deleted, and the directory if it was
    // not there): a directory that cannot be is an error naming it here, not a failed
    // micro-batch at the first dropped row.
    Path probe = new Path(path, ".wmobs-probe-" + java.util.UUID.randomUUID());
    try {
      Hadoop.writeOnce(probe, new byte[0], conf);
      Hadoop.delete(probe, conf);
      if (!existed) {
        Hadoop.deleteEmptyFolder(path, conf); // an object store's marker for it too
      }
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "wmobs: cannot write to the dead letters' directory " + directory + " (" + e + ")", e);
    }
  }

  /** Appends the dropped row to its task's file; false (the row is not kept). */
  public boolean write(InternalRow row) throws IOException {
    TaskContext task = TaskContext.get();
    if (task == null) {
      throw new IllegalStateException("wmobs: dead letters are written inside Spark tasks");
    }
    List<Object> key = List.of(task.taskAttemptId(), spec);
    TaskFile file = OPEN.get(key);
    if (file == null) {
      file = new TaskFile(task);
      OPEN.put(key, file);
      task.addTaskCompletionListener(
          new TaskCompletionListener() {
            @Override
            public void onTaskCompletion(TaskContext context) {
              finish(context);
            }
          });
    }
    file.writer.write(row);
    return false;
  }

  private void finish(TaskContext task) {
    TaskFile file = OPEN.remove(List.of(task.taskAttemptId(), spec));
    if (file == null) {
      return;
    }
    try {
      file.writer.close();
      if (!task.isFailed() && !task.isInterrupted()) {
        Path target =
            new Path(directory + "/batch_id=" + file.batchId + "/" + fileName(task, policy));
        Hadoop.writeOnce(target, file.bytes(), conf.value().value());
      }
    } catch (IOException e) {
      throw new IllegalStateException(
          "wmobs: could not write the dead letters of batch " + file.batchId + " to "
              + directory + ": " + e,
          e);
    }
  }

  /**
   * The task's file in its batch's folder: {@code part-<partition>-<policy>-<query id>.parquet}.
   * Two policies or queries writing to one directory (or one query started again on a new
   * checkpoint, a new id) write files of their own; a task that runs again writes its own file
   * again. {@code deadletter.file_name} names the same.
   */
  static String fileName(TaskContext task, String policy) {
    String query = task.getLocalProperty("sql.streaming.queryId");
    String writer = query == null ? policy : policy + "-" + query;
    return String.format("part-%05d-%s.parquet", task.partitionId(), writer);
  }

  private MessageType schema() {
    Types.MessageTypeBuilder message = Types.buildMessage();
    for (int i = 0; i < names.length; i++) {
      message.addField(field(i));
    }
    message.optional(PrimitiveTypeName.BINARY).as(LogicalTypeAnnotation.stringType())
        .named("wmobs_rule");
    message.optional(PrimitiveTypeName.BINARY).as(LogicalTypeAnnotation.stringType())
        .named("wmobs_policy");
    message.optional(PrimitiveTypeName.INT64).named("wmobs_batch_id");
    return message.named("schema");
  }

  private org.apache.parquet.schema.Type field(int i) {
    String name = names[i];
    switch (kinds[i]) {
      case "byte":
        return Types.optional(PrimitiveTypeName.INT32)
            .as(LogicalTypeAnnotation.intType(8, true)).named(name);
      case "short":
        return Types.optional(PrimitiveTypeName.INT32)
            .as(LogicalTypeAnnotation.intType(16, true)).named(name);
      case "int":
        return Types.optional(PrimitiveTypeName.INT32).named(name);
      case "long":
        return Types.optional(PrimitiveTypeName.INT64).named(name);
      case "float":
        return Types.optional(PrimitiveTypeName.FLOAT).named(name);
      case "double":
        return Types.optional(PrimitiveTypeName.DOUBLE).named(name);
      case "boolean":
        return Types.optional(PrimitiveTypeName.BOOLEAN).named(name);
      case "string":
        return Types.optional(PrimitiveTypeName.BINARY)
            .as(LogicalTypeAnnotation.stringType()).named(name);
      case "binary":
        return Types.optional(PrimitiveTypeName.BINARY).named(name);
      case "date":
        return Types.optional(PrimitiveTypeName.INT32)
            .as(LogicalTypeAnnotation.dateType()).named(name);
      case "timestamp":
        return Types.optional(PrimitiveTypeName.INT64)
            .as(LogicalTypeAnnotation.timestampType(true, LogicalTypeAnnotation.TimeUnit.MICROS))
            .named(name);
      case "decimal":
        return Types.optional(PrimitiveTypeName.FIXED_LEN_BYTE_ARRAY)
            .length(widths[i])
            .as(LogicalTypeAnnotation.decimalType(scales[i], precisions[i]))
            .named(name);
      default:
        throw new IllegalArgumentException("wmobs: no dead-letter column kind " + kinds[i]);
    }
  }

  /** The fewest bytes whose two's complement holds every unscaled value of {@code precision}. */
  static int decimalBytes(int precision) {
    BigInteger largest = BigInteger.TEN.pow(precision);
    int bytes = 1;
    while (BigInteger.ONE.shiftLeft(8 * bytes - 1).compareTo(largest) < 0) {
      bytes++;
    }
    return bytes;
  }

  /** One task's file: Parquet, in memory until the task completes. */
  private final class TaskFile {
    final long batchId;
    final ByteArrayOutputStream buffer = new ByteArrayOutputStream();
    final ParquetWriter<InternalRow> writer;

    TaskFile(TaskContext task) throws IOException {
      String batch = task.getLocalProperty("streaming.sql.batchId");
      batchId = batch == null ? -1 : Long.parseLong(batch);
      writer =
          new Builder(new MemoryFile(buffer), batchId)
              .withConf(new Configuration(false))
              .withCompressionCodec(CompressionCodecName.SNAPPY)
              .withWriteMode(ParquetFileWriter.Mode.OVERWRITE)
              .build();
    }

    byte[] bytes() {
      return buffer.toByteArray();
    }
  }

  private final class Builder extends ParquetWriter.Builder<InternalRow, Builder> {
    private final long batchId;

    Builder(OutputFile file, long batchId) {
      super(file);
      this.batchId = batchId;
    }

    @Override
    protected Builder self() {
      return this;
    }

    @Override
    protected WriteSupport<InternalRow> getWriteSupport(Configuration configuration) {
      return new RowWriteSupport(batchId);
    }
  }

  /** Writes a dropped row: its input columns, the policy that dropped it and its batch. */
  private final class RowWriteSupport extends WriteSupport<InternalRow> {
    private final long batchId;
    private RecordConsumer out;

    RowWriteSupport(long batchId) {
      this.batchId = batchId;
    }

    @Override
    public WriteContext init(Configuration configuration) {
      Map<String, String> metadata = new HashMap<>();
      // Written by Spark 3+ in the proleptic Gregorian calendar: Spark 3.5 reads old dates and
      // times as they are, without its legacy-calendar question.
      metadata.put("org.apache.spark.version", sparkVersion);
      if (!arrowSchema.isEmpty()) {
        metadata.put("ARROW:schema", arrowSchema);
      }
      return new WriteContext(schema(), metadata);
    }

    @Override
    public void prepareForWrite(RecordConsumer recordConsumer) {
      out = recordConsumer;
    }

    @Override
    public void write(InternalRow row) {
      out.startMessage();
      int n = names.length;
      for (int i = 0; i < n; i++) {
        if (!row.isNullAt(i)) {
          out.startField(names[i], i);
          value(i, row);
          out.endField(names[i], i);
        }
      }
      long verdict = row.getLong(n);
      for (int r = 0; r < ruleBits.length; r++) {
        if ((verdict & ruleBits[r]) != 0) {
          out.startField("wmobs_rule", n);
          out.addBinary(Binary.fromString(ruleNames[r]));
          out.endField("wmobs_rule", n);
          break;
        }
      }
      out.startField("wmobs_policy", n + 1);
      out.addBinary(Binary.fromString(policy));
      out.endField("wmobs_policy", n + 1);
      out.startField("wmobs_batch_id", n + 2);
      out.addLong(batchId);
      out.endField("wmobs_batch_id", n + 2);
      out.endMessage();
    }

    private void value(int i, InternalRow row) {
      switch (kinds[i]) {
        case "byte" -> out.addInteger(row.getByte(i));
        case "short" -> out.addInteger(row.getShort(i));
        case "int", "date" -> out.addInteger(row.getInt(i));
        case "long", "timestamp" -> out.addLong(row.getLong(i));
        case "float" -> out.addFloat(row.getFloat(i));
        case "double" -> out.addDouble(row.getDouble(i));
        case "boolean" -> out.addBoolean(row.getBoolean(i));
        case "string" -> out.addBinary(Binary.fromConstantByteArray(row.getUTF8String(i).getBytes()));
        case "binary" -> out.addBinary(Binary.fromConstantByteArray(row.getBinary(i)));
        case "decimal" -> out.addBinary(Binary.fromConstantByteArray(unscaled(i, row)));
        default -> throw new IllegalStateException(kinds[i]);
      }
    }

    private byte[] unscaled(int i, InternalRow row) {
      BigDecimal value = row.getDecimal(i, precisions[i], scales[i]).toJavaBigDecimal();
      byte[] bytes = value.unscaledValue().toByteArray();
      byte[] fixed = new byte[widths[i]];
      byte sign = (byte) (bytes[0] < 0 ? -1 : 0);
      int pad = fixed.length - bytes.length;
      for (int k = 0; k < fixed.length; k++) {
        fixed[k] = k < pad ? sign : bytes[k - pad];
      }
      return fixed;
    }
  }

  /**
   * The function as Spark evaluates it: in generated code, a call of {@link #write} on the
   * row's struct (a binary row, read in place).
   */
  public static final class Write extends WmobsExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    private final DeadLetterWriter writer;
    private final String name;
    private final Expression row;

    Write(DeadLetterWriter writer, String name, Expression row) {
      this.writer = writer;
      this.name = name;
      this.row = row;
    }

    @Override
    public Object eval(InternalRow input) {
      Object value = row.eval(input);
      if (value == null) {
        return null;
      }
      try {
        return writer.write((InternalRow) value);
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      String reference = ctx.addReferenceObj("wmobsDeadLetters", writer, DeadLetterWriter.class.getName());
      ExprCode child = row.genCode(ctx);
      String isNull = ctx.freshName("wmobsIsNull");
      String value = ctx.freshName("wmobsWritten");
      String code =
          child.code()
              + "\nboolean " + isNull + " = " + child.isNull() + ";\n"
              + "boolean " + value + " = false;\n"
              + "if (!" + isNull + ") {\n"
              + "  try {\n"
              + "    " + value + " = " + reference + ".write(" + child.value() + ");\n"
              + "  } catch (java.io.IOException e) {\n"
              + "    throw new java.io.UncheckedIOException(e);\n"
              + "  }\n"
              + "}";
      return ExprCode.apply(
          new CodeBlock(Scala.seq(List.of(code)), Scala.seq(List.<JavaCode>of())),
          JavaCode.isNullVariable(isNull),
          JavaCode.variable(value, DataTypes.BooleanType));
    }

    @Override
    protected List<Expression> arguments() {
      return List.of(row);
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return new Write(writer, name, arguments.get(0));
    }

    @Override
    protected List<Object> fields() {
      return List.of(writer, name, row);
    }

    @Override
    public boolean deterministic() {
      return false; // it writes
    }

    @Override
    public boolean nullable() {
      return true;
    }

    @Override
    public DataType dataType() {
      return DataTypes.BooleanType;
    }

    @Override
    public String prettyName() {
      return name;
    }
  }

  /** A Parquet output file in memory. */
  private static final class MemoryFile implements OutputFile {
    private final ByteArrayOutputStream buffer;

    MemoryFile(ByteArrayOutputStream buffer) {
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
}
